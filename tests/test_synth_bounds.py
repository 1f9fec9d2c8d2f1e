"""``prefixsim.synth`` under hostile parameters (issue 22): every field validated, no hang, no
traceback, and what it writes the tool reads (finite timestamps, hash_ids that are not all
empty); seeds taken modulo 2**64 as for the cluster's router."""

from __future__ import annotations

import dataclasses
import json
import math
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import prefixsim
from cli_checks import one_line_exit_2, run_module
from prefixsim import ParameterError
from prefixsim.synth import SynthConfig, plan_trace, synth_plan

SMALL = SynthConfig(
    requests=40, system_tokens_median=40, first_tokens_median=30, max_prompt_tokens=4000
)


# Every field of SynthConfig with a value that must be refused (each names its field).
BAD: list[tuple[str, Any]] = [
    ("requests", 0),
    ("requests", 100_000_000_000),
    ("requests", 2.5),
    ("requests", True),
    ("seed", 1.5),
    ("seed", True),
    ("rate", 0.0),
    ("rate", 1e-320),
    ("rate", float("inf")),
    ("system_prompts", 0),
    ("system_prompts", 10_000_000_000),
    ("system_zipf", float("nan")),
    ("system_zipf", -1.0),
    ("system_tokens_median", float("inf")),
    ("system_tokens_median", 0.0),
    ("system_tokens_sigma", float("nan")),
    ("system_tokens_sigma", -0.1),
    ("turns_mean", float("inf")),
    ("turns_mean", 1e18),
    ("turns_mean", 0.5),
    ("first_tokens_median", float("nan")),
    ("first_tokens_sigma", float("inf")),
    ("followup_tokens_median", -3.0),
    ("followup_tokens_sigma", float("-inf")),
    ("answer_tokens_median", float("inf")),
    ("answer_tokens_sigma", float("nan")),
    ("think_time", float("inf")),
    ("think_time", 1e308),
    ("think_time", 0.0),
    ("agent_fraction", 1.5),
    ("agent_fraction", float("nan")),
    ("agent_turns_mean", float("inf")),
    ("agent_context_tokens_median", float("inf")),
    ("agent_context_tokens_sigma", float("nan")),
    ("agent_step_tokens_median", 0.0),
    ("agent_step_tokens_sigma", -1.0),
    ("agent_delay", float("inf")),
    ("agent_delay", "5"),
    ("max_prompt_tokens", 0),
    ("max_prompt_tokens", 2**31),
]


def test_every_field_has_a_refused_value() -> None:
    assert {f for f, _ in BAD} == {f.name for f in dataclasses.fields(SynthConfig)}


@pytest.mark.parametrize(("field", "value"), BAD, ids=[f"{f}={v!r}" for f, v in BAD])
def test_each_field_is_validated(field: str, value: Any) -> None:
    with pytest.raises(ParameterError, match=f"invalid {field}="):
        synth_plan(dataclasses.replace(SMALL, **{field: value}))


@pytest.mark.parametrize(
    "args",
    [
        ["--block-size", "0"],
        ["--block-size", "-1"],
        ["--block-size", "1099511627776"],
        ["--seed", "1.5"],
        ["--system-zipf", "nan"],
        ["--turns-mean", "inf"],
        ["--turns-mean", "1e18"],
        ["--system-tokens-median", "inf"],
        ["--requests", "100000000000"],
        ["--requests", "1e11"],
        ["--system-prompts", "10000000000"],
        ["--agent-delay", "inf", "--agent-fraction", "0.5"],
        ["--think-time", "inf"],
        ["--think-time", "1e308"],
    ],
)
def test_cli_refuses_in_one_line(tmp_path: Path, args: list[str]) -> None:
    out = tmp_path / "s.jsonl"
    proc = run_module("prefixsim.synth", str(out), "--requests", "20", *args)
    if args[1] == "1.5":  # not an integer: argparse's own error, exit 2, nothing written
        assert proc.returncode == 2 and "invalid integer value" in proc.stderr
    else:
        one_line_exit_2(proc, "invalid ")
    assert not out.exists()


def test_requests_as_an_exponent() -> None:
    from prefixsim.synth import _integer

    assert _integer("1e3") == 1000 and _integer("12") == 12 and _integer("-1") == -1


