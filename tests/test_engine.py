"""The engine: policies as steps, compositions as drivers (``prefixsim.engine``).

Where a policy keeps a hand-fused kernel of its single-cache replay (its fast path), the
single-cache driver over its steps gives the same result per request: the fast kernel is only
ever a faster way to the driver's numbers.
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import make_trace
from prefixsim import (
    ParameterError,
    Trace,
    make_params,
    policy_names,
    replay_params,
)
from prefixsim.cluster import LoadModel, make_router, replay_cluster_params
from prefixsim.engine import single
from prefixsim.policies import PolicyParams, get_policy
from prefixsim.tiers import MODES, replay_tiers
from strategies import BLOCK_SIZES, conversations, policy_params

FAST = ["LRU", "S3FIFO", "S3FIFO_LCS"]


def steps_and_fast(trace: Trace, params: PolicyParams, block_size: int) -> None:
    spec = get_policy(params.policy)
    inputs = (trace.block_ids, trace.offsets, trace.input_lengths, trace.n_blocks, block_size)
    driven = single.run(spec, params, *inputs, fast=False)
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


# --- S3FIFO_LCS: its steps, its fast kernel and its reference -------------------------------


@st.composite
def lcs_params(draw: st.DrawFn) -> PolicyParams:
    """S3FIFO_LCS with a small queue of 2 slots or more (the steps' domain), small enough that
    both queues, the ghost and the 2-bit clock all act."""
    ratio = draw(st.sampled_from([0.1, 0.25, 0.34, 0.5, 0.75]))
    capacity = draw(st.integers(1, 40))
    while int(capacity * ratio) < 2:
        capacity += 1
    return make_params(
        "S3FIFO_LCS",
        capacity,
        small_ratio=ratio,
        ghost_ratio=draw(st.sampled_from([0.0, 0.3, 0.9, 2.0])),
        move_to_main_threshold=draw(st.integers(0, 3)),
    )


@settings(max_examples=300, deadline=None)
@given(requests=conversations(), params=lcs_params(), block_size=st.sampled_from(BLOCK_SIZES))
def test_s3fifo_lcs_driver_is_its_reference_and_its_fast_kernel(  # type: ignore[no-untyped-def]
    requests, params, block_size
) -> None:
    trace = make_trace(requests)
    ref = replay_params(trace, params, block_size, engine="reference")
    spec = get_policy("S3FIFO_LCS")
    inputs = (trace.block_ids, trace.offsets, trace.input_lengths, trace.n_blocks, block_size)
    driven = single.run(spec, params, *inputs, fast=False)
    np.testing.assert_array_equal(driven[0], ref.hit_tokens)
    assert driven[1] == ref.final_cache_blocks
    assert driven[2] == {k: v for k, v in ref.counters.items() if k != "block_accesses"}
    steps_and_fast(trace, params, block_size)


def test_s3fifo_lcs_small_queue_of_one_slot() -> None:
    """``int(capacity * small_ratio) == 1`` admits nothing (libCacheSim): the single cache
    replays it (fast kernel and reference: every access a miss); the steps refuse it, so a tier
    or a cluster instance does too, naming small_ratio."""
    trace = make_trace([(2, [1, 2]), (2, [1, 2]), (1, [1])])
    params = make_params("S3FIFO_LCS", 10)
    for engine in ("kernel", "reference"):
        res = replay_params(trace, params, 1, engine=engine)  # type: ignore[arg-type]
        assert res.hit_tokens.tolist() == [0, 0, 0] and res.final_cache_blocks == 0
    with pytest.raises(ParameterError, match=r"small_ratio=0\.1.*admits nothing"):
        replay_tiers(trace, [{"policy": "S3FIFO_LCS", "capacity": 10}], "inclusive", 1)
    with pytest.raises(ParameterError, match=r"small_ratio=0\.1.*admits nothing"):
        replay_cluster_params(trace, params, 1, 2, make_router("kv_aware"), LOAD)
    # two slots: the steps run it, and equal the reference
    two = make_params("S3FIFO_LCS", 20)
    assert_clusters_agree(trace, two, 2, make_router("kv_aware"))


def test_s3fifo_lcs_as_a_lower_tier_removes_without_a_ghost() -> None:
    # LRU(1) over S3FIFO_LCS(20: S 2, M 18), exclusive, block_size 1.
    # r0 [a b]: a -> T0; b evicts a into T1's S. r1 [a]: a hit in T1 (1 token), moved to T0
    #   (removed from S, no ghost entry), b demoted into T1's S. r2 [a]: a T0 hit.
    trace = make_trace([(2, ["a", "b"]), (1, ["a"]), (1, ["a"])])
    tiers = [{"policy": "LRU", "capacity": 1}, {"policy": "S3FIFO_LCS", "capacity": 20}]
    for engine in ("reference", "kernel"):
        res = replay_tiers(trace, tiers, "exclusive", 1, engine=engine)  # type: ignore[arg-type]
        assert res.hit_tokens.tolist() == [0, 1, 1]
        assert res.tier_hit_tokens[1].tolist() == [0, 1, 0]  # tier 1, per request
        assert res.tier_counters[1]["promotions_out"] == 1
        assert res.final_tier_blocks == (1, 1)


# --- every policy in every position of a hierarchy ------------------------------------------

COMPILED = [p for p in policy_names() if (s := get_policy(p).steps) is not None and s.per_block]
"""Every policy a hierarchy runs: its steps per block (RADIX, request-level, is refused as a
tier, tested below)."""
ONLINE = [p for p in COMPILED if not get_policy(p).offline]


def lower_tier_policies(mode: str) -> list[str]:
    """What may sit below the first tier (docs/tiers.md): online policies, and in exclusive
    mode only those with a removal."""
    return [p for p in ONLINE if mode == "inclusive" or get_policy(p).removable]


@st.composite
def any_params(draw: st.DrawFn, policy: str, max_capacity: int = 24) -> dict[str, Any]:
    """A tier's parameters for ``policy``, small enough that evictions and ghosts happen."""
    names = get_policy(policy).params_type.field_names()
    tier: dict[str, Any] = {"policy": policy, "capacity": draw(st.integers(1, max_capacity))}
    if policy == "S3FIFO_LCS":  # a small queue of 2 slots or more (1 admits nothing: refused)
        ratio = draw(st.sampled_from([0.1, 0.25, 0.5]))
        tier["capacity"] = max(tier["capacity"], round(2 / ratio))
        tier["small_ratio"] = ratio
        tier["ghost_ratio"] = draw(st.sampled_from([0.0, 0.5, 0.9, 2.0]))
        tier["move_to_main_threshold"] = draw(st.integers(0, 3))
    elif "small_ratio" in names:
        tier["capacity"] = max(tier["capacity"], 2)
        tier["small_ratio"] = draw(st.sampled_from([0.1, 0.25, 0.5, 0.75]))
        tier["max_freq"] = draw(st.integers(0, 3))
        tier["ghost_freq"] = draw(st.integers(0, tier["max_freq"]))
        if not 1 <= round(tier["capacity"] * tier["small_ratio"]) <= tier["capacity"] - 1:
            tier["small_ratio"] = 0.5
    return tier


THREE_TIERS = [["LRU_LEAF", "S3FIFO", "LFU"], ["ARC", "LRU_TAIL_FIRST", "SIEVE"]]
"""Two three-tier hierarchies, whose middle tier both feeds a lower one and is fed."""


@st.composite
def hierarchies(draw: st.DrawFn) -> tuple[list[dict[str, Any]], str]:
    """Every policy in every position it may take, beside LRU (each hierarchy of policies is a
    driver compiled once: the set of them stays small)."""
    mode = draw(st.sampled_from(MODES))
    shape = draw(st.sampled_from(["alone", "first", "second", "three"]))
    if shape == "alone":
        policies = [draw(st.sampled_from(COMPILED))]
    elif shape == "first":
        policies = [draw(st.sampled_from(COMPILED)), "LRU"]
    elif shape == "second":
        policies = ["LRU", draw(st.sampled_from(lower_tier_policies(mode)))]
    else:
        policies = draw(st.sampled_from(THREE_TIERS))
    return [draw(any_params(p)) for p in policies], mode


def assert_tiers_agree(trace: Trace, tiers: list[dict[str, Any]], mode: str, bs: int) -> None:
    ref = replay_tiers(trace, tiers, mode, bs, engine="reference")
    ker = replay_tiers(trace, tiers, mode, bs, engine="kernel")
    np.testing.assert_array_equal(ker.hit_tokens, ref.hit_tokens)
    np.testing.assert_array_equal(ker.tier_hit_tokens, ref.tier_hit_tokens)
    assert ker.tier_counters == ref.tier_counters
    assert ker.final_tier_blocks == ref.final_tier_blocks


@settings(max_examples=400, deadline=None)
@given(requests=conversations(), hierarchy=hierarchies(), block_size=st.sampled_from(BLOCK_SIZES))
def test_every_policy_in_every_position_kernel_is_reference(
    requests, hierarchy, block_size
) -> None:  # type: ignore[no-untyped-def]
    tiers, mode = hierarchy
    assert_tiers_agree(make_trace(requests), tiers, mode, block_size)


@pytest.mark.parametrize("policy", COMPILED)
def test_one_tier_is_the_single_cache(conversation: Trace, policy: str) -> None:
    single = replay_params(conversation, make_params(policy, 2048), 512)
    for mode in MODES:
        tiered = replay_tiers(conversation, [{"policy": policy, "capacity": 2048}], mode)
        np.testing.assert_array_equal(tiered.hit_tokens, single.hit_tokens)
        np.testing.assert_array_equal(tiered.tier_hit_tokens[0], single.hit_tokens)
        assert tiered.final_tier_blocks == (single.final_cache_blocks,)
        assert tiered.tier_counters[0]["hits"] == single.counters["block_hits"]
        assert tiered.tier_counters[0]["evictions"] == single.counters["evictions"]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("policy", policy_names())
def test_refusals_are_the_documented_ones(policy: str, mode: str) -> None:
    trace = make_trace([(1, [1])])
    tiers = [{"policy": "LRU", "capacity": 2}, {"policy": policy, "capacity": 20}]
    if policy in lower_tier_policies(mode):
        replay_tiers(trace, tiers, mode)
        assert policy not in ("BELADY",) and (mode == "inclusive" or policy not in ("CLOCK", "ARC"))
    else:
        with pytest.raises(ParameterError, match=r"tiers\[1\]\.policy"):
            replay_tiers(trace, tiers, mode)
        request_level = policy == "RADIX"
        no_removal = mode == "exclusive" and policy in ("CLOCK", "ARC")
        assert policy == "BELADY" or request_level or no_removal


@pytest.mark.parametrize("engine", ["kernel", "reference"])
def test_radix_is_refused_as_a_tier_and_runs_every_router(engine: str) -> None:
    """RADIX is request-level (docs/policies.md, 'Refusals'): every tier position refuses it
    in one line, before any replay, in both engines; the single cache and every router run
    it, compiled and reference alike."""
    trace = make_trace([(2, [1, 2]), (2, [1, 3])])
    params = make_params("RADIX", 4)
    for first in (True, False):
        for mode in MODES:
            tiers = [{"policy": "RADIX", "capacity": 4}, {"policy": "LRU", "capacity": 4}]
            with pytest.raises(ParameterError, match=r"tiers\[\d\]\.policy='RADIX'.*request-level"):
                replay_tiers(trace, tiers if first else tiers[::-1], mode, 1, engine=engine)  # type: ignore[arg-type]
    assert replay_params(trace, params, 1, engine=engine).hit_tokens.tolist() == [0, 1]  # type: ignore[arg-type]
    for router in ("kv_aware", "least_loaded", "round_robin"):
        res = replay_cluster_params(trace, params, 1, 2, make_router(router), LOAD, engine=engine)  # type: ignore[arg-type]
        assert res.engine == engine


def test_a_demoted_block_is_not_the_requests_in_lru_tail_first() -> None:
    # LRU(1) over LRU_TAIL_FIRST(2), exclusive, block_size 1.
    # r0 [a b c]: a -> T0; b evicts a to T1, c evicts b to T1. Demoted blocks are not the
    #   request's: they join T1's old blocks at the recent end, in order: T1 = [a b] (a LRU).
    #   (Had they been placed by the request, its end would leave T1 = [b a].)
    # r1 [d]: d evicts c from T0 into a full T1, which evicts its LRU block a: T1 = [b c].
    # r2 [a]: a miss (1 token had a been kept); a evicts d into T1, which evicts b.
    trace = make_trace([(3, ["a", "b", "c"]), (1, ["d"]), (1, ["a"])])
    tiers = [{"policy": "LRU", "capacity": 1}, {"policy": "LRU_TAIL_FIRST", "capacity": 2}]
    for engine in ("reference", "kernel"):
        res = replay_tiers(trace, tiers, "exclusive", 1, engine=engine)  # type: ignore[arg-type]
        assert res.hit_tokens.tolist() == [0, 0, 0]
        assert res.tier_counters[1] == {"hits": 0, "admissions": 4, "demotions_in": 4,
                                        "evictions": 2, "promotions_out": 0}  # fmt: skip
        assert res.final_tier_blocks == (1, 2)


def test_lru_leaf_as_a_first_tier_keeps_the_chain_head() -> None:
    # LRU_LEAF(2) over LRU(4), exclusive, block_size 1.
    # r0 [a b c]: a, then b under a; c: T0 full, the LRU leaf is b (a has the child b), so b is
    #   demoted (LRU would demote a): T1 = [b]; c joins T0 under b; a is a leaf again.
    # r1 [a b]: a from T0 (1 token), b from T1 (1 token). a hit; b removed from T1, admitted to
    #   T0 under a, evicting the LRU leaf c to T1. T1 found b only (LRU over LRU: a and b).
    trace = make_trace([(3, ["a", "b", "c"]), (2, ["a", "b"])])
    tiers = [{"policy": "LRU_LEAF", "capacity": 2}, {"policy": "LRU", "capacity": 4}]
    for engine in ("reference", "kernel"):
        res = replay_tiers(trace, tiers, "exclusive", 1, engine=engine)  # type: ignore[arg-type]
        assert res.hit_tokens.tolist() == [0, 2]
        assert res.tier_hit_tokens[:, 1].tolist() == [1, 1]
        assert res.tier_counters[0] == {"hits": 1, "admissions": 4, "demotions_in": 0,
                                        "evictions": 2, "promotions_out": 0}  # fmt: skip
        assert res.tier_counters[1] == {"hits": 1, "admissions": 2, "demotions_in": 2,
                                        "evictions": 0, "promotions_out": 1}  # fmt: skip
        assert res.final_tier_blocks == (2, 1)


# --- every online policy behind every router, at compiled speed -----------------------------

LOAD = LoadModel("llama-3.1-8b", "h100")  # type: ignore[arg-type]


@st.composite
def timed_traces(draw: st.DrawFn) -> Trace:
    trace = make_trace(draw(conversations(max_requests=30)))
    gaps = st.sampled_from([0.0, 0.5, 10.0, 700.0, -300.0])
    ms = np.cumsum(draw(st.lists(gaps, min_size=trace.n_requests, max_size=trace.n_requests)))
    return dataclasses.replace(trace, timestamps=ms.astype(np.float64))


def assert_clusters_agree(trace: Trace, params: PolicyParams, instances: int, router: Any) -> None:
    fast = replay_cluster_params(trace, params, 16, instances, router, LOAD)
    ref = replay_cluster_params(trace, params, 16, instances, router, LOAD, engine="reference")
    assert fast.engine == "kernel"
    np.testing.assert_array_equal(fast.instance, ref.instance)
    np.testing.assert_array_equal(fast.hit_tokens, ref.hit_tokens)
    np.testing.assert_array_equal(fast.queueing_delay, ref.queueing_delay)
    np.testing.assert_array_equal(fast.est_prefill_seconds, ref.est_prefill_seconds)
    np.testing.assert_array_equal(fast.final_cache_blocks, ref.final_cache_blocks)
    assert fast.instance_counters == ref.instance_counters


@settings(max_examples=300, deadline=None)
@given(
    trace=timed_traces(),
    policy=st.sampled_from(ONLINE),
    data=st.data(),
    instances=st.integers(1, 4),
    router=st.sampled_from(["least_loaded", "kv_aware"]),
    weight=st.sampled_from([0.0, 1.0, 3.0]),
)
def test_every_online_policy_behind_the_load_aware_routers(  # type: ignore[no-untyped-def]
    trace, policy, data, instances, router, weight
) -> None:
    tier = data.draw(any_params(policy))
    params = make_params(**tier)
    kw = {"overlap_weight": weight} if router == "kv_aware" else {}
    assert_clusters_agree(trace, params, instances, make_router(router, **kw))


@settings(max_examples=60, deadline=None)
@given(
    requests=conversations(max_requests=25),
    capacity=st.integers(1, 12),
    instances=st.integers(1, 4),
    router=st.sampled_from(["round_robin", "random", "session"]),
)
def test_belady_behind_the_static_routers(requests, capacity, instances, router) -> None:  # type: ignore[no-untyped-def]
    """Each instance knows its future once the router has placed every request: BELADY per
    instance, equal in both engines, and the single cache's BELADY with one instance."""
    trace = make_trace(requests)
    params = make_params("BELADY", capacity)
    assert_clusters_agree(trace, params, instances, make_router(router))
    if instances == 1:
        res = replay_cluster_params(trace, params, 16, 1, make_router(router), None)
        np.testing.assert_array_equal(res.hit_tokens, replay_params(trace, params, 16).hit_tokens)


# --- one scenario, one call -----------------------------------------------------------------


def test_a_scenario_runs_its_composition(conversation: Trace) -> None:
    from prefixsim import Scenario, run_scenario
    from prefixsim.scenario import Cluster
    from prefixsim.tiers import Hierarchy

    params = make_params("S3FIFO", 2048)
    single = run_scenario(conversation, Scenario(params))
    np.testing.assert_array_equal(
        single.hit_tokens, replay_params(conversation, params, 512).hit_tokens
    )
    hierarchy = Hierarchy.of(
        [{"policy": "LRU", "capacity": 256}, {"policy": "FIFO", "capacity": 1024}]
    )
    tiered = run_scenario(conversation, Scenario(hierarchy, 512))
    direct = replay_tiers(conversation, hierarchy.tiers, hierarchy.mode, 512)
    np.testing.assert_array_equal(tiered.tier_hit_tokens, direct.tier_hit_tokens)
    cluster = Cluster(4, make_router("kv_aware"), LOAD)
    routed = run_scenario(conversation, Scenario(params, 512, cluster), engine="kernel")
    by_hand = replay_cluster_params(conversation, params, 512, 4, cluster.router, LOAD)
    np.testing.assert_array_equal(routed.instance, by_hand.instance)
    kinds = [Scenario(params), Scenario(hierarchy), Scenario(params, cluster=cluster)]
    assert [s.composition for s in kinds] == ["cache", "tiers", "cluster"]
    with pytest.raises(ParameterError, match="cluster"):
        Scenario(hierarchy, cluster=cluster)
    with pytest.raises(ParameterError, match="block_size"):
        Scenario(params, 0)


@pytest.mark.parametrize(
    "module", ["prefixsim.engine.single", "prefixsim.engine.tiers", "prefixsim.cluster.driver"]
)
def test_a_drivers_disk_cache_key_covers_its_compiled_callees(module: str) -> None:
    # numba's disk cache checks only the compiled function's own file: a compiled function a
    # driver calls from another file must be in the driver's stamp (engine/build.py), or an
    # edit of that file alone leaves a stale driver on disk (the cluster driver's prefill
    # formula in cost.py was not, before).
    import importlib
    from pathlib import Path

    from numba.core.registry import CPUDispatcher

    from prefixsim import cost
    from prefixsim.cluster import driver as cluster_driver
    from prefixsim.engine import build

    mod = importlib.import_module(module)
    extra = cluster_driver._CALLEES if module == "prefixsim.cluster.driver" else ()
    stamped = {*build._ALWAYS, *(Path(f).resolve() for f in extra)}
    callees = {
        Path(inspect.getsourcefile(f.py_func) or "").resolve()
        for f in vars(mod).values()
        if isinstance(f, CPUDispatcher)
    }
    if module == "prefixsim.cluster.driver":  # the load model's prefill time (cost.py)
        assert Path(inspect.getsourcefile(cost.prefill_seconds.py_func) or "").resolve() in callees
    assert callees <= stamped | {Path(mod.__file__ or "").resolve()}, callees - stamped


def test_a_compiled_drivers_files_are_found_on_its_first_use_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Finding a function's source file costs about 0.1 ms, a sixth of a replay of the
    # bundled trace: the drivers once asked for their steps' files on every call.
    from test_cluster import TOY_LOAD, timed

    trace = timed(make_trace([(2, ["a", "b"]), (2, ["a", "c"])]), [0, 1])
    params = make_params("FIFO", 8)
    run_all = [
        lambda: replay_params(trace, params, 1),
        lambda: replay_params(trace, params, 1, semantics="vllm"),
        lambda: replay_tiers(
            trace,
            [{"policy": "FIFO", "capacity": 4}, {"policy": "LRU", "capacity": 8}],
            block_size=1,
        ),
        lambda: replay_cluster_params(trace, params, 1, 2, make_router("kv_aware"), TOY_LOAD),
    ]
    for run in run_all:
        run()  # compiled (or loaded) and found once

    def refuse(*args: object) -> str:
        raise AssertionError("a source file looked up again")

    monkeypatch.setattr(inspect, "getsourcefile", refuse)
    for run in run_all:
        run()


def test_no_disk_cached_kernel_calls_a_compiled_function_of_another_file() -> None:
    # The same hazard for the package's own @njit(cache=True) kernels, which have no stamp:
    # numba would keep a kernel compiled against an old version of a callee in another file
    # (inlined or called), and a developer's edit of that file alone would run stale code.
    # (The cluster's FCFS queue called cost.prefill_seconds so, before.)
    import importlib
    import pkgutil
    import types

    from numba.core.caching import FunctionCache
    from numba.core.registry import CPUDispatcher

    import prefixsim

    crossing = []
    for info in pkgutil.walk_packages(prefixsim.__path__, "prefixsim."):
        if info.name.endswith("__main__"):
            continue
        mod = importlib.import_module(info.name)
        for name, fn in vars(mod).items():
            if not isinstance(fn, CPUDispatcher) or fn.py_func.__module__ != info.name:
                continue
            if not isinstance(fn._cache, FunctionCache):  # not cached on disk
                continue
            here = inspect.getsourcefile(fn.py_func)
            names = fn.py_func.__code__.co_names
            scope = fn.py_func.__globals__
            # a global name, or an attribute of a module it names (``cost.prefill_seconds``)
            found = [scope.get(n) for n in names]
            modules = [m for m in found if isinstance(m, types.ModuleType)]
            found += [getattr(m, n, None) for m in modules for n in names]
            for callee in found:
                if isinstance(callee, CPUDispatcher):
                    there = inspect.getsourcefile(callee.py_func)
                    if there != here:
                        crossing.append(f"{info.name}.{name} -> {callee.py_func.__qualname__}")
    assert crossing == [], crossing
