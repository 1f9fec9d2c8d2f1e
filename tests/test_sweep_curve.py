"""The sweep computes groups of LRU points from one LRU curve, with the replay's numbers."""

from __future__ import annotations

import numpy as np
import pytest

import prefixsim
from prefixsim import Trace, make_params
from sweep import run as sweep_run
from sweep.config import ExecutorConfig
from sweep.run import CURVE_MIN_POINTS, plan_batches, run_batch

CAPACITIES = [64, 1000, 4096, 20_000, 200_000]


def test_lru_points_come_from_one_curve(
    conversation: Trace, monkeypatch: pytest.MonkeyPatch
) -> None:
    items = [(i, make_params("LRU", c), 512) for i, c in enumerate(CAPACITIES)]
    items.append((len(items), make_params("S3FIFO", 4096), 512))
    expected = [prefixsim.replay_params(conversation, p, b) for _, p, b in items]

    replayed: list[str] = []
    real_replay = prefixsim.replay_params

    def spy(trace, params, block_size):  # type: ignore[no-untyped-def]
        replayed.append(params.policy)
        return real_replay(trace, params, block_size)

    monkeypatch.setattr(sweep_run.prefixsim, "replay_params", spy)
    outcomes = run_batch(conversation, items, per_request=True)
    assert replayed == ["S3FIFO"]  # the LRU points did not replay
    assert [o.point_id for o in outcomes] == [i for i, _, _ in items]
    for o, r in zip(outcomes, expected, strict=True):
        assert o.error is None
        assert o.total_hit_tokens == r.total_hit_tokens
        assert o.final_cache_blocks == r.final_cache_blocks
        assert o.counters == r.counters
        np.testing.assert_array_equal(o.hit_tokens, r.hit_tokens)


def test_few_lru_points_are_replayed(conversation: Trace, monkeypatch: pytest.MonkeyPatch) -> None:
    items = [
        (i, make_params("LRU", c), 512) for i, c in enumerate(CAPACITIES[: CURVE_MIN_POINTS - 1])
    ]
    monkeypatch.setattr(sweep_run.prefixsim, "lru_curve", None)  # would fail if called
    outcomes = run_batch(conversation, items, per_request=False)
    assert [o.error for o in outcomes] == [None] * len(items)


def test_planner_keeps_lru_points_of_a_block_size_together(conversation: Trace) -> None:
    from sweep.grid import Point

    points = [
        Point(point_id=i, trace=conversation.name, trace_sha256=conversation.sha256,
              params=make_params(pol, c), block_size=512, key=str(i))
        for i, (pol, c) in enumerate((pol, c) for c in CAPACITIES for pol in ("LRU", "S3FIFO"))
    ]  # fmt: skip
    plan = plan_batches(points, {conversation.sha256: conversation},
                        ExecutorConfig(n_jobs=2), 2, {"LRU": 5e-9, "S3FIFO": 1e-8})  # fmt: skip
    lru_batches = [b for b in plan.batches if any(p.policy == "LRU" for p in b.points)]
    assert len(lru_batches) == 1
    assert sorted(p.params.capacity for p in lru_batches[0].points) == sorted(CAPACITIES)
    assert all(p.policy == "LRU" for p in lru_batches[0].points)
