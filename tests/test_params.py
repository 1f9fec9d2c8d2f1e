"""Parameter validation: every bad value names the parameter, the value and what is allowed."""

from __future__ import annotations

import pytest

from conftest import make_trace
from prefixsim import ParameterError, make_params, replay
from prefixsim.policies.s3fifo import S3FIFOParams

TRACE = make_trace([(512, [1])])


@pytest.mark.parametrize(
    ("kwargs", "name", "allowed"),
    [
        ({"capacity": 0}, "capacity", "integer >= 1"),
        ({"capacity": -4}, "capacity", "integer >= 1"),
        ({"capacity": 1.5}, "capacity", "integer >= 1"),
        ({"capacity": True}, "capacity", "not a boolean"),
        ({"capacity": "4096"}, "capacity", "integer >= 1"),
        ({"block_size": 0}, "block_size", "integer in [1, "),
        ({"block_size": 2.0}, "block_size", "integer in [1, "),
        ({"block_size": 2**31}, "block_size", "integer in [1, 2147483647]"),
        ({"small_ratio": 0}, "small_ratio", "(0, 1)"),
        ({"small_ratio": 1.0}, "small_ratio", "(0, 1)"),
        ({"small_ratio": -0.1}, "small_ratio", "(0, 1)"),
        ({"small_ratio": True}, "small_ratio", "(0, 1)"),
        ({"small_ratio": "0.1"}, "small_ratio", "(0, 1)"),
        # round(2 * 0.1) = 0: S would be empty
        ({"capacity": 2, "small_ratio": 0.1}, "small_ratio", "leaves S empty"),
        # round(10 * 0.97) = 10: M would be empty
        ({"capacity": 10, "small_ratio": 0.97}, "small_ratio", "leaves M empty"),
        # S3FIFO needs two blocks
        ({"capacity": 1, "small_ratio": 0.5}, "small_ratio", "capacity >= 2"),
        ({"max_freq": -1}, "max_freq", "integer in [0, "),
        ({"max_freq": 2.5}, "max_freq", "integer in [0, "),
        ({"ghost_freq": 4}, "ghost_freq", "integer in [0, 3]"),
        ({"max_freq": 1, "ghost_freq": 2}, "ghost_freq", "integer in [0, 1]"),
        ({"ghost_freq": -1}, "ghost_freq", "integer in [0, 3]"),
        ({"policy": "ARC2"}, "policy", "expected one of ARC, BELADY, CLOCK, FIFO, LFU, LRU,"),
        ({"engine": "fast"}, "engine", "expected one of kernel, reference"),
    ],
)
def test_bad_parameter_is_named(kwargs: dict, name: str, allowed: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(ParameterError) as info:
        replay(TRACE, **kwargs)
    assert info.value.name == name
    assert allowed in str(info.value)
    assert f"invalid {name}=" in str(info.value)


def test_lru_accepts_capacity_one_and_ignores_s3fifo_parameters() -> None:
    result = replay(make_trace([(512, [1]), (512, [1]), (512, [2]), (512, [1])]), "LRU", 1,
                    small_ratio=0.999)  # fmt: skip
    # capacity 1: [1] miss, [1] hit 512, [2] evicts 1, [1] miss
    assert result.hit_tokens.tolist() == [0, 512, 0, 0]
    assert result.params.to_dict() == {"policy": "LRU", "capacity": 1}


def test_unknown_policy_parameter_is_rejected() -> None:
    with pytest.raises(ParameterError, match="not a parameter of LRU"):
        make_params("LRU", 8, small_ratio=0.2)


def test_numpy_integers_are_accepted() -> None:
    import numpy as np

    params = S3FIFOParams(capacity=np.int64(4096), max_freq=np.int32(2))  # type: ignore[arg-type]
    assert params.capacity == 4096 and type(params.capacity) is int
    assert params.max_freq == 2 and type(params.max_freq) is int
