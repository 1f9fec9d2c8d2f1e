"""A cluster of caches behind a router (``docs/cluster.md``): hand-worked routing, the
one-instance identity, reference against the fast path, and the load model."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import make_trace
from prefixsim import ParameterError, Trace, make_params, replay_params
from prefixsim.cluster import LoadModel, make_router, replay_cluster, replay_cluster_params
from prefixsim.cluster.load import prefill_seconds
from prefixsim.cluster.routers import GOLDEN, mix64, ring_points, router_names
from prefixsim.cost import prefill_cost
from prefixsim.hardware import HardwareProfile
from prefixsim.models import ModelProfile, load_model
from prefixsim.policies import get_policy, policy_names
from strategies import conversations, policy_params

# A toy model and GPU whose prefill times are easy by hand (block_size 1, so tokens = blocks):
# flops(n, h) = 2 * 5 * (n - h) + layers 1 * heads 1 * (1 + 1) * (n(n+1) - h(h+1)),
# at 10 FLOP/s achieved; a block is 2 (K, V) * 1 * 1 * 1 * 2 bytes (bf16) = 4 bytes, loaded at
# 4 bytes/s: 1 s per reused block. So
#   prefill(n, h) = (n - h) + 0.2 * (n(n+1) - h(h+1)) + h   seconds:
#   prefill(2, 0) = 2 + 0.2 * 6 = 3.2;  prefill(2, 2) = 0 + 0 + 2 = 2.0;
#   prefill(3, 0) = 3 + 0.2 * 12 = 5.4.
TOY_MODEL = ModelProfile(
    name="toy",
    layers=1,
    attention_heads=1,
    kv_heads=1,
    head_dim=1,
    hidden_size=1,
    total_params=5,
    active_params=5,
)
TOY_GPU = HardwareProfile(name="toy", peak_flops={"bf16": 10.0}, bandwidth={"hbm": 4.0}, mfu=1.0)
TOY_LOAD = LoadModel(TOY_MODEL, TOY_GPU)
REAL_LOAD = LoadModel(load_model("llama-3.1-8b"), "h100")  # type: ignore[arg-type]
ONLINE = [p for p in policy_names() if p != "BELADY" and get_policy(p).steps is not None]
"""The policies every router runs compiled (their steps; RADIX's a request step)."""


def timed(trace: Trace, ms: list[float], out: list[int] | None = None) -> Trace:
    """``trace`` with these arrival times (ms) and output lengths (default 0)."""
    n = trace.n_requests
    return dataclasses.replace(
        trace,
        timestamps=np.array(ms, np.float64),
        output_lengths=np.array(out or [0] * n, np.int64),
    )


def run(trace: Trace, instances: int, router: str, policy: str = "LRU", capacity: int = 64, **kw):  # type: ignore[no-untyped-def]
    load = kw.pop("load", TOY_LOAD)
    engine = kw.pop("engine", "kernel")
    params = make_params(policy, capacity)
    return replay_cluster_params(
        trace, params, 1, instances, make_router(router, **kw), load, engine=engine
    )


def both(trace: Trace, instances: int, router: str, **kw):  # type: ignore[no-untyped-def]
    """The kernel's result, after checking the reference gives the same per request."""
    fast = run(trace, instances, router, engine="kernel", **kw)
    ref = run(trace, instances, router, engine="reference", **kw)
    assert_same(fast, ref)
    return fast


def assert_same(a, b) -> None:  # type: ignore[no-untyped-def]
    np.testing.assert_array_equal(a.instance, b.instance)
    np.testing.assert_array_equal(a.hit_tokens, b.hit_tokens)
    for name in ("queueing_delay", "est_prefill_seconds", "service_seconds"):
        x, y = getattr(a, name), getattr(b, name)
        assert (x is None) == (y is None)
        if x is not None:
            np.testing.assert_array_equal(x, y)  # bit for bit: the same float operations
    np.testing.assert_array_equal(a.final_cache_blocks, b.final_cache_blocks)
    assert a.instance_counters == b.instance_counters


# --- the load model --------------------------------------------------------------------------


def test_prefill_seconds_hand_worked() -> None:
    consts = TOY_LOAD.constants(1)
    assert prefill_seconds(2, 0, *consts) == pytest.approx(3.2)
    assert prefill_seconds(2, 2, *consts) == pytest.approx(2.0)
    assert prefill_seconds(3, 0, *consts) == pytest.approx(5.4)
    # block_size 2: a hit of 3 tokens loads ceil(3/2) = 2 blocks of 8 bytes at 4 B/s = 4 s;
    # computes 1 token: 10 * 1 + 2 * (4*5 - 3*4) = 26 FLOPs = 2.6 s.
    assert prefill_seconds(4, 3, *TOY_LOAD.constants(2)) == pytest.approx(6.6)


@settings(max_examples=50, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 200_000), st.integers(0, 200_000)), min_size=1),
    st.sampled_from([1, 16, 512]),
)
def test_prefill_seconds_is_the_cost_model(pairs, block_size) -> None:  # type: ignore[no-untyped-def]
    n = np.array([max(a, b) for a, b in pairs], np.int64)
    h = np.array([min(a, b) for a, b in pairs], np.int64)
    cost = prefill_cost(REAL_LOAD.model, n, h, block_size, REAL_LOAD.hardware, "hbm")
    consts = REAL_LOAD.constants(block_size)
    ours = [prefill_seconds(int(a), int(b), *consts) for a, b in zip(n, h, strict=True)]
    np.testing.assert_array_equal(ours, cost.est_prefill_seconds)  # one formula: to the bit


