"""The workload generator: determinism, structure-derived blocks equal hashed tokens, the preset."""

from __future__ import annotations

import dataclasses
import gzip
import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import prefixsim
from prefixsim import ParameterError
from prefixsim.formats.tokens import hash_tokens
from prefixsim.synth import PRESETS, SynthConfig, main, plan_tokens, plan_trace, synth_plan

SMALL = SynthConfig(
    requests=60,
    system_prompts=3,
    system_tokens_median=40,
    system_tokens_sigma=0.5,
    first_tokens_median=30,
    followup_tokens_median=10,
    answer_tokens_median=8,
    agent_fraction=0.3,
    agent_turns_mean=4,
    agent_context_tokens_median=80,
    agent_step_tokens_median=5,
    max_prompt_tokens=400,
)


def test_same_seed_same_trace_other_seed_other_trace() -> None:
    a, b, c = (plan_trace(synth_plan(dataclasses.replace(SMALL, seed=s)), 16) for s in (7, 7, 8))
    for name in ("timestamps", "input_lengths", "output_lengths", "offsets", "block_ids"):
        assert np.array_equal(getattr(a, name), getattr(b, name))
    assert a.sha256 == b.sha256 != c.sha256


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32), block_size=st.integers(1, 64), zipf=st.floats(0.0, 2.0))
def test_structural_blocks_equal_hashed_tokens(seed: int, block_size: int, zipf: float) -> None:
    plan = synth_plan(dataclasses.replace(SMALL, seed=seed, system_zipf=zipf))
    structural = plan_trace(plan, block_size)
    hashed = hash_tokens(plan_tokens(plan), block_size, "synth")
    assert np.array_equal(structural.offsets, hashed["offsets"])
    assert np.array_equal(structural.block_ids, hashed["block_ids"])
    assert structural.n_blocks == hashed["n_blocks"]
    assert np.array_equal(structural.input_lengths, hashed["input_lengths"])


def test_session_ids_are_the_sessions_in_order_of_first_request() -> None:
    # Derived from the plan's prompts alone: requests of one session extend each other's
    # prompts, so two requests share a session exactly when they share blocks past the system
    # prompt; numbering by first request means each new session is max-so-far + 1.
    plan = synth_plan(dataclasses.replace(SMALL, requests=300, seed=5))
    sessions = plan_trace(plan, 16).session_ids
    assert sessions is not None and sessions.dtype == np.int64
    seen = -1
    for s in sessions.tolist():
        assert s <= seen + 1
        seen = max(seen, s)
    assert seen + 1 == plan.n_sessions
    tokens = plan_tokens(plan)
    own_first = {}  # a session's first own token id: unique to it
    for i, s in enumerate(sessions.tolist()):
        a = int(tokens.token_offsets[i] + plan.system_tokens[plan.system[i]])
        assert own_first.setdefault(s, int(tokens.tokens[a])) == int(tokens.tokens[a])
    assert len(set(own_first.values())) == len(own_first)


def test_sessions_extend_their_prompts() -> None:
    # Within a session, turn t's prompt = turn t-1's prompt + its answer + a new message, so
    # prompts strictly grow by more than the previous answer; arrivals are sorted.
    plan = synth_plan(dataclasses.replace(SMALL, requests=300, seed=3))
    assert (np.diff(plan.timestamps) >= 0).all()
    for s in range(plan.n_sessions):
        idx = np.flatnonzero(plan.session == s)
        grow = np.diff(plan.prompt_tokens[idx])
        assert (grow > plan.output_lengths[idx][:-1]).all()
    assert plan.prompt_tokens.max() <= SMALL.max_prompt_tokens


def test_the_conversation_preset_matches_the_bundled_trace() -> None:
    # The tolerances: request count exact, mean and median prompt length and the
    # distinct-block count within 10%, the infinite-cache hit rate within 3 points.
    ref = prefixsim.load_trace("conversation")
    syn = plan_trace(synth_plan(PRESETS["conversation"]), 512)
    assert syn.n_requests == ref.n_requests == 12_031
    assert abs(syn.input_lengths.mean() / ref.input_lengths.mean() - 1) < 0.10
    assert abs(np.median(syn.input_lengths) / np.median(ref.input_lengths) - 1) < 0.10
    assert abs(syn.n_blocks / ref.n_blocks - 1) < 0.10
    hit = prefixsim.ceiling(syn, 512).overall_hit_rate
    assert abs(hit - prefixsim.ceiling(ref, 512).overall_hit_rate) < 0.03


def test_cli_writes_a_loadable_trace(tmp_path: Path) -> None:
    out = tmp_path / "s.jsonl.gz"
    args = [str(out), "--requests", "50", "--seed", "3", "--system-tokens-median", "600"]
    assert main([*args, "--block-size", "64"]) == 0
    trace = prefixsim.load_trace(out)
    expected = plan_trace(
        synth_plan(SynthConfig(requests=50, seed=3, system_tokens_median=600)), 64
    )
    assert np.array_equal(trace.block_ids, expected.block_ids)
    assert expected.session_ids is not None and trace.session_ids is not None
    assert np.array_equal(trace.session_ids, expected.session_ids)
    tokens_out = tmp_path / "s.tokens.jsonl.gz"
    assert main([str(tokens_out), "--requests", "5", "--format", "tokens"]) == 0
    with gzip.open(tokens_out, "rt") as f:
        first = json.loads(f.readline())
    assert set(first) == {"timestamp", "token_ids", "output_length", "session_id"}


@pytest.mark.parametrize(
    ("field", "value"),
    [("requests", 0), ("agent_fraction", 1.5), ("rate", 0.0), ("turns_mean", 0.5)],
)
def test_bad_parameters_are_refused(field: str, value: float) -> None:
    with pytest.raises(ParameterError, match=field):
        synth_plan(dataclasses.replace(SMALL, **{field: value}))
