"""A hierarchy's total ``evictions`` is the sum over its tiers, for every tier count and mode,
in the result (``TieredResult.counters``) and in the sweep's TIERS rows; and each tier's own
``evictions`` obeys the conservation of blocks, derived from ``docs/tiers.md`` independently of
the counter code:

* a tier gains a block only by an admission and loses one only by an eviction or (exclusive
  mode) a promotion out, so ``final = admissions - evictions - promotions_out`` (exclusive) and
  ``final = admissions - evictions`` (inclusive: a promotion out is a copy, the block stays);
* in exclusive mode a block is in at most one tier, enters the hierarchy only on an access that
  found it nowhere and leaves only as the last tier's victim, so
  ``sum(final) = (accesses - sum(hits)) - evictions[last]``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import prefixsim
from conftest import make_trace
from prefixsim.tiers import MODES, TieredResult, replay_tiers
from strategies import BLOCK_SIZES, TIER_SHAPES, conversations
from sweep import run_sweep
from sweep.config import TierConfig, TiersConfig
from test_sweep import config, small_trace  # noqa: F401

SHAPES = [
    ("LRU",),
    ("S3FIFO",),
    ("LRU", "S3FIFO"),
    ("S3FIFO", "FIFO"),
    ("SIEVE", "LFU"),
    ("LRU", "S3FIFO", "SIEVE"),
    ("LRU", "S3FIFO", "SIEVE", "LFU"),
    ("LRU", "FIFO", "SIEVE", "LFU"),
]
"""Hierarchies of 1 to 4 tiers over the five policies the tier kernel ran before the hierarchy
driver (policies that may take every position). A few shapes, not every draw of policies: the
driver is compiled once per tuple of policies (seconds each), the capacities vary freely; each
is one of ``TIER_SHAPES``, which the other hierarchy tests draw from (compiled once per run)."""
assert set(SHAPES) <= set(TIER_SHAPES)


@st.composite
def hierarchies(draw: st.DrawFn) -> list[dict[str, Any]]:
    tiers: list[dict[str, Any]] = []
    for policy in draw(st.sampled_from(SHAPES)):
        tier: dict[str, Any] = {"policy": policy, "capacity": draw(st.integers(2, 12))}
        if policy == "S3FIFO":
            tier["small_ratio"] = 0.5  # both queues non-empty at every capacity >= 2
            tier["max_freq"] = draw(st.integers(0, 3))
        tiers.append(tier)
    return tiers


def assert_evictions_conserved(r: TieredResult, n_accesses: int) -> None:
    counters = r.tier_counters
    per_tier = [c["evictions"] for c in counters]
    assert r.counters["evictions"] == sum(per_tier)
    assert [r.counters[f"tier{t}_evictions"] for t in range(r.n_tiers)] == per_tier
    assert r.counters["block_hits"] == sum(c["hits"] for c in counters)
    report = r.to_report(per_request=False)
    assert [t["counters"]["evictions"] for t in report["tiers"]] == per_tier
    for c, final in zip(counters, r.final_tier_blocks, strict=True):
        out = c["evictions"] + (c["promotions_out"] if r.mode == "exclusive" else 0)
        assert final == c["admissions"] - out
    if r.mode == "exclusive":
        misses = n_accesses - sum(c["hits"] for c in counters)
        assert sum(r.final_tier_blocks) == misses - per_tier[-1]


@settings(max_examples=150, deadline=None)
@given(
    requests=conversations(),
    tiers=hierarchies(),
    mode=st.sampled_from(MODES),
    block_size=st.sampled_from(BLOCK_SIZES),
)
def test_total_evictions_are_the_tiers_sum(requests, tiers, mode, block_size) -> None:  # type: ignore[no-untyped-def]
    trace = make_trace(requests)
    for engine in ("kernel", "reference"):
        r = replay_tiers(trace, tiers, mode, block_size, engine=engine)
        assert_evictions_conserved(r, trace.n_accesses)


def test_total_evictions_on_the_bundled_trace(conversation: prefixsim.Trace) -> None:
    # Small tiers, so every tier evicts: a total taken from one tier (the first or the last)
    # differs from the sum by thousands.
    tiers = [
        {"policy": "LRU", "capacity": 256},
        {"policy": "S3FIFO", "capacity": 1024},
        {"policy": "SIEVE", "capacity": 2048},
    ]
    for mode in MODES:
        r = replay_tiers(conversation, tiers, mode)
        assert all(c["evictions"] > 1000 for c in r.tier_counters)
        assert_evictions_conserved(r, conversation.n_accesses)


LEVELS = {
    "hbm": TierConfig(policy=["LRU"], capacity=[16]),
    "dram": TierConfig(policy=["S3FIFO", "FIFO"], capacity=[32]),
    "rdma": TierConfig(policy=["SIEVE"], capacity=[64]),
    "ssd": TierConfig(policy=["LFU"], capacity=[128]),
}


@pytest.mark.parametrize("order", [["hbm"], ["hbm", "dram"], ["hbm", "dram", "rdma", "ssd"]])
def test_sweep_rows_evictions_are_the_tiers_sum(
    tmp_path: Path,
    small_trace: Path,  # noqa: F811
    order: list[str],
) -> None:
    tiers = TiersConfig(name="t", order=order, mode=list(MODES), **{k: LEVELS[k] for k in order})
    out = tmp_path / "run"
    assert run_sweep(config(out, small_trace, tiers=tiers)).exit_code == 0
    df = pd.read_parquet(out / "results.parquet")
    assert len(df) == len(MODES) * (2 if "dram" in order else 1)
    trace = prefixsim.load_trace(small_trace)
    for row in df.to_dict("records"):
        per_tier = [row[f"tier{t}_evictions"] for t in range(len(order))]
        assert all(e > 0 for e in per_tier)
        assert row["evictions"] == sum(per_tier)
        assert row["block_hits"] == sum(row[f"tier{t}_hits"] for t in range(len(order)))
        r = replay_tiers(trace, json.loads(row["tiers"]), row["mode"])
        assert row["evictions"] == r.counters["evictions"]
