"""The cost model's engine-faithful terms: the MLA up-projection of reused tokens, and what the
engines' hit rule (they always compute a prompt's last token) does to the FLOPs.

A toy latent-attention model throughout (``TOY_MLA``), every number derived in the comments.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine_traces import engine_trace
from prefixsim import ParameterError, make_params
from prefixsim.cost import (
    block_recompute_flops,
    break_even_bandwidth,
    break_even_block,
    prefill_cost,
    prefill_cost_reference,
    prefill_flops,
    prefill_flops_reference,
)
from prefixsim.hardware import HardwareProfile
from prefixsim.mode_replay import reference_replay
from prefixsim.models import ModelProfile, load_model

# 2 layers, 2 heads of query/key dim 6 (4 without RoPE + 2 RoPE) and value dim 4, latent 3.
TOY_MLA = ModelProfile(
    name="toy-mla",
    layers=2,
    attention_heads=2,
    kv_heads=2,
    head_dim=6,
    hidden_size=8,
    total_params=1000,
    active_params=1000,
    attention="mla",
    v_head_dim=4,
    kv_lora_rank=3,
    qk_rope_head_dim=2,
    reuse_up_projection=True,
)
TOY_GPU = HardwareProfile(
    name="toy", peak_flops={"bf16": 1000.0}, bandwidth={"hbm": 100.0, "nvme": 10.0}, mfu=0.5
)


def test_up_projection_per_reused_token() -> None:
    # 2 * layers 2 * latent 3 * heads 2 * (nope 4 + value 4) = 192 FLOPs per reused token.
    assert TOY_MLA.reuse_flops_per_token() == 192
    off = dataclasses.replace(TOY_MLA, reuse_up_projection=False)
    assert off.reuse_flops_per_token() == 0
    # DeepSeek-V3: 2 * 61 * 512 * 128 * (128 + 128) = 2,046,820,352 (its profile sets it).
    assert load_model("deepseek-v3").reuse_flops_per_token() == 2_046_820_352


def test_flops_with_reused_latents_hand_worked() -> None:
    # n = 4, h = 2: dense 2 * 1000 * 2 = 4,000; attention 2 * 2 * (6 + 4) = 40 per unit of
    # n(n+1) - h(h+1) = 20 - 6 = 14 -> 560; the 2 reused tokens' up-projection 2 * 192 = 384.
    assert prefill_flops_reference(TOY_MLA, 4, 2) == 4944
    # No cache: 8,000 + 40 * 20 = 8,800; saved 8,800 - 4,944 = 3,856 (not 4,240: reuse is not
    # free for latent attention).
    assert prefill_flops_reference(TOY_MLA, 4, 0) == 8800
    assert prefill_cost_reference(TOY_MLA, 4, 2, 2)["prefill_flops_saved"] == 3856
    off = dataclasses.replace(TOY_MLA, reuse_up_projection=False)
    assert prefill_cost_reference(off, 4, 2, 2)["prefill_flops_saved"] == 4240
    # Nothing computed, nothing attended: the specification's fully cached prompt costs 0.
    assert prefill_flops_reference(TOY_MLA, 4, 4) == 0


def test_break_even_with_reused_latents() -> None:
    # Block 0 of 2 tokens: recompute 2 * 1000 * 2 + 40 * (2 * 3) = 4,240 FLOPs; reuse costs
    # the up-projection of its 2 tokens, 384: reusing saves 3,856 FLOPs = 7.712 s at 500 FLOP/s.
    # A block is 2 layers * (3 + 2) * 2 bytes * 2 tokens = 40 bytes: break-even 40 / 7.712 B/s.
    assert block_recompute_flops(TOY_MLA, 2, 0) == 4240
    assert TOY_MLA.kv_bytes_per_block(2) == 40
    assert break_even_bandwidth(TOY_MLA, TOY_GPU, 2) == pytest.approx(40 / 7.712, rel=1e-12)
    # From NVMe (10 B/s) a block takes 4 s to load plus 0.768 s to up-project; block j costs
    # (4,240 + 160 j) / 500 s to recompute: loading wins from 4,240 + 160 j >= 2,384, block 0.
    assert break_even_block(TOY_MLA, TOY_GPU, 2, "nvme") == 0


@settings(max_examples=100, deadline=None)
@given(pairs=st.lists(st.tuples(st.integers(0, 300), st.integers(0, 300)), max_size=30))
def test_vectorised_equals_reference(pairs: list[tuple[int, int]]) -> None:
    n = np.array([max(a, b) for a, b in pairs], np.int64)
    h = np.array([min(a, b) for a, b in pairs], np.int64)
    cost = prefill_cost(TOY_MLA, n, h, 2, TOY_GPU)
    ref = [
        prefill_cost_reference(TOY_MLA, int(a), int(b), 2, TOY_GPU)
        for a, b in zip(n, h, strict=True)
    ]
    assert cost.total_flops_saved == sum(int(r["prefill_flops_saved"]) for r in ref)
    np.testing.assert_array_equal(
        prefill_flops(TOY_MLA, n, h),
        [prefill_flops_reference(TOY_MLA, int(a), int(b)) for a, b in zip(n, h, strict=True)],
    )
    for field in ("est_prefill_seconds", "est_ttft_saved_seconds"):
        got = getattr(cost, field)
        assert got is not None
        np.testing.assert_allclose(got, [r[field] for r in ref], rtol=1e-12, atol=1e-9)


def test_profile_flag_validated() -> None:
    with pytest.raises(ParameterError, match=r"model\.reuse_up_projection.*mla"):
        dataclasses.replace(load_model("llama-3.1-8b"), reuse_up_projection=True)
    with pytest.raises(ParameterError, match=r"model\.reuse_up_projection"):
        dataclasses.replace(TOY_MLA, reuse_up_projection="yes")  # type: ignore[arg-type]


def test_engines_always_compute_the_last_token() -> None:
    """The specification reuses a fully cached prompt whole (0 FLOPs); the engines' hit rule
    leaves its last block to compute. A prompt of 2 blocks of 4 tokens, twice, LRU."""
    trace = engine_trace([(8, ["a", "b"]), (8, ["a", "b"])])
    params = make_params("LRU", 8)
    spec, _, _ = reference_replay(trace, params, 4, "spec")
    vllm, _, _ = reference_replay(trace, params, 4, "vllm")
    assert (spec.tolist(), vllm.tolist()) == ([0, 8], [0, 4])
    # spec: nothing to compute. vllm: positions 4..7 computed, 4 tokens reused (their
    # up-projection): dense 2 * 1000 * 4 = 8,000, attention 40 * (72 - 20) = 2,080, 4 * 192.
    n = trace.input_lengths
    assert prefill_flops(TOY_MLA, n, spec)[1] == 0
    assert prefill_flops(TOY_MLA, n, vllm)[1] == 8000 + 2080 + 768


def test_up_projection_past_int64_names_its_largest_factor() -> None:
    """Each of the up-projection's factors fits int64 and the product 2 * 2**20 * 2**20 * 2**20
    * (2**4 + 2**20) does not (about 2**82): refused at the profile, naming the largest factor
    (kv_lora_rank, 2**21, one above the others), not later as an overflow in the cost model."""
    with pytest.raises(ParameterError, match=r"model\.kv_lora_rank.*up-projection.*int64"):
        dataclasses.replace(
            TOY_MLA,
            layers=2**20,
            attention_heads=2**20,
            kv_heads=1,
            head_dim=2**20 + 2**4,
            v_head_dim=2**4,
            kv_lora_rank=2**21,
            qk_rope_head_dim=2**4,
        )