def test_fcfs_queueing_and_decode() -> None:
    # One instance; r0 (2 new tokens, 10 output tokens at 0.1 s) at t=0: prefill 3.2, service
    # 3.2 + 1.0 = 4.2, so r1 (2 other tokens) arriving at t=1 s waits until 4.2: delay 3.2,
    # TTFT 3.2 + 3.2 = 6.4; r2 (= r0's tokens, all hit) arrives at t=10 s to an idle
    # instance: delay 0, prefill(2, 2) = 2.0. Busy: 4.2 + 3.2 + 2.0 = 9.4.
    trace = timed(
        make_trace([(2, [1, 2]), (2, [3, 4]), (2, [1, 2])]), [0, 1000, 10_000], [10, 0, 0]
    )
    load = LoadModel(TOY_MODEL, TOY_GPU, decode_seconds_per_token=0.1)
    res = both(trace, 1, "round_robin", load=load)
    np.testing.assert_allclose(res.queueing_delay, [0, 3.2, 0])
    np.testing.assert_allclose(res.est_ttft_seconds, [3.2, 6.4, 2.0])
    np.testing.assert_array_equal(res.hit_tokens, [0, 0, 2])
    assert res.busy_seconds == pytest.approx([9.4])
    assert res.load_imbalance == 1.0


def test_an_idle_instance_has_no_delay_whatever_the_timestamps() -> None:
    # Timestamps before 0: an instance is idle until given work, so the first request at
    # t = -5 s waits 0, and the second (t = -4 s, one instance) waits until -5 + 3.2 = -1.8 s.
    trace = timed(make_trace([(2, [1, 2]), (2, [3, 4])]), [-5000, -4000])
    res = both(trace, 1, "least_loaded")
    np.testing.assert_allclose(res.queueing_delay, [0.0, 2.2])


def test_load_imbalance_and_per_instance_totals() -> None:
    # round robin over 2: r0 (n=2) to 0, busy 3.2; r1 (n=3) to 1, busy 5.4; r2 (r0's blocks)
    # to 0: hit 2 tokens, busy 3.2 + 2.0 = 5.2. Mean busy (5.2 + 5.4) / 2 = 5.3.
    trace = timed(make_trace([(2, [1, 2]), (3, [5, 6, 7]), (2, [1, 2])]), [0, 0, 0])
    res = both(trace, 2, "round_robin")
    assert res.busy_seconds == pytest.approx([5.2, 5.4])
    assert res.load_imbalance == pytest.approx(5.4 / 5.3)
    np.testing.assert_array_equal(res.instance_requests, [2, 1])
    np.testing.assert_array_equal(res.instance_hit_tokens, [2, 0])
    np.testing.assert_array_equal(res.instance_prompt_tokens, [4, 3])
    assert [c["block_accesses"] for c in res.instance_counters] == [4, 3]
    assert [c["block_hits"] for c in res.instance_counters] == [2, 0]
    row = res.summary()
    assert row["total_hit_tokens"] == 2 and row["block_hits"] == 2
    assert row["load_imbalance"] == pytest.approx(5.4 / 5.3)


# --- hand-worked routing ---------------------------------------------------------------------


def test_round_robin() -> None:
    # Request r goes to r mod 3: 0, 1, 2, 0, 1. All five are [1, 2]: the first visit of each
    # instance misses, r3 (back on 0) and r4 (on 1) hit both blocks.
    trace = make_trace([(2, [1, 2])] * 5)
    res = both(trace, 3, "round_robin", load=None)
    np.testing.assert_array_equal(res.instance, [0, 1, 2, 0, 1])
    np.testing.assert_array_equal(res.hit_tokens, [0, 0, 0, 2, 2])
    assert res.queueing_delay is None and res.load_imbalance is None


