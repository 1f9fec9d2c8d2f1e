"""Throughput of the tier kernel beside the single-cache kernels, in the same run.

Replays the bundled trace through a two-tier exclusive hierarchy (LRU in HBM over S3FIFO in
DRAM, by default 2,048 over 16,384 blocks), the same in inclusive mode, and the single-cache
S3FIFO and LRU kernels, alternating the four every round (the machine may be shared), and
prints the median and best block accesses per second of each over the rounds, by wall time and
by the thread's CPU time (on a shared machine the CPU time is the steadier of the two), plus
the first call (compile or disk-cache load) and peak memory.

    python experiments/bench_tiers.py [--rounds 15] [--hbm 2048] [--dram 16384] [--baseline REF]

``--baseline REF`` adds the tier kernel as it was at commit ``REF`` (exported with ``git
archive``, see ``baseline_kernels.py``; a commit before the hierarchy driver, which had
``tiers/kernel.py``) in both modes, alternating with today's ``replay_tiers`` every round, its
hit tokens per request checked equal to today's.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np

from prefixsim import load_trace, make_params, replay_params
from prefixsim.tiers import make_tier, replay_tiers
from prefixsim.tiers.model import COUNTER_NAMES


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", default="conversation")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--hbm", type=int, default=2048, help="tier 0 (LRU) capacity in blocks")
    ap.add_argument("--dram", type=int, default=16384, help="tier 1 (S3FIFO) capacity")
    ap.add_argument("--baseline", metavar="REF", help="also time the tier kernel at commit REF")
    args = ap.parse_args()

    trace = load_trace(args.trace)
    n = trace.n_accesses
    tiers = [make_tier("LRU", args.hbm, name="hbm"), make_tier("S3FIFO", args.dram, name="dram")]
    cases: dict[str, Callable[[], object]] = {
        "tiers LRU/S3FIFO exclusive": lambda: replay_tiers(trace, tiers, "exclusive"),
        "tiers LRU/S3FIFO inclusive": lambda: replay_tiers(trace, tiers, "inclusive"),
        f"single S3FIFO {args.dram}": lambda: replay_params(
            trace, make_params("S3FIFO", args.dram), 512
        ),
        f"single LRU {args.hbm}": lambda: replay_params(trace, make_params("LRU", args.hbm), 512),
    }
    if args.baseline:
        import importlib

        from baseline_kernels import _package

        pkg = _package(args.baseline).__name__
        old = importlib.import_module(f"{pkg}.tiers.kernel")
        for mode in ("exclusive", "inclusive"):
            want = replay_tiers(trace, tiers, mode).hit_tokens
            got = _call_tiers_kernel(old.tiers_kernel, old.CODES, trace, tiers, mode)
            assert np.array_equal(want, got), f"{args.baseline} differs ({mode})"
            cases[f"kernel {args.baseline} {mode}"] = partial(
                _call_tiers_kernel, old.tiers_kernel, old.CODES, trace, tiers, mode
            )
    print(f"trace {trace.name}: {trace.n_requests:,} requests, {n:,} block accesses")
    for name, fn in cases.items():
        start = time.perf_counter()
        fn()
        print(f"first call {name}: {time.perf_counter() - start:.2f} s")
    wall: dict[str, list[float]] = {name: [] for name in cases}
    cpu: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(args.rounds):
        for name, fn in cases.items():
            start, start_cpu = time.perf_counter(), time.thread_time()
            fn()
            cpu[name].append(time.thread_time() - start_cpu)
            wall[name].append(time.perf_counter() - start)
    print()
    print(f"{'':<30}{'---------- wall ----------':>27}{'---------- CPU -----------':>27}")
    print(f"{'case':<30}" + f"{'median ms':>11}{'Macc/s':>8}{'best':>8}" * 2)
    for name in cases:
        line = f"{name:<30}"
        for ts in (wall[name], cpu[name]):
            med = statistics.median(ts)
            line += f"{med * 1e3:>11.2f}{n / med / 1e6:>8.1f}{n / min(ts) / 1e6:>8.1f}"
        print(line)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"\npeak memory (max RSS): {peak:.0f} MB; {args.rounds} rounds, alternating")


def _call_tiers_kernel(
    kernel: Callable[..., Any], codes: dict[str, int], trace: Any, tiers: list[Any], mode: str
) -> Any:
    """``kernel`` (a baseline's ``tiers_kernel``, before the hierarchy driver) called as its
    ``replay_tiers`` called it, arrays allocated in the call as there; returns the hit tokens
    per request."""
    n_tiers = len(tiers)
    return kernel(
        trace.block_ids,
        trace.offsets,
        trace.input_lengths,
        trace.n_blocks,
        512,
        mode == "exclusive",
        np.array([codes[t.policy] for t in tiers], np.int64),
        np.array([t.params.capacity for t in tiers], np.int64),
        np.array([getattr(t.params, "small_cap", 0) for t in tiers], np.int64),
        np.array([getattr(t.params, "max_freq", 0) for t in tiers], np.int64),
        np.array([getattr(t.params, "ghost_freq", 0) for t in tiers], np.int64),
        np.zeros((n_tiers, trace.n_requests), np.int64),
        np.zeros((n_tiers, len(COUNTER_NAMES)), np.int64),
        np.zeros(n_tiers, np.int64),
    )


if __name__ == "__main__":
    main()
