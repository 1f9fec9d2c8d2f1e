"""The one-pass LRU curve equals separate LRU replays at every capacity, request by request."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import make_trace
from prefixsim import ParameterError, ReplayResult, Trace, make_params, replay_params
from prefixsim.lru_curve import ENGINE, ceiling, lru_curve
from strategies import BLOCK_SIZES, conversations


def assert_same_as_replay(got: ReplayResult, trace: Trace, capacity: int, block_size: int) -> None:
    want = replay_params(trace, make_params("LRU", capacity), block_size, engine="kernel")
    np.testing.assert_array_equal(got.hit_tokens, want.hit_tokens)
    assert got.hit_tokens.dtype == want.hit_tokens.dtype
    assert got.final_cache_blocks == want.final_cache_blocks
    assert got.counters == want.counters
    assert list(got.counters) == list(want.counters)
    assert got.params == want.params
    assert got.block_size == want.block_size
    assert (got.trace_name, got.trace_sha256) == (want.trace_name, want.trace_sha256)
    np.testing.assert_array_equal(got.prompt_tokens, want.prompt_tokens)
    assert got.total_hit_tokens == want.total_hit_tokens
    assert got.overall_hit_rate == want.overall_hit_rate
    assert got.engine == ENGINE


def assert_curve_matches_replays(trace: Trace, capacities: list[int], block_size: int) -> None:
    curve = lru_curve(trace, capacities, block_size)
    np.testing.assert_array_equal(curve.capacities, capacities)
    results = curve.results()
    assert [r.cache_capacity_blocks for r in results] == capacities
    matrix = curve.hit_token_matrix()
    for i, (capacity, got) in enumerate(zip(capacities, results, strict=True)):
        assert_same_as_replay(got, trace, capacity, block_size)
        np.testing.assert_array_equal(matrix[i], got.hit_tokens)
        assert curve.total_hit_tokens[i] == got.total_hit_tokens
        assert curve.overall_hit_rate[i] == got.overall_hit_rate
        assert curve.final_cache_blocks[i] == got.final_cache_blocks
        assert curve.block_hits[i] == got.counters["block_hits"]
        assert curve.evictions[i] == got.counters["evictions"]
    # More capacity never loses a hit (stack property), request by request.
    by_capacity = matrix[np.argsort(capacities, kind="stable")]
    assert (np.diff(by_capacity, axis=0) >= 0).all()


@settings(max_examples=150, deadline=None)
@given(
    requests=conversations(),
    extra=st.lists(st.one_of(st.integers(1, 6), st.integers(7, 80)), max_size=5),
    block_size=st.sampled_from(BLOCK_SIZES),
    data=st.data(),
)
def test_curve_matches_replays(requests, extra, block_size, data) -> None:  # type: ignore[no-untyped-def]
    trace = make_trace(requests)
    above = max(trace.n_blocks, 1) + data.draw(st.integers(0, 3))  # at/above the distinct blocks
    capacities = data.draw(st.permutations([1, 2, 3, above, *extra]))
    assert_curve_matches_replays(trace, capacities, block_size)


@settings(max_examples=100, deadline=None)
@given(requests=conversations(), capacity=st.integers(1, 12), block_size=st.sampled_from([1, 16]))
def test_curve_cut_at_small_largest_capacity(requests, capacity, block_size) -> None:  # type: ignore[no-untyped-def]
    """The prefix scan stops above the largest capacity asked for; every capacity up to it is
    still exact (any capacity, not only the ones asked for)."""
    trace = make_trace(requests)
    curve = lru_curve(trace, [capacity], block_size)
    for c in range(1, capacity + 1):
        assert_same_as_replay(curve.result(c), trace, c, block_size)


def test_hand_worked_example() -> None:
    # Stack distance d(h) = distinct blocks accessed since and including h's last access
    # (inf if never accessed); h is resident under LRU(C) iff d(h) <= C. A request's k(C) is the
    # number of leading blocks whose running max of *arrival* distances is <= C.
    #
    # access stream (t: block)      request  arrival distances        prefix max   k(C)
    # t0-2: a b c                   r0       a=inf b=inf c=inf        -            0 for all C
    # t3-4: d e                     r1       d=inf e=inf              -            0 for all C
    # t5-6: a b                     r2       a=|{a,b,c,d,e}|=5, b=4   5 5          2 iff C >= 5
    # t7-8: c b                     r3       c=|{c,d,e,a,b}|=5, b=1   5 5          2 iff C >= 5
    #   (r3's second block b is resident at every C >= 1 but its first, c, only from C = 5)
    # t9-10: f b                    r4       f=inf, b=|{b}|=1         -            0 for all C
    #   (b is resident at every capacity, but the prefix starts with the never-seen f)
    # t11-13: a a c                 r5       a=|{a,b,c,f}|=4 (twice:  4 4 4        3 iff C >= 4
    #   both measured before r5's accesses), c=|{c,b,f}|=3
    # t14: d                        r6       d=|{d,e,a,b,c,f}|=6      6            1 iff C >= 6
    requests = [
        ["a", "b", "c"],
        ["d", "e"],
        ["a", "b"],
        ["c", "b"],
        ["f", "b"],
        ["a", "a", "c"],
        ["d"],
    ]
    block_size = 512
    trace = make_trace([(512 * len(ids) - 12, ids) for ids in requests])  # partial last block
    k_by_capacity = {  # C: k of r0..r6
        1: [0, 0, 0, 0, 0, 0, 0],
        2: [0, 0, 0, 0, 0, 0, 0],
        3: [0, 0, 0, 0, 0, 0, 0],
        4: [0, 0, 0, 0, 0, 3, 0],
        5: [0, 0, 2, 2, 0, 3, 0],
        6: [0, 0, 2, 2, 0, 3, 1],
        7: [0, 0, 2, 2, 0, 3, 1],
    }
    capacities = list(k_by_capacity)
    curve = lru_curve(trace, capacities[::-1], block_size)
    for capacity, ks in k_by_capacity.items():
        want = np.minimum(np.array(ks) * block_size, trace.input_lengths)
        np.testing.assert_array_equal(curve.hit_tokens(capacity), want)
        assert_same_as_replay(curve.result(capacity), trace, capacity, block_size)
    np.testing.assert_array_equal(
        curve.total_hit_tokens[::-1],
        [0, 0, 0, 1524, 1524 + 2 * 1012, 1524 + 2 * 1012 + 500, 1524 + 2 * 1012 + 500],
    )
    # The ceiling (nothing ever evicted) is C >= 6 distinct blocks.
    np.testing.assert_array_equal(ceiling(trace, block_size).hit_tokens, curve.hit_tokens(6))


def test_duplicates_and_order_kept(conversation: Trace) -> None:
    capacities = [4096, 64, 4096, 1, 64]
    curve = lru_curve(conversation, capacities)
    np.testing.assert_array_equal(curve.capacities, capacities)
    assert curve.total_hit_tokens[0] == curve.total_hit_tokens[2]
    assert curve.total_hit_tokens[1] == curve.total_hit_tokens[4]
    assert curve.total_hit_tokens[3] == 0
    assert curve.total_hit_tokens[1] < curve.total_hit_tokens[0]


def test_bundled_trace(conversation: Trace) -> None:
    capacities = [1, 7, 100, 1024, 4096, 50_000, 182_790, 10**6]
    assert conversation.n_blocks == 182_790
    assert_curve_matches_replays(conversation, capacities, 512)
    curve = lru_curve(conversation, capacities)
    # Above the number of distinct blocks nothing is ever evicted.
    assert curve.evictions[-1] == curve.evictions[-2] == 0
    assert curve.final_cache_blocks[-1] == conversation.n_blocks


def test_bundled_trace_cut_short(conversation: Trace) -> None:
    """A small largest capacity cuts most prefix scans short; capacities below stay exact."""
    curve = lru_curve(conversation, [300])
    for capacity in (1, 2, 17, 299, 300):
        assert_same_as_replay(curve.result(capacity), conversation, capacity, 512)


def set_based_ceiling(trace: Trace, block_size: int) -> np.ndarray:
    """Longest prefix of ids seen in earlier requests, with a plain set."""
    seen: set[int] = set()
    ids = trace.block_ids.tolist()
    offsets = trace.offsets.tolist()
    out = []
    for r, length in enumerate(trace.input_lengths.tolist()):
        blocks = ids[offsets[r] : offsets[r + 1]]
        k = 0
        while k < len(blocks) and blocks[k] in seen:
            k += 1
        out.append(min(k * block_size, length))
        seen.update(blocks)
    return np.array(out, dtype=np.int64)


def test_ceiling_on_bundled_trace(conversation: Trace) -> None:
    top = ceiling(conversation)
    want = set_based_ceiling(conversation, 512)
    np.testing.assert_array_equal(top.hit_tokens, want)
    assert top.total_hit_tokens == int(want.sum())
    assert top.overall_hit_rate == int(want.sum()) / conversation.total_prompt_tokens
    lru = replay_params(conversation, make_params("LRU", conversation.n_blocks), 512)
    np.testing.assert_array_equal(top.hit_tokens, lru.hit_tokens)
    curve = lru_curve(conversation, [conversation.n_blocks])
    np.testing.assert_array_equal(top.hit_tokens, curve.hit_tokens(conversation.n_blocks))


@settings(max_examples=100, deadline=None)
@given(requests=conversations(), block_size=st.sampled_from(BLOCK_SIZES))
def test_ceiling_matches_set_based(requests, block_size) -> None:  # type: ignore[no-untyped-def]
    trace = make_trace(requests)
    top = ceiling(trace, block_size)
    np.testing.assert_array_equal(top.hit_tokens, set_based_ceiling(trace, block_size))
    curve = lru_curve(trace, [max(trace.n_blocks, 1)], block_size)
    np.testing.assert_array_equal(top.hit_tokens, curve.hit_tokens(max(trace.n_blocks, 1)))


@pytest.mark.parametrize(
    "capacities", [[0], [1, -3], [1.5], [True], ["4"], [], 4096, "64", [2**63]]
)
def test_invalid_capacities(capacities) -> None:  # type: ignore[no-untyped-def]
    trace = make_trace([(512, [1])])
    with pytest.raises(ParameterError):
        lru_curve(trace, capacities)


def test_invalid_block_size_and_query() -> None:
    trace = make_trace([(512, [1]), (512, [1])])
    with pytest.raises(ParameterError):
        lru_curve(trace, [4], block_size=0)
    with pytest.raises(ParameterError):
        ceiling(trace, block_size=0)
    curve = lru_curve(trace, np.array([4, 2]))
    for bad in (0, 5, 2.0):
        with pytest.raises(ParameterError):
            curve.result(bad)
    np.testing.assert_array_equal(curve.hit_tokens(1), [0, 512])


def test_empty_requests() -> None:
    trace = make_trace([(0, []), (100, []), (512, [7, 7]), (0, [7])])
    assert_curve_matches_replays(trace, [1, 2, 5], 512)
    np.testing.assert_array_equal(ceiling(trace).hit_tokens, [0, 0, 0, 0])
