"""Cache hierarchies (``docs/tiers.md``): hand-worked traces for each mode, the reference
against the kernel per request and per tier, and the one-tier identity with the single cache."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import has_kernel, make_trace
from prefixsim import ParameterError, Trace, make_params, policy_names, replay_params
from prefixsim.policies import get_policy
from prefixsim.tiers import MODES, TieredResult, make_tier, replay_tiers
from strategies import ANY_POSITION, BLOCK_SIZES, TIER_SHAPES, conversations

ONE = 1  # block_size 1: hit tokens are blocks


def run(requests: list[tuple[int, list[int]]], tiers: list[dict[str, Any]], mode: str,
        block_size: int = ONE, engine: str = "reference") -> TieredResult:  # fmt: skip
    return replay_tiers(make_trace(requests), tiers, mode, block_size, engine=engine)  # type: ignore[arg-type]


def both(requests: list[tuple[int, list[int]]], tiers: list[dict[str, Any]], mode: str,
         block_size: int = ONE) -> TieredResult:  # fmt: skip
    """The reference's result, after checking the kernel agrees with it."""
    ref = run(requests, tiers, mode, block_size, "reference")
    ker = run(requests, tiers, mode, block_size, "kernel")
    assert_same(ref, ker)
    return ref


def assert_same(a: TieredResult, b: TieredResult) -> None:
    np.testing.assert_array_equal(a.hit_tokens, b.hit_tokens)
    np.testing.assert_array_equal(a.tier_hit_tokens, b.tier_hit_tokens)
    assert a.tier_counters == b.tier_counters
    assert a.final_tier_blocks == b.final_tier_blocks


def lru(capacity: int, name: str = "") -> dict[str, Any]:
    return {"policy": "LRU", "capacity": capacity, "name": name}


# --- exclusive mode, by hand ---------------------------------------------------------------


def test_exclusive_demotion_chain() -> None:
    # Tiers LRU(1) > LRU(1) > LRU(1), one block per request, block_size 1.
    # r0 [a]: miss; a -> T0.                                  T0=a
    # r1 [b]: miss; b -> T0 evicts a, a demoted to T1.       T0=b T1=a
    # r2 [c]: miss; c -> T0 evicts b -> T1 evicts a -> T2.   T0=c T1=b T2=a
    # r3 [d]: the chain runs to the end: a dropped.           T0=d T1=c T2=b
    # r4 [b]: found in T2 (1 token there); removed from T2, admitted to T0, which evicts d to
    #         T1, which evicts c into the slot b freed.        T0=b T1=d T2=c
    res = both([(1, ["a"]), (1, ["b"]), (1, ["c"]), (1, ["d"]), (1, ["b"])],
               [lru(1), lru(1), lru(1)], "exclusive")  # fmt: skip
    assert res.hit_tokens.tolist() == [0, 0, 0, 0, 1]
    assert res.tier_hit_tokens[:, 4].tolist() == [0, 0, 1]
    assert res.tier_counters[0] == {"hits": 0, "admissions": 5, "demotions_in": 0,
                                    "evictions": 4, "promotions_out": 0}  # fmt: skip
    # T1: a, b, c, d, then d demoted in: 4 admissions; evicted a, b, c.
    assert res.tier_counters[1] == {"hits": 0, "admissions": 4, "demotions_in": 4,
                                    "evictions": 3, "promotions_out": 0}  # fmt: skip
    # T2: a, b, c in; a dropped (the only eviction out of the hierarchy); b promoted out.
    assert res.tier_counters[2] == {"hits": 1, "admissions": 3, "demotions_in": 3,
                                    "evictions": 1, "promotions_out": 1}  # fmt: skip
    assert res.final_tier_blocks == (1, 1, 1)


