"""A cluster behind the load-aware routers under the engines' semantics (``docs/semantics.md``,
"In a cluster"), and the load model's prefill time as the cost model's one formula: a
hand-worked route the engines' cap changes, the compiled driver held equal to the plain
reference per request for every online policy with steps, and a latent-attention profile's
times."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import make_trace
from engine_traces import ENGINE_MODES, EngineCase, engine_requests
from prefixsim import ParameterError, Semantics, load_model, make_params, replay
from prefixsim.cluster import LoadModel, make_router, replay_cluster, replay_cluster_params
from prefixsim.cost import prefill_cost
from prefixsim.hardware import HardwareProfile
from prefixsim.mode_replay import reference_only, replay_arrays
from prefixsim.models import ModelProfile
from prefixsim.policies import get_policy, policy_names
from strategies import policy_params
from test_cluster import REAL_LOAD, TOY_LOAD, assert_same, timed

ONLINE = [p for p in policy_names() if p != "BELADY" and get_policy(p).steps is not None]
DYNAMIC = ["least_loaded", "kv_aware"]


@pytest.mark.parametrize("sem", ["vllm", "sglang"])
def test_kv_aware_route_changed_by_the_cap(sem: str) -> None:
    # The toy load model of tests/test_cluster.py (block_size 1): prefill(n, h) = (n - h) +
    # 0.2 * (n(n+1) - h(h+1)) + h seconds, so prefill(1, 0) = 1.4, prefill(2, 0) = 3.2,
    # prefill(2, 1) = 2.8, prefill(2, 2) = 2.0.
    # R0 (1, [a]) at 0 s: both instances empty, a tie: instance 0 (busy until 1.4 s).
    # R1 (2, [a, b]) at 0.5 s: instance 0 costs 0.9 s of load + prefill(2, 1) = 3.7 (a hits;
    # the cap (2 - 1) // 1 = 1 allows it), instance 1 costs prefill(2, 0) = 3.2: instance 1.
    # R2 (2, [a, b]) at 100 s, both idle: under the specification instance 1 holds both
    # blocks, prefill(2, 2) = 2.0 against instance 0's prefill(2, 1) = 2.8: instance 1. Under
    # the engines at most (2 - 1) // 1 = 1 block hits anywhere: 2.8 on both, a tie: instance 0.
    trace = timed(make_trace([(1, ["a"]), (2, ["a", "b"]), (2, ["a", "b"])]), [0, 500, 100_000])
    params = make_params("LRU", 64)
    rp = make_router("kv_aware")
    for engine in ("kernel", "reference"):
        spec = replay_cluster_params(trace, params, 1, 2, rp, TOY_LOAD, engine=engine)
        assert spec.instance.tolist() == [0, 1, 1]
        assert spec.hit_tokens.tolist() == [0, 0, 2]
        got = replay_cluster_params(trace, params, 1, 2, rp, TOY_LOAD, engine=engine,
                                    semantics=sem)  # fmt: skip
        assert got.instance.tolist() == [0, 1, 0]
        assert got.hit_tokens.tolist() == [0, 0, 1]
        np.testing.assert_allclose(got.est_prefill_seconds, [1.4, 3.2, 2.8])
        assert got.semantics == Semantics(sem)


def test_least_loaded_queues_the_engines_hits() -> None:
    # least_loaded routes by load only; the hit tokens are the engine's. vLLM, blocks of 4:
    # R0 (8, [a, b]) and R1 (8, [a, b]) far apart: both to instance 0 (idle, the lowest
    # index); R1 hits 1 block (the cap (8 - 1) // 4), not 2.
    trace = timed(make_trace([(8, ["a", "b"]), (8, ["a", "b"])]), [0, 100_000])
    res = replay_cluster_params(trace, make_params("LRU", 8), 4, 2, make_router("least_loaded"),
                                TOY_LOAD, semantics="vllm")  # fmt: skip
    assert res.instance.tolist() == [0, 0]
    assert res.hit_tokens.tolist() == [0, 4]
    # a policy without removal behind a load-aware router: refused where a block is freed
    with pytest.raises(ParameterError, match="policy='CLOCK': has no removal step"):
        one = timed(make_trace([(6, ["a", "p"])]), [0])
        clock = make_params("CLOCK", 8)
        rp = make_router("least_loaded")
        replay_cluster_params(one, clock, 4, 2, rp, TOY_LOAD, semantics="sglang")


@pytest.mark.parametrize("router", DYNAMIC)
def test_radix_caching_output_blocks_behind_the_routers(router: str) -> None:
    # RADIX caching output blocks: SGLang allocates a decode step's page at the step, so the
    # request step needs each request's output length, which the cluster driver gives its
    # state as the single cache does (it ran on the reference once, and before that the driver
    # gave R2 no hit here, a Hypothesis find). Blocks of 1, capacity 4, 3 usable after vLLM's
    # null block: R0 caches a; R1 (1, [b]) decodes 2 tokens: its prefill holds b's page (1 +
    # the spare page free: 3), its one decode step (token 1, which starts a page) needs
    # max(spare, 1) = 1 page free besides the one held (2 are) and takes it: b and the output
    # page cached, the cache full, a still resident; R2 (2, [a, c]) hits a (the cap (2 - 1) //
    # 1 = 1); R3..R5 (1, [a]) hit nothing (the cap (1 - 1) // 1 = 0).
    requests = [(1, ["a"]), (1, ["b"]), (2, ["a", "c"])] + [(1, ["a"])] * 3
    trace = timed(make_trace(requests), [0] * 6, [0, 2, 2, 0, 0, 0])
    sem = Semantics("vllm", cache_output_blocks=True)
    params = make_params("RADIX", 4)
    got = replay_cluster_params(trace, params, 1, 1, make_router(router), TOY_LOAD, semantics=sem)
    assert got.engine == "kernel"
    hits, final, counters, ran = replay_arrays(trace, params, 1, sem, "kernel")
    assert ran == "kernel"
    np.testing.assert_array_equal(got.hit_tokens, hits)
    assert (int(got.final_cache_blocks[0]), got.counters) == (final, counters)
    assert got.hit_tokens.tolist() == [0, 0, 1, 0, 0, 0]


@pytest.mark.parametrize("router", DYNAMIC)
def test_what_the_single_cache_replays_on_its_reference_the_routers_do(router: str) -> None:
    # S3FIFO_LCS with a small queue of one slot (capacity 10 under SGLang: int(10 * 0.1) = 1)
    # admits nothing, which its steps refuse: the single cache replays it on the reference, and
    # so do the load-aware routers (their driver runs the steps). Every access a miss.
    trace = timed(make_trace([(2, [1, 2]), (2, [1, 2]), (1, [1])]), [0, 0, 0])
    sem = Semantics("sglang")
    params = make_params("S3FIFO_LCS", 10)
    got = replay_cluster_params(trace, params, 1, 2, make_router(router), TOY_LOAD, semantics=sem)
    assert got.engine == "reference"
    assert replay_arrays(trace, params, 1, sem, "kernel")[3] == "reference"
    assert got.hit_tokens.tolist() == [0, 0, 0]
    assert got.final_cache_blocks.tolist() == [0, 0]


@st.composite
def engine_cluster_points(draw: st.DrawFn) -> tuple[Any, int, Any, Semantics]:
    sem = draw(st.sampled_from(ENGINE_MODES))
    case: EngineCase = draw(engine_requests(max_requests=25))
    need = max(case.max_kv_blocks() if sem.cache_output_blocks else 0, case.max_prompt_blocks())
    capacity = max(need, 1) + (sem.name == "vllm") + draw(st.integers(0, 12))
    policy = draw(st.sampled_from(ONLINE))
    if policy == "S3FIFO_LCS":  # its small queue of one slot admits nothing (refused)
        capacity = max(capacity, 22)
    params = draw(policy_params(policy, capacity))
    n = len(case.requests)
    gaps = draw(st.lists(st.sampled_from([0.0, 0.5, 10.0, 700.0, -300.0]), min_size=n,
                         max_size=n))  # fmt: skip
    trace = timed(case.trace(), np.cumsum(gaps).tolist(), case.outputs)
    return trace, case.block_size, params, sem


@settings(max_examples=150, deadline=None)
@given(
    point=engine_cluster_points(),
    instances=st.integers(1, 4),
    router=st.sampled_from(DYNAMIC),
    weight=st.sampled_from([0.0, 1.0, 3.0]),
    real=st.booleans(),
)
def test_compiled_is_the_reference_under_the_engines(  # type: ignore[no-untyped-def]
    point, instances, router, weight, real
) -> None:
    trace, bs, params, sem = point
    rp = make_router(router, **({"overlap_weight": weight} if router == "kv_aware" else {}))
    load = REAL_LOAD if real else TOY_LOAD
    run = {"engine": "reference", "semantics": sem}
    try:
        ref = replay_cluster_params(trace, params, bs, instances, rp, load, **run)  # type: ignore[arg-type]
    except ParameterError as refusal:  # the same refusal, before any replay
        with pytest.raises(ParameterError) as compiled:
            replay_cluster_params(trace, params, bs, instances, rp, load, semantics=sem)
        assert str(compiled.value) == str(refusal)
        return
    fast = replay_cluster_params(trace, params, bs, instances, rp, load, semantics=sem)
    assert fast.engine == ("reference" if reference_only(params, sem) else "kernel")
    assert fast.semantics == sem
    assert_same(fast, ref)
    if instances == 1:  # one instance is one engine cache
        hits, final, counters, _ = replay_arrays(trace, params, bs, sem, "kernel")
        np.testing.assert_array_equal(fast.hit_tokens, hits)
        assert int(fast.final_cache_blocks[0]) == final
        assert fast.counters == counters


# --- the load model's prefill time is the cost model's ------------------------------------

# A latent-attention toy (block_size 1): kv_b_proj up-projects each reused token's latent of
# 2 to a key of qk_nope 2 and a value of 2 on 1 head in 1 layer: 2 * 1 * 2 * 1 * (2 + 2) = 16
# FLOPs per reused token; the attention coefficient is 1 * 1 * (3 + 2) = 5; a block is
# 1 * (2 + 1) * 2 bytes = 6 bytes, loaded at 6 bytes/s; 10 FLOP/s achieved. So
#   prefill(n, h) = (10 (n - h) + 5 (n(n+1) - h(h+1)) + (h < n) 16 h) / 10 + h seconds.
MLA_TOY = ModelProfile(
    name="mla-toy", layers=1, attention_heads=1, kv_heads=1, head_dim=3, hidden_size=1,
    total_params=5, active_params=5, attention="mla", v_head_dim=2, kv_lora_rank=2,
    qk_rope_head_dim=1, reuse_up_projection=True,
)  # fmt: skip
MLA_GPU = HardwareProfile(name="toy", peak_flops={"bf16": 10.0}, bandwidth={"hbm": 6.0}, mfu=1.0)


@pytest.mark.parametrize("router", ["round_robin", "least_loaded", "kv_aware"])
def test_a_latent_attention_ttft_is_the_cost_models(router: str) -> None:
    # One instance, requests far apart (no queueing): TTFT = prefill.
    # R0 (3, [a, b, c]): h = 0: (30 + 5 * 12) / 10 = 9.0 s.
    # R1 the same prompt, fully cached (spec): nothing computed, no up-projection: 3 blocks
    # at 1 s = 3.0 s. R2 (4, [a, b, c, d]): h = 3 < 4: (10 + 5 * (20 - 12) + 16 * 3) / 10 + 3
    # = 12.8 s (without the up-projection, 8.0 s).
    trace = timed(make_trace([(3, ["a", "b", "c"]), (3, ["a", "b", "c"]),
                             (4, ["a", "b", "c", "d"])]), [0, 100_000, 200_000])  # fmt: skip
    res = replay_cluster(trace, 1, router, "LRU", 16, 1, model=MLA_TOY, hardware=MLA_GPU)
    assert res.hit_tokens.tolist() == [0, 3, 3]
    np.testing.assert_allclose(res.est_ttft_seconds, [9.0, 3.0, 12.8], rtol=1e-15)  # type: ignore[arg-type]
    cost = prefill_cost(MLA_TOY, res.prompt_tokens, res.hit_tokens, 1, MLA_GPU, "hbm")
    np.testing.assert_array_equal(res.est_prefill_seconds, cost.est_prefill_seconds)  # type: ignore[arg-type]


@pytest.mark.parametrize("model", ["deepseek-v3", "llama-3.1-8b"])
@pytest.mark.parametrize("router", ["session", "kv_aware"])
@pytest.mark.parametrize("sem", ["spec", "vllm"])
def test_cluster_prefill_is_the_cost_model_bit_for_bit(
    conversation: Any, model: str, router: str, sem: str
) -> None:
    """Per request, the cluster's estimated prefill time is ``prefill_cost``'s, to the bit:
    with deepseek-v3's up-projection of the reused latents (which the load model lacked) and
    without (llama)."""
    res = replay_cluster(conversation, 4, router, "LRU", 2048, model=model, hardware="h100",
                         semantics=sem, router_params={"key_blocks": 2} if router == "session"
                         else None)  # fmt: skip
    cost = prefill_cost(load_model(model), res.prompt_tokens, res.hit_tokens, 512,
                        LoadModel(model, "h100").hardware, "hbm")  # type: ignore[arg-type]  # fmt: skip
    np.testing.assert_array_equal(res.est_prefill_seconds, cost.est_prefill_seconds)  # type: ignore[arg-type]


def test_one_instance_on_the_bundled_trace_under_the_engines(conversation: Any) -> None:
    for sem in (Semantics("vllm"), Semantics("sglang", cache_output_blocks=True)):
        single = replay(conversation, "S3FIFO", 4096, semantics=sem)
        for router in DYNAMIC:
            res = replay_cluster(conversation, 1, router, "S3FIFO", 4096, model="llama-3.1-8b",
                                 hardware="h100", semantics=sem)  # fmt: skip
            np.testing.assert_array_equal(res.hit_tokens, single.hit_tokens)
            assert res.counters == single.counters
            assert int(res.final_cache_blocks[0]) == single.final_cache_blocks
