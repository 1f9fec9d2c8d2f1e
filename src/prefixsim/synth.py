"""A controllable synthetic workload: multi-turn chat sessions, shared system prompts, agent loops.

``python -m prefixsim.synth OUT --requests N --seed S [--like conversation] [--PARAM VALUE ...]``
writes a Mooncake trace (or a token trace with ``--format tokens``), each request with its
``session_id`` (the session's number, 0, 1, ... in order of first request); :func:`synth_plan`,
:func:`plan_trace` and :func:`plan_tokens` do the same from Python. This module draws the plan,
derives its blocks and token ids, writes it, and is the command line; the parameters, their
bounds and the presets are :mod:`prefixsim.synth_config`'s (:class:`SynthConfig` and
:data:`PRESETS` are importable from here too, as documented). The model (every parameter is a
field of :class:`SynthConfig`, documented there and in ``docs/synth.md``):

* **Sessions** start as a Poisson process. A session draws a system prompt from a pool of
  ``system_prompts`` prompts with Zipf(``system_zipf``) popularity. A chat session has a
  geometric number of turns (mean ``turns_mean``); an agent session (probability
  ``agent_fraction``) has a geometric number of steps (mean ``agent_turns_mean``).
* **Prompts extend each other.** Turn 1's prompt is the system prompt and a first message;
  turn ``t``'s prompt is turn ``t - 1``'s prompt, its answer (``output_length`` tokens) and a new
  message. Agent sessions start with a long context and add a small step each time.
* **Lengths** are lognormal (median and sigma of the underlying normal), rounded, at least 1.
* **Arrivals**: the next turn follows the previous one after an exponential think time; the
  trace is the first ``requests`` requests in arrival order (so a session is never cut in its
  middle turn order), with sessions starting at ``rate / (mean requests per session)`` per second
  so that requests arrive at about ``rate`` per second.
* A turn whose prompt would exceed ``max_prompt_tokens`` ends its session.

Token ids: system prompt ``k`` is ``k * SPAN + (0, 1, ...)``, and each session's own tokens
(messages and answers, in order) are one consecutive run of fresh ids, so two prompts share
exactly the prefix their session structure says. The trace's chained blocks at a block size
then follow from the structure alone (:func:`plan_trace`, a numba kernel, no token arrays): a
block lies wholly in the system prompt (shared by every session using it) or belongs to its
session. :func:`plan_tokens` writes the token ids themselves; hashing them
(:func:`prefixsim.load_trace` on a token trace) gives the same block ids (tested).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import numpy as np
from numba import njit

from ._memory import check_fits
from ._output import atomic_output, check_output_path
from .convert import check_blocks_written, run_tool, tool_parser, write_mooncake
from .errors import ParameterError
from .formats.tokens import TokenTable
from .policies.base import check_int
from .synth_config import _BYTES_PER_TURN, PRESETS, SynthConfig, _first_sessions
from .trace import Trace

SPAN = 1 << 32
"""Token-id span of each system prompt; session tokens start after the pool's spans."""


@dataclass(frozen=True)
class SynthPlan:
    """The generated requests, in arrival order (one entry per request unless noted)."""

    timestamps: np.ndarray  # float64, ms
    prompt_tokens: np.ndarray  # int64
    output_lengths: np.ndarray  # int64
    session: np.ndarray  # int64, 0.. in order of first request
    system: np.ndarray  # int64, the system prompt's index in the pool
    system_tokens: np.ndarray  # int64, per pool prompt
    n_sessions: int

    @property
    def n_requests(self) -> int:
        return len(self.timestamps)


def _lognormal(
    rng: np.random.Generator, median: float, sigma: float, n: int, cap: int
) -> tuple[np.ndarray, np.ndarray]:
    """``max(1, rint(median * exp(sigma * z)))`` for ``n`` standard normal draws ``z``, as
    float64 (``inf`` where it overflows) and as int64 clipped to ``cap + 1``: a length past the
    cap makes every prompt it is part of longer than the cap, clipped or not, so only the
    float value can matter (an answer's ``output_length``)."""
    with np.errstate(over="ignore"):
        exact = np.maximum(1.0, np.rint(median * np.exp(sigma * rng.standard_normal(n))))
    return exact, np.minimum(exact, float(cap + 1)).astype(np.int64)


_LENGTH_KEYS = ("system", "first", "followup", "agent_context", "agent_step", "answer")
_MAX_DRAWS = 24
"""Draws of twice as many sessions before a config whose cap ends almost every session is
refused (each is bounded by the memory check)."""


