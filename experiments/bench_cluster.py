"""Cluster replay time against a single-cache replay, in the same run.

For each router and policy, times a cluster point (``--instances``, default 16, at
``--capacity`` blocks per instance) on the bundled trace beside the single-cache kernel replay
of the same policy and capacity, alternating the two, and prints the medians and their ratio
(the issue's target: at most 5x), and the ratio of the best times (less sensitive to a
loaded machine). Also prints the kernels' first-call time and peak memory.

The row ``session (numpy)`` is the session router as it was before its compiled assignment
(numpy ``searchsorted`` over all requests), kept here only as the baseline of that change.

    python experiments/bench_cluster.py [--instances 16] [--capacity 4096] [--repeat 9]
                                        [--baseline REF]

``--baseline REF`` instead times the load-aware cluster replays (least_loaded, kv_aware) as they
were at commit ``REF`` (exported with ``git archive``, see ``baseline_kernels.py``) against
today's, alternating, by thread CPU time, each old result checked equal to today's per request.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import resource
import statistics
import time

import numpy as np

from prefixsim import load_trace, make_params, replay_params
from prefixsim.cluster import LoadModel, make_router, replay_cluster_params, router_names
from prefixsim.cluster import routers as R

ROUTER_PARAMS = {"session": {"key_blocks": 2}}
NUMPY_SESSION = "session (numpy)"


def _assign_session_numpy(params, instances, trace):  # type: ignore[no-untyped-def]
    """The session router's previous fast path: numpy over all requests (no session ids)."""
    points, owners = R.ring_arrays(instances, params.vnodes)
    starts = trace.offsets[:-1]
    has_blocks = trace.offsets[1:] > starts
    lengths = trace.offsets[1:] - starts
    keys = np.zeros(trace.n_requests, np.uint64)
    keys[has_blocks] = R.mix64_array(trace.block_ids[starts[has_blocks]].astype(np.uint64))
    for b in range(1, params.key_blocks):
        longer = lengths > b
        if not longer.any():
            break
        block = trace.block_ids[starts[longer] + b].astype(np.uint64)
        keys[longer] = R.mix64_array(keys[longer] ^ block)
    j = np.searchsorted(points, keys, side="left") % len(points)
    return np.where(has_blocks, owners[j], 0).astype(np.int32)


@contextlib.contextmanager
def _numpy_session():  # type: ignore[no-untyped-def]
    spec = R._REGISTRY["session"]
    R._REGISTRY["session"] = dataclasses.replace(spec, assign=_assign_session_numpy)
    try:
        yield
    finally:
        R._REGISTRY["session"] = spec


