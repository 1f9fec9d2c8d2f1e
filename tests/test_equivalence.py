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
