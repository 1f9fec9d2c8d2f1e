"""Replay a trace through a policy and account longest-prefix hits.

Semantics (``docs/semantics.md``), identical for every policy and both engines: for each
request in trace order,

1. ``k`` = number of leading ``hash_ids`` resident *when the request arrives*, stopping at the
   first miss (no skip-ahead, no set intersection);
2. hit tokens = ``min(k * block_size, input_length)``;
3. then every block of the request, hit or miss, is accessed in order through the policy.

``engine="kernel"`` runs the compiled single-cache driver over the policy's steps (or the
policy's fast kernel, :mod:`prefixsim.engine.single`) on dense block ids; ``"reference"`` runs
the plain-Python reference with :func:`reference_request`, the reference driver of one cache.
Tests hold the two equal per request.
"""

from __future__ import annotations

import os
import time
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from ._exact import MAX_BLOCK_SIZE, HitTotals
from .engine import single
from .errors import ParameterError
from .first_use import noted
from .mode_replay import check_arrays, replay_arrays
from .policies import PolicyParams, ReferencePolicy, get_policy
from .policies.base import check_int, check_state_fits
from .semantics import Semantics
from .trace import Trace, check_block_size_matches, load_trace

Engine = Literal["kernel", "reference"]
ENGINES: tuple[str, ...] = ("kernel", "reference")


def check_engine(engine: object) -> None:
    """``engine`` is one of :data:`ENGINES`, or a one-line :class:`ParameterError`."""
    if engine not in ENGINES:
        raise ParameterError("engine", engine, f"expected one of {', '.join(ENGINES)}")


__all__ = ["MAX_BLOCK_SIZE"]  # it lives in prefixsim._exact (the trace loader checks it too)


def make_params(policy: str = "S3FIFO", capacity: int = 4096, **policy_params: Any) -> PolicyParams:
    """Validated parameters of ``policy``. Keys the policy does not have are ignored when their
    value is ``None``, and rejected otherwise (so a typo is not silently dropped)."""
    spec = get_policy(policy)
    return spec.params_type(capacity=capacity, **known_params(policy, policy_params))


def known_params(policy: str, policy_params: Mapping[str, Any]) -> dict[str, Any]:
    """``policy_params`` without the keys ``policy`` does not have, which must be None (a typo
    is not silently dropped): :func:`make_params`'s rule for keys."""
    names = get_policy(policy).params_type.field_names()
    unknown = sorted(k for k, v in policy_params.items() if k not in names and v is not None)
    if unknown:
        allowed = ", ".join(n for n in names if n != "capacity") or "none"
        raise ParameterError(
            unknown[0],
            policy_params[unknown[0]],
            f"not a parameter of {policy} (its parameters: {allowed})",
        )
    return {k: v for k, v in policy_params.items() if k in names}


@dataclass(frozen=True, eq=False)
class ReplayResult(HitTotals):
    """Outcome of one replay. Arrays are per request, in trace order."""

    params: PolicyParams
    block_size: int
    trace_name: str
    trace_sha256: str
    hit_tokens: np.ndarray  # int64
    prompt_tokens: np.ndarray  # int64, the requests' input_length
    final_cache_blocks: int
    counters: dict[str, int]
    """``block_accesses``, ``block_hits``, ``evictions`` and the policy's own counters."""
    engine: str
    seconds: float = field(default=0.0, compare=False)
    """Wall time of the replay itself (trace loading and JIT compilation excluded)."""
    semantics: Semantics = field(default_factory=Semantics)
    """The hit rule the replay followed (``docs/semantics.md``): the specification's by
    default, or an engine's."""

    @property
    def policy(self) -> str:
        return self.params.policy

    @property
    def cache_capacity_blocks(self) -> int:
        return self.params.capacity

    def to_report(self, per_request: bool = True) -> dict[str, Any]:
        """The specification's report, plus the parameters and counters used."""
        report: dict[str, Any] = {
            **self.report_totals(),
            "final_cache_blocks": self.final_cache_blocks,
            "cache_capacity_blocks": self.cache_capacity_blocks,
            "block_size": self.block_size,
            **self.params.to_dict(),
            **self.semantics.to_dict(),
            "engine": self.engine,
            "trace": self.trace_name,
            "trace_sha256": self.trace_sha256,
            "n_requests": self.n_requests,
            "counters": dict(self.counters),
        }
        if per_request:
            report["per_request"] = [
                {"hit_tokens": h, "prompt_tokens": p}
                for h, p in zip(self.hit_tokens.tolist(), self.prompt_tokens.tolist(), strict=True)
            ]
        return report


def _as_trace(trace_or_path: Trace | str | os.PathLike[str]) -> Trace:
    return trace_or_path if isinstance(trace_or_path, Trace) else load_trace(trace_or_path)