def _against_baseline(args: argparse.Namespace) -> None:
    """Today's load-aware cluster replays against ``args.baseline``'s, alternating, median and
    best of ``args.repeat`` by thread CPU time; per request equal. The baseline's package runs
    its own ``replay_cluster_params`` on today's trace (its cluster kernels where it had them:
    LRU and S3FIFO before the cluster driver)."""
    import importlib

    from baseline_kernels import _package

    old = _package(args.baseline)
    old_cluster = importlib.import_module(f"{old.__name__}.cluster")
    trace = load_trace(args.trace)
    load = LoadModel(args.model, args.hardware)  # type: ignore[arg-type]
    old_load = old_cluster.LoadModel(args.model, args.hardware)
    n = trace.n_accesses
    print(f"trace {trace.name}: {n:,} accesses; {args.instances} instances x {args.capacity} "
          f"blocks; now against {args.baseline}, alternating, thread CPU time")  # fmt: skip
    print(f"{'router':<14}{'policy':<16}{'now ms':>9}{'old ms':>9}{'now/old':>9}"
          f"{'now best':>10}{'old best':>10}{'Macc/s now':>12}")  # fmt: skip
    for policy in args.policies.split(","):
        params = make_params(policy, args.capacity)
        old_params = old.make_params(policy, args.capacity)
        for name in ("least_loaded", "kv_aware"):
            router, old_router = make_router(name), old_cluster.make_router(name)

            def run(router=router, params=params):  # type: ignore[no-untyped-def]
                return replay_cluster_params(trace, params, 512, args.instances, router, load)

            def run_old(router=old_router, params=old_params):  # type: ignore[no-untyped-def]
                return old_cluster.replay_cluster_params(
                    trace, params, 512, args.instances, router, old_load
                )

            new_res, old_res = run(), run_old()
            assert np.array_equal(new_res.hit_tokens, old_res.hit_tokens), (name, policy)
            assert np.array_equal(new_res.instance, old_res.instance), (name, policy)
            new_t, old_t = [], []
            for _ in range(args.repeat):
                start = time.thread_time()
                run()
                new_t.append(time.thread_time() - start)
                start = time.thread_time()
                run_old()
                old_t.append(time.thread_time() - start)
            nm, om = statistics.median(new_t), statistics.median(old_t)
            print(f"{name:<14}{policy:<16}{nm * 1e3:>9.2f}{om * 1e3:>9.2f}{om / nm:>8.2f}x"
                  f"{min(new_t) * 1e3:>10.2f}{min(old_t) * 1e3:>10.2f}"
                  f"{n / nm / 1e6:>12.1f}")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", default="conversation")
    ap.add_argument("--instances", type=int, default=16)
    ap.add_argument("--capacity", type=int, default=4096)
    ap.add_argument("--repeat", type=int, default=9)
    ap.add_argument("--policies", default="S3FIFO,LRU")
    ap.add_argument("--routers", default=",".join([*router_names(), NUMPY_SESSION]))
    ap.add_argument("--model", default="llama-3.1-8b")
    ap.add_argument("--hardware", default="h100")
    ap.add_argument("--baseline", metavar="REF", help="today's cluster kernels against REF's")
    args = ap.parse_args()
    if args.baseline:
        _against_baseline(args)
        return

    trace = load_trace(args.trace)
    load = LoadModel(args.model, args.hardware)  # type: ignore[arg-type]
    print(f"trace {trace.name}: {trace.n_requests:,} requests, {trace.n_accesses:,} accesses; "
          f"{args.instances} instances x {args.capacity} blocks; model {args.model} on "
          f"{args.hardware}; median of {args.repeat}, cluster and single alternating")  # fmt: skip
    header = (f"{'router':<17}{'policy':<8}{'hit rate':>9}{'single ms':>11}{'cluster ms':>12}"
              f"{'ratio':>7}{'best':>7}{'p99 TTFT s':>12}{'imbalance':>11}")  # fmt: skip
    print(header)
    print("-" * len(header))
    for policy in args.policies.split(","):
        params = make_params(policy, args.capacity)
        for name in args.routers.split(","):
            numpy_session = name == NUMPY_SESSION
            router = make_router("session" if numpy_session else name, **ROUTER_PARAMS.get(
                "session" if numpy_session else name, {}))  # fmt: skip

            def cluster(router=router, params=params, numpy_session=numpy_session):  # type: ignore[no-untyped-def]
                with _numpy_session() if numpy_session else contextlib.nullcontext():
                    return replay_cluster_params(trace, params, 512, args.instances, router, load)

            def single(params=params):  # type: ignore[no-untyped-def]
                return replay_params(trace, params, 512)

            start = time.perf_counter()
            res = cluster()  # first call: compiles or loads the kernels
            first = time.perf_counter() - start
            single()
            c_times, s_times = [], []
            for _ in range(args.repeat):
                start = time.perf_counter()
                single()
                s_times.append(time.perf_counter() - start)
                start = time.perf_counter()
                cluster()
                c_times.append(time.perf_counter() - start)
            s_ms = statistics.median(s_times) * 1e3
            c_ms = statistics.median(c_times) * 1e3
            best = min(c_times) / min(s_times)
            print(f"{name:<17}{policy:<8}{res.overall_hit_rate:>9.4f}{s_ms:>11.1f}{c_ms:>12.1f}"
                  f"{c_ms / s_ms:>7.2f}{best:>7.2f}{res.ttft_percentile(99):>12.3f}"
                  f"{res.load_imbalance:>11.3f}   (first call {first:.2f} s)")  # fmt: skip
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS {peak:.0f} MiB")


if __name__ == "__main__":
    main()
