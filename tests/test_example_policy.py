"""The researcher's policy of docs/policies.md (``docs/examples/two_q.py``): registered from its
one file, it runs as a single cache, as a tier and behind ``kv_aware``, equal to its reference
per request, in each."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import make_trace
from prefixsim import ParameterError, make_params, replay, replay_params
from prefixsim.cluster import LoadModel, make_router, replay_cluster_params
from prefixsim.tiers import MODES, replay_tiers
from strategies import BLOCK_SIZES, conversations

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "docs" / "examples"))
import two_q  # registers TWO_Q, as docs/policies.md says

LOAD = LoadModel("llama-3.1-8b", "h100")  # type: ignore[arg-type]


@st.composite
def two_q_params(draw: st.DrawFn) -> dict[str, object]:
    capacity = draw(st.integers(2, 24))
    kin = draw(st.integers(1, capacity - 1))
    kout = draw(st.integers(0, capacity))
    # ratios that round to exactly kin and kout blocks
    return {"policy": "TWO_Q", "capacity": capacity, "kin_ratio": kin / capacity,
            "kout_ratio": kout / capacity}  # fmt: skip


# A1in is FIFO and keeps a block seen twice in a row where it is; Am is LRU; A1out remembers
# the blocks paged out of A1in. Capacity 4, Kin = 1, Kout = 2, one block per request:
#  1-4  a b c d   free slots: A1in = [a b c d]
#  5    e         |A1in| = 4 > Kin: a paged out to A1out = [a]; A1in = [b c d e]
#  6    a         a ghost hit: b paged out (A1out = [b]); a to Am = [a]
#  7    c         in A1in: a hit (1 token), nothing moves
#  8    f         c paged out: A1out = [b c]; A1in = [d e f]
#  9    a         in Am: a hit (1 token)
# 10    c         a ghost hit (LRU(4) would hit it): d paged out (A1out = [b d]); Am = [a c]
# 11    g         e paged out: A1out = [b d e], over Kout: b dropped; A1in = [f g]
# 12    b         a miss (dropped from the ghost): f paged out, d dropped; A1in = [g b]
HAND = [(1, [x]) for x in "abcdeacfacgb"]
HAND_PARAMS = {"capacity": 4, "kin_ratio": 0.25, "kout_ratio": 0.5}


@pytest.mark.parametrize("engine", ["kernel", "reference"])
def test_hand_worked(engine: str) -> None:
    res = replay(make_trace(HAND), "TWO_Q", block_size=1, engine=engine, **HAND_PARAMS)  # type: ignore[arg-type]
    assert res.hit_tokens.tolist() == [0] * 6 + [1, 0, 1, 0, 0, 0]
    assert res.final_cache_blocks == 4
    assert res.counters == {"block_accesses": 12, "block_hits": 2, "evictions": 6,
                            "ghost_hits": 2}  # fmt: skip
    lru = replay(make_trace(HAND), "LRU", 4, block_size=1)
    assert lru.hit_tokens.tolist() != res.hit_tokens.tolist()  # the case tells 2Q from LRU


def test_parameters_are_checked() -> None:
    with pytest.raises(ParameterError, match="kin_ratio"):
        make_params("TWO_Q", 4, kin_ratio=1.0)
    with pytest.raises(ParameterError, match="kout_ratio"):
        make_params("TWO_Q", 4, kout_ratio=-0.5)
    assert two_q.SPEC.removable


@settings(max_examples=200, deadline=None)
@given(requests=conversations(), tier=two_q_params(), block_size=st.sampled_from(BLOCK_SIZES))
def test_single_cache(requests, tier, block_size) -> None:  # type: ignore[no-untyped-def]
    trace = make_trace(requests)
    params = make_params(**tier)
    kernel = replay_params(trace, params, block_size)
    ref = replay_params(trace, params, block_size, engine="reference")
    np.testing.assert_array_equal(kernel.hit_tokens, ref.hit_tokens)
    assert kernel.final_cache_blocks == ref.final_cache_blocks
    assert kernel.counters == ref.counters


@settings(max_examples=200, deadline=None)
@given(
    requests=conversations(),
    tier=two_q_params(),
    mode=st.sampled_from(MODES),
    first=st.booleans(),
    block_size=st.sampled_from(BLOCK_SIZES),
)
def test_as_a_tier(requests, tier, mode, first, block_size) -> None:  # type: ignore[no-untyped-def]
    trace = make_trace(requests)
    lru = {"policy": "LRU", "capacity": 3}
    tiers = [tier, lru] if first else [lru, tier]
    kernel = replay_tiers(trace, tiers, mode, block_size)
    ref = replay_tiers(trace, tiers, mode, block_size, engine="reference")
    np.testing.assert_array_equal(kernel.hit_tokens, ref.hit_tokens)
    np.testing.assert_array_equal(kernel.tier_hit_tokens, ref.tier_hit_tokens)
    assert kernel.tier_counters == ref.tier_counters
    assert kernel.final_tier_blocks == ref.final_tier_blocks


@settings(max_examples=100, deadline=None)
@given(requests=conversations(), tier=two_q_params(), instances=st.integers(1, 4))
def test_behind_kv_aware(requests, tier, instances) -> None:  # type: ignore[no-untyped-def]
    trace = make_trace(requests)
    params = make_params(**tier)
    router = make_router("kv_aware")
    kernel = replay_cluster_params(trace, params, 16, instances, router, LOAD)
    ref = replay_cluster_params(trace, params, 16, instances, router, LOAD, engine="reference")
    assert kernel.engine == "kernel"
    np.testing.assert_array_equal(kernel.instance, ref.instance)
    np.testing.assert_array_equal(kernel.hit_tokens, ref.hit_tokens)
    assert kernel.instance_counters == ref.instance_counters
