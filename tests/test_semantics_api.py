"""``semantics=`` at the API: replay, replay_params, replay_cluster and replay_tiers.

The engine modes through the public entry points equal the engine-faithful oracles per request
(the same generated traces as tests/test_engines.py); ``spec`` is the default and the same
kernel's numbers bit for bit; the hierarchy and every router take it too.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import make_trace
from engine_traces import (
    EngineCase,
    engine_trace,
    mode_point,
    vllm_oracle,
    vllm_point,
)
from prefixsim import ParameterError, Semantics, make_params, replay, replay_params
from prefixsim.cluster import replay_cluster
from prefixsim.mode_replay import reference_only, reference_replay, replay_arrays
from prefixsim.policies import get_policy, policy_names
from prefixsim.tiers import replay_tiers
from strategies import conversations, policy_params

BS = 4


@settings(max_examples=100, deadline=None)
@given(point=vllm_point())
def test_replay_vllm_is_vllm(point: tuple[EngineCase, int, Semantics]) -> None:
    case, capacity, sem = point
    oracle = vllm_oracle(case, capacity, sem)
    result = replay(
        case.trace(), "LRU_TAIL_FIRST", capacity, case.block_size, semantics=sem
    )  # fmt: skip
    # Up to the first block vLLM holds twice (the documented limit, tests/test_engines.py).
    first = oracle.counters["first_duplicate_request"]
    upto = len(case.requests) if first < 0 else first + 1
    assert result.hit_tokens.tolist()[:upto] == oracle.hit_tokens[:upto]
    assert result.semantics == sem
    assert result.engine == "kernel"  # the compiled driver


# The public replay under sglang against SGLang's radix cache, request by request, is
# tests/test_radix.py::test_compiled_under_sglang_is_sglang (the same call, with the final size).


STEPS = {p: steps for p in policy_names() if (steps := get_policy(p).steps) is not None}
REMOVABLE = [p for p, steps in STEPS.items() if steps.removable]
"""The policies with steps and a removal: every engine mode runs them compiled."""
UNREMOVABLE = [p for p, steps in STEPS.items() if not steps.removable]
"""Steps without a removal: compiled where no temporary block must leave the cache."""


def check_compiled_mode(point: Any) -> None:
    """Per request, the compiled driver equals the semantics' plain reference (hit tokens,
    final blocks, counters); a refusal of the reference is the compiled path's too."""
    trace, bs, params, sem = point
    try:
        want = reference_replay(trace, params, bs, sem)
    except ParameterError as refusal:
        with pytest.raises(ParameterError) as compiled:
            replay_arrays(trace, params, bs, sem, "kernel")
        assert str(compiled.value) == str(refusal)
        return
    hits, final, counters, ran = replay_arrays(trace, params, bs, sem, "kernel")
    # S3FIFO_LCS's one-slot small queue admits nothing, which its steps refuse: the reference
    assert ran == ("reference" if reference_only(params, sem) else "kernel")
    assert hits.tolist() == want[0].tolist()
    assert final == want[1]
    assert counters == want[2]


@settings(max_examples=300, deadline=None)
@given(point=mode_point(REMOVABLE))
def test_compiled_modes_are_the_reference(point: Any) -> None:
    """Every policy with a removal under vLLM (front, back), SGLang, outputs cached or not."""
    check_compiled_mode(point)


@settings(max_examples=60, deadline=None)
@given(point=mode_point(UNREMOVABLE))
def test_compiled_modes_without_a_removal(point: Any) -> None:
    """ARC, CLOCK, BELADY: compiled under vLLM "back" (and wherever no request has a
    temporary block), refused as the reference refuses otherwise."""
    check_compiled_mode(point)


def test_names_and_semantics_objects_alike() -> None:
    # The hand-worked free-queue case of tests/test_semantics.py through the public API.
    free_order = [(5, ["a", "p"]), (5, ["c", "s"]), (4, ["b"]), (5, ["a", "r"])]
    trace = engine_trace(free_order)
    front = replay(trace, "LRU_TAIL_FIRST", 4, BS, semantics="vllm")
    back = replay(trace, "LRU_TAIL_FIRST", 4, BS, semantics=Semantics("vllm", unhashed_free="back"))
    assert front.hit_tokens.tolist() == [0, 0, 0, 4]
    assert back.hit_tokens.tolist() == [0, 0, 0, 0]
    # What ran is what the result says: the compiled driver, or the reference when asked.
    assert front.engine == "kernel"
    report = back.to_report(per_request=False)
    assert (report["semantics"], report["unhashed_free"], report["engine"]) == (
        "vllm",
        "back",
        "kernel",
    )
    assert report["cache_output_blocks"] is False
    asked = replay(trace, "LRU_TAIL_FIRST", 4, BS, semantics="vllm", engine="reference")
    assert asked.engine == "reference" and asked.hit_tokens.tolist() == [0, 0, 0, 4]


