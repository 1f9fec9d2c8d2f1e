"""Capacities and sizes that cannot fit: refused before anything is allocated, with the size
they would need, the same way by the CLI, the API and the grid (issue 22: ``--capacity
100000000000`` asked for 1 TiB, ``2**63`` with FIFO and ``2**64 + 1`` were numba errors, a
5,000-digit ``cache_size`` hit Python's integer-string limit)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from cli_checks import one_line_exit_2, run_module
from prefixsim import ParameterError, make_params, policy_names, replay
from prefixsim.params_grid import make_params_grid
from prefixsim.policies import base
from prefixsim.policies.base import DEFAULT_BYTES_PER_SLOT, PolicySpec, get_policy
from prefixsim.trace import Trace
from prefixsim.units import parse_size

BIG = 2**44  # 16 Ti blocks: the state of every capacity-sized kernel passes any machine's memory


@pytest.mark.parametrize("policy", policy_names())
@pytest.mark.parametrize(
    "capacity", [2**63, 2**64 + 1, 10**5000], ids=["2**63", "2**64+1", "10**5000"]
)
def test_capacity_past_int64_is_refused_as_such(policy: str, capacity: int) -> None:
    with pytest.raises(ParameterError, match="past int64") as err:
        make_params(policy, capacity)
    assert len(str(err.value)) < 200


@pytest.mark.parametrize(
    ("capacity", "policy"),
    [("9223372036854775808", "FIFO"), ("18446744073709551617", "LRU")],
)
def test_cli_capacity_past_int64(capacity: str, policy: str) -> None:
    one_line_exit_2(
        run_module("prefixsim", "conversation", "--policy", policy, "--capacity", capacity),
        "past int64",
    )


@pytest.mark.parametrize("policy", ["S3FIFO", "CLOCK", "S3FIFO_LCS"])
def test_capacity_whose_state_cannot_fit_is_refused_with_its_size(policy: str) -> None:
    spec = get_policy(policy)
    with pytest.raises(ParameterError, match=r"would need .* of memory") as err:
        make_params(policy, BIG)
    params_like = type("P", (), {"capacity": BIG, "ghost_cap": BIG - round(BIG * 0.1)})()
    needed = spec.working_bytes(params_like)  # what the message says it would need
    assert f"({needed} bytes)" in str(err.value)


def test_cli_capacity_too_large_names_the_size() -> None:
    err = one_line_exit_2(
        run_module("prefixsim", "conversation", "--policy", "CLOCK", "--capacity", str(BIG))
    )
    assert f"{5 * BIG} bytes" in err and "memory" in err


def test_cli_cache_size_exabytes() -> None:
    # 7 EiB of llama-3.1-8b blocks: 1.1e11 blocks of S3FIFO state (issue 22: 1.22 TiB asked for)
    proc = run_module(
        "prefixsim", "conversation", "--model", "llama-3.1-8b", "--cache-size", "7EiB"
    )
    one_line_exit_2(proc, "invalid capacity=", "of memory")


def test_capacity_independent_state_is_not_refused() -> None:
    # LRU's state is per distinct block: a huge capacity costs nothing (every block stays)
    trace = replay("conversation", "LRU", capacity=2**62)
    assert (
        trace.final_cache_blocks == trace.counters["block_accesses"] - trace.counters["block_hits"]
    )
    assert make_params("BELADY", 2**62).capacity == 2**62  # its heap is bounded by the trace
    # FIFO's and S3FIFO_LEAF's steps keep their queues as lists over the blocks (the kernels
    # before them had rings of capacity slots): a capacity alone costs them nothing
    assert make_params("FIFO", BIG).capacity == BIG
    assert make_params("S3FIFO_LEAF", BIG).capacity == BIG


def test_grid_and_construction_agree_on_memory() -> None:
    combos: list[dict[str, Any]] = [{"small_ratio": 0.1}, {"small_ratio": 0.5}]
    capacities = [100, BIG, 2**63, 64, BIG // 2]
    grid = make_params_grid("S3FIFO", capacities, combos)
    for k, entry in enumerate(grid):
        c, combo = capacities[k // len(combos)], combos[k % len(combos)]
        try:
            expected: Any = make_params("S3FIFO", c, **combo)
        except ParameterError as err:
            expected = err
        assert type(entry) is type(expected)
        assert str(entry) == str(expected)


def test_every_builtin_policy_declares_its_state() -> None:
    for name in policy_names():
        assert get_policy(name).state_bytes is not None, name


def _trace(n_blocks: int) -> Trace:
    return Trace(
        name="wide.jsonl",
        sha256="0" * 64,
        timestamps=np.zeros(1),
        input_lengths=np.array([512], dtype=np.int64),
        output_lengths=np.zeros(1, dtype=np.int64),
        offsets=np.array([0, 1], dtype=np.int64),
        block_ids=np.zeros(1, dtype=np.int32),
        n_blocks=n_blocks,
        line_numbers=np.ones(1, dtype=np.int64),
    )


def test_replay_checks_the_trace_part_of_the_state_before_the_kernel() -> None:
    """A trace that claims 2**40 distinct blocks: the per-block state (16 TiB for LRU) is
    refused before numpy or the kernel allocates it."""
    from prefixsim.replay import replay_params

    with pytest.raises(ParameterError, match="a trace of 1099511627776 distinct blocks"):
        replay_params(_trace(2**40), make_params("LRU", 4), 512)


def test_default_state_bytes_for_a_policy_without_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """A policy whose spec gives no ``state_bytes`` is held to the conservative default."""
    from prefixsim._memory import memory_limit_bytes

    spec = get_policy("FIFO")
    bare = PolicySpec(
        name=spec.name,
        params_type=spec.params_type,
        reference=spec.reference,
        steps=spec.steps,
    )
    monkeypatch.setitem(base._REGISTRY, "FIFO", bare)
    slots = memory_limit_bytes() // DEFAULT_BYTES_PER_SLOT
    with pytest.raises(ParameterError, match="FIFO's state"):
        make_params("FIFO", slots + 1)
    assert make_params("FIFO", slots // 2).capacity == slots // 2
    # FIFO's own state_bytes (lists over the blocks, nothing a slot) accepts what the default
    # refuses
    monkeypatch.setitem(base._REGISTRY, "FIFO", spec)
    assert make_params("FIFO", slots + 1).capacity == slots + 1


@pytest.mark.parametrize(
    "text",
    ["1" + "0" * 5000, "0." + "0" * 5000 + "1GiB", "9" * 10**5, "1." + "1" * 5000 + "EiB"],
    ids=["5000-digit", "long-fraction", "100k-digit", "long-fraction-EiB"],
)
def test_cache_size_of_thousands_of_digits(text: str) -> None:
    with pytest.raises(ParameterError) as err:
        parse_size("cache_size", text)
    assert len(str(err.value)) < 400


def test_cache_size_long_but_exact() -> None:
    assert parse_size("cache_size", "0" * 5000 + "1GiB") == 2**30
    assert parse_size("cache_size", "1." + "0" * 5000 + "KiB") == 1024
    # 2**-60 EiB is one byte: its 60 decimals are all significant
    assert parse_size("cache_size", f"{1 / 2**60:.60f}EiB") == 1
    with pytest.raises(ParameterError):
        parse_size("cache_size", 10**5000)


def test_cli_cache_size_of_5000_digits() -> None:
    proc = run_module(
        "prefixsim", "conversation", "--model", "llama-3.1-8b", "--cache-size", "1" + "0" * 5000
    )
    err = one_line_exit_2(proc, "too large")
    assert len(err) < 400
