"""A hierarchy of tiers under the engines' semantics (``docs/semantics.md``, "In a hierarchy"):
hand-worked cases for each rule, the compiled driver held equal to the plain reference per
request and per tier for every policy with steps in the top tier, and one tier as the single
engine cache."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import make_trace
from engine_traces import ENGINE_MODES, EngineCase, engine_requests
from prefixsim import ParameterError, Semantics, replay
from prefixsim.policies import get_policy, policy_names
from prefixsim.tiers import MODES, Tier, TieredResult, replay_tiers
from strategies import conversations, policy_params
from test_tiers import assert_same as assert_tiers_same

BS = 4
STEPS = [p for p in policy_names() if (s := get_policy(p).steps) is not None and s.per_block]
"""Every policy with per-block steps: each takes the top tier (a request-level one, RADIX, is
refused as a tier: docs/policies.md, "Refusals")."""
LOWER = ["LRU", "S3FIFO"]
"""The lower tier of the drawn hierarchies: every policy in every position is covered under
spec by tests/test_tiers.py; here the engines' rule (tier 0's) meets each top-tier policy, and a
lower tier only receives what tier 0 demotes or writes through (one driver is compiled per
hierarchy of policies: the draws keep their number small)."""


def run(requests: list[tuple[int, list[Any]]], tiers: list[dict[str, Any]], mode: str,
        semantics: Any, engine: str = "kernel", outputs: list[int] | None = None,
        ) -> TieredResult:  # fmt: skip
    trace = make_trace(requests, outputs=outputs)
    return replay_tiers(trace, tiers, mode, BS, engine=engine, semantics=semantics)  # type: ignore[arg-type]


def both(requests: list[tuple[int, list[Any]]], tiers: list[dict[str, Any]], mode: str,
         semantics: Any, outputs: list[int] | None = None) -> TieredResult:  # fmt: skip
    """The reference's result, after checking the compiled driver agrees with it."""
    ref = run(requests, tiers, mode, semantics, "reference", outputs)
    ker = run(requests, tiers, mode, semantics, "kernel", outputs)
    assert_same(ref, ker)
    return ref


def assert_same(a: TieredResult, b: TieredResult) -> None:
    """tests/test_tiers.py's comparison, and the totals (accesses, temporary blocks)."""
    assert_tiers_same(a, b)
    assert a.counters == b.counters


def lru(capacity: int) -> dict[str, Any]:
    return {"policy": "LRU", "capacity": capacity}


# --- hand-worked: each rule once ------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("sem", ["vllm", "sglang"])
def test_a_partial_block_is_never_hit_in_any_tier(mode: str, sem: str) -> None:
    # Blocks of 4 tokens. R1 (6, [a, p]): a is full and cached; p's 2 tokens are a temporary
    # block, held in tier 0 while R1 runs and then freed, never written to tier 1. R2, the
    # same prompt: a hits (4 tokens, whole blocks), p misses in both tiers, so 4 of 6 tokens
    # (the specification would hit all 6). R3 (9, [a, p, q]) hits a only: R3's p is a full
    # block (hashed), but nothing cached it before.
    requests = [(6, ["a", "p"]), (6, ["a", "p"]), (9, ["a", "p", "q"])]
    tiers = [lru(4 if sem == "vllm" else 3), lru(8)]  # 3 usable blocks either way
    res = both(requests, tiers, mode, sem)
    assert res.hit_tokens.tolist() == [0, 4, 4]
    assert res.tier_hit_tokens[0].tolist() == [0, 4, 4]
    assert res.counters["temporary_blocks"] == 3  # R1's, R2's and R3's last partial block
    # Tier 1 never takes a temporary block: inclusive, a (R1) and p (R3) are written through;
    # exclusive, tier 0 never evicts (R3 holds a, p and its temporary block: 3 blocks).
    assert res.tier_counters[1]["admissions"] == (2 if mode == "inclusive" else 0)
    spec = both(requests, tiers, mode, "spec")
    assert spec.hit_tokens.tolist() == [0, 6, 8]


