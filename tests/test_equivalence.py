"""The compiled kernels agree with the plain-Python references, request by request."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import make_trace
from prefixsim import Trace, replay_params
from prefixsim.policies import PolicyParams
from strategies import BLOCK_SIZES, conversations, policy_params


def assert_engines_agree(trace: Trace, params: PolicyParams, block_size: int) -> None:
    kernel = replay_params(trace, params, block_size, engine="kernel")
    reference = replay_params(trace, params, block_size, engine="reference")
    np.testing.assert_array_equal(kernel.hit_tokens, reference.hit_tokens)
    assert kernel.final_cache_blocks == reference.final_cache_blocks
    assert kernel.counters == reference.counters


@settings(max_examples=400, deadline=None)
@given(
    requests=conversations(),
    params=policy_params(),
    block_size=st.sampled_from(BLOCK_SIZES),
)
def test_kernel_matches_reference(requests, params, block_size) -> None:  # type: ignore[no-untyped-def]
    assert_engines_agree(make_trace(requests), params, block_size)


@settings(max_examples=100, deadline=None)
@given(requests=conversations(max_requests=80), params=policy_params(policy="S3FIFO"))
def test_s3fifo_kernel_matches_reference_long(requests, params) -> None:  # type: ignore[no-untyped-def]
    assert_engines_agree(make_trace(requests), params, 512)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("policy", "capacity"),
    [("S3FIFO", 64), ("S3FIFO", 4096), ("S3FIFO", 65536), ("LRU", 64), ("LRU", 4096)],
)
def test_engines_agree_on_bundled_trace(conversation: Trace, policy: str, capacity: int) -> None:
    from prefixsim import make_params

    assert_engines_agree(conversation, make_params(policy, capacity), 512)


# --- the kernels' own data structures, pinned where generated traces reach them rarely -------

GHOST_RING_TRACE = [(16, [b]) for b in "abcdabefcdghabgd"]
"""S3FIFO with capacity 4, small_ratio 0.5: S, M and G hold 2 blocks each; the kernel's G is a
ring of 2 * 2 = 4 slots with tombstones. Following the specification, one block per request:

 1-4  a b c d   S=[c,d], a then b evicted to G=[a,b] (evictions 2); ring: a@0 b@1
 5-6  a b       ghost hits (2), both to M=[a,b]; G empty; ring: two tombstones
 7-8  e f       c then d evicted to G=[c,d] (evictions 4); ring: c@2 d@3, now full of live
                entries and tombstones, so it is packed: c@0, d@1
 9    c         ghost hit (3) (tombstone @0); M full, a (freq 0) evicted (5) to G=[d,a]: a@2
 10   d         ghost hit (4): the tombstone must land on d's new slot 1; b evicted (6), G=[a,b]:
                b@3, the ring is full again and packed: a@0, b@1
 11-14 g h a b  each evicts S's head (e f g h: evictions 7-10) into a full G, which drops its
                oldest (a b e f): a and b are new again; S=[a,b], G=[g,h]
 15   g         ghost hit (5); c evicted from M (11): M=[d,g], G=[h,c]
 16   d         a hit in M: the only request with hit tokens (16, its whole input)

A kernel that left d's slot stale when packing the ring would tombstone slot 3 at request 10,
keep d live in G while it is in M, later drop it from G (clearing its state), and miss at
request 16."""


def test_s3fifo_ghost_ring_packing() -> None:
    from prefixsim import make_params

    trace = make_trace(GHOST_RING_TRACE)
    params = make_params("S3FIFO", 4, small_ratio=0.5)
    result = replay_params(trace, params, 16, engine="kernel")
    assert result.hit_tokens.tolist() == [0] * 15 + [16]
    assert result.counters == {
        "block_accesses": 16,
        "block_hits": 1,
        "evictions": 11,
        "ghost_hits": 5,
        "promotions": 0,
    }
    assert result.final_cache_blocks == 4
    assert_engines_agree(trace, params, 16)


@pytest.mark.parametrize("max_freq", [2**29 - 1, 2**29, 2**31 - 1])
def test_s3fifo_kernel_exact_at_large_max_freq(max_freq: int) -> None:
    """freq and ghost slots share one integer per block (``freq * 4 + where``): int32 while
    ``4 * max_freq + 3`` fits, int64 from max_freq = 2**29 on. Block 0 is hit 39 times (freq 39
    in M), block 195 returns from G with ``ghost_freq``, then blocks accessed twice each are
    promoted into M and push both towards its head: how long each survives depends on its
    exact freq."""
    from prefixsim import make_params

    hot = [(64, [0])] * 40
    churn = [(64, [b]) for b in range(1, 200)]
    warm = [(64, [b]) for b in range(1000, 1100) for _ in range(2)]
    trace = make_trace([*hot, *churn, (64, [195]), *warm, (64, [195]), (64, [0])])
    for ghost_freq in (0, 1, max_freq):
        params = make_params(
            "S3FIFO", 8, small_ratio=0.25, max_freq=max_freq, ghost_freq=ghost_freq
        )
        assert_engines_agree(trace, params, 64)
