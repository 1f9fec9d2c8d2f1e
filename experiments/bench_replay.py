"""Replay throughput of the compiled kernels against the plain-Python references.

Prints, for each policy and capacity on the bundled conversation trace, block accesses per
second of the kernel (best of --repeat runs) and of the reference (one run) side by side, and
their ratio; plus trace parse time, binary-cache load time, the kernels' first-call time (JIT
compile or on-disk cache load, reported apart from the replays) and peak memory.

With ``--baseline [REF]``, the replays of ``--policies`` are also timed against the kernels of
commit REF (ebaec63 if not given; imported from that commit by ``baseline_kernels.py``; 115ee6c
is the last commit before the drivers): the replay as shipped (a policy's fast kernel, or the
driver), the single-cache driver over its steps, and REF's kernel alternate ``--repeat`` times
per capacity (checked equal per request first), median by the thread's CPU time and by wall
time. A policy REF does not have is timed as shipped and as the driver only. ``--grid`` adds
the S3FIFO points of the 1,008-point grid
(``bench_command.grid_1008``: 48 capacities from 256 to 131,072 x 5 ``small_ratio`` x 4
``max_freq``): each point's kernel call (its state's allocation included, as a sweep runs it)
timed by the thread's CPU time, old and new alternating point by point, the 960 calls summed;
median of ``--grid-repeat`` sums.

    python experiments/bench_replay.py [--trace conversation] [--repeat 5] [--no-reference]
                                       [--baseline [REF]] [--grid] [--grid-repeat 5]
"""

from __future__ import annotations

import argparse
import resource
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from prefixsim import Trace, load_trace, make_params, policy_names, replay_params
from prefixsim.engine import single
from prefixsim.policies import get_policy

BASELINE = "ebaec63"
"""The default baseline commit of ``--baseline`` (as ``bench_scale.BASELINE``)."""

CAPACITIES = [1024, 2048, 4096, 8192, 16384, 32768, 65536]


def best_of(fn, repeat: int) -> float:  # type: ignore[no-untyped-def]
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", default="conversation")
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument(
        "--policies", default=",".join(policy_names()), help="comma list (default: all)"
    )
    ap.add_argument("--no-reference", action="store_true", help="skip the slow reference runs")
    ap.add_argument(
        "--baseline",
        nargs="?",
        const=BASELINE,
        metavar="REF",
        help=f"--policies' kernels against those of commit REF (default {BASELINE})",
    )
    ap.add_argument(
        "--grid", action="store_true", help="with --baseline: the 960 S3FIFO points of 1,008"
    )
    ap.add_argument("--grid-repeat", type=int, default=5)
    args = ap.parse_args()

    parse = best_of(lambda: load_trace(args.trace, use_cache=False), 3)
    load_trace(args.trace)  # make sure the binary cache exists
    cached = best_of(lambda: load_trace(args.trace), 10)
    trace = load_trace(args.trace)
    n = trace.n_accesses
    print(f"trace {trace.name}: {trace.n_requests:,} requests, {n:,} block accesses, "
          f"{trace.n_blocks:,} distinct blocks")  # fmt: skip
    print(f"parse (no cache): {parse * 1e3:.1f} ms   binary-cache load: {cached * 1e3:.2f} ms")

    policies = args.policies.split(",")
    for policy in policies:
        kernel = get_policy(policy).kernel  # the fast kernel, or the single-cache driver
        start = time.perf_counter()
        replay_params(trace, make_params(policy, 2048), 512)
        first = time.perf_counter() - start
        how = "loaded from disk cache" if kernel.stats.cache_hits else "compiled"
        print(f"{policy} kernel first call: {first:.2f} s ({how})")

    print()
    header = (f"{'policy':<15}{'capacity':>9}{'hit rate':>10}{'kernel ms':>11}"
              f"{'kernel Macc/s':>15}{'ref ms':>10}{'ref Macc/s':>12}{'speed-up':>10}")  # fmt: skip
    print(header)
    print("-" * len(header))
    # All kernel timings first, then the references: a reference replay churns hundreds of MB
    # of Python objects, and a kernel timed right after one runs up to 2x slower.
    grid = [(policy, capacity) for policy in policies for capacity in CAPACITIES]
    kernel_s: dict[tuple[str, int], float] = {}
    rates: dict[tuple[str, int], float] = {}
    for policy, capacity in grid:
        params = make_params(policy, capacity)
        rates[policy, capacity] = replay_params(trace, params, 512).overall_hit_rate
        kernel_s[policy, capacity] = best_of(
            lambda p=params: replay_params(trace, p, 512), args.repeat
        )
    reference_s: dict[tuple[str, int], float] = {}
    if not args.no_reference:
        for policy, capacity in grid:
            params = make_params(policy, capacity)
            reference_s[policy, capacity] = best_of(
                lambda p=params: replay_params(trace, p, 512, engine="reference"), 1
            )
    for policy, capacity in grid:
        k = kernel_s[policy, capacity]
        row = (f"{policy:<15}{capacity:>9,}{rates[policy, capacity]:>10.4f}{k * 1e3:>11.2f}"
               f"{n / k / 1e6:>15.1f}")  # fmt: skip
        if (policy, capacity) in reference_s:
            r = reference_s[policy, capacity]
            row += f"{r * 1e3:>10.0f}{n / r / 1e6:>12.2f}{r / k:>9.0f}x"
        print(row)
    if args.baseline:
        against_baseline(trace, policies, args.repeat, args.baseline)
        if args.grid and "S3FIFO" in policies:
            grid_against_baseline(trace, args.grid_repeat, args.baseline)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"\npeak memory (max RSS of this process): {peak:.0f} MiB")


