"""A policy states its state once: each field with how it is made (``prefixsim.engine.steps``),
``Steps`` derives ``make_state`` from it, and ``register`` names the policy by its parameters."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pytest

from prefixsim.engine.lists import links, per_cache
from prefixsim.engine.steps import Space, Steps, counters, extend_state, param, per_id
from prefixsim.policies import get_policy
from prefixsim.policies.lru import LRUParams, LRUReference, lru_admit, lru_hit, lru_is_resident


class _State(NamedTuple):
    link: np.ndarray = links()
    stamp: np.ndarray = per_id(np.int64)
    sc: np.ndarray = per_cache(-1, -1, 0)
    cnt: np.ndarray = counters(LRUReference)
    capacity: int = param("capacity")


def test_a_declared_state_is_made_field_by_field() -> None:
    steps = Steps(_State, is_resident=lru_is_resident, hit=lru_hit, admit=lru_admit)
    s = steps.make_state(LRUParams(capacity=7), Space(5, 3, np.zeros(4, np.int32)))
    assert type(s) is _State and s.capacity == 7
    assert s.link.shape == (10,) and not s.link.any()
    assert s.stamp.dtype == np.int64 and s.stamp.shape == (5,)
    assert s.sc.tolist() == [-1, -1, 0] * 3
    assert s.cnt.shape == (3, len(LRUReference.counter_names)) and not s.cnt.any()


def test_extend_state_keeps_the_base_fields_and_replaces_named_rules() -> None:
    wide = extend_state(_State, "_Wide", cnt=counters(LRUReference), parent=per_id(np.int32))
    assert wide._fields == (*_State._fields, "parent")
    assert wide.__module__ == __name__
    s = Steps(wide, is_resident=lru_is_resident, hit=lru_hit, admit=lru_admit).make_state(
        LRUParams(capacity=2), Space(3, 1, np.zeros(1, np.int32))
    )
    assert s.parent.dtype == np.int32 and s.parent.shape == (3,) and s.capacity == 2


def test_a_field_without_a_rule_or_a_missing_step_is_refused() -> None:
    class Bare(NamedTuple):
        link: np.ndarray
        capacity: int

    with pytest.raises(TypeError, match="Bare: no rule for link, capacity"):
        Steps(Bare, is_resident=lru_is_resident, hit=lru_hit, admit=lru_admit)
    with pytest.raises(TypeError, match="admit is required"):
        Steps(_State, is_resident=lru_is_resident, hit=lru_hit)


def test_a_policy_is_registered_under_its_parameters_name() -> None:
    spec = get_policy("LRU")
    assert spec.name == LRUParams.policy and spec.params_type is LRUParams
    assert get_policy("FIFO").steps.state.__name__ == "FIFOState"  # type: ignore[union-attr]
