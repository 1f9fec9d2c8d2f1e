"""The workload generator's distributions where no test looked: Zipf popularity of the system
prompts, the achieved request rate with agent sessions, and determinism at the default seed.

The statistical tests run at fixed seeds (deterministic) with bounds derived from the model of
``docs/synth.md``, not fitted to the output: each is 5 standard deviations of the statistic
under the documented distribution (a correct generator fails one with probability below 1e-6
per check at any seed), and a generator off by a plausible mistake misses it by tens of them.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest

from prefixsim.synth import SynthConfig, main, plan_trace, synth_plan

Z = 5.0  # standard deviations


def session_systems(plan) -> np.ndarray:  # type: ignore[no-untyped-def]
    """Each session's system prompt (after checking that all its turns share it)."""
    first = np.full(plan.n_sessions, -1)
    for s, k in zip(plan.session.tolist(), plan.system.tolist(), strict=True):
        if first[s] < 0:
            first[s] = k
        assert first[s] == k, "a session's turns share its system prompt"
    return first


@pytest.mark.parametrize("seed", [0, 11])
@pytest.mark.parametrize("zipf", [0.0, 0.8, 1.5])
def test_system_prompt_popularity_is_zipf(zipf: float, seed: int) -> None:
    # Each session draws its system prompt independently: rank k (1-based) with probability
    # p_k = k**-a / sum_j j**-a. The sessions in the trace are chosen by arrival time, which
    # does not depend on the draw, so the counts over n sessions are multinomial(n, p) and
    # count_k has mean n p_k and standard deviation sqrt(n p_k (1 - p_k)).
    # Sensitivity, 6 prompts and about 5,000 sessions (sd of count_1 <= 36): at a = 1.5 a
    # missing exponent (a = 1) moves p_1 from 0.547 to 0.408, ranks shifted by one (weights
    # from 2) to 0.401, reversed ranks to 0.037 (> 19 sd); at a = 0.8 from 0.353 to 0.408,
    # 0.281 and 0.084 (> 7 sd); at a = 0 (uniform) a missing exponent gives 0.408 (> 30 sd).
    k = 6
    cfg = SynthConfig(requests=8000, seed=seed, system_prompts=k, system_zipf=zipf)
    plan = synth_plan(cfg)
    counts = np.bincount(session_systems(plan), minlength=k)
    n = plan.n_sessions
    assert n == counts.sum() > 4500
    weights = np.arange(1, k + 1, dtype=np.float64) ** -zipf
    p = weights / weights.sum()
    for rank, (c, pk) in enumerate(zip(counts.tolist(), p.tolist(), strict=True), start=1):
        sd = math.sqrt(n * pk * (1 - pk))
        assert abs(c - n * pk) <= Z * sd, (rank, c, n * pk, sd)


def turns_moments(mean: float) -> tuple[float, float]:
    """E[K] and E[K^2] of the geometric number of turns on 1, 2, ... with mean ``mean``
    (p = 1 / mean: Var = (1 - p) / p^2 = mean^2 - mean, so E[K^2] = 2 mean^2 - mean)."""
    return mean, 2 * mean * mean - mean


@pytest.mark.parametrize(
    ("agent_fraction", "agent_turns_mean", "seed"),
    [(0.0, 10.0, 0), (0.3, 10.0, 0), (0.3, 10.0, 5), (1.0, 6.0, 0)],
)
def test_achieved_request_rate_with_agents(
    agent_fraction: float, agent_turns_mean: float, seed: int
) -> None:
    # Sessions start as a Poisson process of rate lambda = rate / E[K], K a session's turns
    # (chat with probability 1 - f, mean turns_mean; agent with probability f, mean
    # agent_turns_mean), and each emits K requests after delays that do not depend on when it
    # started. So in steady state requests arrive at lambda * E[K] = rate per second, and the
    # count in a window W has mean rate * |W| (W = [T/4, 3T/4], T = requests / rate: past
    # every session's delays, which are minutes, and before the trace's end at about T) and,
    # for a Poisson cluster process, variance <= lambda * |W| * E[K^2]
    # = rate * |W| * E[K^2] / E[K] (a session's requests in W are at most K).
    # Sensitivity (f = 0.3): session starts at rate / turns_mean (agents forgotten) make
    # requests arrive 2.6x as fast; at rate / agent_turns_mean, 0.41x; f and 1 - f swapped,
    # 0.55x. The 5-sd band is +-13.5% of the mean count.
    rate = 3.4
    cfg = SynthConfig(
        requests=40_000,
        seed=seed,
        rate=rate,
        agent_fraction=agent_fraction,
        agent_turns_mean=agent_turns_mean,
        max_prompt_tokens=2**31 - 1,  # no session is cut short: every session has its K turns
    )
    plan = synth_plan(cfg)
    chat, agent = turns_moments(cfg.turns_mean), turns_moments(agent_turns_mean)
    f = agent_fraction
    mean_k = (1 - f) * chat[0] + f * agent[0]
    mean_k2 = (1 - f) * chat[1] + f * agent[1]
    horizon = cfg.requests / rate  # seconds
    lo, hi = horizon / 4, 3 * horizon / 4
    seconds = plan.timestamps / 1000.0
    assert seconds[-1] > hi  # the window lies inside the trace
    count = int(((seconds >= lo) & (seconds < hi)).sum())
    expected = rate * (hi - lo)
    sd = math.sqrt(rate * (hi - lo) * mean_k2 / mean_k)
    assert abs(count - expected) <= Z * sd, (count, expected, sd)
    if f:
        turns = np.bincount(plan.session, minlength=plan.n_sessions)
        assert turns.max() > 3 * cfg.turns_mean  # agent loops are there


def test_default_seed_is_deterministic(tmp_path: Path) -> None:
    # seed 0 is the default: it must be a seed like any other, not "fresh entropy".
    cfg = SynthConfig(requests=300)
    assert cfg.seed == 0
    a, b = plan_trace(synth_plan(cfg), 64), plan_trace(synth_plan(cfg), 64)
    other = plan_trace(synth_plan(dataclasses.replace(cfg, seed=1)), 64)
    for name in ("timestamps", "input_lengths", "output_lengths", "block_ids", "session_ids"):
        assert np.array_equal(getattr(a, name), getattr(b, name)), name
    assert a.sha256 == b.sha256 != other.sha256
    outs = [tmp_path / f"{i}.jsonl" for i in range(3)]
    common = ["--requests", "40", "--block-size", "64"]
    assert main([str(outs[0]), *common]) == 0
    assert main([str(outs[1]), *common]) == 0
    assert main([str(outs[2]), *common, "--seed", "0"]) == 0
    assert outs[0].read_bytes() == outs[1].read_bytes() == outs[2].read_bytes()
    tokens = [tmp_path / f"{i}.tokens.jsonl" for i in range(2)]
    for path in tokens:
        assert main([str(path), "--requests", "5", "--format", "tokens"]) == 0
    assert tokens[0].read_bytes() == tokens[1].read_bytes()