def test_exclusive_promotion_from_lowest_tier_splits_tokens() -> None:
    # LRU(2) over LRU(4), block_size 4. r0 [a b c d] (16 tokens): all miss; T0 ends with c d,
    # a and b demoted to T1 in that order.
    # r1 [a b c] with input_length 10: the scan finds a (T1), b (T1), c (T0): k = 3, hit tokens
    # min(12, 10) = 10, split T1: 4 + 4, T0: the clamped last block, 10 - 8 = 2.
    # Its accesses: a from T1 to T0 (evicts c: T1 = b c), b from T1 to T0 (evicts d: T1 = c d),
    # c from T1 to T0 (evicts a: T1 = d a).  Final: T0 = b c, T1 = d a.
    res = both([(16, ["a", "b", "c", "d"]), (10, ["a", "b", "c"])], [lru(2), lru(4)],
               "exclusive", block_size=4)  # fmt: skip
    assert res.hit_tokens.tolist() == [0, 10]
    assert res.tier_hit_tokens[:, 1].tolist() == [2, 8]
    assert res.tier_counters[1]["hits"] == 3  # a, b and c were all in T1 when accessed
    assert res.tier_counters[1]["promotions_out"] == 3
    assert res.tier_counters[0]["hits"] == 0
    assert res.final_tier_blocks == (2, 2)


def test_exclusive_first_tier_capacity_one_same_policy() -> None:
    # LRU(1) over LRU(3), exclusive, trace a b c d e c e a (one block per request).
    #   a: T0 = a.  b: T0 = b, T1 = [a].  c: T0 = c, T1 = [a b].  d: T0 = d, T1 = [a b c].
    #   e: T0 = e; d demoted into a full T1, which evicts its LRU end a: T1 = [b c d].
    #   c: found in T1 (hit); removed (T1 = [b d]), admitted to T0, e demoted: T1 = [b d e].
    #   e: found in T1 (hit); removed, to T0, c demoted: T0 = e, T1 = [b d c].
    #   a: a miss (dropped at e); to T0, e demoted, T1 full evicts b: T0 = a, T1 = [d c e].
    # Hits [0 0 0 0 0 1 1 0]: the same as one LRU(4) (see the property test below).
    # T0 never hits: 8 admissions, 7 victims (every one but the first), all demoted into T1.
    requests = [(1, [x]) for x in "abcdecea"]
    res = both(requests, [lru(1), lru(3)], "exclusive")
    assert res.hit_tokens.tolist() == [0, 0, 0, 0, 0, 1, 1, 0]
    assert res.tier_hit_tokens[1].tolist() == [0, 0, 0, 0, 0, 1, 1, 0]
    assert res.tier_counters[1] == {"hits": 2, "admissions": 7, "demotions_in": 7,
                                    "evictions": 2, "promotions_out": 2}  # fmt: skip
    assert res.final_tier_blocks == (1, 3)


@settings(max_examples=150, deadline=None)
@given(requests=conversations(), c0=st.integers(1, 8), c1=st.integers(1, 24))
def test_exclusive_lru_over_lru_is_one_lru(requests, c0, c1) -> None:  # type: ignore[no-untyped-def]
    # Exclusive LRU(c0) over LRU(c1) keeps the c0 most recently used blocks in T0 and the next
    # c1 in T1 in recency order (a demoted block is newer than all of T1; a promoted one leaves
    # it), so the union is exactly one LRU(c0 + c1), per request and per block hit.
    trace = make_trace(requests)
    single = replay_params(trace, make_params("LRU", c0 + c1), 512)
    for engine in ("reference", "kernel"):
        res = replay_tiers(trace, [lru(c0), lru(c1)], "exclusive", 512, engine=engine)  # type: ignore[arg-type]
        np.testing.assert_array_equal(res.hit_tokens, single.hit_tokens)
        assert res.counters["block_hits"] == single.counters["block_hits"]
        assert res.tier_counters[1]["evictions"] == single.counters["evictions"]


# --- inclusive mode, by hand ---------------------------------------------------------------