Run = tuple[float, float, tuple[Any, ...]]
"""One kernel call: wall seconds, the thread's CPU seconds, (hit_tokens, final size, counters)."""

VARIANTS = ("new", "driver", "old")
"""What ``--baseline`` times, alternating: ``new`` the single-cache replay as shipped (the
policy's fast kernel if it keeps one, else the driver over its steps), ``driver`` the
single-cache driver over the steps (``single.run(..., fast=False)``: what every composition
inlines), ``old`` REF's kernel."""


def kernel_runner(trace: Trace, ref: str, policies: list[str]) -> Callable[..., Run]:
    """``run(policy, capacity, variant, **params)``: one call of a :data:`VARIANTS` replay,
    timed, on ``trace`` with block size 512. A policy REF does not have gets no ``old``."""
    from baseline_kernels import baseline_kernel  # the experiments folder is on sys.path

    old_kernels = {}
    for p in policies:
        try:
            old_kernels[p] = baseline_kernel(ref, p)
        except Exception:  # ParameterError of REF's registry: a policy newer than REF
            continue

    def run(policy: str, capacity: int, variant: str | bool, **params: Any) -> Run:
        variant = {True: "old", False: "new"}.get(variant, variant)  # type: ignore[arg-type]
        spec = get_policy(policy)
        new_params = make_params(policy, capacity, **params)
        cnt = np.zeros(len(spec.counter_names), np.int64)
        inputs = (trace.block_ids, trace.offsets, trace.input_lengths, trace.n_blocks, 512)
        wall, cpu = time.perf_counter(), time.thread_time()
        if variant == "old":  # allocating the kernel's state is part of its time, old or new
            out = old_kernels[policy](*inputs, cnt, capacity, **params)
        else:
            hit_tokens, final, counters = single.run(
                spec, new_params, *inputs, fast=variant == "new"
            )
            out = (hit_tokens, final)
            cnt[:] = list(counters.values())
        return time.perf_counter() - wall, time.thread_time() - cpu, (*out, cnt)

    run.has_old = old_kernels.__contains__  # type: ignore[attr-defined]
    return run


def check_equal(new: Run, old: Run, what: object) -> None:
    """The same hit tokens per request, final size and counters, or stop."""
    assert np.array_equal(new[2][0], old[2][0]) and new[2][1] == old[2][1], what
    assert np.array_equal(new[2][2], old[2][2]), what