def test_engine_mode_counts_the_accesses_it_makes() -> None:
    # R1 (8, [a, b]) generates 9 tokens: KV of 16 tokens, 4 full blocks, two of them output
    # blocks; R2 (5, [a, q]): a and its partial block. 4 + 2 accesses, one temporary block.
    trace = engine_trace([(8, ["a", "b"]), (5, ["a", "q"])], [9, 0])
    sem = Semantics("sglang", cache_output_blocks=True)
    result = replay(trace, "LRU", 8, BS, semantics=sem)
    assert result.counters["block_accesses"] == 6
    assert result.counters["temporary_blocks"] == 1
    assert result.hit_tokens.tolist() == [0, 4]


@settings(max_examples=60, deadline=None)
@given(requests=conversations(), params=policy_params(), bs=st.sampled_from([1, 2, 16, 512]))
def test_spec_is_todays_kernel_bit_for_bit(requests: Any, params: Any, bs: int) -> None:
    trace = make_trace(requests)
    today = replay_params(trace, params, bs)
    for given_ in ("spec", Semantics(), None):
        got = replay_params(trace, params, bs, semantics=given_)
        np.testing.assert_array_equal(got.hit_tokens, today.hit_tokens)
        assert got.hit_tokens.dtype == today.hit_tokens.dtype
        assert got.final_cache_blocks == today.final_cache_blocks
        assert got.counters == today.counters
        assert got.engine == "kernel"
        assert got.semantics == Semantics()


@pytest.mark.parametrize("bad", ["vLLM", "engine", ""])
def test_unknown_semantics_named(bad: str) -> None:
    trace = engine_trace([(8, ["a", "b"])])
    with pytest.raises(ParameterError, match=f"invalid semantics={bad!r}: expected one of spec"):
        replay(trace, "LRU", 8, BS, semantics=bad)


def test_cluster_instances_are_engine_caches() -> None:
    """round_robin routes as under spec; each instance is one vLLM cache: instance i's
    requests replayed alone give its hit tokens."""
    case = [(9, ["a", "b", "c"]), (5, ["x", "p"]), (9, ["a", "b", "d"]), (8, ["x", "y"])]
    case += [(9, ["a", "b", "e"]), (8, ["x", "y"])]
    trace = engine_trace(case)
    got = replay_cluster(trace, 2, "round_robin", "LRU_TAIL_FIRST", 4, BS, semantics="vllm")
    assert got.instance.tolist() == [0, 1, 0, 1, 0, 1]
    params = make_params("LRU_TAIL_FIRST", 4)
    for i in range(2):
        alone = engine_trace(case[i::2])
        want, _, _ = reference_replay(alone, params, BS, "vllm")
        assert got.hit_tokens[i::2].tolist() == want.tolist()
    # by hand: instance 0 hits a, b (8 tokens, the partial blocks never); instance 1 finds x,
    # then the fully cached (8, [x, y]) computes its last block: 1 block.
    assert got.hit_tokens.tolist() == [0, 0, 8, 4, 8, 4]
    assert got.engine == "kernel" and got.semantics == Semantics("vllm")


@pytest.mark.parametrize("router", ["least_loaded", "kv_aware"])
def test_cluster_load_aware_routers_take_the_engines(router: str) -> None:
    # (8, [a, b]) twice, far apart: the second hits 1 block (the cap), not 2; the result
    # says which semantics ran (tests/test_cluster_semantics.py has the per-request checks).
    trace = engine_trace([(8, ["a", "b"]), (8, ["a", "b"])])
    kw = {"model": "llama-3.1-8b", "hardware": "h100"}
    got = replay_cluster(trace, 2, router, "LRU", 8, BS, semantics="vllm", **kw)  # type: ignore[arg-type]
    assert got.hit_tokens.tolist() == [0, 4]
    assert got.semantics == Semantics("vllm") and got.engine == "kernel"


def test_tiers_take_engine_semantics() -> None:
    # (8, [a, b]) twice through LRU(4) over LRU(8): the second hits 1 block under SGLang's
    # cap, 2 under the specification; the report names the semantics.
    trace = engine_trace([(8, ["a", "b"]), (8, ["a", "b"])])
    tiers = [{"policy": "LRU", "capacity": 4}, {"policy": "LRU", "capacity": 8}]
    assert replay_tiers(trace, tiers, block_size=BS).hit_tokens.tolist() == [0, 8]
    got = replay_tiers(trace, tiers, block_size=BS, semantics="sglang")
    assert got.hit_tokens.tolist() == [0, 4]
    report = got.to_report(per_request=False)
    assert (report["semantics"], report["unhashed_free"]) == ("sglang", "front")
