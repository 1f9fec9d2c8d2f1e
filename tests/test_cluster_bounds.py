"""Cluster parameters under hostile input (issue 22): seeds are any integer taken modulo 2**64
(as docs/cluster.md says; ``seed=-1`` was refused and ``seed=2**128`` failed at run time), a
ring of vnodes that cannot fit and a load model whose times would not be finite are refused by
:func:`prefixsim.cluster.check_cluster` and the constructors, before any replay."""

from __future__ import annotations

import numpy as np
import pytest

from prefixsim import ParameterError, make_params
from prefixsim.cluster import LoadModel, make_router, replay_cluster
from prefixsim.cluster.replay import check_cluster
from prefixsim.cluster.routers import ring_arrays


@pytest.mark.parametrize(
    ("seed", "representative"),
    [(0, 0), (-1, -1), (2**64 - 1, -1), (2**128, 0), (2**128 + 7, 7), (2**63, -(2**63))],
    ids=["0", "-1", "2**64-1", "2**128", "2**128+7", "2**63"],
)
def test_seed_taken_modulo_2_64(seed: int, representative: int) -> None:
    params = make_router("random", seed=seed)
    assert params.seed == representative  # type: ignore[attr-defined]
    assert -(2**63) <= params.seed < 2**63  # type: ignore[attr-defined]


def test_equal_seeds_modulo_2_64_route_the_same() -> None:
    a = replay_cluster("conversation", 4, "random", router_params={"seed": -1}, capacity=256)
    b = replay_cluster("conversation", 4, "random", router_params={"seed": 2**64 - 1}, capacity=256)
    c = replay_cluster(
        "conversation", 4, "random", router_params={"seed": 2**128 + 3}, capacity=256
    )
    d = replay_cluster("conversation", 4, "random", router_params={"seed": 3}, capacity=256)
    assert np.array_equal(a.instance, b.instance)
    assert np.array_equal(c.instance, d.instance)
    assert not np.array_equal(a.instance, d.instance)
    ref = replay_cluster(
        "conversation",
        4,
        "random",
        router_params={"seed": -1},
        capacity=256,
        engine="reference",
    )
    assert np.array_equal(a.instance, ref.instance)


@pytest.mark.parametrize("seed", [1.5, True, "3", None])
def test_a_seed_is_an_integer(seed: object) -> None:
    with pytest.raises(ParameterError, match="seed"):
        make_router("random", seed=seed)


def test_a_ring_that_cannot_fit_is_refused_with_its_size() -> None:
    router = make_router("session", vnodes=2**32 - 1)
    params = make_params("LRU", 64)
    with pytest.raises(ParameterError, match=r"invalid vnodes=4294967295: .* of memory"):
        check_cluster(params, 512, 2, router, None)
    with pytest.raises(ParameterError, match="invalid vnodes"):
        replay_cluster("conversation", 2, router, capacity=64)
    check_cluster(params, 512, 2, make_router("session", vnodes=1024), None)


def test_ring_state_bytes_bound_the_ring() -> None:
    router = make_router("session", vnodes=1000)
    points, owners = ring_arrays(3, 1000)
    assert points.nbytes + owners.nbytes <= router.state_bytes(3)


def test_instances_copies_of_the_state_are_checked_for_dynamic_routers() -> None:
    from prefixsim._memory import memory_limit_bytes

    # S3FIFO: 12 bytes a slot; 4096 instances of a capacity whose one state fits
    capacity = memory_limit_bytes() // 12 // 64
    params = make_params("S3FIFO", capacity)
    load = LoadModel("llama-3.1-8b", "h100")
    with pytest.raises(ParameterError, match="4096 times"):
        check_cluster(params, 512, 4096, make_router("least_loaded"), load)
    check_cluster(params, 512, 4096, make_router("round_robin"), None)  # one at a time


@pytest.mark.parametrize("value", [1e308, 1e10, float("inf"), float("nan"), -1.0, True])
def test_decode_seconds_per_token_keeps_times_finite(value: float) -> None:
    with pytest.raises(ParameterError, match="decode_seconds_per_token"):
        LoadModel("llama-3.1-8b", "h100", "hbm", value)


@pytest.mark.parametrize("value", [1e308, 1e10, float("inf"), -1.0])
def test_overlap_weight_keeps_costs_finite(value: float) -> None:
    with pytest.raises(ParameterError, match="overlap_weight"):
        make_router("kv_aware", overlap_weight=value)


def test_times_at_the_bounds_are_finite() -> None:
    load = LoadModel("llama-3.1-8b", "h100", "hbm", 1e9)
    res = replay_cluster(
        "conversation",
        4,
        make_router("kv_aware", overlap_weight=1e9),
        capacity=256,
        model=load.model,
        hardware=load.hardware,
        decode_seconds_per_token=1e9,
    )
    for name in ("queueing_delay", "est_prefill_seconds", "service_seconds"):
        values = getattr(res, name)
        assert values is not None and np.isfinite(values).all(), name