def test_splitmix64_test_vectors() -> None:
    # The published outputs of SplitMix64 (Steele, Lea, Flood 2014; Vigna's splitmix64.c):
    # seed 0 -> e220a8397b1dcdaf, 6e789e6aa1b965f4, 06c45d188009454f, f88bb8a8724c81ec;
    # seed 1234567 -> 6457827717110365317, 3203168211198807973, 9817491932198370423, ...
    seq0 = [mix64(0 + (r + 1) * GOLDEN) for r in range(4)]
    assert seq0 == [0xE220A8397B1DCDAF, 0x6E789E6AA1B965F4, 0x06C45D188009454F, 0xF88BB8A8724C81EC]
    seq = [mix64(1234567 + (r + 1) * GOLDEN) for r in range(3)]
    assert seq == [6457827717110365317, 3203168211198807973, 9817491932198370423]


def test_random_follows_splitmix64() -> None:
    # Instance = r-th SplitMix64 output mod instances. Seed 0, 4 instances: the low two bits
    # of ...af, ...f4, ...4f, ...ec are 3, 0, 3, 0. Seed 1234567, 10 instances: the last
    # decimal digits 7, 3, 3.
    four = make_trace([(1, [r]) for r in range(4)])
    np.testing.assert_array_equal(both(four, 4, "random", seed=0, load=None).instance, [3, 0, 3, 0])
    three = make_trace([(1, [r]) for r in range(3)])
    res = both(three, 10, "random", seed=1234567, load=None)
    np.testing.assert_array_equal(res.instance, [7, 3, 3])


def test_random_is_deterministic_under_a_seed() -> None:
    trace = make_trace([(4, [r % 7, r]) for r in range(200)])
    a = run(trace, 5, "random", seed=42, load=None)
    b = run(trace, 5, "random", seed=42, load=None)
    c = run(trace, 5, "random", seed=43, load=None)
    np.testing.assert_array_equal(a.instance, b.instance)
    np.testing.assert_array_equal(a.hit_tokens, b.hit_tokens)
    # Two seeds agree on all 200 requests with probability 5**-200: they differ.
    assert not np.array_equal(a.instance, c.instance)
    assert set(a.instance.tolist()) == {0, 1, 2, 3, 4}


def test_session_ring() -> None:
    # The key is mix64(first block id); the instance owns the first ring point >= key,
    # wrapping. Checked against a brute-force search of the ring (no bisect).
    trace = make_trace([(3, [r % 11, 100 + r]) for r in range(60)] + [(0, [])])
    res = both(trace, 4, "session", vnodes=8, load=None)
    ring = ring_points(4, 8)
    for r in range(trace.n_requests):
        blocks = trace.request_blocks(r)
        if len(blocks) == 0:
            assert res.instance[r] == 0  # no hash_ids: instance 0
            continue
        key = mix64(int(blocks[0]))
        above = [(p, i) for p, i in ring if p >= key]
        assert res.instance[r] == (min(above) if above else min(ring))[1]
    # Requests with the same first block share an instance (the same session).
    for first in range(11):
        assert len(set(res.instance[:60][np.arange(60) % 11 == first].tolist())) == 1


def test_session_key_blocks() -> None:
    # Every request starts with block 0 (a shared system prompt): key_blocks=1 sends all to one
    # instance; key_blocks=2 folds in the second block, mix64(mix64(0) ^ b1), which spreads them.
    trace = make_trace([(3, [0, 1 + r % 9, 50 + r]) for r in range(90)])
    one = both(trace, 4, "session", load=None)
    assert len(set(one.instance.tolist())) == 1
    two = both(trace, 4, "session", key_blocks=2, load=None)
    assert len(set(two.instance.tolist())) > 1
    ring = ring_points(4, 64)
    for r in range(9):
        key = mix64(mix64(trace.request_blocks(r)[0].item()) ^ trace.request_blocks(r)[1].item())
        above = [(p, i) for p, i in ring if p >= key]
        assert two.instance[r] == (min(above) if above else min(ring))[1]


def test_session_is_consistent_when_an_instance_is_added() -> None:
    # Consistent hashing: going from 4 to 5 instances, a request either stays where it was
    # or moves to the new instance 4 (its points only take over keys).
    trace = make_trace([(2, [r, r + 1000]) for r in range(300)])
    four = run(trace, 4, "session", load=None).instance
    five = run(trace, 5, "session", load=None).instance
    moved = four != five
    assert moved.any()
    assert (five[moved] == 4).all()


