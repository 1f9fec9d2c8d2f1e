"""Every value is checked before the run folder is made (issue 22).

A value the engine refuses at run time is refused at planning with the engine's own message,
under the key the user typed (:mod:`sweep.engine_checks`): the tests hold the sweep to the
engine itself (it refuses exactly what the engine's replay refuses), to values the engine
refuses today, and to a refusal planted in the engine. And one rule for every grid key:
no empty list, no key a hierarchy ignores, every value valid whether or not a point uses it.
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import prefixsim
from prefixsim.tiers import replay_tiers
from sweep import run_sweep
from sweep.config import TierConfig, TiersConfig
from test_sweep import config, small_trace  # noqa: F401


def refused(cfg: Any) -> str:
    """The one-line error the sweep gives for ``cfg``; its run folder must not exist."""
    with pytest.raises(prefixsim.PrefixSimError) as info:
        run_sweep(cfg)
    assert not Path(cfg.out_dir).exists()
    message = str(info.value)
    assert "\n" not in message
    return message


def two_tiers(top: str, low: str, capacity: int = 64) -> TiersConfig:
    return TiersConfig(
        name="mine",
        order=["hbm", "dram"],
        hbm=TierConfig(policy=[top], capacity=[capacity]),
        dram=TierConfig(policy=[low], capacity=[capacity]),
    )


def engine_refusal(call: Any) -> prefixsim.ParameterError | None:
    try:
        call()
    except prefixsim.ParameterError as err:
        return err
    return None


@pytest.mark.parametrize("position", [0, 1])
def test_a_tier_policy_is_refused_at_planning_iff_the_engine_refuses_it(
    tmp_path: Path,
    small_trace: Path,  # noqa: F811
    position: int,
) -> None:
    # issue 22: tiers.hbm.policy=CLOCK passed planning, wrote the run folder, then advised
    # engine='reference' under tiers[0].policy. The engine decides which policy runs where.
    tiny = prefixsim.load_trace(small_trace)
    for policy in prefixsim.policy_names():
        top, low = (policy, "LRU") if position == 0 else ("LRU", policy)
        tiers = [
            {"name": "hbm", "policy": top, "capacity": 64},
            {"name": "dram", "policy": low, "capacity": 64},
        ]
        err = engine_refusal(lambda tiers=tiers: replay_tiers(tiny, tiers, block_size=512))
        cfg = config(tmp_path / policy / "out", small_trace, tiers=two_tiers(top, low))
        if err is None:
            continue  # accepted by the engine: the sweep runs it (tests/test_sweep_tiers.py)
        message = refused(cfg)
        level = ("hbm", "dram")[position]
        assert f"tiers.{level}.policy={policy!r}" in message, message
        assert "tiers[" not in message and "engine=" not in message, message


@pytest.mark.parametrize("policy", sorted(prefixsim.policy_names()))
def test_a_policy_behind_a_router_is_refused_at_planning_iff_the_engine_refuses_it(
    tmp_path: Path,
    small_trace: Path,  # noqa: F811
    policy: str,
) -> None:
    from prefixsim.cluster import make_router, replay_cluster_params

    tiny = prefixsim.load_trace(small_trace)
    params = prefixsim.make_params(policy, 64)
    router = make_router("round_robin")
    err = engine_refusal(lambda: replay_cluster_params(tiny, params, 512, 2, router, None))
    cfg = config(tmp_path / "out", small_trace, policy=[policy], capacity=[64], instances=[2])
    if err is None:
        return
    assert f"invalid {err.name}={err.value!r}: {err.allowed}" in refused(cfg)


@pytest.mark.parametrize(
    ("kw", "needle"),
    [
        # accepted by planning, refused at run time (exit 1, a failed run folder) before
        ({"block_size": [2**40]}, "invalid block_size=1099511627776: expected an integer in"),
        ({"capacity": [2**63]}, "capacity=9223372036854775808"),
        # (seed=2**128 was refused too; seeds are now taken modulo 2**64, as documented)
        ({"router": ["session"], "vnodes": [2**32 - 1]}, "invalid vnodes=4294967295: the session"),
    ],
)
def test_values_refused_at_run_time_are_refused_at_planning(
    tmp_path: Path,
    small_trace: Path,  # noqa: F811
    kw: dict[str, Any],
    needle: str,
) -> None:
    assert needle in refused(config(tmp_path / "out", small_trace, **kw))


def test_a_refusal_planted_in_the_engine_is_met_at_planning(
    tmp_path: Path,
    small_trace: Path,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # the mechanism, whatever the engine's rules: planning asks the replay's own checks
    # (prefixsim.replay.check_replay, which replay_params runs first), so a refusal planted
    # there is planning's
    replay_module = sys.modules["prefixsim.replay"]
    real = replay_module.check_replay
    calls = Counter[int]()

    def planted(trace, params, block_size, **kw):  # type: ignore[no-untyped-def]
        calls[params.capacity] += 1
        if params.capacity >= 5000:
            raise prefixsim.ParameterError("capacity", params.capacity, "a planted refusal")
        return real(trace, params, block_size, **kw)

    monkeypatch.setattr(replay_module, "check_replay", planted)
    capacities = list(range(100, 5001, 100))  # 50 capacities, the last one refused
    cfg = config(tmp_path / "out", small_trace, policy=["S3FIFO"], capacity=capacities)
    message = refused(cfg)
    assert "invalid capacity=5000: a planted refusal" in message
    assert "capacity=5000" in message.split("first point refused:")[1]
    # checked at its smallest and largest capacity (and two between), not at all 50
    assert {100, 5000} <= set(calls) and sum(calls.values()) <= 4


@pytest.mark.parametrize(
    "kw",
    [
        {"policy": ["S3FIFO", "LRU", "SIEVE"], "capacity": [64, 128, 256, 512, 1024]},
        {"policy": ["LRU"], "capacity": [4096], "semantics": ["vllm"]},
        {"tiers": two_tiers("LRU", "S3FIFO")},
        {"policy": ["S3FIFO"], "capacity": [64], "instances": [2], "router": ["round_robin"]},
    ],
    ids=["cache", "vllm", "tiers", "cluster"],
)
def test_planning_replays_no_request(
    tmp_path: Path,
    small_trace: Path,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    kw: dict[str, Any],
) -> None:
    # planning asks the engine's checks and replays nothing: every replay of the sweep (each
    # composition's compiled replay, the LRU curve, any scenario) happens once the run folder
    # exists, i.e. after planning
    from prefixsim.cluster import driver as cluster_driver
    from prefixsim.engine import single, tiers
    from sweep import outcome

    out = tmp_path / "out"
    before: list[str] = []

    def watched(module: Any, name: str) -> None:
        real = getattr(module, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            if not out.exists():
                before.append(f"{module.__name__}.{name}")
            return real(*args, **kwargs)

        monkeypatch.setattr(module, name, call)

    for module, name in [
        (single, "run"),
        (tiers, "run"),
        (cluster_driver, "run"),
        (outcome, "run_scenario"),
        (prefixsim, "lru_curve"),
    ]:
        watched(module, name)
    summary = run_sweep(config(out, small_trace, **kw))
    assert summary.exit_code == 0 and summary.planned >= 1
    assert before == []


@pytest.mark.parametrize(
    "kw",
    [
        {"capacity": []},
        {"router": []},
        {"instances": []},
        {"overlap_weight": []},
        {"small_ratio": [], "policy": ["LRU"]},
        {"tiers": TiersConfig(name="t", order=["hbm"], hbm=TierConfig(capacity=[]))},
        {"tiers": TiersConfig(name="t", order=["hbm"], hbm=TierConfig(), mode=[])},
    ],
)
def test_an_empty_list_is_refused_for_every_grid_key(
    tmp_path: Path,
    small_trace: Path,  # noqa: F811
    kw: dict[str, Any],
) -> None:
    # issue 22: 'tiers.dram.capacity=[]', 'router=[]', 'instances=[]' were 0-row successes
    message = refused(config(tmp_path / "out", small_trace, **kw))
    assert message.endswith(": empty list; the grid needs at least one value"), message


@pytest.mark.parametrize(
    "kw",
    [{"cache_size": ["1GiB"]}, {"instances": [2]}, {"router": ["kv_aware"]}, {"capacity": [64]}],
)
def test_a_key_a_hierarchy_ignores_is_refused(
    tmp_path: Path,
    small_trace: Path,  # noqa: F811
    kw: dict[str, Any],
) -> None:
    # issue 22: tiers= silently ignored cache_size, instances and router (one row, no warning)
    (key,) = kw
    cfg = config(tmp_path / "out", small_trace, tiers=two_tiers("LRU", "LRU"), **kw)
    assert refused(cfg).startswith(f"{key}: does not apply to a hierarchy")


@pytest.mark.parametrize(
    ("kw", "needle"),
    [
        ({"overlap_weight": [-1.0]}, "invalid overlap_weight=-1.0"),
        ({"overlap_weight": [-1.0], "router": ["round_robin"]}, "invalid overlap_weight=-1.0"),
        ({"vnodes": [0]}, "invalid vnodes=0"),
        ({"small_ratio": [-1.0], "policy": ["LRU"]}, "invalid small_ratio=-1.0"),
        (
            {"tiers": TiersConfig(name="t", order=["hbm"], hbm=TierConfig(small_ratio=[2.0]))},
            "invalid tiers.hbm.small_ratio=2.0",
        ),
    ],
)
def test_a_value_no_point_uses_is_checked_too(
    tmp_path: Path,
    small_trace: Path,  # noqa: F811
    kw: dict[str, Any],
    needle: str,
) -> None:
    # issue 22: overlap_weight=-1 was accepted when no kv_aware point is in the grid
    assert needle in refused(config(tmp_path / "out", small_trace, **kw))


def test_defaults_and_valid_unused_values_run(tmp_path: Path, small_trace: Path) -> None:  # noqa: F811
    cfg = config(tmp_path / "out", small_trace, policy=["LRU"], capacity=[64], small_ratio=[0.3])
    summary = run_sweep(cfg)
    assert summary.exit_code == 0 and summary.planned == 1