def _too_long(cfg: SynthConfig, kinds: Sequence[str], allowed: str) -> ParameterError:
    """The error for lengths that do not fit ``max_prompt_tokens``, naming the key the user
    changed: the length parameter (``{kind}_tokens_median`` or ``_sigma``) changed from its
    default with the largest median, else ``max_prompt_tokens`` (a typed median of 1e18 was
    "invalid max_prompt_tokens=131072", the default)."""
    default = SynthConfig()
    changed = [
        f"{kind}_tokens_{part}"
        for kind in sorted(kinds, key=lambda k: -getattr(cfg, f"{k}_tokens_median"))
        for part in ("median", "sigma")
        if getattr(cfg, f"{kind}_tokens_{part}") != getattr(default, f"{kind}_tokens_{part}")
    ]
    cap_typed = cfg.max_prompt_tokens != default.max_prompt_tokens
    over_cap = any(getattr(cfg, f"{kind}_tokens_median") > cfg.max_prompt_tokens for kind in kinds)
    if not changed or (cap_typed and not over_cap):
        return ParameterError("max_prompt_tokens", cfg.max_prompt_tokens, allowed)
    return ParameterError(
        changed[0],
        getattr(cfg, changed[0]),
        f"{allowed} (max_prompt_tokens={cfg.max_prompt_tokens})",
    )


def synth_plan(cfg: SynthConfig) -> SynthPlan:
    """Draw the sessions and keep the first ``cfg.requests`` requests in arrival order."""
    cfg.check()
    rng = np.random.default_rng(cfg.seed % 2**64)  # the docs: seeds are taken modulo 2**64
    with np.errstate(over="ignore"):  # k ** a past float64 is a weight of 0
        weights = 1.0 / np.arange(1, cfg.system_prompts + 1, dtype=np.float64) ** cfg.system_zipf
    system_exact, system_tokens = _lognormal(
        rng, cfg.system_tokens_median, cfg.system_tokens_sigma, cfg.system_prompts,
        cfg.max_prompt_tokens,
    )  # fmt: skip
    shortest = float(system_exact.min())
    if shortest >= cfg.max_prompt_tokens:  # a first turn adds a message of at least one token
        raise _too_long(
            cfg,
            ["system"],
            f"no first turn fits: the shortest system prompt has {shortest:.0f} tokens, and a "
            "first message adds at least one",
        )
    mean_turns = (
        1 - cfg.agent_fraction
    ) * cfg.turns_mean + cfg.agent_fraction * cfg.agent_turns_mean
    # Enough sessions for the requests (more are drawn only if the cap ended many sessions).
    n_sessions = _first_sessions(cfg.requests, mean_turns)
    for _ in range(_MAX_DRAWS):
        try:
            check_fits(
                "max_prompt_tokens",
                cfg.max_prompt_tokens,
                int(_BYTES_PER_TURN * n_sessions * mean_turns),
                f"so few turns fit within max_prompt_tokens that {n_sessions} sessions must be "
                "drawn; that",
            )
        except ParameterError as err:
            raise _too_long(cfg, _LENGTH_KEYS, err.allowed) from None
        plan, kept = _draw(rng, cfg, n_sessions, weights, system_tokens, mean_turns)
        if plan is not None:
            return plan
        if kept == 0 and n_sessions >= 1 << 16:
            break
        n_sessions *= 2
    raise _too_long(
        cfg,
        _LENGTH_KEYS,
        f"too few turns fit within max_prompt_tokens: a draw of {n_sessions} sessions kept "
        f"{kept} turns, for {cfg.requests} requests",
    )


