"""The engine: policies as steps, compositions as drivers (``prefixsim.engine``).

Where a policy keeps a hand-fused kernel of its single-cache replay (its fast path), the
single-cache driver over its steps gives the same result per request: the fast kernel is only
ever a faster way to the driver's numbers.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import make_trace
from prefixsim import Trace, make_params
from prefixsim.engine import single
from prefixsim.policies import PolicyParams, get_policy
from strategies import BLOCK_SIZES, conversations, policy_params

FAST = ["LRU", "S3FIFO"]


def steps_and_fast(trace: Trace, params: PolicyParams, block_size: int) -> None:
    spec = get_policy(params.policy)
    inputs = (trace.block_ids, trace.offsets, trace.input_lengths, trace.n_blocks, block_size)
    driven = single.run_steps(spec.steps, params, spec.counter_names, *inputs)
    fast = single.run(spec, params, *inputs)
    np.testing.assert_array_equal(driven[0], fast[0])
    assert driven[1:] == fast[1:]


@settings(max_examples=300, deadline=None)
@given(
    requests=conversations(),
    params=policy_params(),
    block_size=st.sampled_from(BLOCK_SIZES),
)
def test_fast_kernel_is_the_driver(requests, params, block_size) -> None:  # type: ignore[no-untyped-def]
    steps_and_fast(make_trace(requests), params, block_size)


@pytest.mark.parametrize("policy", FAST)
@pytest.mark.parametrize("capacity", [64, 4096])
def test_fast_kernel_is_the_driver_on_the_bundled_trace(
    conversation: Trace, policy: str, capacity: int
) -> None:
    steps_and_fast(conversation, make_params(policy, capacity), 512)
