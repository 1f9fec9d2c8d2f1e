"""The sweep's planner and store where no test looked: cache sizes that floor to the same block
count stay distinct points, ``capacity=[16, 16.0]`` is refused as typed (16.0 is not an
integer, and it is not 16), and a point found in two leftover part files keeps its latest
version."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import prefixsim
from prefixsim.models import load_model
from sweep import ExecutorConfig, PlanError, SweepConfig, run_sweep
from sweep.grid import assign_points, plan_grid
from sweep.store import RunDir
from test_cost_sweep import model_config
from test_sweep import config, small_trace  # noqa: F401

MODEL = "llama-3.1-8b"  # 128 KiB of KV cache per token: 64 MiB a 512-token block
MIB = 2**20


def planned(cfg: SweepConfig) -> list[tuple[str, int, int, int | None, str]]:
    """(policy, capacity, block_size, cache_bytes, point key) of every point of the grid."""
    grid = plan_grid(cfg)
    shas = {t: "ab" * 32 for t in cfg.trace}
    points, _ = assign_points(grid, shas, {}, {"cost": "x"})
    return [(p.policy, p.params.capacity, p.block_size, p.cache_bytes, p.key) for p in points]


# --- cache sizes that floor to the same number of blocks -------------------------------------


@settings(max_examples=60, deadline=None)
@given(
    blocks=st.integers(10, 5000),
    extra=st.lists(st.integers(0, 2 * MIB - 1), min_size=2, max_size=4, unique=True),
    block_size=st.sampled_from([512, 256, 16]),  # 64, 32 and 2 MiB a block
    policies=st.sampled_from([["LRU"], ["S3FIFO", "LRU"], ["FIFO", "SIEVE"]]),
    spell=st.sampled_from(["bytes", "KiB"]),
)
def test_sizes_flooring_to_one_capacity_stay_distinct_points(
    blocks: int, extra: list[int], block_size: int, policies: list[str], spell: str
) -> None:
    per_block = load_model(MODEL).kv_bytes_per_block(block_size)
    sizes = sorted(blocks * per_block + e for e in extra)  # e < per_block: all floor to blocks
    if spell == "KiB":  # the same bytes written in KiB where they are whole KiB
        texts = [f"{s // 1024}KiB" if s % 1024 == 0 else str(s) for s in sizes]
    else:
        texts = [str(s) for s in sizes]
    cfg = SweepConfig(
        policy=policies, cache_size=texts, block_size=[block_size], model=model_config(MODEL)
    )
    points = planned(cfg)
    # one point per policy and size, all with the same capacity, each with its own bytes
    assert len(points) == len(policies) * len(sizes)
    assert {c for _, c, _, _, _ in points} == {blocks}
    for policy in policies:
        assert sorted(b for p, _, _, b, _ in points if p == policy) == sizes
    assert len({k for *_, k in points}) == len(points)


def test_one_size_spelled_twice_is_one_point() -> None:
    cfg = SweepConfig(
        policy=["LRU"], cache_size=["1GiB", "1073741824", "1024MiB"], model=model_config(MODEL)
    )
    assert [(c, b) for _, c, _, b, _ in planned(cfg)] == [(16, 2**30)]


def test_sizes_flooring_to_one_capacity_are_two_rows(
    tmp_path: Path,
    small_trace: Path,  # noqa: F811
) -> None:
    # 64 MiB blocks: 1 GiB and 1 GiB + 32 MiB are 16 blocks, 2 GiB and 2 GiB + 1 byte 32 (five
    # LRU points: the LRU-curve path), each pair the same replay but two points.
    sizes = ["1GiB", str(2**30 + 32 * MIB), "2GiB", str(2**31 + 1), "4GiB"]
    out = tmp_path / "out"
    cfg = config(
        out, small_trace, policy=["LRU", "S3FIFO"], cache_size=sizes, model=model_config(MODEL)
    )
    summary = run_sweep(cfg)
    assert (summary.exit_code, summary.computed) == (0, 10)
    df = pd.read_parquet(out / "results.parquet")
    pr = pd.read_parquet(out / "per_request.parquet")
    want_bytes = [2**30, 2**30 + 32 * MIB, 2**31, 2**31 + 1, 2**32]
    trace = prefixsim.load_trace(small_trace)
    for policy in ("LRU", "S3FIFO"):
        rows = df[df.policy == policy].sort_values("cache_bytes")
        assert rows.cache_bytes.tolist() == want_bytes
        assert rows.capacity.tolist() == [16, 16, 32, 32, 64]
        for row in rows.itertuples():
            r = prefixsim.replay(trace, policy, int(row.capacity))
            assert row.total_hit_tokens == r.total_hit_tokens
            mine = pr[pr.point_id == row.point_id].sort_values("request").hit_tokens
            np.testing.assert_array_equal(mine.to_numpy(), r.hit_tokens)
    assert df.point_id.nunique() == len(df) == 10
    assert run_sweep(cfg).computed == 0


# --- capacity=[16, 16.0] ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("policies", "capacity", "bad", "n_bad"),
    [
        (["LRU", "S3FIFO"], [16, 16.0], "16.0", 3),
        (["LRU", "S3FIFO"], [16.0, 16], "16.0", 3),
        (["LRU", "S3FIFO"], [16, 64, 16.0, 64.0], "16.0", 6),
        (["LRU", "S3FIFO"], [64, 16, True], "True", 3),
        (["LRU"], [1, True], "True", 1),
        (["LRU"], [True, 1], "True", 1),
    ],
)
def test_equal_capacities_of_another_type_are_refused_as_typed(
    policies: list[str], capacity: list[object], bad: str, n_bad: int
) -> None:
    # Per bad capacity, 1 LRU point and 2 S3FIFO points (two small_ratio values), each refused
    # with its own value: not merged with the integer it equals (16 == 16.0, 1 == True) nor
    # given that integer's parameters.
    kw = {"policy": policies, "small_ratio": [0.25, 0.5]}
    with pytest.raises(PlanError) as info:
        plan_grid(SweepConfig(capacity=capacity, **kw))  # type: ignore[arg-type]
    message = str(info.value)
    assert message.startswith(f"invalid capacity={bad}: expected an integer")
    plural = "s" if n_bad > 1 else ""
    assert f"({n_bad} invalid point{plural}; first: policy=LRU capacity={bad})" in message
    assert "\n" not in message
    ints = [c for c in capacity if type(c) is int]  # the same grid without them plans
    per_capacity = 3 if "S3FIFO" in policies else 1
    assert len(plan_grid(SweepConfig(capacity=ints, **kw))) == per_capacity * len(ints)  # type: ignore[arg-type]


# --- a point in two leftover part files -------------------------------------------------------


def test_point_in_two_leftover_parts_keeps_its_latest_version(
    tmp_path: Path,
    small_trace: Path,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Run 1 (no per-request output) and run 2 (with it) are both killed before folding their
    # parts in: each point is in two parts, run 1's without per-request rows, run 2's (written
    # later) with them. Run 3 must compute nothing and fold run 2's versions in, per-request
    # rows included; folding the older version first-wins would lose them.
    grid = {"policy": ["LRU", "FIFO"], "capacity": [16, 256]}
    ex = ExecutorConfig(n_jobs=1, batch_size=1)
    out = tmp_path / "out"
    monkeypatch.setattr(RunDir, "consolidate", lambda self: (0, set()))
    parts = out / ".sweep" / "parts"
    run_sweep(config(out, small_trace, executor=ex, save_per_request=False, **grid))
    assert len(list(parts.glob("*.arrow"))) == 4
    run_sweep(config(out, small_trace, executor=ex, **grid))  # redoes them for their rows
    assert len(list(parts.glob("*.arrow"))) == 8
    assert not (out / "results.parquet").exists()
    monkeypatch.undo()
    third = run_sweep(config(out, small_trace, executor=ex, **grid))
    assert (third.skipped, third.computed) == (4, 0)
    assert not list(parts.glob("*.arrow"))
    df = pd.read_parquet(out / "results.parquet")
    pr = pd.read_parquet(out / "per_request.parquet")
    trace = prefixsim.load_trace(small_trace)
    assert len(df) == 4
    for row in df.itertuples():
        r = prefixsim.replay(trace, row.policy, int(row.capacity))
        assert row.total_hit_tokens == r.total_hit_tokens
        mine = pr[pr.point_id == row.point_id].sort_values("request").hit_tokens
        np.testing.assert_array_equal(mine.to_numpy(), r.hit_tokens)
