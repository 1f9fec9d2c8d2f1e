"""RADIX's compiled replay against LRU_LEAF's, in the same run (issue 19: within 2x).

For each capacity (1,024 / 4,096 / 16,384 blocks by default) on the bundled conversation trace,
under the specification's rule and SGLang's (``--semantics``; ``sglang+out`` caches the output
blocks too, RADIX's decode steps taking their pages as they go), the two policies' compiled
single-cache replays alternate ``--repeat`` times (RADIX, LRU_LEAF, RADIX, ...), each timed by
wall time and by the thread's CPU time (less sensitive to a loaded machine); the table gives the
medians, block accesses per second and the ratio RADIX / LRU_LEAF. Before timing, each RADIX
point is checked equal per request to its plain-Python reference (whose time is printed for
scale), and the kernels are compiled (or loaded from numba's disk cache) outside the timings.
Peak memory (RSS) is the whole process's.

    python experiments/bench_radix.py [--trace conversation] [--repeat 21]
                                      [--capacities 1024,4096,16384]
                                      [--semantics spec,sglang,sglang+out]
"""

from __future__ import annotations

import argparse
import resource
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from prefixsim import Semantics, load_trace, make_params, replay_params
from prefixsim.mode_replay import reference_replay


def timed(fn: Callable[[], Any]) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.thread_time()
    fn()
    return time.perf_counter() - wall, time.thread_time() - cpu


def semantics(name: str) -> Semantics:
    """``spec``, ``vllm``, ``sglang``, or either engine with ``+out`` (``cache_output_blocks``)."""
    mode, _, out = name.partition("+")
    return Semantics(mode, cache_output_blocks=out == "out")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", default="conversation")
    ap.add_argument("--repeat", type=int, default=21)
    ap.add_argument("--capacities", default="1024,4096,16384")
    ap.add_argument("--semantics", default="spec,sglang")
    args = ap.parse_args()
    trace = load_trace(args.trace)
    n = trace.n_accesses
    print(f"trace {trace.name}: {trace.n_requests:,} requests, {n:,} block accesses; "
          f"{args.repeat} alternating runs per point, medians")  # fmt: skip
    header = (
        f"{'semantics':>10} {'capacity':>8} | {'RADIX ms':>8} {'LRU_LEAF ms':>11} "
        f"{'ratio':>5} | {'RADIX cpu':>9} {'LEAF cpu':>8} {'ratio':>5} | "
        f"{'RADIX acc/s':>11} | {'ref s':>5}"
    )
    print(header)
    print("-" * len(header))
    for mode in args.semantics.split(","):
        sem = semantics(mode)
        for capacity in map(int, args.capacities.split(",")):
            radix = make_params("RADIX", capacity)
            leaf = make_params("LRU_LEAF", capacity)
            runs = {
                p.policy: (lambda p=p, sem=sem: replay_params(trace, p, 512, semantics=sem))
                for p in (radix, leaf)
            }
            got = runs["RADIX"]()  # compiles (or loads) the kernels, outside the timings
            runs["LRU_LEAF"]()
            assert got.engine == "kernel"
            start = time.perf_counter()
            want = reference_replay(trace, radix, 512, sem)
            ref_s = time.perf_counter() - start
            np.testing.assert_array_equal(got.hit_tokens, want[0])
            assert got.final_cache_blocks == want[1]
            times: dict[str, list[tuple[float, float]]] = {"RADIX": [], "LRU_LEAF": []}
            for _ in range(args.repeat):
                for name, fn in runs.items():
                    times[name].append(timed(fn))
            wall = {k: statistics.median(t[0] for t in v) for k, v in times.items()}
            cpu = {k: statistics.median(t[1] for t in v) for k, v in times.items()}
            print(
                f"{mode:>10} {capacity:>8} | {wall['RADIX'] * 1e3:>8.2f} "
                f"{wall['LRU_LEAF'] * 1e3:>11.2f} {wall['RADIX'] / wall['LRU_LEAF']:>5.2f} | "
                f"{cpu['RADIX'] * 1e3:>9.2f} {cpu['LRU_LEAF'] * 1e3:>8.2f} "
                f"{cpu['RADIX'] / cpu['LRU_LEAF']:>5.2f} | {n / wall['RADIX']:>11,.0f} | "
                f"{ref_s:>5.2f}"
            )
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS {peak:.0f} MiB")


if __name__ == "__main__":
    main()
