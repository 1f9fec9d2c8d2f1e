"""Prefill FLOPs, FLOPs saved and the estimated prefill time: hand-worked examples, and the
vectorised functions against the plain reference on generated requests."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prefixsim import ParameterError
from prefixsim.cost import (
    block_recompute_flops,
    break_even_bandwidth,
    break_even_block,
    capacity_blocks,
    prefill_cost,
    prefill_cost_reference,
    prefill_flops,
    prefill_flops_reference,
)
from prefixsim.hardware import HardwareProfile
from prefixsim.models import ModelProfile, load_model

TINY = ModelProfile(
    name="tiny",
    layers=2,
    attention_heads=4,
    kv_heads=2,
    head_dim=8,
    hidden_size=32,
    total_params=1000,
    active_params=1000,
)
# peak 1000 FLOP/s * mfu 0.5 = 500 FLOP/s achieved; blocks arrive at 100 or 10 bytes/s
TOY_GPU = HardwareProfile(
    name="toy",
    peak_flops={"bf16": 1000.0},
    bandwidth={"hbm": 100.0, "nvme": 10.0},
    mfu=0.5,
)


def test_flops_hand_worked() -> None:
    # n = 4 prompt tokens, h = 2 reused: positions 2 and 3 are computed.
    # dense: 2 * 1000 active params * 2 computed tokens = 4,000
    # attention per (query, key) pair: layers 2 * heads 4 * (2 * 8 for Q.K + 2 * 8 for A.V)
    #   = 256; position 2 attends to 3 positions, position 3 to 4: 7 pairs -> 1,792
    assert prefill_flops_reference(TINY, 4, 2) == 4000 + 1792
    # no cache: dense 2 * 1000 * 4 = 8,000; pairs 1 + 2 + 3 + 4 = 10 -> 2,560
    assert prefill_flops_reference(TINY, 4, 0) == 8000 + 2560
    assert prefill_flops(TINY, np.array([4, 4]), np.array([2, 0])).tolist() == [5792.0, 10560.0]
    assert prefill_flops_reference(TINY, 4, 4) == 0  # everything reused


def test_flops_llama_8b_one_block() -> None:
    model = load_model("llama-3.1-8b")
    # dense: 2 * 8,030,000,000 * 512 = 8,222,720,000,000
    # attention: 32 layers * 32 heads * (128 + 128) = 262,144 per unit of n(n+1) - h(h+1);
    #   512 * 513 = 262,656 -> 68,853,694,464
    expected = 8_222_720_000_000 + 68_853_694_464
    assert prefill_flops_reference(model, 512, 0) == expected
    assert prefill_flops(model, np.array([512]))[0] == float(expected)


def test_mla_attention_uses_qk_and_v_dims() -> None:
    model = load_model("deepseek-v3")
    # 61 layers * 128 heads * (192 + 128) = 2,498,560 per unit of n(n+1) - h(h+1); n = 1: 2
    # dense: 2 * 37e9 active parameters
    assert prefill_flops_reference(model, 1, 0) == 2 * 37_000_000_000 + 2_498_560 * 2


def test_estimated_time_hand_worked() -> None:
    # block_size 2: a block weighs 2 (K, V) * 2 layers * 2 KV heads * 8 * 2 bytes * 2 tokens = 256
    # n = 4, h = 2: one reused block -> 256 bytes at 100 B/s = 2.56 s;
    # compute of the uncached part 5,792 / 500 = 11.584 s -> 14.144 s with the cache;
    # without: 10,560 / 500 = 21.12 s; saved 6.976 s.
    ref = prefill_cost_reference(TINY, 4, 2, 2, TOY_GPU, "hbm")
    assert ref["reused_bytes"] == 256
    assert ref["est_prefill_seconds"] == pytest.approx(14.144, rel=1e-12)
    assert ref["est_prefill_seconds_no_cache"] == pytest.approx(21.12, rel=1e-12)
    assert ref["est_ttft_saved_seconds"] == pytest.approx(6.976, rel=1e-12)
    # from NVMe at 10 B/s: 25.6 s of transfer makes the hit a loss: 11.584 + 25.6 - 21.12
    slow = prefill_cost_reference(TINY, 4, 2, 2, TOY_GPU, "nvme")
    assert slow["est_ttft_saved_seconds"] == pytest.approx(-16.064, rel=1e-12)
    # a hit clamped to a prompt ending inside a block still loads the whole block:
    # n = 3, h = 3 -> ceil(3 / 2) = 2 blocks = 512 bytes
    assert prefill_cost_reference(TINY, 3, 3, 2)["reused_bytes"] == 512


def test_break_even_hand_worked() -> None:
    # block 0 of 2 tokens: dense 2 * 1000 * 2 = 4,000; attention 256 / 2 * (2 * 3) = 768
    assert block_recompute_flops(TINY, 2, 0) == 4768
    # 4,768 / 500 = 9.536 s to recompute; loading 256 bytes takes as long at 256 / 9.536 B/s
    assert break_even_bandwidth(TINY, TOY_GPU, 2) == pytest.approx(256 / 9.536, rel=1e-12)
    # block j costs (4,768 + 1,024 j) / 500 s (each block attends to 4 more earlier tokens per
    # query); loading from NVMe costs 25.6 s: recompute is cheaper while 4768 + 1024 j < 12800,
    # i.e. for j <= 7; from block 8 on, loading wins.
    assert block_recompute_flops(TINY, 2, 7) == 4768 + 7 * 1024
    assert break_even_block(TINY, TOY_GPU, 2, "nvme") == 8
    assert break_even_block(TINY, TOY_GPU, 2, "hbm") == 0  # 2.56 s < 9.536 s


def test_capacity_blocks() -> None:
    model = load_model("llama-3.1-70b")  # 160 MiB a block at 512 tokens
    assert capacity_blocks(64 * 2**30, model, 512) == 409  # 65,536 MiB / 160 = 409.6
    assert capacity_blocks(2**40, model, 512) == 6553  # 1,048,576 / 160 = 6,553.6
    assert capacity_blocks(160 * 2**20, model, 512) == 1  # exactly one block
    with pytest.raises(ParameterError, match="smaller than one block"):
        capacity_blocks(160 * 2**20 - 1, model, 512)


def test_bad_hits_refused() -> None:
    with pytest.raises(ParameterError, match=r"hit_tokens\[1\]"):
        prefill_flops(TINY, np.array([4, 4]), np.array([0, 5]))
    with pytest.raises(ParameterError, match="hit_tokens"):
        prefill_flops_reference(TINY, 4, -1)


@st.composite
def models(draw: st.DrawFn) -> ModelProfile:
    mla = draw(st.booleans())
    total = draw(st.integers(1, 10**12))
    return ModelProfile(
        name="generated",
        layers=draw(st.integers(1, 130)),
        attention_heads=draw(st.integers(1, 128)),
        kv_heads=draw(st.integers(1, 16)),
        head_dim=draw(st.integers(1, 256)),
        hidden_size=draw(st.integers(1, 20000)),
        total_params=total,
        active_params=draw(st.integers(1, total)),
        attention="mla" if mla else "gqa",
        v_head_dim=draw(st.none() | st.integers(1, 256)),
        kv_lora_rank=draw(st.integers(1, 1024)) if mla else None,
        qk_rope_head_dim=draw(st.integers(1, 128)) if mla else None,
        kv_dtype=draw(st.sampled_from(["bf16", "fp16", "fp8", "fp32"])),
    )


@st.composite
def requests(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray]:
    pairs = draw(
        st.lists(
            st.integers(0, 3000).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, n))),
            max_size=12,
        )
    )
    n = np.array([p[0] for p in pairs], dtype=np.int64)
    h = np.array([p[1] for p in pairs], dtype=np.int64)
    return n, h


@settings(max_examples=80, deadline=None)
@given(
    model=models(),
    reqs=requests(),
    block_size=st.sampled_from([1, 2, 16, 512]),
    tier=st.sampled_from(["hbm", "nvme"]),
)
def test_vectorised_matches_reference(
    model: ModelProfile, reqs: tuple[np.ndarray, np.ndarray], block_size: int, tier: str
) -> None:
    n, h = reqs
    cost = prefill_cost(model, n, h, block_size, TOY_GPU, tier)
    columns = (
        "prefill_flops",
        "prefill_flops_saved",
        "est_prefill_seconds_no_cache",
        "est_prefill_seconds",
        "est_ttft_saved_seconds",
    )
    for i in range(len(n)):
        ref = prefill_cost_reference(model, int(n[i]), int(h[i]), block_size, TOY_GPU, tier)
        assert int(cost.reused_bytes[i]) == ref["reused_bytes"]  # exact
        for col in columns:
            got = float(getattr(cost, col)[i])
            assert math.isclose(
                got, ref[col], rel_tol=1e-12, abs_tol=1e-9 * ref["est_prefill_seconds_no_cache"]
            ), col
    totals = cost.totals()
    assert totals["reused_bytes"] == sum(
        prefill_cost_reference(model, int(a), int(b), block_size)["reused_bytes"]
        for a, b in zip(n, h, strict=True)
    )
    exact_saved = sum(
        prefill_flops_reference(model, int(a)) - prefill_flops_reference(model, int(a), int(b))
        for a, b in zip(n, h, strict=True)
    )
    # totals come from exact integer sums, rounded once
    assert totals["prefill_flops_saved"] == float(exact_saved)
    exact_full = sum(prefill_flops_reference(model, int(a)) for a in n)
    assert totals["prefill_flops"] == float(exact_full)
    for col in columns[2:]:
        per_request_sum = math.fsum(getattr(cost, col).tolist())
        scale = totals["est_prefill_seconds_no_cache"] or 0.0
        assert math.isclose(totals[col] or 0.0, per_request_sum, rel_tol=1e-9, abs_tol=1e-9 * scale)