# -- seeds: any integer, taken modulo 2**64 -----------------------------------------------------


def test_seed_is_taken_modulo_2_64() -> None:
    a = synth_plan(dataclasses.replace(SMALL, seed=-1))
    b = synth_plan(dataclasses.replace(SMALL, seed=2**64 - 1))
    c = synth_plan(dataclasses.replace(SMALL, seed=2**128 + 5))
    d = synth_plan(dataclasses.replace(SMALL, seed=5))
    assert np.array_equal(a.timestamps, b.timestamps)
    assert np.array_equal(c.timestamps, d.timestamps)
    assert not np.array_equal(a.timestamps, d.timestamps)


# -- no hang: a cap below what a first turn needs -----------------------------------------------


def test_cap_below_the_system_prompt_is_refused_at_once(tmp_path: Path) -> None:
    start = time.perf_counter()
    proc = run_module(
        "prefixsim.synth",
        str(tmp_path / "s.jsonl"),
        "--requests",
        "50",
        "--max-prompt-tokens",
        "600",
    )
    one_line_exit_2(proc, "invalid max_prompt_tokens=600", "700 tokens")
    assert time.perf_counter() - start < 30


def test_cap_that_almost_no_turn_fits_terminates() -> None:
    # 702 tokens: the 700-token system prompt and a first message of at most 2 tokens (median
    # 5000): no turn is kept, and the draws stop instead of doubling forever
    start = time.perf_counter()
    with pytest.raises(ParameterError, match="too few turns fit"):
        synth_plan(SynthConfig(requests=50, max_prompt_tokens=702))
    assert time.perf_counter() - start < 30


# -- what synth writes, the tool reads ----------------------------------------------------------


def test_huge_sigmas_give_a_valid_trace() -> None:
    """A sigma of 1000 draws lengths past float64 (it was ``negative dimensions``): a message
    past the cap ends its session as any other would, and the rest is a trace."""
    cfg = dataclasses.replace(SMALL, requests=200, first_tokens_sigma=1000.0, seed=3)
    plan = synth_plan(cfg)
    assert plan.n_requests == 200
    assert (plan.prompt_tokens >= 1).all() and (plan.prompt_tokens <= cfg.max_prompt_tokens).all()
    assert (plan.output_lengths >= 1).all()
    trace = plan_trace(plan, 16)
    assert trace.n_accesses > 0


def test_an_answer_past_2_62_tokens_is_refused() -> None:
    cfg = dataclasses.replace(SMALL, answer_tokens_median=1e18, answer_tokens_sigma=50.0)
    with pytest.raises(ParameterError, match="answer_tokens_sigma"):
        synth_plan(cfg)


def test_large_delays_still_give_finite_json(tmp_path: Path) -> None:
    out = tmp_path / "s.jsonl"
    args = ["--requests", "30", "--think-time", "1e12", "--agent-fraction", "0.5"]
    proc = run_module("prefixsim.synth", str(out), *args, "--agent-delay", "1e12", "--rate", "1e-9")
    assert proc.returncode == 0, proc.stderr
    for line in out.read_text().splitlines():
        row = json.loads(line, parse_constant=lambda c: pytest.fail(f"non-standard JSON {c}"))
        assert math.isfinite(row["timestamp"])
    assert prefixsim.load_trace(out).n_requests == 30


def test_block_size_longer_than_every_prompt_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "s.jsonl"
    proc = run_module(
        "prefixsim.synth", str(out), "--requests", "5", "--block-size", str(2**31 - 1)
    )
    one_line_exit_2(proc, "invalid block_size=2147483647", "every hash_ids would be empty")
    assert not out.exists()


def test_plan_trace_checks_its_block_size() -> None:
    plan = synth_plan(SMALL)
    for bad in (0, -1, 2**40, True):
        with pytest.raises(ParameterError, match="block_size"):
            plan_trace(plan, bad)


def test_memory_of_a_plan_is_checked_before_drawing() -> None:
    start = time.perf_counter()
    with pytest.raises(ParameterError, match=r"invalid requests=2147483647: .* of memory"):
        synth_plan(SynthConfig(requests=2**31 - 1))
    assert time.perf_counter() - start < 5
