"""Points in batches: the worker function (:func:`run_batch`) and the plan (:func:`plan_batches`).

The parent process loads each trace once and hands batches of points to an executor
(:mod:`sweep.backends`). A batch holds points of one trace, consecutive in point_id order, sized
so that a task carries a fraction of a second of work (per-task overhead is then negligible per
point) while every worker still gets several tasks. The trace travels with every task, but
cheaply: loky memory-maps its large arrays (one dump per sweep), Dask scatters it once, threads
share it, and each worker keeps one private, writable copy per trace (keyed by sha256) so the
compiled kernels see the exact argument types the parent compiled (and cached on disk) before
dispatch: workers load, never compile.

A point that raises is caught in the worker and returned as a failure; the others go on.
Results do not depend on the backend, ``n_jobs`` or the batch size: each point is one
deterministic replay, and rows are ordered by point_id when written.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import operator
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

import prefixsim
from prefixsim import Scenario, Trace

from .config import Backend, ExecutorConfig
from .grid import Point, gc_paused
from .outcome import CURVE_MIN_POINTS, Item, Outcome, failure, head, replay_items

log = logging.getLogger("sweep")

TARGET_BATCH_SECONDS = 0.25
"""Work per task aimed at (estimated with :data:`NOMINAL_SECONDS_PER_ACCESS`)."""
MIN_TASKS_PER_WORKER = 4
"""Batches are small enough that each worker gets at least this many (load balance)."""
TAPER_PER_WORKER = 2
"""Towards the end of a parallel plan a batch holds at most the points left divided by this
times the workers (guided self-scheduling), so that the workers finish close together and
the last batch's part and rows, written after every replay, are small (see
:func:`_tapered`)."""
TAIL_BATCH_SECONDS = 0.025
"""The smallest batch the taper makes, in estimated seconds of replays (the cost of a batch
itself, its part file and its dispatch, is a few milliseconds)."""
NOMINAL_SECONDS_PER_ACCESS: dict[str, float] = {"LRU": 5e-9}
"""The plan's cost model: seconds per block access of a replay, by policy (others:
:data:`DEFAULT_SECONDS_PER_ACCESS`). Nominal numbers, not timed at run time, so the same grid on
the same machine always gets the same plan (a timed warm-up varied by 2x on a busy machine and
flipped plans). Measured on one core: LRU 3.5-4 ns, S3FIFO 7-9 ns."""
DEFAULT_SECONDS_PER_ACCESS = 1e-8
WORKER_START_SECONDS = 1.0
"""What starting loky's worker processes costs before their first replay (interpreter, imports,
numba's disk cache): 0.6-2.3 s measured on 2 cores. An automatic-batch loky/threading sweep runs
in this process unless its workers are expected to finish sooner than this process alone (see
:func:`runs_in_process`); an underestimated replay cost errs towards running in process, which
is never slower than itself."""
THREAD_START_SECONDS = 0.01
"""The same for threads of this process (the kernels release the GIL): a thread pool."""
CLUSTER_COST_IN_REPLAYS = 4
"""Upper estimate of a cluster point's cost, in single-cache replays (measured on the bundled
trace at 16 instances: 1.6 to 4.0 for S3FIFO, ``experiments/bench_cluster.py``)."""
CURVE_COST_IN_REPLAYS = 8
"""Upper estimate of one LRU curve's cost, in LRU replays (measured: about 4)."""


# --- worker side ---------------------------------------------------------------------------------


_LOCAL_TRACES: dict[str, Trace] = {}
_MAX_LOCAL_TRACES = 4


def _local_trace(trace: Trace) -> Trace:
    """This process's view of ``trace``: plain ndarrays, writable and contiguous (a read-only
    array would make numba compile a new specialization).

    Workers receive large arrays memory-mapped copy-on-write (``mmap_mode="c"`` in
    :func:`execute`): those are used as they are, viewed as plain ndarrays, so every worker
    shares the one copy joblib wrote (the kernels never write to a trace). Anything else that is
    not writable and contiguous is copied."""
    cached = _LOCAL_TRACES.get(trace.sha256)
    if cached is not None:
        return cached
    arrays = {
        f.name: a
        for f in dataclasses.fields(trace)
        if isinstance(a := getattr(trace, f.name), np.ndarray)
    }
    ok = (a.flags.writeable and a.flags.c_contiguous and a.flags.aligned for a in arrays.values())
    if not all(ok):
        owned = {name: np.array(a, copy=True, order="C", subok=False) for name, a in arrays.items()}
        trace = dataclasses.replace(trace, **owned)  # type: ignore[arg-type]
    elif any(type(a) is not np.ndarray for a in arrays.values()):
        # Views are free, so they are not kept: a worker holding joblib's memory maps past its
        # batch would keep them alive at shutdown (loky then warns of leaked files).
        views = {name: a.view(np.ndarray) for name, a in arrays.items()}  # no copy
        return dataclasses.replace(trace, **views)  # type: ignore[arg-type]
    if len(_LOCAL_TRACES) >= _MAX_LOCAL_TRACES:
        _LOCAL_TRACES.pop(next(iter(_LOCAL_TRACES)))
    _LOCAL_TRACES[trace.sha256] = trace
    return trace