@noted  # a line on stderr while the kernels compile (first use only)
def replay(
    trace_or_path: Trace | str | os.PathLike[str],
    policy: str = "S3FIFO",
    capacity: int = 4096,
    block_size: int = 512,
    small_ratio: float = 0.1,
    max_freq: int = 3,
    ghost_freq: int = 0,
    *,
    engine: Engine = "kernel",
    semantics: Semantics | str | None = None,
    **policy_params: Any,
) -> ReplayResult:
    """Replay a trace (a :class:`Trace`, a path, or a bundled name) through ``policy``.

    ``small_ratio``, ``max_freq`` and ``ghost_freq`` apply to S3FIFO and are ignored by policies
    that do not have them; other policies' parameters go in ``policy_params``. ``semantics`` is
    the hit rule (``docs/semantics.md``): ``"spec"`` (the default, the specification's),
    ``"vllm"``, ``"sglang"``, or a :class:`~prefixsim.semantics.Semantics` with its options
    (``Semantics("vllm", unhashed_free="back")``).
    """
    spec = get_policy(policy)
    names = spec.params_type.field_names()
    defaults = {"small_ratio": small_ratio, "max_freq": max_freq, "ghost_freq": ghost_freq}
    params = make_params(
        policy, capacity, **{k: v for k, v in defaults.items() if k in names}, **policy_params
    )
    return replay_params(
        _as_trace(trace_or_path), params, block_size, engine=engine, semantics=semantics
    )


def replay_params(
    trace: Trace,
    params: PolicyParams,
    block_size: int,
    *,
    engine: Engine = "kernel",
    semantics: Semantics | str | None = None,
) -> ReplayResult:
    """Replay with already validated ``params`` (what the sweep calls for every grid point).
    Under an engine's semantics the replay is :func:`prefixsim.mode_replay.replay_arrays`'s (the
    result's ``engine`` says which engine ran)."""
    sem = Semantics.of(semantics)
    block_size = check_replay(trace, params, block_size, engine=engine, semantics=sem)
    spec = get_policy(params.policy)
    start = time.perf_counter()
    if sem.name != "spec":
        hit_tokens, final, counters, engine = replay_arrays(trace, params, block_size, sem, engine)
    elif engine == "kernel":
        hit_tokens, final, counters = single.run(
            spec,
            params,
            trace.block_ids,
            trace.offsets,
            trace.input_lengths,
            trace.n_blocks,
            block_size,
        )
    else:
        hit_tokens, final, counters = _reference_replay(trace, params, block_size)
    seconds = time.perf_counter() - start
    return ReplayResult(
        params=params,
        block_size=block_size,
        trace_name=trace.name,
        trace_sha256=trace.sha256,
        hit_tokens=np.asarray(hit_tokens, dtype=np.int64),
        prompt_tokens=trace.input_lengths,
        final_cache_blocks=int(final),
        counters={"block_accesses": trace.n_accesses, **counters},
        engine=engine,
        seconds=seconds,
        semantics=sem,
    )


def check_replay(
    trace: Trace,
    params: PolicyParams,
    block_size: int,
    *,
    engine: Engine = "kernel",
    semantics: Semantics | str | None = None,
) -> int:
    """Every refusal :func:`replay_params` makes, before it replays anything and without
    allocating (it calls this first; so does :func:`prefixsim.scenario.check_scenario`, the
    check before a sweep's run): the block size (bounded so that ``k * block_size`` cannot
    overflow the kernels' int64) and the trace's, the engine, the policy's compiled steps and
    their state for this trace (refused if it cannot fit in memory), or an engine semantics'
    refusals (:func:`prefixsim.mode_replay.check_arrays`). Returns the block size, checked."""
    sem = Semantics.of(semantics)
    block_size = check_int("block_size", block_size, 1, MAX_BLOCK_SIZE)
    check_engine(engine)
    check_block_size_matches(trace, block_size)
    if sem.name != "spec":
        check_arrays(trace, params, block_size, sem, engine)
    elif engine == "kernel":
        check_state_fits(params, trace.n_blocks, trace.n_accesses)
        spec = get_policy(params.policy)
        if spec.fast_kernel is None:
            spec.compiled_steps(params)
    return block_size


def reference_hit_tokens(
    cache: ReferencePolicy, hash_ids: Sequence[Hashable], input_length: int, block_size: int
) -> int:
    """The specification's rule on one reference cache as it is now, read-only: ``k`` = the
    leading blocks resident (stopping at the first that is not), hit tokens
    ``min(k * block_size, input_length)``."""
    k = 0
    while k < len(hash_ids) and cache.is_resident(hash_ids[k]):
        k += 1
    return min(k * block_size, input_length)


def reference_request(
    cache: ReferencePolicy, hash_ids: Sequence[Hashable], input_length: int, block_size: int
) -> int:
    """One request on one reference cache: its hit tokens at arrival
    (:func:`reference_hit_tokens`), then every block accessed in order through the policy's
    steps (:meth:`~prefixsim.policies.ReferencePolicy.access_request`)."""
    hit_tokens = reference_hit_tokens(cache, hash_ids, input_length, block_size)
    cache.access_request(hash_ids)
    return hit_tokens


def _reference_replay(
    trace: Trace, params: PolicyParams, block_size: int
) -> tuple[np.ndarray, int, dict[str, int]]:
    """The reference driver of one cache: :func:`reference_request` for every request in trace
    order, over the plain-Python reference policy (``prepare``d with the whole stream)."""
    cache = get_policy(params.policy).reference(params)
    block_ids = trace.block_ids.tolist()
    offsets = trace.offsets.tolist()
    cache.prepare(block_ids, offsets)
    hit_tokens = np.empty(trace.n_requests, np.int64)
    for r, input_length in enumerate(trace.input_lengths.tolist()):
        hash_ids = block_ids[offsets[r] : offsets[r + 1]]
        hit_tokens[r] = reference_request(cache, hash_ids, input_length, block_size)
    return hit_tokens, cache.resident_count(), dict(cache.counters)
