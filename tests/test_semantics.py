"""The replay's semantics (prefixsim.semantics): its rules by hand, and ``spec`` as today.

Blocks of 4 tokens throughout (``BS``), so that partial blocks read easily: ``(10, [a, b, c])``
is a prompt of two full blocks and a partial one of 2 tokens. Every expected number is derived
in the comment above its case; the engine-faithful oracles (tests/test_engines.py) then hold
the engine modes equal to vLLM and SGLang on generated traces.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import make_trace
from engine_traces import engine_requests, engine_trace
from prefixsim import ParameterError, make_params, replay_params
from prefixsim.mode_replay import reference_replay
from prefixsim.policies import policy_names
from prefixsim.semantics import (
    SEMANTICS,
    SGLANG,
    SPEC,
    VLLM,
    Semantics,
    check_fits,
    hit_tokens,
    request_blocks,
)
from strategies import conversations, policy_params

BS = 4


def hits(requests: list[Any], policy: str, capacity: int, semantics: Any, **kw: Any) -> list[int]:
    trace = engine_trace(requests, kw.pop("outputs", None))
    params = make_params(policy, capacity, **kw)
    return reference_replay(trace, params, BS, semantics)[0].tolist()


# --- validation ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "key"),
    [
        ({"name": "vLLM"}, "semantics"),
        ({"name": "vllm", "unhashed_free": "middle"}, "unhashed_free"),
        ({"name": "sglang", "unhashed_free": "back"}, "unhashed_free"),
        ({"name": "spec", "unhashed_free": "back"}, "unhashed_free"),
        ({"name": "spec", "cache_output_blocks": True}, "cache_output_blocks"),
        ({"name": "vllm", "cache_output_blocks": "yes"}, "cache_output_blocks"),
    ],
)
def test_invalid_semantics_named(kwargs: dict[str, Any], key: str) -> None:
    with pytest.raises(ParameterError, match=f"invalid {key}="):
        Semantics(**kwargs)


def test_semantics_of_names_and_codes() -> None:
    assert [Semantics.of(n).code for n in SEMANTICS] == [SPEC, VLLM, SGLANG]
    assert Semantics.of(None) == Semantics() == Semantics("spec")
    s = Semantics("vllm", unhashed_free="back")
    assert Semantics.of(s) is s
    assert s.to_dict() == {
        "semantics": "vllm",
        "unhashed_free": "back",
        "cache_output_blocks": False,
    }


def test_null_block_leaves_capacity_minus_one() -> None:
    assert Semantics("vllm").usable_capacity(4096) == 4095
    assert Semantics("sglang").usable_capacity(4096) == 4096  # padding page outside the pool
    assert Semantics("spec").usable_capacity(1) == 1
    with pytest.raises(ParameterError, match="null block"):
        Semantics("vllm").usable_capacity(1)


# --- the layout of a request -----------------------------------------------------------------

# (input_length, output_length, n_hash_ids) -> (n_prompt, n_output, n_temp, max_hit), BS = 4.
LAYOUTS = [
    # spec: every hash cached, no cap, no temporary block.
    (SPEC, False, (10, 9, 3), (3, 0, 0, 3)),
    (SPEC, False, (8, 0, 7), (7, 0, 0, 7)),
    # Two full blocks and a partial one: the partial one is temporary; 9 // 4 = 2 may hit.
    (VLLM, False, (10, 9, 3), (2, 0, 1, 2)),
    # A prompt of exactly two blocks: both cached, but (8 - 1) // 4 = 1 may hit.
    (VLLM, False, (8, 0, 2), (2, 0, 0, 1)),
    (SGLANG, False, (8, 0, 2), (2, 0, 0, 1)),
    # One token: no full block; the block is temporary and nothing may hit.
    (VLLM, False, (1, 5, 1), (0, 0, 1, 0)),
    (VLLM, False, (0, 0, 0), (0, 0, 0, 0)),
    # Outputs: KV of 10 + 5 - 1 = 14 tokens, 4 blocks, 3 full: one output block (the partial
    # prompt block, filled) and one temporary block.
    (VLLM, True, (10, 5, 3), (2, 1, 1, 2)),
    # One generated token adds no KV: the prefill-only layout.
    (SGLANG, True, (10, 1, 3), (2, 0, 1, 2)),
    # 8 + 9 - 1 = 16 tokens: 4 full blocks, two of them output, nothing temporary.
    (SGLANG, True, (8, 9, 2), (2, 2, 0, 1)),
    # hash_ids shorter than the prompt: the blocks without a hash are held, never cached, and
    # so are the output blocks after them (KV of 18 tokens: 5 blocks, one cached).
    (VLLM, True, (10, 9, 1), (1, 0, 4, 1)),
    # hash_ids longer than the prompt: the extra hashes carry no token.
    (VLLM, False, (5, 0, 4), (1, 0, 1, 1)),
]


@pytest.mark.parametrize(("code", "out", "request_", "layout"), LAYOUTS)
def test_request_blocks(code: int, out: bool, request_: tuple[int, int, int], layout: Any) -> None:
    assert request_blocks(code, *request_, BS, out) == layout


@given(
    length=st.integers(0, 100),
    out=st.integers(0, 30),
    n=st.integers(0, 30),
    bs=st.integers(1, 9),
    cache_out=st.booleans(),
)
def test_request_blocks_add_up(length: int, out: int, n: int, bs: int, cache_out: bool) -> None:
    """Under the engines a request holds ceil(kv / bs) blocks, caches only full ones, and may
    hit no block that would leave no prompt token to compute."""
    kv = length + out - 1 if cache_out and out > 1 else length
    n_prompt, n_output, n_temp, max_hit = request_blocks(VLLM, length, out, n, bs, cache_out)
    assert n_prompt + n_output + n_temp == -(-kv // bs)
    assert n_prompt + n_output <= kv // bs
    assert min(n_prompt, n_output, n_temp, max_hit) >= 0
    assert max_hit * bs <= max(length - 1, 0)
    assert max_hit <= n_prompt <= n


@given(
    length=st.integers(0, 200),
    out=st.integers(0, 40),
    n=st.integers(0, 40),
    bs=st.integers(1, 17),
    cache_out=st.booleans(),
)
def test_request_blocks_by_their_definitions(
    length: int, out: int, n: int, bs: int, cache_out: bool
) -> None:
    """``request_blocks`` (one division per request) against its definitions written out:
    the first ``min(L // b, n)`` hashes cached, ``ceil(kv / b)`` blocks held, the full blocks
    past the prompt's cached as outputs when the prompt is fully hashed, at most ``(L - 1) //
    b`` blocks hit."""
    kv = length + out - 1 if cache_out and out > 1 else length
    n_prompt = min(length // bs, n)
    n_output = kv // bs - length // bs if n_prompt == length // bs else 0
    n_temp = -(-kv // bs) - n_prompt - n_output
    max_hit = min(n_prompt, max(length - 1, 0) // bs)
    want = (n_prompt, n_output, n_temp, max_hit)
    assert request_blocks(VLLM, length, out, n, bs, cache_out) == want
    assert request_blocks(SPEC, length, out, n, bs, cache_out) == (n, 0, 0, n)


_compiled: dict[str, Any] = {}


@settings(max_examples=50, deadline=None)
@given(
    code=st.sampled_from([SPEC, VLLM, SGLANG]),
    length=st.integers(0, 100),
    out=st.integers(0, 30),
    n=st.integers(0, 30),
    bs=st.integers(1, 9),
    cache_out=st.booleans(),
)
def test_rules_compile_with_numba(
    code: int, length: int, out: int, n: int, bs: int, cache_out: bool
) -> None:
    """A compiled driver calls the same rules: numba compiles them as they are."""
    from numba import njit

    if not _compiled:
        _compiled.update(layout=njit(request_blocks), hits=njit(hit_tokens))
    layout = request_blocks(code, length, out, n, bs, cache_out)
    assert _compiled["layout"](code, length, out, n, bs, cache_out) == layout
    k = min(n, 7)
    want = hit_tokens(code, k, layout[3], length, bs)
    assert _compiled["hits"](code, k, layout[3], length, bs) == want


def test_hit_tokens_rule() -> None:
    # spec clamps k blocks to the prompt; the engines count whole blocks up to the cap.
    assert hit_tokens(SPEC, 3, 3, 10, BS) == 10
    assert hit_tokens(VLLM, 3, 2, 10, BS) == 8
    assert hit_tokens(SGLANG, 1, 2, 10, BS) == 4


# --- hand-worked replays ---------------------------------------------------------------------

# A partial block is never hit. LRU_TAIL_FIRST, capacity 8. R1 (10, [a, b, c]): cold. R2 the
# same prompt: spec finds a, b, c resident and clamps 12 to 10 tokens; vLLM never cached the
# partial block c (a temporary block, freed), so 2 full blocks hit = 8 tokens.
PARTIAL = [(10, ["a", "b", "c"]), (10, ["a", "b", "c"])]


def test_partial_block_never_hit() -> None:
    assert hits(PARTIAL, "LRU_TAIL_FIRST", 8, "spec") == [0, 10]
    assert hits(PARTIAL, "LRU_TAIL_FIRST", 8, "vllm") == [0, 8]
    assert hits(PARTIAL, "LRU_TAIL_FIRST", 8, "sglang") == [0, 8]


# The L - 1 cap. R1 (8, [a, b]) caches both full blocks; R2, the same prompt, is fully cached,
# but an engine must compute its last token: (8 - 1) // 4 = 1 block = 4 tokens (spec: 8).
CAPPED = [(8, ["a", "b"]), (8, ["a", "b"])]


@pytest.mark.parametrize("policy", ["LRU_TAIL_FIRST", "LRU", "FIFO", "RADIX"])
def test_fully_cached_aligned_prompt_computes_its_last_block(policy: str) -> None:
    assert hits(CAPPED, policy, 8, "spec") == [0, 8]
    assert hits(CAPPED, policy, 8, "vllm") == [0, 4]
    assert hits(CAPPED, policy, 8, "sglang") == [0, 4]


# The null block. LRU_TAIL_FIRST, capacity 3 under vLLM: 2 usable blocks. R1 (8, [a, b]) leaves
# the LRU order b, a (tail first). R2 (5, [c, x]): c and its partial block need 2 blocks, both
# of a and b are evicted. R3 (5, [a, y]): a misses: 0. With capacity 4 (3 usable) R2 evicts
# only b (c fills the free block, the partial one evicts b), so R3 hits a: 4 tokens.
NULL = [(8, ["a", "b"]), (5, ["c", "x"]), (5, ["a", "y"])]


def test_null_block_costs_one_block() -> None:
    assert hits(NULL, "LRU_TAIL_FIRST", 3, "vllm") == [0, 0, 0]
    assert hits(NULL, "LRU_TAIL_FIRST", 4, "vllm") == [0, 0, 4]
    assert hits(NULL, "LRU_TAIL_FIRST", 3, "sglang") == [0, 0, 4]  # no null block


# Where a freed block without a hash goes. Capacity 4 (3 usable), LRU_TAIL_FIRST, LRU lists
# least recent first, T1.. the partial blocks. R1 (5, [a, p]), R2 (5, [c, s]), R3 (4, [b]),
# R4 (5, [a, r]).
# front (today): R1 leaves [T1, a], T1 freed: [a]. R2 places c and T2 in free slots: [a, T2, c],
# T2 freed: [a, c]. R3's b takes the last slot: [a, c, b]. R4 hits a: 4 tokens.
# back (releases before vLLM PR #42656): T1 stays: [T1, a]. R2's c fills the last free slot, T2
# evicts T1: [a, T2, c]. R3's b evicts a: [T2, c, b]. R4 misses a: 0.
FREE_ORDER = [(5, ["a", "p"]), (5, ["c", "s"]), (4, ["b"]), (5, ["a", "r"])]


def test_unhashed_block_free_queue_position() -> None:
    assert hits(FREE_ORDER, "LRU_TAIL_FIRST", 4, Semantics("vllm")) == [0, 0, 0, 4]
    back = Semantics("vllm", unhashed_free="back")
    assert hits(FREE_ORDER, "LRU_TAIL_FIRST", 4, back) == [0, 0, 0, 0]


# Output blocks take capacity and no prompt hits them. LRU_TAIL_FIRST, capacity 4 (3 usable).
# R1 (4, [a]) generates 9 tokens: the KV of 12 tokens is 3 full blocks, a and two output
# blocks o1, o2 (fresh hashes): [o2, o1, a]. R2 (5, [b, q]) generates none: b and its partial
# block T2 evict o2 and o1: [a, T2, b], T2 freed: [a, b]. R3 (5, [a, t]) hits a: 4 tokens; its
# partial block takes the free slot: [b, a] at the end (2 blocks; 2 temporary blocks in all).
# With capacity 3 (2 usable) R1's 3 blocks cannot be held at once: refused (vLLM could never
# schedule it); without cache_output_blocks R1 holds a only, R2's b and T2 evict it: R3 misses.
OUTPUTS = [(4, ["a"]), (5, ["b", "q"]), (5, ["a", "t"])]


def test_cache_output_blocks() -> None:
    on = Semantics("vllm", cache_output_blocks=True)
    assert hits(OUTPUTS, "LRU_TAIL_FIRST", 4, on, outputs=[9, 0, 0]) == [0, 0, 4]
    trace = engine_trace(OUTPUTS, [9, 0, 0])
    _, final, counters = reference_replay(trace, make_params("LRU_TAIL_FIRST", 4), BS, on)
    assert final == 2 and counters["temporary_blocks"] == 2
    with pytest.raises(ParameterError, match=r"line 1 .* 3 blocks"):
        hits(OUTPUTS, "LRU_TAIL_FIRST", 3, on, outputs=[9, 0, 0])
    assert hits(OUTPUTS, "LRU_TAIL_FIRST", 3, "vllm", outputs=[9, 0, 0]) == [0, 0, 0]


def test_request_larger_than_the_usable_cache_refused() -> None:
    trace = engine_trace([(12, ["a", "b", "c"])])
    check_fits(Semantics("spec"), trace, 1, BS)  # the specification replays it anyway
    check_fits(Semantics("sglang"), trace, 3, BS)
    with pytest.raises(ParameterError, match=r"capacity=3.*needs 3 blocks.*2 usable"):
        check_fits(Semantics("vllm"), trace, 3, BS)
    # the compiled replay refuses it too, by the layout it keeps for the trace: first and again
    for _ in range(2):
        with pytest.raises(ParameterError, match=r"capacity=3.*line 1.*needs 3 blocks.*2 usable"):
            replay_params(trace, make_params("LRU", 3), BS, semantics="vllm")
    assert replay_params(trace, make_params("LRU", 3), BS, semantics="sglang").engine == "kernel"


def test_policy_without_removal_refused_when_a_block_must_be_freed() -> None:
    with pytest.raises(ParameterError, match=r"CLOCK.*no removal"):
        hits(PARTIAL, "CLOCK", 8, "sglang")
    # vLLM's older free order keeps the partial block: no removal needed.
    assert hits(PARTIAL, "CLOCK", 8, Semantics("vllm", unhashed_free="back")) == [0, 8]


# --- spec is today's replay, bit for bit -----------------------------------------------------


@settings(max_examples=150, deadline=None)
@given(requests=conversations(), params=policy_params(), data=st.data())
def test_spec_is_the_replay_reference(requests, params, data) -> None:  # type: ignore[no-untyped-def]
    trace = make_trace(requests)
    bs = data.draw(st.sampled_from([1, 2, 16, 512]))
    want = replay_params(trace, params, bs, engine="reference")
    got, final, counters = reference_replay(trace, params, bs, "spec")
    np.testing.assert_array_equal(got, want.hit_tokens)
    assert final == want.final_cache_blocks
    assert {"block_accesses": trace.n_accesses, **counters} == want.counters


ENGINE_TRACE_POLICIES = [p for p in policy_names() if p != "BELADY"]


@settings(max_examples=60, deadline=None)
@given(case=engine_requests(), policy=st.sampled_from(ENGINE_TRACE_POLICIES), cap=st.data())
def test_spec_is_the_replay_reference_for_every_policy(case, policy, cap) -> None:  # type: ignore[no-untyped-def]
    """Every registered policy (RADIX needs prefix-identifying hashes: engine traces)."""
    trace = case.trace()
    capacity = cap.draw(st.integers(max(case.max_blocks, 2), case.max_blocks + 12))
    try:
        params = make_params(policy, capacity)
    except ParameterError:
        return  # e.g. S3FIFO_LCS below 20 blocks
    want = replay_params(trace, params, case.block_size, engine="reference")
    got, final, _ = reference_replay(trace, params, case.block_size)
    np.testing.assert_array_equal(got, want.hit_tokens)
    assert final == want.final_cache_blocks
