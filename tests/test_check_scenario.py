"""``check_scenario`` asks the engine's own checks of a scenario without replaying it: it refuses
exactly what ``run_scenario`` refuses, with the same one-line message (what the sweep's planning
relies on, ``sweep.engine_checks``)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

import prefixsim
from prefixsim import ParameterError, Semantics, make_params
from prefixsim.cluster import make_router
from prefixsim.scenario import Cluster, Scenario, check_scenario, run_scenario
from prefixsim.tiers import Hierarchy, make_tier


def _trace() -> prefixsim.Trace:
    trace = prefixsim.load_trace("conversation")
    n = 40  # the first requests: enough for every rule below, quick to replay
    end = int(trace.offsets[n])
    return dataclasses.replace(
        trace,
        timestamps=trace.timestamps[:n],
        input_lengths=trace.input_lengths[:n],
        output_lengths=trace.output_lengths[:n],
        line_numbers=trace.line_numbers[:n],
        offsets=trace.offsets[: n + 1],
        block_ids=trace.block_ids[:end],
        session_ids=None if trace.session_ids is None else trace.session_ids[:n],
    )


TRACE = _trace()


def _outcome(call: Any) -> str | None:
    try:
        call()
    except ParameterError as err:
        return str(err)
    return None


def _scenario(kind: str, policy: str, x: Any) -> Scenario:
    if kind == "cache":
        return Scenario(_params(policy, x))
    if kind in ("vllm", "sglang"):
        return Scenario(_params(policy, x), semantics=Semantics(kind))
    if kind == "tiers":  # the policy above LRU or below it
        own = make_tier(policy, 64, name="a", **_extra(policy))
        lru = make_tier("LRU", 64, name="b")
        return Scenario(Hierarchy(capacity=0, tiers=(own, lru) if x == "upper" else (lru, own)))
    return Scenario(_params(policy, 64), cluster=Cluster(2, make_router(x), _load(x)))


CASES = [
    (kind, policy, x)
    for policy in prefixsim.policy_names()
    for kind, xs in [
        ("cache", (2, 4096)),
        ("vllm", (2, 4096)),
        ("sglang", (4096,)),
        ("tiers", ("upper", "lower")),
        ("cluster", ("round_robin", "kv_aware")),
    ]
    for x in xs
]
"""Every composition with each policy, the engine semantics, and values each refuses."""


def _extra(policy: str) -> dict[str, Any]:
    # S3FIFO_LCS with a small queue of one slot: the single cache runs it, its steps refuse it
    return {"small_ratio": 1 / 64} if policy == "S3FIFO_LCS" else {}


def _params(policy: str, capacity: int) -> Any:
    return make_params(policy, capacity, **_extra(policy))


def _load(router: str) -> Any:
    if router != "kv_aware":
        return None
    from prefixsim.cluster import LoadModel

    return LoadModel(prefixsim.load_model("llama-3.1-8b"), "h100")  # type: ignore[arg-type]


@pytest.mark.slow
@pytest.mark.parametrize(("kind", "policy", "x"), CASES)
def test_check_scenario_refuses_exactly_what_the_replay_refuses(
    kind: str, policy: str, x: Any
) -> None:
    try:
        scenario = _scenario(kind, policy, x)
    except ParameterError:
        return  # refused by the constructor, before either is asked
    checked = _outcome(lambda: check_scenario(TRACE, scenario))
    ran = _outcome(lambda: run_scenario(TRACE, scenario))
    assert checked == ran


def test_the_cases_hold_refusals_of_every_kind() -> None:
    # the equality above is worth something only if the replay refuses some of the cases: the
    # compiled steps (RADIX), a small queue the steps refuse (S3FIFO_LCS), a removal the engine
    # semantics need (CLOCK, ARC), the requests vLLM's capacity cannot fit, a tier position
    for kind, policy, x in [
        ("tiers", "RADIX", "upper"),
        ("cluster", "S3FIFO_LCS", "kv_aware"),
        ("vllm", "CLOCK", 4096),
        ("sglang", "ARC", 4096),
        ("vllm", "LRU", 2),
        ("tiers", "CLOCK", "lower"),
    ]:
        with pytest.raises(ParameterError):
            check_scenario(TRACE, _scenario(kind, policy, x))


def test_check_scenario_refuses_a_state_too_large_for_the_trace() -> None:
    # a trace claiming 2**40 distinct blocks: every composition's state is refused, unreplayed
    wide = dataclasses.replace(TRACE, n_blocks=2**40)
    for scenario in (
        Scenario(make_params("LRU", 64)),
        Scenario(Hierarchy(capacity=0, tiers=(make_tier("LRU", 64), make_tier("SIEVE", 64)))),
        Scenario(make_params("SIEVE", 64), cluster=Cluster(2, make_router("round_robin"))),
    ):
        with pytest.raises(ParameterError, match="1099511627776 distinct blocks"):
            check_scenario(wide, scenario)


def test_check_scenario_replays_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    from prefixsim.engine import single

    def boom(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("replayed")

    monkeypatch.setattr(single, "run", boom)
    check_scenario(TRACE, Scenario(make_params("SIEVE", 64)))
    check_scenario(TRACE, Scenario(make_params("SIEVE", 4096), semantics=Semantics("vllm")))