# Timed trace for least_loaded and kv_aware (2 instances, prefill(2, 0) = 3.2 s):
#   r0 [1, 2] at t=0: both idle, tie -> instance 0, free0 = 3.2;
#   r1 [3, 4] at t=1: load0 = 2.2, load1 = 0;
#   r2 [3, 4] at t=3.3 (r1's blocks again).
TIMED = timed(make_trace([(2, [1, 2]), (2, [3, 4]), (2, [3, 4])]), [0, 1000, 3300])


def test_least_loaded() -> None:
    # r0 -> 0 (tie). r1: load0 2.2 > load1 0 -> 1, free1 = 1 + 3.2 = 4.2.
    # r2 at 3.3: load0 = 0 (free0 3.2 < 3.3), load1 = 0.9 -> 0, although 1 holds r2's blocks.
    res = both(TIMED, 2, "least_loaded")
    np.testing.assert_array_equal(res.instance, [0, 1, 0])
    np.testing.assert_array_equal(res.hit_tokens, [0, 0, 0])
    np.testing.assert_allclose(res.queueing_delay, [0, 0, 0])


@pytest.mark.parametrize(
    ("weight", "expected"),
    [
        # r1: cost0 = w * 3.2 + 2.2, cost1 = w * 3.2 + 0 -> 1 for every w.
        # r2: cost0 = w * prefill(2, 0) + 0 = 3.2 w; cost1 = w * prefill(2, 2) + 0.9 = 2 w + 0.9
        #   w = 1: 3.2 > 2.9 -> 1;  w = 2: 6.4 > 4.9 -> 1;  w = 0.5: 1.6 < 1.9 -> 0;
        #   w = 0: 0 < 0.9 -> 0 (least_loaded).
        (1.0, [0, 1, 1]),
        (2.0, [0, 1, 1]),
        (0.5, [0, 1, 0]),
        (0.0, [0, 1, 0]),
    ],
)
def test_kv_aware(weight: float, expected: list[int]) -> None:
    res = both(TIMED, 2, "kv_aware", overlap_weight=weight)
    np.testing.assert_array_equal(res.instance, expected)
    if expected[2] == 1:  # on instance 1: both blocks hit, waits 4.2 - 3.3 = 0.9, TTFT 2.9
        assert res.hit_tokens[2] == 2
        assert res.queueing_delay[2] == pytest.approx(0.9)
        assert res.est_ttft_seconds[2] == pytest.approx(2.9)


def test_kv_aware_ties_go_to_the_lowest_index() -> None:
    # Three idle instances and a cold request: equal costs, instance 0; then the same blocks
    # again at a later time when 0 is idle again: 0 holds them, the cheapest.
    trace = timed(make_trace([(2, [1, 2]), (2, [1, 2])]), [0, 60_000])
    res = both(trace, 3, "kv_aware")
    np.testing.assert_array_equal(res.instance, [0, 0])
    np.testing.assert_array_equal(res.hit_tokens, [0, 2])


# --- one instance is one cache ---------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(
    requests=conversations(max_requests=25),
    policy=st.sampled_from(ONLINE),
    router=st.sampled_from(["round_robin", "random", "session", "least_loaded", "kv_aware"]),
    engine=st.sampled_from(["kernel", "reference"]),
)
def test_one_instance_is_the_single_cache(requests, policy, router, engine) -> None:  # type: ignore[no-untyped-def]
    trace = make_trace(requests)
    # S3FIFO: small 1, main 9; S3FIFO_LCS: small 2 (its small queue of 1 admits nothing, which
    # its steps refuse: tests/test_engine.py)
    params = make_params(policy, 20 if policy == "S3FIFO_LCS" else 10)
    single = replay_params(trace, params, 16, engine="kernel")
    load = TOY_LOAD if router in ("least_loaded", "kv_aware") else None
    res = replay_cluster_params(trace, params, 16, 1, make_router(router), load, engine=engine)
    np.testing.assert_array_equal(res.instance, 0)
    np.testing.assert_array_equal(res.hit_tokens, single.hit_tokens)
    assert int(res.final_cache_blocks[0]) == single.final_cache_blocks
    assert res.counters == single.counters