def _draw(
    rng: np.random.Generator,
    cfg: SynthConfig,
    n_sessions: int,
    weights: np.ndarray,
    system_tokens: np.ndarray,
    mean_turns: float,
) -> tuple[SynthPlan | None, int]:
    """The plan from ``n_sessions`` sessions, or None (with the number of turns kept) when the
    cap leaves fewer than ``cfg.requests``."""
    cap = cfg.max_prompt_tokens
    agent = rng.random(n_sessions) < cfg.agent_fraction
    turns = np.where(
        agent,
        rng.geometric(1.0 / cfg.agent_turns_mean, n_sessions),
        rng.geometric(1.0 / cfg.turns_mean, n_sessions),
    ).astype(np.int64)
    # Turn t's prompt has at least 2t tokens (a system prompt, t messages and t - 1 answers of
    # at least one each), so turns past cap // 2 are always cut: drawing them would only cost
    # memory (and, with a huge turns_mean, overflow it).
    np.minimum(turns, max(1, cap // 2), out=turns)
    system = rng.choice(len(weights), size=n_sessions, p=weights / weights.sum())
    starts = np.cumsum(rng.exponential(mean_turns / cfg.rate, n_sessions))
    n = int(turns.sum())
    sess = np.repeat(np.arange(n_sessions), turns)
    first = np.zeros(n, dtype=bool)
    first[np.cumsum(turns) - turns] = True
    is_agent = agent[sess]
    _, chat_first = _lognormal(rng, cfg.first_tokens_median, cfg.first_tokens_sigma, n, cap)
    _, chat_next = _lognormal(rng, cfg.followup_tokens_median, cfg.followup_tokens_sigma, n, cap)
    _, agent_first = _lognormal(
        rng, cfg.agent_context_tokens_median, cfg.agent_context_tokens_sigma, n, cap
    )
    _, agent_next = _lognormal(
        rng, cfg.agent_step_tokens_median, cfg.agent_step_tokens_sigma, n, cap
    )
    answers_exact, answers = _lognormal(
        rng, cfg.answer_tokens_median, cfg.answer_tokens_sigma, n, cap
    )
    message = np.where(
        first,
        np.where(is_agent, agent_first, chat_first),
        np.where(is_agent, agent_next, chat_next),
    )
    # Turn t adds the previous answer and its message; turn 1 adds the system prompt. Clipped
    # to cap + 1 (exact: more makes the prompt pass the cap all the same), every cumulative
    # sum below stays under 2**62.
    prev_answer = np.concatenate(([0], answers[:-1]))
    added = np.minimum(np.where(first, system_tokens[system[sess]], prev_answer) + message, cap + 1)
    prompt = _segmented_cumsum(added, first)
    gap = np.where(
        is_agent, rng.exponential(cfg.agent_delay, n), rng.exponential(cfg.think_time, n)
    )
    times = starts[sess] + _segmented_cumsum(np.where(first, 0.0, gap), first)
    keep = prompt <= cfg.max_prompt_tokens
    # A turn past the cap ends the session: drop it and every later turn of the session.
    keep = _segmented_cumsum((~keep).astype(np.int64), first) == 0
    kept = int(keep.sum())
    if kept < cfg.requests:
        return None, kept
    idx = np.flatnonzero(keep)
    order = idx[np.argsort(times[idx], kind="stable")][: cfg.requests]
    if times[idx].max() <= times[order[-1]]:  # pragma: no cover - the margin always suffices
        return None, kept
    with np.errstate(over="ignore"):
        timestamps = np.round(times[order] * 1000.0, 3)
    _check_finite_times(cfg, timestamps, order, starts[sess], is_agent)
    if answers_exact[order].max() > _MAX_LENGTH:
        raise ParameterError(
            "answer_tokens_sigma",
            cfg.answer_tokens_sigma,
            f"with answer_tokens_median={cfg.answer_tokens_median}, an answer drawn has more "
            "than 2**62 tokens (its output_length)",
        )
    # Sessions renumbered 0.. in order of first request.
    _, first_pos, inverse = np.unique(sess[order], return_index=True, return_inverse=True)
    rank = np.empty(len(first_pos), dtype=np.int64)
    rank[np.argsort(first_pos, kind="stable")] = np.arange(len(first_pos))
    plan = SynthPlan(
        timestamps=timestamps,
        prompt_tokens=prompt[order],
        output_lengths=answers_exact[order].astype(np.int64),
        session=rank[inverse],
        system=system[sess[order]].astype(np.int64),
        system_tokens=system_tokens,
        n_sessions=len(first_pos),
    )
    return plan, kept


_MAX_LENGTH = 2.0**62
"""Longest answer (``output_length``) written."""


def _check_finite_times(
    cfg: SynthConfig,
    timestamps: np.ndarray,
    order: np.ndarray,
    starts: np.ndarray,
    is_agent: np.ndarray,
) -> None:
    """Every arrival time (ms) finite, or the input refused naming the key that made it not:
    the session start (``rate``) or the delays of its chat or agent turns."""
    bad = np.flatnonzero(~np.isfinite(timestamps))
    if not len(bad):
        return
    i = int(order[bad[0]])
    if not np.isfinite(starts[i] * 1000.0):
        key = "rate"
    else:
        key = "agent_delay" if is_agent[i] else "think_time"
    raise ParameterError(key, getattr(cfg, key), "the arrival times (ms) pass float64's range")


def _segmented_cumsum(values: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Cumulative sums restarting wherever ``starts`` is true (``starts[0]`` must be true)."""
    total = np.cumsum(values)
    base = np.where(starts, total - values, 0)
    return total - np.maximum.accumulate(base)


# -- blocks from the structure -------------------------------------------------------------------


@njit(cache=True)
def _block_ids_kernel(prompt, system, system_tokens, session, n_sessions, block_size, offsets):
    n_sys = len(system_tokens)
    # Slots: each system prompt's full blocks, then each session's blocks past them.
    count = np.zeros(n_sys + n_sessions, dtype=np.int64)
    for k in range(n_sys):
        count[k] = system_tokens[k] // block_size
    for i in range(len(prompt)):
        own = prompt[i] // block_size - system_tokens[system[i]] // block_size
        if own > count[n_sys + session[i]]:
            count[n_sys + session[i]] = own
    start = np.zeros(len(count) + 1, dtype=np.int64)
    for o in range(len(count)):
        start[o + 1] = start[o] + count[o]
    slots = np.full(start[-1], -1, dtype=np.int32)
    out = np.empty(offsets[-1], dtype=np.int32)
    nxt = 0
    pos = 0
    for i in range(len(prompt)):
        shared = system_tokens[system[i]] // block_size
        for j in range(prompt[i] // block_size):
            # Wholly inside the system prompt: shared by its sessions; else the session's own.
            s = start[system[i]] + j if j < shared else start[n_sys + session[i]] + j - shared
            if slots[s] < 0:
                slots[s] = nxt
                nxt += 1
            out[pos] = slots[s]
            pos += 1
    return out, nxt


def _check_block_size(block_size: int) -> int:
    from .replay import MAX_BLOCK_SIZE

    return check_int("block_size", block_size, 1, MAX_BLOCK_SIZE)


def plan_trace(plan: SynthPlan, block_size: int, name: str = "synth") -> Trace:
    """The plan as a :class:`Trace` at ``block_size``: the blocks its token ids hash to, from the
    structure alone. A block is shared exactly when it lies wholly in the same system prompt or
    in the same session's prefix. Its ``session_ids`` are the plan's sessions (so a Mooncake file
    written from it has a ``session_id`` on every line)."""
    import hashlib

    block_size = _check_block_size(block_size)
    offsets = np.zeros(plan.n_requests + 1, dtype=np.int64)
    np.cumsum(plan.prompt_tokens // block_size, out=offsets[1:])
    if offsets[-1] >= 2**31:
        raise ParameterError("requests", plan.n_requests, "at most 2**31 - 1 block accesses")
    block_ids, n_blocks = _block_ids_kernel(
        plan.prompt_tokens,
        plan.system,
        plan.system_tokens,
        plan.session,
        plan.n_sessions,
        block_size,
        offsets,
    )
    digest = hashlib.sha256()
    for a in (plan.timestamps, plan.prompt_tokens, plan.output_lengths, plan.session, plan.system):
        digest.update(np.ascontiguousarray(a).tobytes())
    digest.update(f"block_size={block_size}".encode())
    return Trace(
        name=name,
        sha256=digest.hexdigest(),
        timestamps=plan.timestamps,
        input_lengths=plan.prompt_tokens,
        output_lengths=plan.output_lengths,
        offsets=offsets,
        block_ids=block_ids,
        n_blocks=int(n_blocks),
        line_numbers=np.arange(1, plan.n_requests + 1, dtype=np.int64),
        block_size=block_size,
        # Real sessions: numbered 0, 1, ... in order of first request, as loading them back
        # numbers them, so a written trace routes the same (cluster ``session`` router).
        session_ids=plan.session,
    )


def plan_tokens(plan: SynthPlan) -> TokenTable:
    """The token ids of every prompt (for token-trace output and the equivalence test; memory is
    the sum of the prompt lengths)."""
    sys_len = plan.system_tokens[plan.system]
    own = plan.prompt_tokens - sys_len
    longest = np.zeros(plan.n_sessions, dtype=np.int64)
    np.maximum.at(longest, plan.session, own)
    base = len(plan.system_tokens) * SPAN + np.concatenate(([0], np.cumsum(longest)[:-1]))
    offsets = np.zeros(plan.n_requests + 1, dtype=np.int64)
    np.cumsum(plan.prompt_tokens, out=offsets[1:])
    tokens = np.empty(int(offsets[-1]), dtype=np.int64)
    for i in range(plan.n_requests):
        k, s = int(plan.system[i]), int(sys_len[i])
        a = int(offsets[i])
        tokens[a : a + s] = np.arange(k * SPAN, k * SPAN + s)
        b = int(base[plan.session[i]])
        tokens[a + s : int(offsets[i + 1])] = np.arange(b, b + int(own[i]))
    return TokenTable(
        timestamps=plan.timestamps,
        output_lengths=plan.output_lengths,
        token_offsets=offsets,
        tokens=tokens,
        line_numbers=np.arange(1, plan.n_requests + 1, dtype=np.int64),
    )


def write_tokens(plan: SynthPlan, out: str) -> None:
    """Write the plan as a token trace (JSONL, gzip if ``out`` ends in ``.gz``), atomically
    (:func:`prefixsim._output.atomic_output`: a regular file or a new path only)."""
    import gzip
    import io

    n_tokens = int(plan.prompt_tokens.sum())
    check_fits("requests", plan.n_requests, 8 * n_tokens, f"the {n_tokens} token ids")
    table = plan_tokens(plan)
    with atomic_output(out) as raw:
        binary: Any = gzip.GzipFile(fileobj=raw, mode="wb") if out.endswith(".gz") else raw
        f = io.TextIOWrapper(binary, encoding="utf-8")
        for i in range(plan.n_requests):
            ids = table.tokens[table.token_offsets[i] : table.token_offsets[i + 1]].tolist()
            row = {
                "timestamp": float(plan.timestamps[i]),
                "token_ids": ids,
                "output_length": int(plan.output_lengths[i]),
                "session_id": int(plan.session[i]),
            }
            f.write(json.dumps(row, allow_nan=False) + "\n")
        f.flush()
        f.detach()  # not close(): that would close the file atomic_output renames
        if binary is not raw:
            binary.close()


# -- command line --------------------------------------------------------------------------------


def _integer(text: str) -> int:
    """An integer option: ``100000``, or an integral number in exponent form (``1e5``)."""
    try:
        return int(text)
    except ValueError:
        pass
    try:
        value = Decimal(text)
    except ArithmeticError:
        raise argparse.ArgumentTypeError(f"invalid integer value: {text!r}") from None
    if not value.is_finite() or value != value.to_integral_value():
        raise argparse.ArgumentTypeError(f"invalid integer value: {text!r}")
    if value.adjusted() > 4000:  # never expanded: a billion digits would take gigabytes
        raise argparse.ArgumentTypeError(f"invalid integer value: {text!r} (too large)")
    return int(value)


def build_parser() -> argparse.ArgumentParser:
    p = tool_parser(
        "synth",
        "Generate a synthetic multi-turn / agent workload as a trace file.",
        "conv.jsonl.gz --like conversation --seed 1",
    )
    p.add_argument("output", metavar="OUT", help="trace file to write (.jsonl or .jsonl.gz)")
    p.add_argument("--like", choices=sorted(PRESETS), help="start from a preset")
    p.add_argument("--format", choices=("mooncake", "tokens"), default="mooncake")
    p.add_argument("--block-size", type=_integer, default=512, help="mooncake output (default 512)")
    for f in dataclasses.fields(SynthConfig):
        flag = "--" + f.name.replace("_", "-")
        kind = _integer if isinstance(f.default, int) else float
        p.add_argument(flag, type=kind, default=None, help=f"(default {f.default})")
    return p


def config_from_args(args: argparse.Namespace) -> SynthConfig:
    base = PRESETS[args.like] if args.like else SynthConfig()
    given = {
        f.name: getattr(args, f.name)
        for f in dataclasses.fields(SynthConfig)
        if getattr(args, f.name) is not None
    }
    return dataclasses.replace(base, **given)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run_tool("synth", lambda: _synth(args))


def _synth(args: argparse.Namespace) -> str:
    cfg = config_from_args(args)
    cfg.check()
    if args.format == "mooncake":
        _check_block_size(args.block_size)
    check_output_path(args.output)  # before the plan is drawn
    plan = synth_plan(cfg)
    if args.format == "tokens":
        write_tokens(plan, args.output)
    else:
        trace = plan_trace(plan, args.block_size, args.output)
        check_blocks_written(trace, args.block_size)
        write_mooncake(trace, args.output)
    return f"{args.output}: {plan.n_requests} requests in {plan.n_sessions} sessions"


if __name__ == "__main__":
    sys.exit(main())
