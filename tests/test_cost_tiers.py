"""The estimated prefill time of a hierarchy (``docs/cost-model.md``, ``docs/tiers.md``): one
transfer term per tier at its medium's bandwidth. A hand-worked example, the vectorised
function against the plain reference on hit splits a replay can give, the split invariant on
real replays, and the one-tier identity with the single-cache :func:`prefill_cost`."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import make_trace
from prefixsim import ParameterError, Trace, replay
from prefixsim.cost import (
    prefill_cost,
    prefill_cost_reference,
    prefill_cost_tiers,
    prefill_cost_tiers_reference,
    reused_blocks,
    tier_reused_blocks,
)
from prefixsim.hardware import HardwareProfile
from prefixsim.models import ModelProfile, load_model
from prefixsim.tiers import MODES, block_tokens, replay_tiers
from strategies import BLOCK_SIZES, TIER_SHAPES, conversations
from test_cost import TINY, TOY_GPU, models

# TINY at block_size 2: a block weighs 2 (K, V) * 2 layers * 2 KV heads * 8 * 2 bytes * 2 tokens
# = 256 bytes; attention costs 2 layers * 4 heads * (8 + 8) = 128 FLOPs per unit of
# n(n+1) - h(h+1); TOY_GPU computes 500 FLOP/s, and blocks arrive from hbm at 100 B/s and from
# nvme at 10 B/s.
MEDIA = ["hbm", "nvme"]
TOY_GPU_ALL = HardwareProfile(
    name="toy4",
    peak_flops={"bf16": 1000.0},
    bandwidth={"hbm": 100.0, "dram_pcie": 40.0, "rdma": 20.0, "nvme": 10.0},
    mfu=0.5,
)


def test_hand_worked_two_tiers() -> None:
    # Request A: 5 prompt tokens, 3 blocks, all 3 hit: h = min(3 * 2, 5) = 5. Block 0 (tokens
    # 0-1) was found in tier 1, block 1 (tokens 2-3) in tier 0, block 2 (token 4 only: the
    # clamp) in tier 1, so tier_hit_tokens = [2, 3]. Blocks loaded: tier 0 ceil(2/2) = 1,
    # tier 1 ceil(3/2) = 2 (one full, one partial): 3 = ceil(5/2), the single-cache count.
    #   no cache: 2 * 1000 * 5 + 128 * 30 = 13,840 FLOPs -> 27.68 s
    #   cached: nothing computed; 256 B / 100 + 512 B / 10 = 2.56 + 51.2 = 53.76 s
    # Request B: 6 prompt tokens, leading blocks 0 (tier 0) and 1 (tier 1) hit: h = 4, [2, 2].
    #   no cache: 2 * 1000 * 6 + 128 * 42 = 17,376 -> 34.752 s
    #   cached: 2 * 1000 * 2 + 128 * (42 - 20) = 6,816 -> 13.632 s, + 2.56 + 25.6 = 41.792 s
    n = np.array([5, 6])
    split = np.array([[2, 2], [3, 2]])
    cost = prefill_cost_tiers(TINY, n, split, 2, TOY_GPU, MEDIA)
    assert cost.tier_reused_bytes is not None
    assert cost.tier_reused_bytes.tolist() == [[256, 256], [512, 256]]
    assert cost.reused_bytes.tolist() == [768, 512]
    assert cost.tier_total_reused_bytes == (512, 768)
    assert cost.est_prefill_seconds is not None and cost.est_ttft_saved_seconds is not None
    assert cost.est_prefill_seconds.tolist() == pytest.approx([53.76, 41.792], rel=1e-12)
    assert cost.est_ttft_saved_seconds.tolist() == pytest.approx(
        [27.68 - 53.76, 34.752 - 41.792], rel=1e-12
    )
    # totals: compute 6,816 / 500 = 13.632 s; transfer tier 0 512 / 100 = 5.12 s, tier 1
    # 768 / 10 = 76.8 s -> 95.552 s (= 53.76 + 41.792)
    totals = cost.totals()
    assert totals["reused_bytes"] == 1280
    assert totals["est_prefill_seconds"] == pytest.approx(95.552, rel=1e-12)
    assert totals["est_prefill_seconds_no_cache"] == pytest.approx(62.432, rel=1e-12)
    ref = prefill_cost_tiers_reference(TINY, 5, [2, 3], 2, TOY_GPU, MEDIA)
    assert ref["tier_reused_bytes"] == [256, 512]
    assert ref["est_prefill_seconds"] == pytest.approx(53.76, rel=1e-12)
    # The same hits all from nvme (the single cache_tier rule) take 3 * 25.6 = 76.8 s.
    single = prefill_cost(TINY, n[:1], np.array([5]), 2, TOY_GPU, "nvme")
    assert single.est_prefill_seconds is not None
    assert single.est_prefill_seconds[0] == pytest.approx(76.8, rel=1e-12)


def test_partial_block_in_two_tiers_refused() -> None:
    # Only the last reused block can be partial: [1, 1] at block_size 2 would charge 2 blocks
    # for 2 tokens (ceil per tier double-counting), and no replay gives it.
    with pytest.raises(ParameterError, match=r"tier_hit_tokens\[:, 1\]"):
        tier_reused_blocks(np.array([[2, 1], [0, 1]]), 2)
    with pytest.raises(ParameterError, match="more than one tier"):
        prefill_cost_tiers_reference(TINY, 4, [1, 1], 2)


def test_bad_input_named() -> None:
    n = np.array([4, 4])
    with pytest.raises(ParameterError, match=r"tiers\[1\]\.medium"):
        prefill_cost_tiers(TINY, n, np.array([[2, 2], [2, 0]]), 2, TOY_GPU, ["hbm", None])
    with pytest.raises(ParameterError, match=r"tiers\[1\]\.medium.*toy has no bandwidth"):
        prefill_cost_tiers(TINY, n, np.array([[2, 2], [2, 0]]), 2, TOY_GPU, ["hbm", "rdma"])
    with pytest.raises(ParameterError, match=r"hit_tokens\[1\]"):
        prefill_cost_tiers(TINY, n, np.array([[2, 2], [2, 6]]), 2)  # a tier past the prompt
    with pytest.raises(ParameterError, match=r"hit_tokens\[0\]"):
        prefill_cost_tiers(TINY, n, np.array([[4, 2], [2, 0]]), 2)  # the sum past the prompt
    with pytest.raises(ParameterError, match="tier_hit_tokens"):
        prefill_cost_tiers(TINY, n, np.array([2, 2]), 2)  # not [tier, request]
    with pytest.raises(ParameterError, match="media"):
        prefill_cost_tiers(TINY, n, np.array([[2, 2], [2, 0]]), 2, TOY_GPU, ["hbm"])
    # without hardware no medium is needed
    assert prefill_cost_tiers(TINY, n, np.array([[2, 2], [2, 0]]), 2).est_prefill_seconds is None


@st.composite
def split_requests(draw: st.DrawFn, block_size: int, n_tiers: int) -> tuple[int, list[int]]:
    """A prompt and a split of its hits that a replay can give: ``k`` leading blocks (of a
    ``hash_ids`` possibly longer than the prompt), each found in some tier, each contributing
    :func:`block_tokens`."""
    n = draw(st.integers(0, 3000))
    blocks = -(-n // block_size) + draw(st.integers(0, 2))
    k = draw(st.integers(0, blocks))
    split = [0] * n_tiers
    for j in range(k):
        split[draw(st.integers(0, n_tiers - 1))] += block_tokens(j, block_size, n)
    return n, split


@st.composite
def tiered_requests(draw: st.DrawFn) -> tuple[int, int, np.ndarray, np.ndarray]:
    block_size = draw(st.sampled_from([1, 2, 16, 512]))
    n_tiers = draw(st.integers(1, 4))
    reqs = draw(st.lists(split_requests(block_size, n_tiers), max_size=12))
    n = np.array([r[0] for r in reqs], dtype=np.int64)
    split = np.array([r[1] for r in reqs], dtype=np.int64).reshape(-1, n_tiers).T
    return block_size, n_tiers, n, split


FOUR_MEDIA = HardwareProfile(
    name="four",
    peak_flops={"bf16": 1e15},
    bandwidth={"hbm": 3e12, "dram_pcie": 5e10, "rdma": 2.5e10, "nvme": 7e9},
    mfu=0.4,
)


@settings(max_examples=100, deadline=None)
@given(model=models(), reqs=tiered_requests(), media=st.permutations(list(FOUR_MEDIA.bandwidth)))
def test_vectorised_matches_reference(
    model: ModelProfile, reqs: tuple[int, int, np.ndarray, np.ndarray], media: list[str]
) -> None:
    block_size, n_tiers, n, split = reqs
    media = media[:n_tiers]
    cost = prefill_cost_tiers(model, n, split, block_size, FOUR_MEDIA, media)
    assert cost.tier_reused_bytes is not None
    # the per-tier blocks sum to the single-cache count ceil(h / block_size), exactly
    np.testing.assert_array_equal(
        tier_reused_blocks(split, block_size).sum(axis=0), reused_blocks(split.sum(0), block_size)
    )
    columns = (
        "prefill_flops",
        "prefill_flops_saved",
        "est_prefill_seconds_no_cache",
        "est_prefill_seconds",
        "est_ttft_saved_seconds",
    )
    for r in range(len(n)):
        ref = prefill_cost_tiers_reference(
            model, int(n[r]), split[:, r].tolist(), block_size, FOUR_MEDIA, media
        )
        assert cost.tier_reused_bytes[:, r].tolist() == ref["tier_reused_bytes"]  # exact
        assert int(cost.reused_bytes[r]) == ref["reused_bytes"]
        scale = float(ref["est_prefill_seconds_no_cache"])  # type: ignore[arg-type]
        for col in columns:
            got, want = float(getattr(cost, col)[r]), float(ref[col])  # type: ignore[arg-type]
            assert math.isclose(got, want, rel_tol=1e-12, abs_tol=1e-9 * scale), col
        if n_tiers == 1:  # one tier: the single-cache reference, to the bit
            single = prefill_cost_reference(
                model, int(n[r]), int(split[0, r]), block_size, FOUR_MEDIA, media[0]
            )
            assert {k: v for k, v in ref.items() if k != "tier_reused_bytes"} == single
    totals = cost.totals()
    assert cost.tier_total_reused_bytes == tuple(int(x) for x in cost.tier_reused_bytes.sum(1))
    for col in columns[2:]:
        per_request_sum = math.fsum(getattr(cost, col).tolist())
        scale = totals["est_prefill_seconds_no_cache"] or 0.0
        assert math.isclose(totals[col] or 0.0, per_request_sum, rel_tol=1e-9, abs_tol=1e-9 * scale)


@st.composite
def hierarchies(draw: st.DrawFn) -> list[dict[str, object]]:
    # two or three tiers, of the tuples of policies the hierarchy tests share (each compiled
    # once in a run); the split's cost does not depend on which policies produced it
    shape = draw(st.sampled_from([s for s in TIER_SHAPES if len(s) in (2, 3)]))
    return [
        {"policy": policy, "capacity": draw(st.integers(10, 24)), "name": f"t{t}"}
        for t, policy in enumerate(shape)
    ]


@settings(max_examples=40, deadline=None)
@given(
    requests=conversations(),
    tiers=hierarchies(),
    mode=st.sampled_from(MODES),
    block_size=st.sampled_from(BLOCK_SIZES),
)
def test_replayed_splits_cost_like_the_reference(
    requests: list[tuple[int, list[int]]],
    tiers: list[dict[str, object]],
    mode: str,
    block_size: int,
) -> None:
    # Real replays (prompts that end inside a block, hash_ids longer or shorter than the
    # prompt) give splits whose per-tier blocks sum to ceil(h / block_size): never refused.
    r = replay_tiers(make_trace(requests), tiers, mode, block_size)
    blocks = tier_reused_blocks(r.tier_hit_tokens, block_size)
    np.testing.assert_array_equal(blocks.sum(axis=0), reused_blocks(r.hit_tokens, block_size))
    media = ["hbm", "dram_pcie", "nvme"][: len(tiers)]
    cost = prefill_cost_tiers(
        TINY, r.prompt_tokens, r.tier_hit_tokens, block_size, TOY_GPU_ALL, media
    )
    assert cost.est_prefill_seconds is not None
    for i in range(r.n_requests):
        ref = prefill_cost_tiers_reference(
            TINY,
            int(r.prompt_tokens[i]),
            r.tier_hit_tokens[:, i].tolist(),
            block_size,
            TOY_GPU_ALL,
            media,
        )
        assert math.isclose(
            float(cost.est_prefill_seconds[i]),
            ref["est_prefill_seconds"],  # type: ignore[arg-type]
            rel_tol=1e-12,
        )


@pytest.mark.parametrize("medium", ["hbm", "nvme"])
def test_one_tier_hierarchy_is_the_single_cache_cost(conversation: Trace, medium: str) -> None:
    # A one-tier hierarchy replays exactly as the single cache (tests/test_tiers.py), and its
    # cost is the single cache's prefill_cost in that tier, to the bit, per request and total.
    model, hw = load_model("llama-3.1-8b"), TOY_GPU_ALL
    single = replay(conversation, "S3FIFO", 2048)
    tiered = replay_tiers(conversation, [{"policy": "S3FIFO", "capacity": 2048, "medium": medium}])
    want = prefill_cost(model, single.prompt_tokens, single.hit_tokens, 512, hw, medium)
    got = prefill_cost_tiers(
        model,
        tiered.prompt_tokens,
        tiered.tier_hit_tokens,
        512,
        hw,
        [t.medium for t in tiered.tiers],
    )
    for col in (
        "prefill_flops",
        "prefill_flops_saved",
        "reused_bytes",
        "est_prefill_seconds",
        "est_prefill_seconds_no_cache",
        "est_ttft_saved_seconds",
    ):
        np.testing.assert_array_equal(getattr(got, col), getattr(want, col), err_msg=col)
    assert got.totals() == want.totals()
    assert got.bandwidth == want.bandwidth == hw.tier_bandwidth(medium)
