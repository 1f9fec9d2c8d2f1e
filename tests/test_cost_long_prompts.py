"""Per-request savings of long prompts: computed from the hit tokens, not as the difference of
two near-equal costs. A 2**50-token prompt with 1,024 hit tokens costs ~1e35 FLOPs with or
without them; their difference in float64 is 0.0 while the saved amount is ~1.7e13. Every value
below is derived by hand from ``docs/cost-model.md``."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from prefixsim.cost import prefill_cost, prefill_cost_reference, prefill_cost_tiers
from prefixsim.hardware import HardwareProfile
from prefixsim.models import load_model

N = 2**50
H = 1024
# Llama-3.1-8B: 2 * active 8.03e9 per token; attention c = 32 layers * 32 heads * (128 + 128)
# = 262,144 per unit of h(h+1). saved = 2 P h + c h (h + 1).
LLAMA_SAVED = 2 * 8_030_000_000 * H + 262_144 * H * (H + 1)  # 16,720,586,342,400
# One bf16 token of KV: 2 * 32 layers * 8 kv heads * 128 * 2 bytes = 131,072; at block_size 16,
# 1,024 tokens are 64 blocks of 2,097,152 bytes = 134,217,728 bytes.
LLAMA_BYTES = 64 * 16 * 131_072
# H100: 9.894e14 bf16 FLOP/s * mfu 0.5 = 4.947e14 effective; HBM 3.35e12 bytes/s.
EFF, HBM, NVME = 9.894e14 * 0.5, 3.35e12, 7.0e9


def test_llama_saved_flops_of_a_long_prompt() -> None:
    assert LLAMA_SAVED == 16_720_586_342_400
    cost = prefill_cost(load_model("llama-3.1-8b"), np.array([N, N]), np.array([H, 0]), 16)
    assert cost.prefill_flops_saved[0] == pytest.approx(LLAMA_SAVED, rel=1e-15)
    assert cost.prefill_flops_saved[1] == 0.0
    assert cost.total_flops_saved == LLAMA_SAVED
    assert cost.reused_bytes.tolist() == [LLAMA_BYTES, 0]


def test_llama_saved_seconds_of_a_long_prompt() -> None:
    hw = HardwareProfile.from_dict(
        {"name": "h100-ish", "peak_flops": {"bf16": 9.894e14}, "bandwidth": {"hbm": HBM}}
    )
    cost = prefill_cost(load_model("llama-3.1-8b"), np.array([N]), np.array([H]), 16, hw)
    want = LLAMA_SAVED / EFF - LLAMA_BYTES / HBM  # 0.0337993... s - 4.0065e-5 s
    assert cost.est_ttft_saved_seconds is not None
    assert cost.est_ttft_saved_seconds[0] == pytest.approx(want, rel=1e-14)


def test_two_tiers_saved_seconds_of_a_long_prompt() -> None:
    hw = HardwareProfile.from_dict(
        {
            "name": "h100-ish",
            "peak_flops": {"bf16": 9.894e14},
            "bandwidth": {"hbm": HBM, "nvme": NVME},
        }
    )
    # 512 tokens (32 blocks) from HBM, 512 from NVMe: the same FLOPs, two transfers.
    tiers = np.array([[512], [512]])
    cost = prefill_cost_tiers(
        load_model("llama-3.1-8b"), np.array([N]), tiers, 16, hw, ["hbm", "nvme"]
    )
    half = LLAMA_BYTES // 2
    want = LLAMA_SAVED / EFF - half / HBM - half / NVME
    assert cost.prefill_flops_saved[0] == pytest.approx(LLAMA_SAVED, rel=1e-15)
    assert cost.est_ttft_saved_seconds is not None
    assert cost.est_ttft_saved_seconds[0] == pytest.approx(want, rel=1e-14)


# DeepSeek-V3 (MLA): 2 P = 74e9; c = 61 * 128 * (192 + 128) = 2,498,560; a reused token's
# up-projection 2,046,820,352 FLOPs, paid only when a token is computed (h < n).
DS_UP = 2_046_820_352
DS_C = 61 * 128 * (192 + 128)


def test_mla_saved_flops_of_a_long_prompt() -> None:
    model = load_model("deepseek-v3")
    cost = prefill_cost(model, np.array([N, H]), np.array([H, H]), 512)
    partly = 74_000_000_000 * H + DS_C * H * (H + 1) - DS_UP * H
    whole = 74_000_000_000 * H + DS_C * H * (H + 1)  # nothing computed: no up-projection
    assert cost.prefill_flops_saved[0] == pytest.approx(partly, rel=1e-15)
    assert cost.prefill_flops_saved[1] == pytest.approx(whole, rel=1e-15)
    assert cost.total_flops_saved == partly + whole


def test_engine_rule_pays_the_up_projection_of_a_long_prompt() -> None:
    # The engines' hit rule leaves the last block to compute: h = n - block_size < n, so the
    # up-projection of the h reused tokens is paid, however long the prompt.
    model = load_model("deepseek-v3")
    n = 2**40
    h = n - 512
    cost = prefill_cost(model, np.array([n]), np.array([h]), 512)
    want = 74_000_000_000 * h + DS_C * h * (h + 1) - DS_UP * h
    assert cost.prefill_flops_saved[0] == pytest.approx(want, rel=1e-15)


def test_an_up_projection_heavier_than_a_token_is_exact() -> None:
    # A profile whose reused token's up-projection (2 * 2 * 3 * 2 * 8 = 192) outweighs its
    # dense work (2 * active 10 = 20): a = 20 - 192 = -172 per hit token, attention c = 2 * 2
    # * (6 + 4) = 40 per unit of h(h+1). h = 3 of n = 4: 3 * -172 + 40 * 12 = -36.
    toy = dataclasses.replace(
        load_model("deepseek-v3"),
        name="toy",
        layers=2,
        attention_heads=2,
        kv_heads=2,
        head_dim=6,
        hidden_size=8,
        total_params=10,
        active_params=10,
        v_head_dim=4,
        kv_lora_rank=3,
        qk_rope_head_dim=2,
    )
    assert toy.reuse_flops_per_token() == 192
    cost = prefill_cost(toy, np.array([4, 2**50]), np.array([3, 3]), 2)
    assert cost.prefill_flops_saved.tolist() == [-36.0, -36.0]
    assert prefill_cost_reference(toy, 4, 3, 2)["prefill_flops_saved"] == -36
