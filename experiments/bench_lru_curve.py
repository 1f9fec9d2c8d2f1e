"""One-pass LRU curve against separate LRU kernel replays, side by side.

On the bundled conversation trace: a curve over --points capacities (geometric from 64 to
262144) from :func:`prefixsim.lru_curve.lru_curve`, against one ``replay_params`` kernel
replay per capacity. Prints the kernels' first-call times (JIT compile or on-disk cache load)
apart, the curve's time (best of --repeat), one LRU kernel replay's time (best of --repeat, at
the median capacity), the replays' total (best of --repeat-all), their ratios, the time to
materialise every capacity's per-request ``ReplayResult`` from the curve, a curve over 10x the
capacities, and peak memory. Checks that curve and replays agree on every total and counter.

    python experiments/bench_lru_curve.py [--trace conversation] [--points 100] [--repeat 20]
                                          [--baseline REF]

``--baseline REF`` instead times the curve's kernels (the one pass, the totals at the
capacities, the per-request hits at one capacity, the ceiling) against those of commit ``REF``
(exported with ``git archive``, see ``baseline_kernels.py``), alternating, median of --repeat by
thread CPU time, each old result checked equal to today's.
"""

from __future__ import annotations

import argparse
import resource
import time
from collections.abc import Callable

import numpy as np

from prefixsim import load_trace, make_params, replay_params
from prefixsim.lru_curve import _curve_kernel, ceiling, lru_curve
from prefixsim.policies import get_policy