def against_baseline(trace: Trace, policies: list[str], repeat: int, ref: str) -> None:
    """Each policy's replay as shipped and its driver against REF's kernel, alternating (the
    order rotates every round), median of ``repeat`` by the thread's CPU time."""
    run = kernel_runner(trace, ref, policies)
    n = trace.n_accesses
    print(f"\nagainst {ref}'s kernels, alternating, median of {repeat}, M accesses/s by the "
          "thread's CPU time (wall in brackets);\nnew = as shipped, driver = the steps' driver, "
          "a/b = speed of a over b (CPU time)")  # fmt: skip
    header = (f"{'policy':<15}{'capacity':>9}{'new':>15}{'driver':>15}{'old':>15}"
              f"{'new/old':>11}{'driver/old':>11}{'driver/new':>11}")  # fmt: skip
    print(header)
    print("-" * len(header))
    for policy in policies:
        variants = [v for v in VARIANTS if v != "old" or run.has_old(policy)]  # type: ignore[attr-defined]
        for capacity in CAPACITIES:
            first = run(policy, capacity, "new")
            for v in variants[1:]:
                check_equal(first, run(policy, capacity, v), (policy, capacity, v))
            times: dict[str, list[tuple[float, float]]] = {v: [] for v in variants}
            for rep in range(repeat):
                k = rep % len(variants)
                for v in variants[k:] + variants[:k]:
                    times[v].append(run(policy, capacity, v)[:2])
            med = {
                v: (statistics.median(t[0] for t in ts), statistics.median(t[1] for t in ts))
                for v, ts in times.items()
            }
            cells = ""
            for v in VARIANTS:
                if v in med:
                    cells += f"{n / med[v][1] / 1e6:>7.1f} ({n / med[v][0] / 1e6:>5.1f})"
                else:
                    cells += f"{'-':>15}"
            ratios = ""
            for a, b in (("new", "old"), ("driver", "old"), ("driver", "new")):
                if a in med and b in med:
                    ratios += (
                        f"{med[b][1] / med[a][1]:>{9 if b == 'old' and a == 'new' else 11}.2f}"
                    )
                else:
                    ratios += f"{'-':>{9 if b == 'old' and a == 'new' else 11}}"
            print(f"{policy:<15}{capacity:>9,}{cells}{ratios}")


def grid_points() -> list[dict[str, Any]]:
    """The S3FIFO points of the 1,008-point grid (``bench_command.grid_1008``)."""
    from bench_command import MAX_FREQS, SMALL_RATIOS, grid_1008

    overrides = dict(arg.split("=", 1) for arg in grid_1008())
    capacities = [int(c) for c in overrides["capacity"].split(",")]
    return [
        {"capacity": c, "small_ratio": r, "max_freq": f}
        for c in capacities
        for r in SMALL_RATIOS
        for f in MAX_FREQS
    ]


def grid_against_baseline(trace: Trace, repeat: int, ref: str) -> None:
    """The grid's S3FIFO kernel calls, CPU seconds summed, against REF's; median of ``repeat``."""
    run = kernel_runner(trace, ref, ["S3FIFO"])
    points = grid_points()
    for p in points:  # checked equal first; this also loads both kernels
        check_equal(run("S3FIFO", variant="new", **p), run("S3FIFO", variant="old", **p), p)
    sums: dict[bool, list[float]] = {False: [], True: []}
    for rep in range(repeat):
        total = {False: 0.0, True: 0.0}
        for i, p in enumerate(points):
            for old in (i % 2 == rep % 2, i % 2 != rep % 2):
                total[old] += run("S3FIFO", variant=old, **p)[1]
        for old, seconds in total.items():
            sums[old].append(seconds)
    n = trace.n_accesses * len(points)
    new, old = statistics.median(sums[False]), statistics.median(sums[True])
    print(f"\n{len(points)} S3FIFO points of the 1,008-point grid, kernel CPU seconds summed, "
          f"alternating with {ref}'s point by point, median of {repeat} (min-max)")  # fmt: skip
    for label, sec, runs in (("new", new, sums[False]), (ref, old, sums[True])):
        spread = f"({min(runs):.3f}-{max(runs):.3f})"
        print(f"  {label:<10}{sec:7.3f} s {spread}  {n / sec / 1e6:6.1f}M/s")
    print(f"  new/old: {old / new:.2f}x")


if __name__ == "__main__":
    main()
