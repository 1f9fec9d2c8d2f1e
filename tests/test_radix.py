"""RADIX compiled: its request step (``prefixsim.policies.radix``) against its reference.

RADIX is request-level: the drivers of one cache per request (the single cache, the cluster)
call its ``request`` step in place of their per-block request. Hypothesis holds the compiled
replay equal to ``RadixReference`` per request (hit tokens, counters, final size) under the
specification's rule and the engines' (``semantics="sglang"``, ``"vllm"``), with every option
of the policy, and behind the cluster's routers; and to SGLang's oracle. Hand-worked cases pin
what the generated traces reach rarely: a locked leaf skipped and queued again, the heap's
compaction, a request larger than the cache; and a decode step's page. The hand-worked SGLang
cases of ``tests/test_engines.py`` run compiled there too.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import bundled_head, make_trace
from engine_traces import ENGINE_MODES, EngineCase, engine_requests, sglang_point
from prefixsim import Trace, make_params, replay, replay_params
from prefixsim.cluster import LoadModel, make_router, replay_cluster_params
from prefixsim.mode_replay import reference_only, reference_replay, replay_arrays
from prefixsim.oracles import sglang_radix
from prefixsim.policies import PolicyParams
from prefixsim.semantics import Semantics
from strategies import BLOCK_SIZES, conversations
from sweep import ExecutorConfig, SweepConfig, run_sweep
from test_equivalence import assert_engines_agree

LOAD = LoadModel("llama-3.1-8b", "h100")  # type: ignore[arg-type]


@st.composite
def radix_params(draw: st.DrawFn, capacity: int | None = None) -> PolicyParams:
    """RADIX with every option drawn, small enough that nodes split and whole nodes go."""
    if capacity is None:
        capacity = draw(st.one_of(st.integers(1, 6), st.integers(7, 40)))
    return make_params(
        "RADIX",
        capacity,
        split_refresh=draw(st.booleans()),
        whole_node=draw(st.booleans()),
        spare_pages=draw(st.integers(0, 2)),
        evict_shortfall=draw(st.booleans()),
    )


@settings(max_examples=400, deadline=None)
@given(requests=conversations(), params=radix_params(), block_size=st.sampled_from(BLOCK_SIZES))
def test_compiled_is_the_reference(requests, params, block_size) -> None:  # type: ignore[no-untyped-def]
    """The specification's rule on any trace: duplicate hashes, hashes that do not identify
    their prefix (a resident block after a miss, on another branch), requests larger than the
    cache."""
    assert_engines_agree(make_trace(requests), params, block_size)


@settings(max_examples=200, deadline=None)
@given(case=engine_requests(), data=st.data())
def test_compiled_is_the_reference_on_engine_traces(case: EngineCase, data: Any) -> None:
    capacity = data.draw(st.integers(max(case.max_blocks, 1), case.max_blocks + 8))
    assert_engines_agree(case.trace(), data.draw(radix_params(capacity)), case.block_size)


@st.composite
def radix_mode_point(draw: st.DrawFn) -> tuple[Trace, int, PolicyParams, Semantics]:
    """An engine trace or a conversation, with output lengths; RADIX holding its largest
    request (and vLLM's null block); an engine mode of every option."""
    sem = draw(st.sampled_from(ENGINE_MODES))
    if draw(st.booleans()):
        case = draw(engine_requests(max_requests=25))
    else:
        bs = draw(st.sampled_from([1, 2, 3, 16]))
        requests = draw(conversations(max_requests=25, block_sizes=(bs,)))
        outputs = draw(st.lists(st.integers(0, 3 * bs + 1), min_size=len(requests),
                                max_size=len(requests)))  # fmt: skip
        case = EngineCase(bs, [(n, list(ids)) for n, ids in requests], outputs)
    need = max(case.max_kv_blocks() if sem.cache_output_blocks else 0, case.max_prompt_blocks())
    capacity = max(need, 1) + (sem.name == "vllm") + draw(st.integers(0, 10))
    return case.trace(), case.block_size, draw(radix_params(capacity)), sem


@settings(max_examples=300, deadline=None)
@given(point=radix_mode_point())
def test_compiled_modes_are_the_reference(point: Any) -> None:
    """Under vLLM (front and back: RADIX frees its temporary pages itself either way) and SGLang,
    outputs cached or not (its decode steps then allocate page by page, from each request's
    output length), the compiled request step equals the reference per request."""
    trace, bs, params, sem = point
    want = reference_replay(trace, params, bs, sem)
    hits, final, counters, ran = replay_arrays(trace, params, bs, sem, "kernel")
    assert ran == "kernel"
    assert not reference_only(params, sem)
    assert hits.tolist() == want[0].tolist()
    assert final == want[1]
    assert counters == want[2]


@settings(max_examples=200, deadline=None)
@given(point=sglang_point())
def test_compiled_under_sglang_is_sglang(point: tuple[EngineCase, int, bool, bool]) -> None:
    """The compiled replay against SGLang's radix cache (its decode steps too when outputs are
    cached), request by request, and its evictions and free pages."""
    case, capacity, outputs, shortfall = point
    oracle = sglang_radix.replay(
        case.requests, capacity, case.block_size, evict_shortfall=shortfall,
        output_lengths=case.outputs if outputs else None,
    )  # fmt: skip
    sem = Semantics("sglang", cache_output_blocks=outputs)
    res = replay(case.trace(), "RADIX", capacity, case.block_size, semantics=sem,
                 evict_shortfall=shortfall)  # fmt: skip
    assert res.engine == "kernel"
    assert res.hit_tokens.tolist() == oracle.hit_tokens
    assert res.final_cache_blocks == capacity - oracle.counters["free_pages"]
    assert res.counters["evictions"] == oracle.counters["evictions"]


@settings(max_examples=100, deadline=None)
@given(
    requests=conversations(max_requests=30, block_sizes=(1, 16)),
    params=radix_params(),
    router=st.sampled_from(["kv_aware", "least_loaded", "round_robin", "session"]),
    instances=st.integers(1, 4),
    bs=st.sampled_from([1, 16]),
)
def test_every_router_compiled_is_the_reference(requests, params, router, instances, bs) -> None:  # type: ignore[no-untyped-def]
    """Behind the load-aware routers all instances are one state (``q`` an instance): the
    cluster driver over RADIX's request step; behind the static ones, the single cache per
    sub-trace. Final sizes count the accesses the request step left unresident."""
    trace = make_trace(requests)
    rp = make_router(router)
    fast = replay_cluster_params(trace, params, bs, instances, rp, LOAD, engine="kernel")
    ref = replay_cluster_params(trace, params, bs, instances, rp, LOAD, engine="reference")
    assert fast.engine == "kernel"
    np.testing.assert_array_equal(fast.instance, ref.instance)
    np.testing.assert_array_equal(fast.hit_tokens, ref.hit_tokens)
    np.testing.assert_array_equal(fast.final_cache_blocks, ref.final_cache_blocks)
    assert fast.instance_counters == ref.instance_counters


@settings(max_examples=60, deadline=None)
@given(
    point=radix_mode_point(),
    router=st.sampled_from(["kv_aware", "least_loaded", "round_robin"]),
    instances=st.integers(1, 3),
)
def test_every_router_compiled_is_the_reference_under_the_engines(  # type: ignore[no-untyped-def]
    point, router, instances
) -> None:
    """The engine modes behind the routers, outputs cached or not: the cluster driver gives
    RADIX's state the output lengths as the single cache does (the static routers replay each
    sub-trace as one engine cache)."""
    trace, bs, params, sem = point
    rp = make_router(router)
    fast = replay_cluster_params(trace, params, bs, instances, rp, LOAD, semantics=sem)
    ref = replay_cluster_params(trace, params, bs, instances, rp, LOAD, engine="reference",
                                semantics=sem)  # fmt: skip
    assert fast.engine == "kernel"
    np.testing.assert_array_equal(fast.instance, ref.instance)
    np.testing.assert_array_equal(fast.hit_tokens, ref.hit_tokens)
    np.testing.assert_array_equal(fast.final_cache_blocks, ref.final_cache_blocks)
    assert fast.instance_counters == ref.instance_counters


# --- hand-worked --------------------------------------------------------------------------------


def one(*blocks: str) -> tuple[int, list[str]]:
    return (len(blocks), list(blocks))  # block_size 1: every block full


# A locked leaf is skipped, then evictable again. Capacity 2, spare page 1, block_size 1 (spec).
# R1 [a, b]: the leaf [a, b]. R2 [a, a] hits both (2 tokens): its match walks [a, b] twice and
# the second walk ends inside it, so it splits: [a] (new) over [b]. Both walked nodes are
# locked while the request evicts for its spare page (0 free): the only leaf, [b], is locked,
# nothing goes; the insertion then walks [a] only (b is not in the request). R3 [c] needs a page
# and the spare one: [b] goes, then [a], a leaf now: c is cached. R4 [c] hits c. Had the locked
# leaf not been queued again after R2's eviction (nothing else refreshes it), R3 would find no
# leaf, cache nothing, and R4 miss.
LOCKED = [(2, ["a", "b"]), (2, ["a", "a"]), one("c"), one("c")]


@pytest.mark.parametrize("engine", ["kernel", "reference"])
def test_a_locked_leaf_is_skipped_then_evicted(engine: str) -> None:
    res = replay_params(make_trace(LOCKED), make_params("RADIX", 2), 1, engine=engine)  # type: ignore[arg-type]
    assert res.hit_tokens.tolist() == [0, 2, 0, 1]
    assert res.counters["splits"] == 1 and res.counters["evicted_nodes"] == 2
    assert res.counters["evictions"] == 2 and res.final_cache_blocks == 1


# A request larger than the cache (spec) caches the leading blocks that fit. Capacity 3.
# R1 [a, b, c, d, e]: 5 pages + 1 spare, 3 free: [a, b, c] cached, d and e not (final 3).
# R2 [a, b, c, d] hits a, b, c (3 tokens); it needs d and the spare page, the only leaf is
# locked: nothing cached. R3 [x] evicts [a, b, c] whole (3 blocks, one node): final 1.
BIG = [one("a", "b", "c", "d", "e"), one("a", "b", "c", "d"), one("x")]


@pytest.mark.parametrize("engine", ["kernel", "reference"])
def test_a_request_larger_than_the_cache_caches_what_fits(engine: str) -> None:
    res = replay_params(make_trace(BIG), make_params("RADIX", 3), 1, engine=engine)  # type: ignore[arg-type]
    assert res.hit_tokens.tolist() == [0, 3, 0]
    assert res.counters["evictions"] == 3 and res.counters["evicted_nodes"] == 1
    assert res.final_cache_blocks == 1


# A decode step's page (cache_output_blocks, docs/semantics.md: SGLang checks for its spare page
# at every decode step and takes a page at the step whose token starts one). Capacity 3 pages of
# 4 tokens, SGLang. R1 (4, [a]) decodes nothing: [a]. R2 (4, [x]) generates `out` tokens: its
# prefill holds x's page (1 + the spare page needed, 2 free: no eviction), then its decode steps
# compute tokens 4 .. 4 + out - 2; token 4 starts a page. R3 (8, [a, w]).
# * out = 2: one step, token 4: it needs max(spare, 1) = 1 page free besides x's (1 is) and
#   takes it: the cache is full, a still resident. KV of 4 + 2 - 1 = 5 tokens: the page of
#   token 4 is partial, freed; [x] cached. R3 hits a (the cap (8 - 1) // 4 = 1 block: 4 tokens)
#   and needs w's page and the spare one, 1 free: [x] goes. Had the prefill taken both pages
#   and the spare one on top (3 with 2 free), [a] would have gone at R2 and R3 missed.
# * out = 5: tokens 4 .. 7. Token 4 takes the page (the cache full); token 5 asks for the spare
#   page again, 0 free: [a], the only unlocked leaf, goes at that step (tokens 6, 7: 1 free, no
#   eviction). The page of tokens 4 .. 7 is full: cached with x, one node [x, o]. R3 misses a,
#   needs 2 pages and the spare one, 1 free: [x, o] goes whole (2 pages, one node).
# * out = 5 without the spare page (spare_pages=0): the steps after token 4 ask for none, a
#   stays; R3 hits a (locked), needs w's page, 0 free: [x, o] goes whole.
DECODE = [(4, ["a"]), (4, ["x"]), (8, ["a", "w"])]


@pytest.mark.parametrize("engine", ["kernel", "reference"])
@pytest.mark.parametrize(
    ("out", "spare", "hits", "evictions", "nodes"),
    [(2, 1, [0, 0, 4], 1, 1), (5, 1, [0, 0, 0], 3, 2), (5, 0, [0, 0, 4], 2, 1)],
)
def test_a_decode_step_takes_its_page_at_the_step(  # type: ignore[no-untyped-def]
    engine, out, spare, hits, evictions, nodes
) -> None:
    trace = make_trace(DECODE, outputs=[0, out, 0])
    sem = Semantics("sglang", cache_output_blocks=True)
    res = replay_params(trace, make_params("RADIX", 3, spare_pages=spare), 4, engine=engine,
                        semantics=sem)  # fmt: skip
    assert res.engine == engine
    assert res.hit_tokens.tolist() == hits
    assert (res.counters["evictions"], res.counters["evicted_nodes"]) == (evictions, nodes)
    assert res.final_cache_blocks == 2
    if spare == 1:  # SGLang's own
        oracle = sglang_radix.replay(DECODE, 3, 4, output_lengths=[0, out, 0])
        assert oracle.hit_tokens == hits and oracle.counters["evictions"] == evictions


def test_heap_compaction_and_growth() -> None:
    """Many leaves refreshed over and over leave dead heap entries (each refresh queues the
    leaf's new time): the heap (16 slots to start) fills, is compacted and grows, and the
    eviction order stays the reference's. 40 one-block sessions, each hit 5 times in a shuffled
    order, then new blocks that evict them."""
    rng = np.random.default_rng(7)
    order = rng.permutation(np.repeat(np.arange(40), 5))
    requests = [one(f"s{i}") for i in range(40)] + [one(f"s{i}") for i in order]
    requests += [one(f"n{i}") for i in range(60)] + [one(f"s{i}") for i in range(40)]
    assert_engines_agree(make_trace(requests), make_params("RADIX", 48), 1)
    assert_engines_agree(make_trace(requests), make_params("RADIX", 48, whole_node=False), 1)


@pytest.mark.slow
@pytest.mark.parametrize("capacity", [1024, 4096])
@pytest.mark.parametrize("semantics", ["spec", "sglang"])
def test_compiled_is_the_reference_on_the_bundled_trace(
    conversation: Trace, capacity: int, semantics: str
) -> None:
    params = make_params("RADIX", capacity)
    want = reference_replay(conversation, params, 512, semantics)
    hits, final, counters, _ = (
        replay_arrays(conversation, params, 512, Semantics(semantics), "kernel")
        if semantics != "spec"
        else (*_spec(conversation, params), "kernel")
    )
    np.testing.assert_array_equal(hits, want[0])
    assert (final, counters) == (want[1], want[2])


def _spec(trace: Trace, params: PolicyParams) -> tuple[np.ndarray, int, dict[str, int]]:
    res = replay_params(trace, params, 512)
    counters = {k: v for k, v in res.counters.items() if k != "block_accesses"}
    return res.hit_tokens, res.final_cache_blocks, counters


def test_the_sweep_runs_it(tmp_path: Path) -> None:
    """The sweep plans and runs RADIX points (it refused them while RADIX had a reference
    only), compiled, each row the public replay's."""
    trace = bundled_head(tmp_path, 300)
    out = tmp_path / "run"
    cfg = SweepConfig(
        out_dir=str(out), progress=False, executor=ExecutorConfig(n_jobs=1), plot=False,
        trace=[str(trace)], policy=["RADIX"], capacity=[256, 1024], semantics=["spec", "sglang"],
    )  # fmt: skip
    run_sweep(cfg)
    rows = pd.read_parquet(out / "results.parquet")
    assert len(rows) == 4
    for row in rows.itertuples():
        want = replay(str(trace), "RADIX", int(row.capacity), semantics=row.semantics)
        assert want.engine == "kernel"
        assert row.total_hit_tokens == want.total_hit_tokens
        assert row.final_cache_blocks == want.final_cache_blocks
        assert (row.evictions, row.splits) == (want.counters["evictions"], want.counters["splits"])
