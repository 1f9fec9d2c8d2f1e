"""The executor's plan: deterministic for a grid and a machine, never slower than in process."""

from __future__ import annotations

import logging

import pytest

import prefixsim
from sweep import Backend, ExecutorConfig, SweepConfig
from sweep.grid import assign_points, plan_grid
from sweep.run import (
    TAIL_BATCH_SECONDS,
    TAPER_PER_WORKER,
    TARGET_BATCH_SECONDS,
    WORKER_START_SECONDS,
    _tapered,
    nominal_cost,
    plan_batches,
    runs_in_process,
    start_seconds,
    warm_up,
)


def test_in_process_unless_workers_finish_sooner() -> None:
    # Two workers that take s seconds to start finish t seconds of replays at s + t / 2,
    # sooner than this process alone only when t > 2 s.
    s = WORKER_START_SECONDS
    assert start_seconds(Backend.loky) == s
    assert runs_in_process(1.99 * s, 2, s)
    assert not runs_in_process(2.01 * s, 2, s)
    # with 4 workers: s + t / 4 < t when t > 4 s / 3
    assert runs_in_process(1.33 * s, 4, s)
    assert not runs_in_process(1.34 * s, 4, s)
    assert runs_in_process(1e6, 1, s)
    # threads start at once: worth it from a few hundredths of a second of replays
    assert not runs_in_process(0.1, 2, start_seconds(Backend.threading))


def _plan(cfg: SweepConfig, workers: int):  # type: ignore[no-untyped-def]
    trace = prefixsim.load_trace("conversation")
    points, _ = assign_points(plan_grid(cfg), {"conversation": trace.sha256}, {})
    traces = {trace.sha256: trace}
    return plan_batches(points, traces, cfg.executor, workers, warm_up(traces, points))


@pytest.mark.parametrize("n_capacities", [2, 24, 200])
def test_same_grid_same_plan_with_its_estimate_logged(
    n_capacities: int, caplog: pytest.LogCaptureFixture
) -> None:
    cfg = SweepConfig(
        policy=["S3FIFO", "LRU"],
        capacity=list(range(1024, 1024 * (n_capacities + 1), 1024)),
        small_ratio=[0.05, 0.1, 0.15, 0.2, 0.25],
        executor=ExecutorConfig(backend=Backend.loky, n_jobs=2),
    )
    with caplog.at_level(logging.DEBUG, logger="sweep"):
        first, second = _plan(cfg, 2), _plan(cfg, 2)
    assert first == second
    # S3FIFO points cost the conversation trace's accesses at the nominal cost each; the LRU
    # points (one curve) are worth CURVE_COST_IN_REPLAYS LRU replays in all.
    n_accesses = prefixsim.load_trace("conversation").n_accesses
    s3fifo = 5 * n_capacities * n_accesses * nominal_cost("S3FIFO")
    assert first.estimated_seconds >= s3fifo
    assert first.in_process == runs_in_process(first.estimated_seconds, 2, WORKER_START_SECONDS)
    assert first.in_process == (n_capacities < 100)  # 1,000 S3FIFO points: about 2.9 s
    logged = [r.getMessage() for r in caplog.records if r.getMessage().startswith("plan:")]
    assert len(logged) == 2 and logged[0] == logged[1]
    assert f"estimated {first.estimated_seconds:.3f} s" in logged[0]
    assert ("in this process" in logged[0]) == first.in_process


def test_batches_taper_towards_the_end_of_a_parallel_plan() -> None:
    # 20 points left, batches of at most 8, 2 workers: a batch holds at most ceil(left / 4)
    # points (TAPER_PER_WORKER = 2 per worker), at least 2:
    # left 20 -> 5, 15 -> 4, 11 -> 3, 8 -> 2, 6 -> 2, 4 -> max(2, 1) = 2, 2 -> 2
    assert TAPER_PER_WORKER == 2
    assert _tapered(20, 20, 8, 2, 2) == [5, 4, 3, 2, 2, 2, 2]
    # a group followed by 20 more points (another trace): its batches stay at 4 until the
    # share of what is left falls below; the last one is what remains of the group
    # left 30 -> min(4, 8) = 4, 26 -> min(4, 7) = 4, 22 -> 2 points remain
    assert _tapered(10, 30, 4, 1, 2) == [4, 4, 2]


def test_parallel_plan_keeps_every_point_once_in_order_and_ends_with_small_batches() -> None:
    cfg = SweepConfig(
        policy=["S3FIFO", "LRU"],
        capacity=list(range(1024, 1024 * 49, 1024)),
        small_ratio=[0.05, 0.1, 0.15, 0.2, 0.25],
        max_freq=[1, 2, 3, 4],
        executor=ExecutorConfig(backend=Backend.threading, n_jobs=2),
    )
    trace = prefixsim.load_trace("conversation")
    points, _ = assign_points(plan_grid(cfg), {"conversation": trace.sha256}, {})
    plan = _plan(cfg, 2)
    assert not plan.in_process
    s3fifo = [b for b in plan.batches if b.points[0].policy == "S3FIFO"]
    ids = [p.point_id for b in s3fifo for p in b.points]
    assert ids == sorted(p.point_id for p in points if p.policy == "S3FIFO")
    sizes = [len(b.points) for b in s3fifo]
    assert sizes == sorted(sizes, reverse=True)  # never growing
    # the last batches hold a few hundredths of a second of replays, the first ones 0.25 s
    per_point = nominal_cost("S3FIFO") * trace.n_accesses
    assert sizes[0] * per_point <= TARGET_BATCH_SECONDS < (sizes[0] + 1) * per_point
    assert sizes[-2] * per_point < 2 * TAIL_BATCH_SECONDS