def test_one_instance_on_the_bundled_trace(conversation: Trace) -> None:
    single = replay_params(conversation, make_params("S3FIFO", 4096), 512)
    for router in ("round_robin", "session", "kv_aware"):
        res = replay_cluster(
            conversation, 1, router, "S3FIFO", 4096, model="llama-3.1-8b", hardware="h100"
        )
        np.testing.assert_array_equal(res.hit_tokens, single.hit_tokens)
        assert res.counters == single.counters


# --- reference against the fast path ---------------------------------------------------------


@st.composite
def timed_traces(draw: st.DrawFn) -> Trace:
    trace = make_trace(draw(conversations(max_requests=30)))
    n = trace.n_requests
    gaps = draw(
        st.lists(st.sampled_from([0.0, 0.5, 10.0, 700.0, 5000.0, -300.0]), min_size=n, max_size=n)
    )
    out = draw(st.lists(st.integers(0, 500), min_size=n, max_size=n))
    return timed(trace, np.cumsum(gaps).tolist(), out)


@settings(max_examples=150, deadline=None)
@given(
    trace=timed_traces(),
    params=policy_params(),
    instances=st.integers(1, 5),
    router=st.sampled_from(["round_robin", "random", "session", "least_loaded", "kv_aware"]),
    weight=st.sampled_from([0.0, 0.5, 1.0, 3.0]),
    seed=st.integers(0, 2**70),
    block_size=st.sampled_from([1, 16, 512]),
    decode=st.sampled_from([0.0, 0.001]),
    real=st.booleans(),
)
def test_kernel_matches_reference(  # type: ignore[no-untyped-def]
    trace, params, instances, router, weight, seed, block_size, decode, real
) -> None:
    kw = {"overlap_weight": weight, "seed": seed, "key_blocks": 1 + seed % 3}
    rp = make_router(router, **{k: v for k, v in kw.items() if k in _fields(router)})
    model, gpu = (REAL_LOAD.model, REAL_LOAD.hardware) if real else (TOY_MODEL, TOY_GPU)
    load = LoadModel(model, gpu, decode_seconds_per_token=decode)
    fast = replay_cluster_params(trace, params, block_size, instances, rp, load, engine="kernel")
    ref = replay_cluster_params(trace, params, block_size, instances, rp, load, engine="reference")
    assert fast.engine == "kernel"
    assert_same(fast, ref)


@settings(max_examples=40, deadline=None)
@given(
    requests=conversations(max_requests=25),
    policy=st.sampled_from([p for p in ONLINE if p not in ("S3FIFO", "LRU")]),
    router=st.sampled_from(["round_robin", "random", "session"]),
    instances=st.integers(1, 4),
)
def test_static_routers_reuse_every_policy_kernel(requests, policy, router, instances) -> None:  # type: ignore[no-untyped-def]
    trace = make_trace(requests)
    params = make_params(policy, 10)
    rp = make_router(router)
    fast = replay_cluster_params(trace, params, 16, instances, rp, TOY_LOAD, engine="kernel")
    ref = replay_cluster_params(trace, params, 16, instances, rp, TOY_LOAD, engine="reference")
    assert_same(fast, ref)


def _fields(router: str) -> tuple[str, ...]:
    from prefixsim.cluster import get_router

    return get_router(router).params_type.field_names()


# --- refused input ---------------------------------------------------------------------------


def test_refusals() -> None:
    trace = make_trace([(2, [1, 2])])
    with pytest.raises(ParameterError, match=r"router='nope'.*round_robin"):
        make_router("nope")
    with pytest.raises(ParameterError, match="overlap_weigth"):
        make_router("kv_aware", overlap_weigth=1.0)
    with pytest.raises(ParameterError, match="overlap_weight=-1"):
        make_router("kv_aware", overlap_weight=-1)
    with pytest.raises(ParameterError, match="seed"):
        make_router("random", seed=1.5)  # any integer is a seed (modulo 2**64), not a fraction
    for router in ("least_loaded", "kv_aware"):
        with pytest.raises(ParameterError, match="needs the load model"):
            run(trace, 2, router, load=None)
    with pytest.raises(ParameterError, match="instances=0"):
        run(trace, 0, "round_robin")
    with pytest.raises(ParameterError, match="offline"):
        run(trace, 2, "least_loaded", policy="BELADY")
    with pytest.raises(ParameterError, match="hardware"):
        replay_cluster(trace, 2, model="llama-3.1-8b")
    with pytest.raises(ParameterError, match="decode_seconds_per_token"):
        LoadModel(TOY_MODEL, TOY_GPU, decode_seconds_per_token=float("nan"))
    assert set(router_names()) == {"round_robin", "random", "session", "least_loaded", "kv_aware"}
