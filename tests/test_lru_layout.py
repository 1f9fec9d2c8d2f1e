"""The LRU kernel's link array: the dtype boundary and every dtype against the reference.

``lru_kernel`` stores block h's [prev, next] as ``~node`` in the smallest of int16 / int32 /
int64 that holds ``~n_blocks`` (the sentinel row's index is ``n_blocks``). At the largest block
count of a dtype the sentinel's link ``~n_blocks`` is that dtype's minimum, so a threshold one
too high would wrap it around and send the list through a wrong row.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import make_trace
from prefixsim import Trace, make_params, replay_params
from prefixsim.policies.lru import LINK16_MAX_BLOCKS, LINK32_MAX_BLOCKS, lru_replay
from strategies import conversations


def test_link_limits_are_the_dtype_minimums() -> None:
    # ~n = -n - 1 must be >= the dtype's minimum: n <= 2**15 - 1 (int16), 2**31 - 1 (int32).
    assert np.iinfo(np.int16).min == ~LINK16_MAX_BLOCKS
    assert np.iinfo(np.int32).min == ~LINK32_MAX_BLOCKS


def _boundary_trace(n_blocks: int) -> Trace:
    """``n_blocks`` distinct blocks in chains of 64 (the last one shorter), then the last chain
    and the first chain again, twice: with capacity 100 the blocks with the highest ids (next
    to the sentinel row) are evicted and re-admitted, and chains hit."""
    ids = list(range(n_blocks))
    chains = [ids[i : i + 64] for i in range(0, n_blocks, 64)]
    again = [chains[-1], chains[0], chains[-1], chains[-1][:3], chains[0]]
    return make_trace([(64 * 512 - 7, c) for c in chains + again])


def _assert_kernel_equals_reference(trace: Trace, capacity: int) -> None:
    params = make_params("LRU", capacity)
    kernel = replay_params(trace, params, 512, engine="kernel")
    reference = replay_params(trace, params, 512, engine="reference")
    np.testing.assert_array_equal(kernel.hit_tokens, reference.hit_tokens)
    assert kernel.final_cache_blocks == reference.final_cache_blocks
    assert kernel.counters == reference.counters


def test_int16_boundary_matches_reference() -> None:
    # LINK16_MAX_BLOCKS blocks: int16 links, the sentinel's ~32767 = -32768 (the minimum);
    # one block more: int32 links.
    for n_blocks in (LINK16_MAX_BLOCKS, LINK16_MAX_BLOCKS + 1):
        trace = _boundary_trace(n_blocks)
        assert trace.n_blocks == n_blocks
        _assert_kernel_equals_reference(trace, 100)
        # The repeated chains hit (the last chain was just accessed; so was the first one's
        # head after its second re-read), so the comparison covers hits, not only misses.
        assert replay_params(trace, make_params("LRU", 100), 512).counters["block_hits"] > 0


@settings(max_examples=100, deadline=None)
@given(requests=conversations(), capacity=st.integers(1, 40), dtype=st.sampled_from(["i4", "i8"]))
def test_wider_links_give_the_same_replay(requests, capacity, dtype) -> None:  # type: ignore[no-untyped-def]
    """The int32 and int64 bodies (used past 2**15 - 1 and 2**31 - 1 blocks) replay small
    traces exactly like the reference."""
    trace = make_trace(requests)
    cnt = np.zeros(2, np.int64)
    link = np.zeros((trace.n_blocks + 1, 2), np.dtype(dtype))
    hit_tokens, final = lru_replay(
        trace.block_ids, trace.offsets, trace.input_lengths, 512, cnt, capacity, link
    )
    reference = replay_params(trace, make_params("LRU", capacity), 512, engine="reference")
    np.testing.assert_array_equal(hit_tokens, reference.hit_tokens)
    assert final == reference.final_cache_blocks
    assert cnt.tolist() == [reference.counters["block_hits"], reference.counters["evictions"]]
