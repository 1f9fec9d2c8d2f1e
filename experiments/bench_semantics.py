"""The engine modes' cost: a policy's replay under ``vllm`` and ``sglang`` against its ``spec``
replay (issue 19: "at most 10% over today's replay of the same policy").

For each policy and capacity on the bundled conversation trace (blocks of 512 tokens), the
public entry point (``replay_params``, what the API, CLI and sweep call) under ``spec`` (today's
replay: the policy's fast kernel if it has one, else the single-cache driver), under ``vllm``
(front, and ``--options`` adds back and ``cache_output_blocks``) and under ``sglang``, all
compiled: the points alternate ``--repeat`` times in one run (each compiled once first, apart),
median of the thread's CPU time (``time.thread_time``: a shared machine's other processes count
less than in wall time), block accesses of the trace per second, and the ratio to ``spec``.

A mode's replay lays the trace out once (``prefixsim.semantics.engine_layout``, kept with the
trace for the next replays of a sweep): the mode columns are such later calls; ``vllm first``
is a first call, the layout made in it (the kept one dropped before each call). The column
``spec driver`` is the spec through the driver over the policy's steps (``fast=False``): for a
policy with a fast kernel it is what the modes ran before they had the fast kernels. A policy
without a removal (ARC, CLOCK, BELADY) is refused where a temporary block must leave the cache
(vLLM front, SGLang): those cells say so. Then, per point, the peak of the memory the replay
allocates (``tracemalloc``, one call each) and the process's max RSS; the last lines give the
largest ratio of each column.

    python experiments/bench_semantics.py [--policies LRU,S3FIFO,...] [--capacities 4096]
                                          [--repeat 21] [--options]
"""

from __future__ import annotations

import argparse
import resource
import statistics
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

from prefixsim import ParameterError, Semantics, load_trace, make_params, replay_params, semantics
from prefixsim.engine import single
from prefixsim.policies import get_policy

BLOCK_SIZE = 512


POLICIES = (
    "LRU,FIFO,SIEVE,CLOCK,LFU,ARC,S3FIFO,S3FIFO_LEAF,LRU_LEAF,LRU_TAIL_FIRST,S3FIFO_LCS,BELADY"
)
"""The policies with steps (every one the modes compile)."""
FIRST = "vllm first"


def points(options: bool) -> dict[str, Semantics | None]:
    """The columns: ``None`` is the spec through the driver (``fast=False``)."""
    cols: dict[str, Semantics | None] = {"spec": Semantics(), "spec driver": None}
    cols["vllm"] = Semantics("vllm")
    cols[FIRST] = Semantics("vllm")
    if options:
        cols["vllm back"] = Semantics("vllm", unhashed_free="back")
        cols["vllm +out"] = Semantics("vllm", cache_output_blocks=True)
    cols["sglang"] = Semantics("sglang")
    if options:
        cols["sglang +out"] = Semantics("sglang", cache_output_blocks=True)
    return cols


def runner(trace: Any, params: Any, name: str, sem: Semantics | None) -> Callable[[], Any]:
    if sem is None:
        spec = get_policy(params.policy)
        args = (trace.block_ids, trace.offsets, trace.input_lengths, trace.n_blocks, BLOCK_SIZE)
        return lambda: single.run(spec, params, *args, fast=False)[0]
    if name == FIRST:

        def first() -> Any:
            # the layout made in the call (the other layouts kept)
            semantics._LAYOUTS.get(trace, {}).pop((BLOCK_SIZE, False), None)
            return replay_params(trace, params, BLOCK_SIZE, semantics=sem)

        return first
    return lambda: replay_params(trace, params, BLOCK_SIZE, semantics=sem)


def refused(trace: Any, params: Any, sem: Semantics | None) -> bool:
    """Whether the point is refused (a policy without a removal, a temporary block to free)."""
    if sem is None or sem.name == "spec":
        return False
    try:
        replay_params(trace, params, BLOCK_SIZE, semantics=sem)
    except ParameterError:
        return True
    return False


def peak_bytes(fn: Callable[[], Any]) -> int:
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", default="conversation")
    ap.add_argument("--policies", default=POLICIES)
    ap.add_argument("--capacities", default="1024,4096,16384")
    ap.add_argument("--repeat", type=int, default=21)
    ap.add_argument("--options", action="store_true", help="add vLLM back and cached outputs")
    args = ap.parse_args()
    trace = load_trace(args.trace)
    cols = points(args.options)
    print(
        f"trace {trace.name}: {trace.n_requests:,} requests, {trace.n_accesses:,} block "
        f"accesses; median thread CPU time of {args.repeat} alternating runs "
        "(shared machine: noisy)\n"
    )
    header = "| policy | capacity | " + " | ".join(cols) + " |"
    print(header)
    print("|" + " --- |" * (header.count("|") - 1))
    memory: list[str] = []
    worst: dict[str, float] = {}
    for policy in args.policies.split(","):
        for capacity in map(int, args.capacities.split(",")):
            params = make_params(policy, capacity)
            live = {n: sem for n, sem in cols.items() if not refused(trace, params, sem)}
            runs = {name: runner(trace, params, name, sem) for name, sem in live.items()}
            for run in runs.values():  # compile (or load from the disk cache), untimed
                run()
            # the modes are what they claim: compiled (not the reference)
            for name, sem in live.items():
                if sem is not None and sem.name != "spec":
                    assert runs[name]().engine == "kernel", (policy, name)
            times: dict[str, list[float]] = {name: [] for name in live}
            for _ in range(args.repeat):
                for name, run in runs.items():
                    start = time.thread_time()  # this thread's CPU time: less noise
                    run()
                    times[name].append(time.thread_time() - start)
            med = {name: statistics.median(t) for name, t in times.items()}
            cells = []
            for name in cols:
                if name not in live:
                    cells.append("refused")
                    continue
                rate = trace.n_accesses / med[name] / 1e6
                cell = f"{med[name] * 1e3:.2f} ms ({rate:.0f} M/s)"
                if name != "spec":
                    ratio = med[name] / med["spec"]
                    cell += f" {ratio:.2f}x"
                    worst[name] = max(worst.get(name, 0.0), ratio)
                cells.append(cell)
            print(f"| {policy} | {capacity:,} | " + " | ".join(cells) + " |", flush=True)
            peaks = {name: peak_bytes(run) for name, run in runs.items()}
            memory.append(
                f"| {policy} | {capacity:,} | "
                + " | ".join(f"{peaks[n] / 2**20:.1f} MiB" if n in peaks else "-" for n in cols)
                + " |"
            )
    print("\nlargest ratio to spec: " + ", ".join(f"{n} {r:.2f}x" for n, r in worst.items()))
    print("\npeak memory a replay allocates (tracemalloc, one call each)\n")
    print(header)
    print("|" + " --- |" * (header.count("|") - 1))
    print("\n".join(memory))
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"\nmax RSS of this process: {rss:.0f} MiB")


if __name__ == "__main__":
    main()