def clear_local_traces() -> None:
    _LOCAL_TRACES.clear()


def _full_item(item: Item | tuple[Any, ...]) -> Item:
    """An item as a scenario: ``(point_id, params, block_size[, cluster[, semantics]])``
    (single caches, or clusters, under ``spec`` when shorter) is ``(point_id, Scenario)``."""
    if len(item) == 2:
        return item
    point_id, params, block_size, *rest = item
    return (point_id, Scenario(params, block_size, *rest))


def run_batch(
    trace: Trace, given: Sequence[Item | tuple[Any, ...]], per_request: bool
) -> list[Outcome]:
    """Replay a batch of points of one trace (runs in a worker), outcomes in ``items`` order
    (:func:`sweep.outcome.replay_items`). Never raises for a point: a failure is returned with
    the exception's type, message and location."""
    items = [_full_item(it) for it in given]
    done = replay_items(_local_trace(trace), items, per_request)
    return [o if isinstance(o, Outcome) else failure(items[i][0], o) for i, o in enumerate(done)]


# --- parent side ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Batch:
    trace_sha256: str
    points: tuple[Point, ...]

    def items(self) -> list[Item]:
        return [(p.point_id, p.scenario) for p in self.points]


@dataclass
class Plan:
    """How a sweep's points will be executed."""

    batches: list[Batch]
    batch_size: int | None
    """The batch size used, None when it varies by trace (automatic)."""
    in_process: bool
    workers: int
    estimated_seconds: float


def warm_up(traces: dict[str, Trace], points: Sequence[Point]) -> dict[str, float]:
    """Load (or compile and cache on disk) every kernel the sweep uses, in this process, before
    any worker starts; returns the plan's nominal replay cost per block access of each policy
    (:data:`NOMINAL_SECONDS_PER_ACCESS`)."""
    first: dict[str, Point] = {}
    for p in points:
        first.setdefault(p.policy, p)
    for p in first.values():  # load or compile (as one cache, under spec: the same kernels)
        prefixsim.run_scenario(_head(traces[p.trace_sha256]), Scenario(p.params, p.block_size))
    # Cluster points: their kernels (per policy and kind of router) on a few requests.
    warmed: set[tuple[str, bool]] = set()
    for p in points:
        if p.cluster is None:
            continue
        kind = (p.policy, p.cluster.router.router in ("least_loaded", "kv_aware"))
        if kind not in warmed:
            warmed.add(kind)
            warm = Scenario(p.params, p.block_size, p.cluster)
            prefixsim.run_scenario(_head(traces[p.trace_sha256]), warm)
    return {policy: nominal_cost(policy) for policy in first}


def nominal_cost(policy: str) -> float:
    """Seconds per block access of a ``policy`` replay, for planning."""
    return NOMINAL_SECONDS_PER_ACCESS.get(policy, DEFAULT_SECONDS_PER_ACCESS)


def start_seconds(backend: Backend) -> float:
    """What starting ``backend``'s workers costs, for planning."""
    return THREAD_START_SECONDS if backend == Backend.threading else WORKER_START_SECONDS


def runs_in_process(estimated_seconds: float, workers: int, start: float) -> bool:
    """Whether ``estimated_seconds`` of replays finish sooner here, one at a time, than on
    ``workers`` new workers, which first start (``start`` seconds), then share the work:
    ``start + t / workers < t`` only when ``t > start * workers / (workers - 1)``."""
    if workers <= 1:
        return True
    return estimated_seconds <= start * workers / (workers - 1)


def _head(trace: Trace) -> Trace:
    """The first requests of this process's copy of ``trace``, about 2,000 block accesses."""
    return head(_local_trace(trace), 2_000)