def test_the_cap_over_a_prefix_in_two_tiers() -> None:
    # SGLang (no null block), exclusive, LRU(3) over LRU(8), blocks of 4. R1 (8, [a, b]);
    # R2 (8, [c, d]): d evicts a from tier 0 into tier 1. R3 (8, [a, b]): a is in tier 1, b
    # in tier 0, but at most (8 - 1) // 4 = 1 block may hit: a, 4 tokens from tier 1 (spec:
    # both, 8 tokens, 4 per tier). R3 promotes a and b back to tier 0 (demoting b, then c), so
    # R4 (9, [a, b, x]), which may hit (9 - 1) // 4 = 2 blocks, finds both in tier 0: 8 tokens.
    requests = [(8, ["a", "b"]), (8, ["c", "d"]), (8, ["a", "b"]), (9, ["a", "b", "x"])]
    tiers = [lru(3), lru(8)]
    res = both(requests, tiers, "exclusive", "sglang")
    assert res.hit_tokens.tolist() == [0, 0, 4, 8]
    assert res.tier_hit_tokens.T.tolist() == [[0, 0], [0, 0], [0, 4], [8, 0]]
    spec = both(requests, tiers, "exclusive", "spec")
    assert spec.hit_tokens.tolist() == [0, 0, 8, 8]  # R4: min(2 * 4, 9)
    assert spec.tier_hit_tokens.T.tolist()[2] == [4, 4]


def test_the_null_block_is_in_the_top_tier_only() -> None:
    # vLLM: tier 0 of capacity 3 holds 2 blocks (block 0 is the null block); tier 1 of
    # capacity 2 holds 2 (a host tier has no null block). Exclusive, blocks of 4:
    # R1 (8, [a, b]) fills tier 0; R2 (8, [c, d]) demotes a, b to tier 1; R3 (8, [a, b]):
    # a and b are in tier 1, and the cap lets one hit: 4 tokens from tier 1.
    requests = [(8, ["a", "b"]), (8, ["c", "d"]), (8, ["a", "b"])]
    tiers = [lru(3), lru(2)]
    res = both(requests, tiers, "exclusive", "vllm")
    assert res.final_tier_blocks == (2, 2)
    assert res.hit_tokens.tolist() == [0, 0, 4]
    assert res.tier_hit_tokens[1].tolist() == [0, 0, 4]
    # SGLang reserves nothing: tier 0 holds 3, so R2 demotes only a; R3 finds a in tier 1.
    sg = both(requests, tiers, "exclusive", "sglang")
    assert sg.final_tier_blocks == (3, 1)
    assert sg.tier_hit_tokens.T.tolist()[2] == [0, 4]
    # The capacity check is the top tier's: a request must fit the device at once.
    with pytest.raises(ParameterError, match="needs 3 blocks of 4 tokens at once, more than the 2"):
        run([(9, ["a", "b", "c"])], tiers, "exclusive", "vllm")


@pytest.mark.parametrize("mode", MODES)
def test_a_temporary_victim_leaves_the_hierarchy(mode: str) -> None:
    # vLLM "back": a freed temporary block stays in tier 0 until the policy evicts it, and
    # then it is dropped, never demoted. LRU(3) (2 usable) over LRU(8), blocks of 4:
    # R1 (6, [a, p]): a, then its partial block t1, both stay. R2 (4, [c]): c evicts a (the
    # oldest), which goes down (exclusive) or was already there (inclusive). R3 (4, [d]):
    # evicts t1, which is dropped: tier 1 holds a only (and c, d in inclusive mode).
    sem = Semantics("vllm", unhashed_free="back")
    res = both([(6, ["a", "p"]), (4, ["c"]), (4, ["d"])], [lru(3), lru(8)], mode, sem)
    assert res.final_tier_blocks == ((2, 1) if mode == "exclusive" else (2, 3))
    assert res.tier_counters[0]["evictions"] == 2  # a, then the temporary block
    if mode == "exclusive":
        assert res.tier_counters[1]["demotions_in"] == 1  # a only


def test_a_top_tier_without_removal_is_refused_where_a_block_must_be_freed() -> None:
    requests = [(6, ["a", "p"])]
    for engine in ("kernel", "reference"):
        with pytest.raises(ParameterError, match="policy='CLOCK': has no removal step"):
            run(requests, [{"policy": "CLOCK", "capacity": 4}, lru(4)], "inclusive", "sglang",
                engine)  # fmt: skip
    back = Semantics("vllm", unhashed_free="back")  # nothing is freed: it runs
    res = both(requests, [{"policy": "CLOCK", "capacity": 4}, lru(4)], "inclusive", back)
    assert res.hit_tokens.tolist() == [0]


def test_cache_output_blocks_in_a_hierarchy() -> None:
    # SGLang with outputs cached, blocks of 4: R1 (8, [a, b]) generates 6 tokens, the KV of
    # 8 + 6 - 1 = 13 tokens: 3 full blocks (a, b and an output block) and a temporary one.
    # R2 (13, [a, b, o, z]) asks for 3 full blocks: a and b hit, the output block's hash is
    # one no prompt has, so it does not: 8 tokens.
    res = both([(8, ["a", "b"]), (13, ["a", "b", "o", "z"])], [lru(8), lru(8)], "inclusive",
               Semantics("sglang", cache_output_blocks=True), outputs=[6, 0])  # fmt: skip
    assert res.hit_tokens.tolist() == [0, 8]
    assert res.counters["block_accesses"] == 4 + 4
    assert res.counters["temporary_blocks"] == 2


