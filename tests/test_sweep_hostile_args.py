"""Hostile values on the sweep's command line and in its config files (the audit of issues 21
and 22): each is one line, exit status 2, nothing created, before any value list is built.

The command runs in this process in an empty folder (the fixtures of
``test_sweep_config_errors``); the cases are families, not the audit's examples alone.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sweep import ranges
from sweep.config import SweepConfig
from sweep.grid import PlanError, grid_size_bound, plan_grid
from test_sweep_config_errors import assert_refused, cli  # noqa: F401

# --- ranges: counted before they are listed (a billion values was a MemoryError) -----------

HUGE_RANGES = [
    "capacity=range(1,3000000000)",
    "capacity=range(1,30000000)",
    "capacity=range(0,10000000000000000000000,7)",
    "capacity=range(3000000000,1,-1)",
    "capacity=shuffle(range(1,30000000))",
    "capacity=range(1,1e10)",
    "block_size=range(1,30000000)",
    "seed=range(0,30000000)",
    "max_freq=range(1,30000000)",
    "vnodes=range(1,30000000)",
    "small_ratio=range(0.1,0.5,1e-300)",
    "small_ratio=range(0.0,1.0,1e-8)",
    "small_ratio=range(0.5,0.1,-1e-9)",
    "overlap_weight=range(0,1,1e-12)",
    "tiers.hbm.capacity=range(1,30000000)",
]


@pytest.mark.parametrize("typed", HUGE_RANGES)
def test_a_range_past_the_grid_bound_is_refused_with_the_memory_it_needs(
    cli,  # noqa: F811
    tmp_path: Path,
    typed: str,
) -> None:  # type: ignore[no-untyped-def]
    args = ["tiers=hbm_dram", typed] if typed.startswith("tiers.") else [typed]
    line = assert_refused(cli, tmp_path, args, f"'{typed}': the range has ", "at most 10,000,000")
    assert "GiB" in line or "TiB" in line or "PiB" in line, line


@pytest.mark.parametrize(
    ("typed", "needle"),
    [
        ("small_ratio=range(0.1,nan,0.1)", "its stop is nan"),
        ("small_ratio=range(0.1,inf,0.1)", "its stop is inf"),
        ("small_ratio=range(-inf,0.5,0.1)", "its start is -inf"),
        ("small_ratio=range(nan,0.5,0.1)", "its start is nan"),
        ("small_ratio=range(0.1,0.5,nan)", "its step is nan"),
        ("small_ratio=range(0.1,0.5,inf)", "its step is inf"),
        ("capacity=range(1,inf)", "its stop is inf"),
        ("seed=range(1,10,nan)", "its step is nan"),
        ("small_ratio=range(0.1,0.5,0)", "a step other than 0"),
        ("capacity=range(1,10,0)", "a step other than 0"),
    ],
)
def test_a_range_with_a_bound_that_is_not_finite_is_one_line(
    cli,  # noqa: F811
    tmp_path: Path,
    typed: str,
    needle: str,
) -> None:  # type: ignore[no-untyped-def]
    assert_refused(cli, tmp_path, [typed], f"'{typed}': range() needs", needle)


@pytest.mark.parametrize(
    "typed",
    ["capacity=${sweep_range:1,3000000000,1}", "small_ratio=${sweep_range:0.1,0.5,1e-300}"],
)
def test_a_compact_range_typed_as_such_is_bounded_too(
    cli,  # noqa: F811
    tmp_path: Path,
    typed: str,
) -> None:  # type: ignore[no-untyped-def]
    line = assert_refused(cli, tmp_path, [typed], "the range has ", "at most 10,000,000")
    assert "raised while resolving" not in line, line


def test_the_count_is_the_length_of_the_range_it_stands_for() -> None:
    # independent of the bound: the count of every small range equals len(list(values))
    cases = [(1, 10, 1), (10, 1, -3), (1, 1, 1), (5, 1, 1), (0.1, 0.5, 0.1), (0.5, 0.1, -0.05)]
    cases += [(0.05, 0.3, 0.05), (1, 2.5, 0.5), (-3, 3, 2)]
    for start, stop, step in cases:
        assert ranges.count(start, stop, step) == len(ranges.expand(start, stop, step))
    assert ranges.count(1, 10_000_001) == 10_000_000  # the bound itself is allowed
    with pytest.raises(ranges.RangeError):
        ranges.count(1, 10_000_002)


# --- the grid: its product bounded before any point is built ---------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ["capacity=range(2,5000)", "block_size=range(1,5000)"],
        [
            "policy=S3FIFO",
            "capacity=range(10,5000)",
            "small_ratio=range(0.1,0.9,0.01)",
            "max_freq=range(1,100)",
        ],
        ["router=random", "instances=range(1,4000)", "seed=range(1,4000)"],
        ["tiers=hbm_dram", "tiers.hbm.capacity=range(1,5000)", "tiers.dram.capacity=range(1,5000)"],
    ],
)
def test_a_grid_past_the_bound_is_refused_before_planning(
    cli,  # noqa: F811
    tmp_path: Path,
    args: list[str],
) -> None:  # type: ignore[no-untyped-def]
    assert_refused(cli, tmp_path, args, "the grid has ", "points; a grid holds at most 10,000,000")


def test_the_grid_bound_counts_what_plan_grid_builds() -> None:
    # a parameter a policy lacks does not multiply it (LRU has no small_ratio)
    cfg = SweepConfig(
        capacity=[64, 128, 256], policy=["S3FIFO", "LRU"], small_ratio=[0.1, 0.2], block_size=[4, 8]
    )
    assert grid_size_bound(cfg) == len(plan_grid(cfg)) == 3 * 2 * (2 + 1)


def test_the_api_is_bounded_like_the_command_line() -> None:
    cfg = SweepConfig(capacity=list(range(2, 5002)), block_size=list(range(1, 3001)))
    with pytest.raises(PlanError, match="the grid has 30,000,000 points"):
        plan_grid(cfg)