def test_inclusive_eviction_leaves_lower_copy() -> None:
    # LRU(1) over LRU(3), inclusive. r0 [a]: miss, a -> T0 and T1.
    # r1 [b]: miss, b -> T0 (a evicted from T0 only) and T1 (a b).
    # r2 [a]: arrival: a is not in T0 but in T1: 1 token credited to T1. Access: hit in T1
    #         (a becomes T1's MRU: b a), copied to T0 (b evicted from T0; T1 keeps b).
    # r3 [a]: in T0 (and T1): credited to T0, accessed there only (T1's order stays b a).
    # r4 [c d]: misses; T1 = b a c, then d evicts b: T1 = a c d. T0 = d.
    # r5 [a]: found in T1 (a survived because r2 touched it).
    requests = [(1, ["a"]), (1, ["b"]), (1, ["a"]), (1, ["a"]), (2, ["c", "d"]), (1, ["a"])]
    res = both(requests, [lru(1), lru(3)], "inclusive")
    assert res.tier_hit_tokens.tolist() == [[0, 0, 0, 1, 0, 0], [0, 0, 1, 0, 0, 1]]
    assert res.tier_counters[0] == {"hits": 1, "admissions": 6, "demotions_in": 0,
                                    "evictions": 5, "promotions_out": 0}  # fmt: skip
    assert res.tier_counters[1] == {"hits": 2, "admissions": 4, "demotions_in": 0,
                                    "evictions": 1, "promotions_out": 2}  # fmt: skip
    assert res.final_tier_blocks == (1, 3)


def test_inclusive_slower_copy_untouched_by_faster_hit() -> None:
    # FIFO(2) over LRU(2), inclusive.
    # r0 [a b]: misses, admitted to both: T0 = [a b], T1 = [a b] (a is T1's LRU end).
    # r1 [a]: in T0 and T1: credited to T0 (1 token) and accessed there only (a FIFO hit
    #         changes nothing); T1's copy is untouched, so a stays T1's LRU end.
    # r2 [c]: a miss: T0 evicts a (FIFO), T1 evicts a (LRU): T0 = [b c], T1 = [b c].
    # r3 [a]: a miss (had r1 refreshed T1's copy, T1 would have evicted b and kept a).
    requests = [(2, ["a", "b"]), (1, ["a"]), (1, ["c"]), (1, ["a"])]
    res = both(requests, [{"policy": "FIFO", "capacity": 2}, lru(2)], "inclusive")
    assert res.tier_hit_tokens.tolist() == [[0, 1, 0, 0], [0, 0, 0, 0]]
    assert [c["evictions"] for c in res.tier_counters] == [2, 2]  # r2: a and a; r3: b and b


def test_s3fifo_lower_tier_uses_its_own_ghost() -> None:
    # LRU(1) over S3FIFO(capacity 4, small_ratio 0.25: S 1, M 3, G 3), exclusive.
    # a: T0 = a.   b: T0 = b; a demoted to S = [a].
    # c: T0 = c; b demoted: S full, a (freq 0) evicted to G: S = [b], G = [a].
    # a: a miss (a ghost is not resident); T0 = a; c demoted: b evicted: S = [c], G = [a b].
    # d: T0 = d; a demoted into T1, where it is a hit of T1's ghost: to M with freq 0
    #    (not to S, so c stays): S = [c], M = [a], G = [b].
    # c: found in T1 (1 token), removed from S without a ghost entry; T0 = c; d demoted into
    #    the freed S slot: S = [d], M = [a]. (Had a gone to S, c would have been evicted.)
    requests = [(1, [x]) for x in "abcadc"]
    params = {"policy": "S3FIFO", "capacity": 4, "small_ratio": 0.25}
    res = both(requests, [lru(1), params], "exclusive")
    assert res.hit_tokens.tolist() == [0, 0, 0, 0, 0, 1]
    assert res.tier_hit_tokens[1].tolist() == [0, 0, 0, 0, 0, 1]
    assert res.tier_counters[1] == {"hits": 1, "admissions": 5, "demotions_in": 5,
                                    "evictions": 2, "promotions_out": 1}  # fmt: skip
    assert res.final_tier_blocks == (1, 2)


# --- reference and kernel, per request and per tier ------------------------------------------

KERNEL_POLICIES = list(ANY_POSITION)  # in every position, either mode


@st.composite
def tier_lists(draw: st.DrawFn, max_tiers: int = 3) -> list[dict[str, Any]]:
    """One of the shared tuples of policies (``TIER_SHAPES``: every policy in every position),
    each tier's parameters drawn freely."""
    out = []
    for policy in draw(st.sampled_from([s for s in TIER_SHAPES if len(s) <= max_tiers])):
        tier: dict[str, Any] = {"policy": policy}
        if policy == "S3FIFO":
            tier["capacity"] = draw(st.integers(2, 24))
            tier["small_ratio"] = draw(st.sampled_from([0.1, 0.25, 0.5, 0.75]))
            tier["max_freq"] = draw(st.integers(0, 3))
            tier["ghost_freq"] = draw(st.integers(0, tier["max_freq"]))
            small = round(tier["capacity"] * tier["small_ratio"])
            if not 1 <= small <= tier["capacity"] - 1:
                tier["small_ratio"] = 0.5
        else:
            tier["capacity"] = draw(st.integers(1, 24))
        out.append(tier)
    return out


