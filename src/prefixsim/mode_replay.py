"""One cache replayed under an engine's semantics (``vllm``, ``sglang``): the plain-Python
reference, and the dispatch between it and the compiled driver.

:mod:`prefixsim.semantics` holds the rules (a request's blocks, the hit rule, the usable
capacity) and the compiled layout of a trace; this module replays a trace under them:

* :func:`reference_replay` is the plain-Python replay of one cache under a semantics over any
  :class:`~prefixsim.policies.ReferencePolicy`, request by request (:func:`engine_request`,
  which a cluster's reference instances run too); under ``spec`` it is the replay loop of
  :mod:`prefixsim.replay` step for step;
* :func:`replay_arrays` is the one dispatch of a replay under an engine's semantics, to
  :func:`compiled_replay` (the single-cache driver over
  :func:`~prefixsim.semantics.engine_layout`) or to the reference, and :func:`check_arrays`
  makes its refusals without replaying.

Nothing here is compiled: the layout kernels stay next to the rule they call, in
:mod:`prefixsim.semantics` (numba's disk cache checks only a compiled function's own file).
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Hashable, Sequence
from typing import Literal, Protocol, runtime_checkable

import numpy as np

from .engine import single
from .engine.rules import EngineRule
from .errors import ParameterError
from .policies import PolicyParams, PolicySpec, ReferencePolicy, get_policy
from .policies.base import check_state_fits
from .semantics import (
    SPEC,
    Semantics,
    _kept_layout,
    _layout_sizes,
    check_fits,
    decode_pages,
    engine_layout,
    hit_tokens,
)
from .trace import Trace


@runtime_checkable
class RequestLevelPolicy(Protocol):
    """A policy that serves a whole request itself (SGLang's radix cache, :mod:`RADIX
    <prefixsim.policies.radix>`): it matches the request's prefix in its own structure and
    handles the temporary blocks with its own allocation rule."""

    def prefix_blocks(self, blocks: Sequence[Hashable]) -> int:
        """Leading ``blocks`` resident now (no state change)."""
        ...

    def serve_request(
        self, blocks: Sequence[Hashable], hit: int, n_temp: int, decode: Sequence[bool]
    ) -> None:
        """Serve a request whose ``hit`` leading cached ``blocks`` are reused and which holds
        ``n_temp`` temporary blocks while it runs; ``decode``
        (:func:`~prefixsim.semantics.decode_pages`) says which of its decode steps take a
        block."""
        ...


class _Fresh:
    """Hashes no trace block has: the output blocks' and the temporary blocks'. Negative
    integers (trace ids are non-negative), unique over one replay."""

    def __init__(self) -> None:
        self._next = itertools.count(-1, -1)

    def take(self, n: int) -> list[int]:
        return [next(self._next) for _ in range(n)]


def request_accesses(
    trace: Trace, semantics: Semantics, block_size: int
) -> tuple[list[list[Hashable]], list[list[Hashable]], list[int]]:
    """Every request's blocks under ``semantics`` (:func:`~prefixsim.semantics.request_blocks`),
    for the plain references: ``(cached, temporary, max_hit)`` per request. ``cached[r]`` are its
    cached blocks (its first ``n_prompt`` hashes, then ``n_output`` output blocks),
    ``temporary[r]`` the blocks it holds and never caches; both new ones get hashes no trace
    block has (:class:`_Fresh`, negative integers, unique over the trace). Under ``spec``: its
    hashes, none temporary, ``max_hit`` all of them."""
    block_ids = trace.block_ids.tolist()
    offsets = trace.offsets.tolist()
    lengths = trace.input_lengths.tolist()
    outputs = trace.output_lengths.tolist()
    fresh = _Fresh()
    cached: list[list[Hashable]] = []
    temps: list[list[Hashable]] = []
    max_hits: list[int] = []
    for r in range(trace.n_requests):
        hashes = block_ids[offsets[r] : offsets[r + 1]]
        n_prompt, n_output, n_temp, max_hit = semantics.request_blocks(
            lengths[r], outputs[r], len(hashes), block_size
        )
        cached.append([*hashes[:n_prompt], *fresh.take(n_output)])
        temps.append(list(fresh.take(n_temp)))
        max_hits.append(max_hit)
    return cached, temps, max_hits


def reference_replay(
    trace: Trace,
    params: PolicyParams,
    block_size: int,
    semantics: Semantics | str | None = None,
) -> tuple[np.ndarray, int, dict[str, int]]:
    """Replay ``trace`` through the reference of ``params.policy`` under ``semantics``:
    ``(hit_tokens per request, final_cache_blocks, counters)``.

    For every request in trace order (:func:`~prefixsim.semantics.request_blocks` gives its layout):

    1. ``k`` = leading cached blocks resident at arrival (the policy's own prefix match for a
       :class:`RequestLevelPolicy`), hit tokens by :func:`~prefixsim.semantics.hit_tokens`;
    2. the cached blocks, then the temporary ones, are accessed in order through the policy
       (``access_request``); a request-level policy serves the request instead;
    3. the temporary blocks then leave the cache (``remove``) unless vLLM frees them to the back.

    The policy is built with the usable capacity (``capacity - 1`` under vLLM: the null block);
    ``final_cache_blocks`` counts the blocks the policy holds at the end (under vLLM "back",
    including the freed temporary blocks still in the cache). Counters are the policy's plus
    ``temporary_blocks`` (blocks held for a request and never cached) under the engine modes.
    Under ``spec`` this is :mod:`prefixsim.replay`'s reference loop exactly."""
    sem = Semantics.of(semantics)
    spec = get_policy(params.policy)
    if sem.name != "spec":
        check_fits(sem, trace, params.capacity, block_size)
        params = _with_capacity(params, sem.usable_capacity(params.capacity))
    lengths = trace.input_lengths.tolist()
    outputs = trace.output_lengths.tolist()
    code = sem.code
    # The accesses of every request, built first so that an offline policy sees the stream it
    # will be replayed with (output and temporary blocks included).
    cached, temps, max_hits = request_accesses(trace, sem, block_size)
    cache = spec.reference(params)
    stream: list[Hashable] = []
    stream_offsets = [0]
    for blocks, held in zip(cached, temps, strict=True):
        stream.extend(blocks)
        stream.extend(held)
        stream_offsets.append(len(stream))
    cache.prepare(stream, stream_offsets)
    out = np.empty(trace.n_requests, np.int64)
    n_temps = 0
    for r, blocks in enumerate(cached):
        n_temps += len(temps[r])
        out[r] = engine_request(
            cache, blocks, temps[r], max_hits[r], lengths[r], outputs[r], block_size, sem,
            params.policy,
        )  # fmt: skip
    counters = dict(cache.counters)
    if code != SPEC:
        # the accesses made: the cached blocks (prompt and output) and the temporary ones
        counters["block_accesses"] = len(stream)
        counters["temporary_blocks"] = n_temps
    return out, cache.resident_count(), counters


def leading_blocks(cache: ReferencePolicy, blocks: Sequence[Hashable]) -> int:
    """How many leading ``blocks`` are resident in ``cache`` now (read-only): the policy's own
    prefix match for a :class:`RequestLevelPolicy`."""
    if isinstance(cache, RequestLevelPolicy):
        return cache.prefix_blocks(blocks)
    k = 0
    while k < len(blocks) and cache.is_resident(blocks[k]):
        k += 1
    return k


def engine_request(
    cache: ReferencePolicy, blocks: Sequence[Hashable], held: Sequence[Hashable], max_hit: int,
    input_length: int, output_length: int, block_size: int, semantics: Semantics, policy: str,
) -> int:  # fmt: skip
    """One request of :func:`reference_replay` on one reference cache (a cluster's instance
    too): its hit tokens at arrival (:func:`leading_blocks`,
    :func:`~prefixsim.semantics.hit_tokens`), then its cached ``blocks`` and its temporary ones
    (``held``) accessed in order, then ``held`` released unless vLLM frees them to the back; a
    :class:`RequestLevelPolicy` serves the request itself."""
    k = leading_blocks(cache, blocks)
    tokens = hit_tokens(semantics.code, k, max_hit, input_length, block_size)
    if isinstance(cache, RequestLevelPolicy):
        outputs = semantics.cache_output_blocks
        decode = decode_pages(input_length, output_length, block_size, outputs)
        cache.serve_request(blocks, min(k, max_hit), len(held), decode)
        return tokens
    if not held:
        cache.access_request(blocks)
        return tokens
    cache.access_request([*blocks, *held])
    if semantics.free_front:
        _release(cache, held, policy)
    return tokens


def compiled_replay(
    trace: Trace, params: PolicyParams, block_size: int, semantics: Semantics, spec: PolicySpec
) -> tuple[np.ndarray, int, dict[str, int]]:
    """:func:`reference_replay`'s results from the single-cache replay under
    :class:`~prefixsim.engine.rules.EngineRule` (the policy's fast kernel if it has one, else
    the driver over its steps): the same capacity (the null block), the same accesses
    (:func:`~prefixsim.semantics.engine_layout`), the temporary blocks removed by the rule."""
    assert spec.steps is not None
    usable = semantics.usable_capacity(params.capacity)
    layout = engine_layout(trace, semantics, block_size)
    if layout.longest > usable:
        check_fits(semantics, trace, params.capacity, block_size)  # its one-line refusal
    params = _with_capacity(params, usable)
    frees = spec.steps.removable or not spec.steps.per_block  # a request step frees its own
    if layout.n_temp and semantics.free_front and not frees:
        # the reference refuses at the first request that holds one (its last temporary
        # block is resident when the request ends): refuse before any replay
        raise _no_removal(params.policy)
    check_state_fits(params, layout.n_ids, len(layout.ids))
    rule = EngineRule.of(block_size, layout.temp_base, semantics.free_front)
    hits, final, counters = single.run(
        spec,
        params,
        layout.ids,
        layout.offsets,
        trace.input_lengths,
        layout.n_ids,
        block_size,
        rule=rule,
        output_lengths=trace.output_lengths if semantics.cache_output_blocks else None,
    )
    counters["block_accesses"] = len(layout.ids)
    counters["temporary_blocks"] = layout.n_temp
    return hits, final, counters


def replay_arrays(
    trace: Trace, params: PolicyParams, block_size: int, semantics: Semantics, engine: str
) -> tuple[np.ndarray, int, dict[str, int], Literal["kernel", "reference"]]:
    """The one dispatch of a replay under an engine's semantics (``vllm``, ``sglang``), for
    every entry point (:func:`prefixsim.replay_params`, the cluster's instances):
    ``(hit_tokens per request, final_cache_blocks, counters, engine that ran)``.

    ``engine="kernel"`` runs the compiled single-cache driver (:func:`compiled_replay`) for a
    policy with steps; ``engine="reference"``, a policy without steps and the points
    :func:`reference_only` names run :func:`reference_replay`. The result says which ran."""
    if semantics.name == "spec":  # the callers run the specification's own engines
        raise ValueError("replay_arrays is the engine modes' dispatch; spec has its own")
    spec = get_policy(params.policy)
    if engine == "kernel" and spec.steps is not None:
        if reference_only(params, semantics):
            hit_tokens, final, counters = reference_replay(trace, params, block_size, semantics)
            return hit_tokens, final, counters, "reference"
        hit_tokens, final, counters = compiled_replay(trace, params, block_size, semantics, spec)
        return hit_tokens, final, counters, "kernel"
    hit_tokens, final, counters = reference_replay(trace, params, block_size, semantics)
    return hit_tokens, final, counters, "reference"


def check_arrays(
    trace: Trace, params: PolicyParams, block_size: int, semantics: Semantics, engine: str
) -> None:
    """Every refusal :func:`replay_arrays` makes, asked without replaying or allocating (what a
    check before a replay calls, :func:`prefixsim.scenario.check_scenario`): a request no engine
    could schedule (:func:`~prefixsim.semantics.check_fits`), the policy at the usable capacity,
    a policy without removal when a request holds a temporary block it must free, and the
    compiled driver's state for the accesses the layout makes
    (:func:`~prefixsim.semantics._layout_sizes`: counted, not laid out)."""
    spec = get_policy(params.policy)
    kept = _kept_layout(trace, semantics, block_size)  # its counts: no pass over the trace
    if kept is None or kept.longest > semantics.usable_capacity(params.capacity):
        check_fits(semantics, trace, params.capacity, block_size)
    usable = _with_capacity(params, semantics.usable_capacity(params.capacity))
    request_level = hasattr(spec.reference, "serve_request")  # frees its own pages
    compiled = engine == "kernel" and spec.steps is not None
    if compiled and reference_only(params, semantics):
        compiled = False  # the reference replays it
    if request_level or not semantics.free_front:
        removable = True  # a request-level policy frees no block; vLLM "back" removes none
    else:
        removable = spec.steps.removable if compiled else spec.reference.removable  # type: ignore[union-attr]
    if compiled or not removable:
        if kept is not None:
            n_accesses, n_output, n_temp = len(kept.ids), kept.n_output, kept.n_temp
        else:
            sizes = (trace.offsets, trace.input_lengths, trace.output_lengths, block_size)
            n_accesses, n_output, n_temp = _layout_sizes(
                semantics.code, *sizes, semantics.cache_output_blocks
            )
        if n_temp and not removable:
            # the compiled driver refuses before its replay; the reference at the first
            # request that holds a temporary block (its last one is resident when it ends)
            raise _no_removal(params.policy)
        if compiled:
            check_state_fits(usable, trace.n_blocks + int(n_output) + int(n_temp), int(n_accesses))


def reference_only(params: PolicyParams, semantics: Semantics) -> bool:
    """Whether ``params`` under an engine's ``semantics`` runs on the reference though its
    policy has steps: ``S3FIFO_LCS`` with a small queue of one slot
    (:func:`_one_slot_small_queue`). (A request-level policy caching output blocks runs
    compiled: its state gets the requests' output lengths, ``Space.output_lengths``, for the
    pages its decode steps take, :func:`~prefixsim.semantics.decode_pages`.)"""
    return _one_slot_small_queue(params, semantics)


def _one_slot_small_queue(params: PolicyParams, semantics: Semantics) -> bool:
    """Whether ``params`` at the usable capacity is S3FIFO_LCS with a small queue of one slot:
    it admits nothing, which its steps cannot express and refuse (``policies/s3fifo_lcs.py``);
    the reference replays it, as the fast kernel does under ``spec``. (A capacity the policy
    refuses outright is refused here, by both engines alike.)"""
    if params.policy != "S3FIFO_LCS":
        return False
    usable = _with_capacity(params, semantics.usable_capacity(params.capacity))
    return getattr(usable, "small_cap", 0) == 1


def _release(cache: ReferencePolicy, held: Sequence[Hashable], policy: str) -> None:
    """Free a request's temporary blocks: each leaves the cache (the slot is free) if the
    request's own admissions have not evicted it already."""
    for h in held:
        if not cache.is_resident(h):
            continue
        try:
            cache.remove(h)
        except NotImplementedError:
            raise _no_removal(policy) from None


def _no_removal(policy: str) -> ParameterError:
    return ParameterError(
        "policy",
        policy,
        "has no removal step, which the engine semantics need to free a request's "
        "partial block (vLLM with unhashed_free=back does not)",
    )


def _with_capacity(params: PolicyParams, capacity: int) -> PolicyParams:
    """``params`` with another capacity, validated again (a policy whose queues need more
    blocks refuses the usable capacity, naming it)."""
    try:
        return _with_capacity_kept(params, capacity)
    except TypeError:  # a field that cannot be hashed (a researcher's policy): not kept
        return _with_capacity_new(params, capacity)


def _with_capacity_new(params: PolicyParams, capacity: int) -> PolicyParams:
    values = {k: v for k, v in params.to_dict().items() if k != "policy"}
    values["capacity"] = capacity
    return type(params)(**values)


# Parameters are frozen: the validation (a tenth of a small replay) runs once per point.
_with_capacity_kept = functools.lru_cache(maxsize=1024)(_with_capacity_new)