@gc_paused()
def plan_batches(
    points: Sequence[Point],
    traces: dict[str, Trace],
    ex: ExecutorConfig,
    workers: int,
    cost_per_access: dict[str, float],
) -> Plan:
    """Split ``points`` into batches (one trace each, consecutive point ids). With automatic
    batching, the LRU points of one trace and block size form one batch of their own, which a
    worker computes from one LRU curve (see :func:`run_batch`)."""
    estimate = _estimates(points, traces, cost_per_access)
    by_id = operator.attrgetter("point_id")
    by_trace: dict[str, list[Point]] = {}
    curves: dict[tuple[str, int], list[Point]] = {}
    for p in sorted(points, key=by_id):
        if p.params.policy == "LRU" and ex.batch_size is None and p.cluster is None:
            curves.setdefault((p.trace_sha256, p.block_size), []).append(p)
        else:
            by_trace.setdefault(p.trace_sha256, []).append(p)
    batches: list[Batch] = []
    for (sha, _), lru_points in curves.items():
        if len(lru_points) >= CURVE_MIN_POINTS:
            batches.append(Batch(sha, tuple(lru_points)))
            for p in lru_points:
                estimate[p.point_id] *= CURVE_COST_IN_REPLAYS / len(lru_points)
        else:
            by_trace.setdefault(sha, []).extend(lru_points)
    total = sum(estimate.values())
    in_process = ex.backend != Backend.dask and (
        ex.n_jobs == 1
        or workers == 1
        or (ex.batch_size is None and runs_in_process(total, workers, start_seconds(ex.backend)))
    )
    left = sum(len(group) for group in by_trace.values())  # in this and the later groups
    for sha, group in by_trace.items():
        group.sort(key=by_id)
        if ex.batch_size is not None:
            cuts = _fixed(len(group), ex.batch_size)
        elif in_process:
            size = max(1, math.ceil(TARGET_BATCH_SECONDS / max(1e-9, _mean(group, estimate))))
            cuts = _fixed(len(group), size)
        else:
            per_point = max(1e-9, _mean(group, estimate))
            by_time = max(1, math.floor(TARGET_BATCH_SECONDS / per_point))
            by_balance = max(1, math.ceil(len(points) / (MIN_TASKS_PER_WORKER * workers)))
            smallest = max(1, math.ceil(TAIL_BATCH_SECONDS / per_point))
            cuts = _tapered(len(group), left, min(by_time, by_balance), smallest, workers)
        left -= len(group)
        i = 0
        for size in cuts:
            batches.append(Batch(sha, tuple(group[i : i + size])))
            i += size
    if ex.batch_size is None and len(batches) == 1 and ex.backend != Backend.dask:
        in_process = True
    sizes = {len(b.points) for b in batches}
    plan = Plan(
        batches=batches,
        batch_size=ex.batch_size if ex.batch_size is not None else (max(sizes) if sizes else 0),
        in_process=in_process,
        workers=1 if in_process else workers,
        estimated_seconds=total,
    )
    log.debug(
        "plan: %d points, estimated %.3f s of replays (s per access: %s); %s; %d batch(es) of "
        "up to %d points",
        len(points),
        total,
        ", ".join(f"{k} {v:.1e}" for k, v in sorted(cost_per_access.items())),
        "in this process"
        if in_process
        else f"{workers} {ex.backend.value} workers (worth starting above "
        f"{start_seconds(ex.backend) * workers / max(1, workers - 1):.2f} s)",
        len(batches),
        max(sizes) if sizes else 0,
    )
    return plan


def _fixed(n: int, size: int) -> list[int]:
    """``n`` points in batches of ``size`` (the last one shorter)."""
    return [min(size, n - i) for i in range(0, n, size)]


def _tapered(n: int, left: int, size: int, smallest: int, workers: int) -> list[int]:
    """Sizes of the batches of ``n`` points, ``left`` points in the plan from the first of
    them on: ``size`` points each, except that a batch holds no more than the points left
    divided by :data:`TAPER_PER_WORKER` x ``workers``, and no fewer than ``smallest`` (nor more
    than remain). With batches of equal size, a worker could start the last one just as the
    other finished theirs, and replay it alone while the other cores idle; then the main
    thread writes its part and per-request rows after every replay. Shrinking batches keep
    the wait for the last ones, and what is written after them, to a few hundredths of a
    second."""
    sizes: list[int] = []
    done = 0
    while done < n:
        share = math.ceil((left - done) / (TAPER_PER_WORKER * workers))
        k = min(n - done, max(smallest, min(size, share)))
        sizes.append(k)
        done += k
    return sizes


def _estimates(
    points: Sequence[Point], traces: dict[str, Trace], cost_per_access: dict[str, float]
) -> dict[int, float]:
    """point_id -> estimated seconds of its replay (before LRU curves are accounted for)."""
    # A point's estimate depends on its policy, trace and kind only: computed once for each
    # (the same product, so the same float, as per point).
    unit: dict[tuple[str, str, bool], float] = {}
    estimate: dict[int, float] = {}
    for p in points:
        kind = (p.params.policy, p.trace_sha256, p.cluster is None)
        cost = unit.get(kind)
        if cost is None:
            cost = unit[kind] = (
                cost_per_access.get(kind[0], 1e-8)
                * traces[kind[1]].n_accesses
                * (1 if kind[2] else CLUSTER_COST_IN_REPLAYS)
            )
        estimate[p.point_id] = cost
    return estimate


def _mean(group: Sequence[Point], estimate: dict[int, float]) -> float:
    return sum(estimate[p.point_id] for p in group) / max(1, len(group))