@settings(max_examples=200, deadline=None)
@given(
    requests=conversations(),
    tiers=tier_lists(),
    mode=st.sampled_from(MODES),
    block_size=st.sampled_from(BLOCK_SIZES),
)
def test_kernel_matches_reference(requests, tiers, mode, block_size) -> None:  # type: ignore[no-untyped-def]
    ref = run(requests, tiers, mode, block_size, "reference")
    ker = run(requests, tiers, mode, block_size, "kernel")
    assert_same(ref, ker)
    # Invariants of the semantics, on the reference.
    np.testing.assert_array_equal(ref.tier_hit_tokens.sum(axis=0), ref.hit_tokens)
    counters = ref.tier_counters
    if mode == "exclusive":
        for upper, lower in itertools.pairwise(counters):
            assert upper["evictions"] == lower["demotions_in"]
        assert sum(c["hits"] for c in counters) + counters[0]["admissions"] - sum(
            c["promotions_out"] for c in counters
        ) == len(make_trace(requests).block_ids)


# --- one tier is the single cache ------------------------------------------------------------


def assert_single_identity(
    trace: Trace, policy: str, capacity: int, engine: str, modes: tuple[str, ...] = MODES
) -> None:
    params = make_params(policy, capacity)
    single_engine = "kernel" if has_kernel(policy) else "reference"  # a policy without steps
    single = replay_params(trace, params, 512, engine=single_engine)  # type: ignore[arg-type]
    for mode in modes:
        tiered = replay_tiers(trace, [{"policy": policy, "capacity": capacity}], mode,
                              engine=engine)  # type: ignore[arg-type]  # fmt: skip
        np.testing.assert_array_equal(tiered.hit_tokens, single.hit_tokens)
        np.testing.assert_array_equal(tiered.tier_hit_tokens[0], single.hit_tokens)
        assert tiered.final_tier_blocks == (single.final_cache_blocks,)
        assert tiered.tier_counters[0]["hits"] == single.counters["block_hits"]
        assert tiered.tier_counters[0]["evictions"] == single.counters["evictions"]


@pytest.mark.parametrize("policy", KERNEL_POLICIES)
def test_one_tier_kernel_is_the_single_cache(conversation: Trace, policy: str) -> None:
    assert_single_identity(conversation, policy, 2048, "kernel")


@pytest.mark.slow
@pytest.mark.parametrize(  # RADIX is request-level: refused as a tier (docs/policies.md, Refusals)
    "policy", [p for p in policy_names() if (s := get_policy(p).steps) is not None and s.per_block]
)
def test_one_tier_reference_is_the_single_cache(conversation: Trace, policy: str) -> None:
    # One mode: with one tier the modes run the same steps (the kernel test checks both).
    # BELADY's reference scans the whole cache for each victim: a small cache keeps it quick.
    capacity = 32 if policy == "BELADY" else 2048
    assert_single_identity(conversation, policy, capacity, "reference", ("exclusive",))


# --- refused hierarchies ---------------------------------------------------------------------


@pytest.mark.parametrize("policy", ["CLOCK", "ARC", "BELADY"])
def test_no_removal_refused_as_lower_tier(policy: str) -> None:
    with pytest.raises(ParameterError, match=r"tiers\[1\].policy.*no natural removal"):
        run([(1, ["a"])], [lru(1), {"policy": policy, "capacity": 2}], "exclusive")


def test_bad_mode_and_medium() -> None:
    with pytest.raises(ParameterError, match="mode"):
        run([(1, ["a"])], [lru(1)], "write-back")
    with pytest.raises(ParameterError, match="medium"):
        make_tier("LRU", 4, medium="tape")
    with pytest.raises(ParameterError, match="tiers"):
        run([(1, ["a"])], [], "exclusive")