def best_of(fn: Callable[[], object], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def geometric(points: int, lo: int = 64, hi: int = 262144) -> list[int]:
    return np.unique(np.geomspace(lo, hi, points).round().astype(np.int64)).tolist()


def _against_baseline(args: argparse.Namespace) -> None:
    """Each curve kernel against ``args.baseline``'s, alternating, median thread CPU time."""
    import importlib
    import statistics

    from baseline_kernels import _package

    curve_module = importlib.import_module("prefixsim.lru_curve")
    old = importlib.import_module(f"{_package(args.baseline).__name__}.lru_curve")
    trace = load_trace(args.trace)
    bs = args.block_size
    capacities = np.array(geometric(args.points), np.int64)
    prefix_max, prefix_offsets, _, _ = _curve_kernel(
        trace.block_ids, trace.offsets, trace.n_blocks, int(capacities[-1])
    )
    median = int(capacities[len(capacities) // 2])
    calls = {
        "one pass (_curve_kernel)": (
            "_curve_kernel",
            (trace.block_ids, trace.offsets, trace.n_blocks, int(capacities[-1])),
        ),
        f"totals at {len(capacities)} capacities": (
            "_totals_kernel",
            (prefix_max, prefix_offsets, trace.input_lengths, bs, capacities),
        ),
        f"per-request hits at {median}": (
            "_hits_kernel",
            (prefix_max, prefix_offsets, trace.input_lengths, bs, median),
        ),
        "ceiling": (
            "_ceiling_kernel",
            (trace.block_ids, trace.offsets, trace.input_lengths, trace.n_blocks, bs),
        ),
    }
    print(f"trace {trace.name}: {trace.n_accesses:,} block accesses; today's curve kernels "
          f"against {args.baseline}'s, alternating, median of {args.repeat}, "
          "thread CPU time")  # fmt: skip
    print(f"{'kernel':<34}{'now ms':>9}{'old ms':>9}{'now/old':>9}")
    for label, (name, call_args) in calls.items():
        new_fn, old_fn = getattr(curve_module, name), getattr(old, name)
        a, b = new_fn(*call_args), old_fn(*call_args)
        a, b = (a, b) if isinstance(a, tuple) else ((a,), (b,))
        for x, y in zip(a, b, strict=True):
            assert np.array_equal(np.asarray(x), np.asarray(y)), label
        times: dict[bool, list[float]] = {False: [], True: []}
        for rep in range(args.repeat):
            for is_old in (rep % 2 == 1, rep % 2 == 0):
                fn = old_fn if is_old else new_fn
                start = time.thread_time()
                fn(*call_args)
                times[is_old].append(time.thread_time() - start)
        new_s, old_s = statistics.median(times[False]), statistics.median(times[True])
        print(f"{label:<34}{new_s * 1e3:>9.3f}{old_s * 1e3:>9.3f}{old_s / new_s:>8.2f}x")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", default="conversation")
    ap.add_argument("--points", type=int, default=100, help="capacities on the curve")
    ap.add_argument("--repeat", type=int, default=20, help="best of N for single runs")
    ap.add_argument("--repeat-all", type=int, default=3, help="best of N for all the replays")
    ap.add_argument("--block-size", type=int, default=512)
    ap.add_argument("--baseline", metavar="REF", help="the curve's kernels against REF's")
    args = ap.parse_args()
    if args.baseline:
        _against_baseline(args)
        return

    trace = load_trace(args.trace)
    bs = args.block_size
    capacities = geometric(args.points)
    print(f"trace {trace.name}: {trace.n_requests:,} requests, {trace.n_accesses:,} block "
          f"accesses, {trace.n_blocks:,} distinct blocks")  # fmt: skip
    print(f"{len(capacities)} capacities, geometric from {capacities[0]} to {capacities[-1]}")

    start = time.perf_counter()
    replay_params(trace, make_params("LRU", 4096), bs)
    first_replay = time.perf_counter() - start
    lru_how = "loaded from disk cache" if get_policy("LRU").kernel.stats.cache_hits else "compiled"
    start = time.perf_counter()
    lru_curve(trace, capacities, bs).result(capacities[0])
    ceiling(trace, bs)
    first_curve = time.perf_counter() - start
    curve_how = "loaded from disk cache" if _curve_kernel.stats.cache_hits else "compiled"
    print(f"first call: LRU kernel {first_replay:.2f} s ({lru_how}); "
          f"curve kernels {first_curve:.2f} s ({curve_how})")  # fmt: skip

    curve = lru_curve(trace, capacities, bs)
    t_curve = best_of(lambda: lru_curve(trace, capacities, bs), args.repeat)
    median = capacities[len(capacities) // 2]
    params = make_params("LRU", median)
    t_one = best_of(lambda: replay_params(trace, params, bs), args.repeat)
    all_params = [make_params("LRU", c) for c in capacities]
    replays = [replay_params(trace, p, bs) for p in all_params]
    t_all = best_of(lambda: [replay_params(trace, p, bs) for p in all_params], args.repeat_all)
    t_results = best_of(curve.results, 3)
    many = geometric(10 * args.points, 1, 10**6)
    t_many = best_of(lambda: lru_curve(trace, many, bs), args.repeat)
    t_ceiling = best_of(lambda: ceiling(trace, bs), args.repeat)

    for i, r in enumerate(replays):
        assert curve.total_hit_tokens[i] == r.total_hit_tokens, capacities[i]
        assert curve.final_cache_blocks[i] == r.final_cache_blocks, capacities[i]
        assert curve.block_hits[i] == r.counters["block_hits"], capacities[i]
        assert curve.evictions[i] == r.counters["evictions"], capacities[i]
    mid = capacities.index(median)
    assert np.array_equal(curve.result(median).hit_tokens, replays[mid].hit_tokens)

    print()
    print(f"curve, {len(capacities)} capacities (totals + counters): {t_curve * 1e3:8.2f} ms")
    print(f"one LRU kernel replay (capacity {median}):      {t_one * 1e3:8.2f} ms")
    print(f"{len(capacities)} LRU kernel replays:                   {t_all * 1e3:8.2f} ms")
    print(f"curve / one replay:   {t_curve / t_one:6.2f}x   (target <= 8x)")
    print(f"replays / curve:      {t_all / t_curve:6.1f}x   (target >= 12x)")
    print(f"+ per-request ReplayResult for all {len(capacities)} capacities: "
          f"{t_results * 1e3:.2f} ms")  # fmt: skip
    print(f"curve, {len(many)} capacities 1..10^6: {t_many * 1e3:.2f} ms "
          f"({t_many / t_one:.2f}x one replay)")  # fmt: skip
    print(f"ceiling (unbounded cache): {t_ceiling * 1e3:.2f} ms")
    rates = curve.overall_hit_rate
    top = ceiling(trace, bs).overall_hit_rate
    print(f"hit rate at {capacities[0]}: {rates[0]:.4f}, at {capacities[-1]}: {rates[-1]:.4f}, "
          f"ceiling: {top:.4f}")  # fmt: skip
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"\npeak memory (max RSS of this process): {peak:.0f} MiB")


if __name__ == "__main__":
    main()