# --- the compiled driver is the reference, per request and per tier ------------------------


@st.composite
def tiered_points(draw: st.DrawFn) -> tuple[Any, int, list[Tier], str, Semantics]:
    """``(trace, block_size, tiers, mode, semantics)``: an engine-shaped trace or one of
    tests/strategies.py's conversations (duplicate hashes, ``hash_ids`` longer or shorter
    than the prompt), with output lengths; a top tier of any policy with steps that holds the
    largest request (and vLLM's null block), and perhaps a lower tier."""
    sem = draw(st.sampled_from(ENGINE_MODES))
    if draw(st.booleans()):
        case = draw(engine_requests(max_requests=20))
    else:
        bs = draw(st.sampled_from([1, 2, 3, 16]))
        requests = draw(conversations(max_requests=20, block_sizes=(bs,)))
        outputs = draw(st.lists(st.integers(0, 3 * bs + 1), min_size=len(requests),
                                max_size=len(requests)))  # fmt: skip
        case = EngineCase(bs, [(n, list(ids)) for n, ids in requests], outputs)
    need = max(case.max_kv_blocks() if sem.cache_output_blocks else 0, case.max_prompt_blocks())
    top_policy = draw(st.sampled_from(STEPS))
    capacity = max(need, 1) + (sem.name == "vllm") + draw(st.integers(0, 12))
    if top_policy == "S3FIFO_LCS":  # its small queue of one slot admits nothing (refused)
        capacity = max(capacity, 22)
    if top_policy == "BELADY":  # its reference scans the cache for each victim
        capacity = min(max(capacity, need + 1), 40)
    tiers = [Tier(draw(policy_params(top_policy, capacity)))]
    mode = draw(st.sampled_from(MODES))
    if draw(st.booleans()):
        lower = draw(st.sampled_from(LOWER)) if top_policy in LOWER else "LRU"
        tiers.append(Tier(draw(policy_params(lower, draw(st.integers(2, 24))))))
    return case.trace(), case.block_size, tiers, mode, sem


@settings(max_examples=250, deadline=None)
@given(point=tiered_points())
def test_compiled_is_the_reference_under_the_engines(point: Any) -> None:
    trace, bs, tiers, mode, sem = point
    try:
        ref = replay_tiers(trace, tiers, mode, bs, engine="reference", semantics=sem)
    except ParameterError as refusal:  # the same refusal, before any replay
        with pytest.raises(ParameterError) as compiled:
            replay_tiers(trace, tiers, mode, bs, engine="kernel", semantics=sem)
        assert str(compiled.value) == str(refusal)
        return
    ker = replay_tiers(trace, tiers, mode, bs, engine="kernel", semantics=sem)
    assert_same(ref, ker)
    assert ker.semantics == sem and ker.engine == "kernel"
    # The engines' rule on the reference: whole blocks, at most (L - 1) // block_size of them.
    assert not (ref.tier_hit_tokens % bs).any()
    cap = np.maximum(trace.input_lengths - 1, 0) // bs * bs
    assert (ref.hit_tokens <= cap).all()
    np.testing.assert_array_equal(ref.tier_hit_tokens.sum(axis=0), ref.hit_tokens)


ONE_TIER_MODES = (
    Semantics("vllm"),
    Semantics("vllm", unhashed_free="back"),
    Semantics("sglang", cache_output_blocks=True),
)
ONE_TIER = [
    (policy, sem)
    for sem in ONE_TIER_MODES
    for policy in STEPS
    if policy != "BELADY"  # its reference scans the cache per victim; the draws above have it
    and (get_policy(policy).steps.removable or not sem.free_front)  # type: ignore[union-attr]
]
"""Where a top tier without a removal must free a block it is refused alike (tested above)."""


@pytest.mark.parametrize(("policy", "sem"), ONE_TIER)
def test_one_tier_is_the_single_engine_cache(conversation: Any, policy: str, sem: Any) -> None:
    single = replay(conversation, policy, 2048, semantics=sem)
    for mode in MODES:
        tiered = replay_tiers(conversation, [{"policy": policy, "capacity": 2048}], mode,
                              semantics=sem)  # fmt: skip
        np.testing.assert_array_equal(tiered.hit_tokens, single.hit_tokens)
        assert tiered.final_tier_blocks == (single.final_cache_blocks,)
        assert tiered.tier_counters[0]["hits"] == single.counters["block_hits"]
        assert tiered.tier_counters[0]["evictions"] == single.counters["evictions"]
        for key in ("block_accesses", "temporary_blocks"):
            assert tiered.counters[key] == single.counters[key]
