"""The replay's semantics: the specification's, or an engine's hit rule.

``docs/semantics.md`` states the specification's rule (the default, ``spec``) and the two
engine modes in prose; this module is the one place they are written as rules a driver calls.
Every rule is a pure function of a request's integers, so a compiled driver can call the same
code (:func:`request_blocks` and :func:`usable_capacity` use integer arithmetic only and take the
mode as an integer code, so ``numba.njit`` compiles them as they are).

A request with ``input_length`` ``L`` and ``hash_ids`` ``h[0..n-1]`` is laid out in blocks of
``block_size`` tokens ``b``:

* ``spec`` (the user's specification): every hash of the request is a cached block; the prefix
  scan counts the leading resident ones (``k``), hit tokens are ``min(k * b, L)``; no null block,
  no temporary block.
* ``vllm`` (vLLM v1's KV cache manager): only *full* blocks have a hash and can be cached or hit:
  the first ``L // b`` hashes. The hit is capped so that at least one prompt token is computed
  (``max_cache_hit_length = L - 1``): at most ``(L - 1) // b`` blocks, and hit tokens are
  ``hit_blocks * b``. A partial last block is a *temporary* block: it holds a block while its
  request runs (evicting the policy's victim if the cache is full) and is never cached; when the
  request ends it is freed to the *front* of the free queue (reused first: the slot is simply
  free) or, as releases before vLLM PR #42656, to the *back* (it stays in the cache as a block
  no request will hit, evicted in the policy's order). Block 0 is the null block: ``capacity -
  1`` blocks are usable.
* ``sglang`` (SGLang's ``RadixCache`` with ``page_size = block_size``): the same hit rule (the
  match key is ``fill_ids[:L - 1]`` truncated to whole pages); the partial page is freed when
  the request finishes (``cache_finished_req``); no page of the pool's size is reserved (SGLang
  keeps its padding page outside it).

With ``cache_output_blocks`` the blocks the generated tokens fill are cached too: an engine
computes the KV of ``L + output_length - 1`` tokens (the last sampled token is never fed
back), so ``(L + output_length - 1) // b`` blocks are full; those past the prompt's full blocks
get hashes no prompt has, and the last partial block (if any) is the temporary one. Without it
a request is replayed as if it generated one token (the prefill-only replay).

Inputs the engines never see are still defined: a hash past ``ceil(L / b)`` carries no token
and is ignored; a block of the prompt without a hash (``hash_ids`` shorter than ``ceil(L / b)``)
is temporary (held, never cached). A request needing more blocks than the usable capacity can
never be scheduled by either engine; :func:`check_fits` refuses it.

Sources (read with the search tool; the commit is the stored snapshot each file was read at):

* vLLM ``vllm/v1/core/kv_cache_manager.py`` ``KVCacheManager.get_computed_blocks`` (the ``L -
  1`` cap) and ``allocate_slots`` (ace980e6de05); ``single_type_kv_cache_manager.py``
  ``FullAttentionManager.find_longest_cache_hit`` (full blocks only, ``max_length //
  block_size``), ``SingleTypeKVCacheManager.free`` (reverse order) (129ab7c60cbb);
  ``block_pool.py`` ``BlockPool.__init__`` (the null block), ``free_blocks`` (unhashed blocks
  ``prepend_n``-ed to the front) (c59cb7941357).
* SGLang ``python/sglang/srt/managers/schedule_batch.py`` ``Req._compute_max_prefix_len``
  (``input_len - 1``), ``python/sglang/srt/mem_cache/radix_cache.py``
  ``RadixCache.match_prefix`` (page alignment) and ``cache_finished_req`` (95769b280eaa);
  the paged allocator's ``free_pages = arange(1, num_pages + 1)`` (page 0 kept for padding).

:func:`reference_replay` is the plain-Python replay of one cache under a semantics over any
:class:`~prefixsim.policies.ReferencePolicy`; under ``spec`` it is the replay loop of
:mod:`prefixsim.replay` step for step.
"""

from __future__ import annotations

import functools
import itertools
import threading
import weakref
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

import numpy as np
from numba import njit

from .engine import single
from .engine.rules import EngineRule
from .engine.steps import ix
from .errors import ParameterError
from .policies import PolicyParams, PolicySpec, ReferencePolicy, get_policy
from .policies.base import check_state_fits
from .trace import Trace

SPEC, VLLM, SGLANG = 0, 1, 2
"""Integer codes of the modes, for compiled drivers (:attr:`Semantics.code`)."""
SEMANTICS: tuple[str, ...] = ("spec", "vllm", "sglang")
"""The modes by name, in code order."""
FREE_ORDERS: tuple[str, ...] = ("front", "back")
"""Where vLLM frees a block that has no hash: ``front`` (reused first, today's releases) or
``back`` (appended like any block, releases before vLLM PR #42656)."""

VLLM_RELEASE = "vLLM v1, vllm/v1/core as of c59cb7941357 (block_pool.py)"
SGLANG_RELEASE = "SGLang RadixCache, radix_cache.py as of 95769b280eaa"


@dataclass(frozen=True)
class Semantics:
    """A replay's semantics, validated at construction.

    ``unhashed_free`` applies to ``vllm`` only and ``cache_output_blocks`` to the engine modes:
    a value that would change nothing is refused rather than ignored (so a typo in a sweep does
    not run the default silently)."""

    name: str = "spec"
    """``spec`` (the specification, the default), ``vllm`` or ``sglang``."""
    unhashed_free: str = "front"
    """vLLM only: where a freed block without a hash goes in the free queue
    (:data:`FREE_ORDERS`)."""
    cache_output_blocks: bool = False
    """Engine modes only: also cache the full blocks the generated tokens fill."""

    def __post_init__(self) -> None:
        if self.name not in SEMANTICS:
            raise ParameterError("semantics", self.name, f"expected one of {', '.join(SEMANTICS)}")
        if self.unhashed_free not in FREE_ORDERS:
            raise ParameterError(
                "unhashed_free", self.unhashed_free, f"expected one of {', '.join(FREE_ORDERS)}"
            )
        if self.unhashed_free != "front" and self.name != "vllm":
            raise ParameterError(
                "unhashed_free",
                self.unhashed_free,
                f"applies to semantics=vllm only (semantics={self.name} has no free queue)",
            )
        if not isinstance(self.cache_output_blocks, (bool, np.bool_)):
            raise ParameterError(
                "cache_output_blocks", self.cache_output_blocks, "expected true or false"
            )
        object.__setattr__(self, "cache_output_blocks", bool(self.cache_output_blocks))
        if self.cache_output_blocks and self.name == "spec":
            raise ParameterError(
                "cache_output_blocks",
                True,
                "applies to semantics=vllm or sglang (the specification caches prompt blocks only)",
            )

    @classmethod
    def of(cls, value: Semantics | str | None) -> Semantics:
        """``value`` as a :class:`Semantics` (a name gives that mode with its defaults)."""
        if isinstance(value, Semantics):
            return value
        return cls("spec" if value is None else value)

    @property
    def code(self) -> int:
        return SEMANTICS.index(self.name)

    @property
    def free_front(self) -> bool:
        """Whether temporary blocks leave the cache when their request ends (``True`` except
        under vLLM with ``unhashed_free="back"``)."""
        return self.unhashed_free == "front"

    def usable_capacity(self, capacity: int) -> int:
        """Blocks a policy may hold (:func:`usable_capacity`); refuses a capacity that leaves
        none."""
        usable = usable_capacity(self.code, capacity)
        if usable < 1:
            raise ParameterError(
                "capacity",
                capacity,
                "semantics=vllm reserves block 0 as the null block: expected capacity >= 2",
            )
        return usable

    def request_blocks(
        self, input_length: int, output_length: int, n_hash_ids: int, block_size: int
    ) -> tuple[int, int, int, int]:
        """:func:`request_blocks` under this semantics."""
        return request_blocks(
            self.code, input_length, output_length, n_hash_ids, block_size, self.cache_output_blocks
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "semantics": self.name,
            "unhashed_free": self.unhashed_free,
            "cache_output_blocks": self.cache_output_blocks,
        }


def usable_capacity(code: int, capacity: int) -> int:
    """Blocks available to the policy: ``capacity - 1`` under ``vllm`` (``BlockPool.__init__``
    pops block 0 as the null block, which no request ever gets), ``capacity`` otherwise."""
    return capacity - 1 if code == VLLM else capacity


def request_blocks(
    code: int,
    input_length: int,
    output_length: int,
    n_hash_ids: int,
    block_size: int,
    cache_output_blocks: bool,
) -> tuple[int, int, int, int]:
    """A request's blocks as ``(n_prompt, n_output, n_temp, max_hit)``.

    ``n_prompt``: leading ``hash_ids`` that are cached blocks; ``n_output``: full blocks the
    generated tokens fill, cached with hashes no prompt has (after the prompt's); ``n_temp``:
    blocks held while the request runs and never cached (after those); ``max_hit``: the most
    leading blocks that may hit. The request accesses ``n_prompt + n_output`` cached blocks and
    holds ``n_prompt + n_output + n_temp`` blocks in all. Integer arithmetic only (see the module
    docstring)."""
    if code == SPEC:
        return n_hash_ids, 0, 0, n_hash_ids
    # One division (two with outputs cached): the compiled layout runs this for every request,
    # and an integer division costs more than the rest of it.
    full_prompt = input_length // block_size
    aligned = input_length == full_prompt * block_size
    n_prompt = min(full_prompt, n_hash_ids)
    full = full_prompt  # blocks of KV filled: kv_tokens // block_size
    n_total = full_prompt if aligned else full_prompt + 1  # ceil(kv_tokens / block_size)
    if cache_output_blocks and output_length > 1:
        kv_tokens = input_length + output_length - 1  # the last sampled token has no KV
        full = kv_tokens // block_size
        n_total = full if kv_tokens == full * block_size else full + 1
    n_output = 0
    if n_prompt == full_prompt:  # output blocks chain on a fully hashed prompt only
        n_output = full - full_prompt
    n_temp = n_total - n_prompt - n_output
    # (L - 1) // block_size for L > 0: L's full blocks, one fewer if L is a multiple
    max_hit = 0
    if input_length > 0:
        max_hit = min(n_prompt, full_prompt - 1 if aligned else full_prompt)
    return n_prompt, n_output, n_temp, max_hit


_request_blocks = njit(request_blocks)  # the same rule, for the compiled layout below


def hit_tokens(code: int, k: int, max_hit: int, input_length: int, block_size: int) -> int:
    """Hit tokens of a request whose ``k`` leading cached blocks are resident at arrival:
    ``min(k * block_size, L)`` under ``spec``; ``min(k, max_hit) * block_size`` under the
    engines (whole blocks, never the partial one)."""
    if code == SPEC:
        return min(k * block_size, input_length)
    return min(k, max_hit) * block_size


def decode_pages(
    input_length: int, output_length: int, block_size: int, cache_output_blocks: bool
) -> list[bool]:
    """Per decode step (one per generated token but the first, which the prefill samples),
    whether the token it computes starts a block: the steps that take a block while the request
    runs. Empty without ``cache_output_blocks`` (the prefill-only replay). For a request-level
    policy whose allocation happens step by step (SGLang checks for a free page at every
    decode step)."""
    if not cache_output_blocks or output_length <= 1:
        return []
    start = input_length
    return [pos % block_size == 0 for pos in range(start, start + output_length - 1)]


def check_fits(semantics: Semantics, trace: Trace, capacity: int, block_size: int) -> None:
    """Refuse a trace with a request that needs more blocks than ``semantics`` leaves usable:
    neither engine can ever schedule it (vLLM refuses to start with such a ``max_model_len``,
    SGLang aborts the request), so no hit count would be the engine's."""
    if semantics.name == "spec":
        return
    usable = semantics.usable_capacity(capacity)
    lengths = trace.input_lengths.astype(np.int64)
    kv = lengths.copy()
    if semantics.cache_output_blocks:
        kv = np.where(trace.output_lengths > 1, lengths + trace.output_lengths - 1, lengths)
    # Every block of ceil(kv / block_size) is held at once (hashed, output or temporary).
    need = -(-kv // block_size)
    over = np.flatnonzero(need > usable)
    if len(over):
        r = int(over[0])
        raise ParameterError(
            "capacity",
            capacity,
            f"the request at line {int(trace.line_numbers[r])} of {trace.name} needs "
            f"{int(need[r])} blocks of {block_size} tokens at once, more than the {usable} "
            f"usable under semantics={semantics.name}; the engine could never schedule it",
        )


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
        ``n_temp`` temporary blocks while it runs; ``decode`` (:func:`decode_pages`) says which
        of its decode steps take a block."""
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
    """Every request's blocks under ``semantics`` (:func:`request_blocks`), for the plain
    references: ``(cached, temporary, max_hit)`` per request. ``cached[r]`` are its cached
    blocks (its first ``n_prompt`` hashes, then ``n_output`` output blocks), ``temporary[r]``
    the blocks it holds and never caches; both new ones get hashes no trace block has
    (:class:`_Fresh`, negative integers, unique over the trace). Under ``spec``: its hashes,
    none temporary, ``max_hit`` all of them."""
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

    For every request in trace order (:func:`request_blocks` gives its layout):

    1. ``k`` = leading cached blocks resident at arrival (the policy's own prefix match for a
       :class:`RequestLevelPolicy`), hit tokens by :func:`hit_tokens`;
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
    too): its hit tokens at arrival (:func:`leading_blocks`, :func:`hit_tokens`), then its
    cached ``blocks`` and its temporary ones (``held``) accessed in order, then ``held``
    released unless vLLM frees them to the back; a :class:`RequestLevelPolicy` serves the
    request itself."""
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


@dataclass(frozen=True)
class Layout:
    """A trace's accesses under an engine's semantics, as dense ids for a compiled driver
    (:func:`engine_layout`)."""

    ids: np.ndarray
    """Request ``r`` accesses ``ids[offsets[r]:offsets[r + 1]]``: its cached blocks (prompt,
    then output), then its temporary ones."""
    offsets: np.ndarray
    n_ids: int
    """Ids are ``0 .. n_ids - 1``: the trace's blocks, then the output blocks, then the
    temporary blocks (from :attr:`temp_base`), each output and temporary block an id of its
    own (:class:`_Fresh`'s hashes)."""
    temp_base: int
    n_output: int
    n_temp: int
    longest: int = 0
    """The most blocks one request holds at once (:func:`check_fits`'s measure)."""


@njit(cache=True, nogil=True)
def _layout_sizes(code, offsets, input_lengths, output_lengths, block_size, cache_output):
    accesses = 0
    outputs = 0
    temps = 0
    for r in range(input_lengths.shape[0]):
        n_hash = offsets[ix(r + 1)] - offsets[ix(r)]
        n_prompt, n_output, n_temp, _ = _request_blocks(
            code, input_lengths[ix(r)], output_lengths[ix(r)], n_hash, block_size, cache_output
        )
        accesses += n_prompt + n_output + n_temp
        outputs += n_output
        temps += n_temp
    return accesses, outputs, temps


@njit(cache=True, nogil=True)
def _layout_fill(
    code, block_ids, offsets, input_lengths, output_lengths, block_size, cache_output,
    next_output, next_temp, ids, out_offsets,
):  # fmt: skip
    j = 0
    longest = 0
    for r in range(input_lengths.shape[0]):
        start = offsets[ix(r)]
        n_prompt, n_output, n_temp, _ = _request_blocks(
            code,
            input_lengths[ix(r)],
            output_lengths[ix(r)],
            offsets[ix(r + 1)] - start,
            block_size,
            cache_output,
        )
        for i in range(n_prompt):
            ids[ix(j)] = block_ids[ix(start + i)]
            j += 1
        for _ in range(n_output):
            ids[ix(j)] = next_output
            next_output += 1
            j += 1
        for _ in range(n_temp):
            ids[ix(j)] = next_temp
            next_temp += 1
            j += 1
        out_offsets[ix(r + 1)] = j
        longest = max(longest, n_prompt + n_output + n_temp)
    return longest  # the most blocks a request holds at once


@njit(cache=True, nogil=True)
def _layout_in_place(code, ids, offsets, input_lengths, block_size, next_temp):
    # Without output blocks a request whose hashes are exactly its blocks (n_prompt + n_temp of
    # them: the engines' traces) is laid out in its own slot of the trace: its leading hashes,
    # then its temporary ids over the hashes of its partial block. ``ids`` is a copy of the
    # trace's; -1: a request that does not fit its slot (the two passes lay that trace out).
    longest = 0
    for r in range(input_lengths.shape[0]):
        start = offsets[ix(r)]
        end = offsets[ix(r + 1)]
        n_prompt, _, n_temp, _ = _request_blocks(
            code, input_lengths[ix(r)], 0, end - start, block_size, False
        )
        if n_prompt + n_temp != end - start:
            return -1, 0
        for j in range(start + n_prompt, end):
            ids[ix(j)] = next_temp
            next_temp += 1
        longest = max(longest, end - start)
    return next_temp, longest


_MEMO_IDS = 2**26
"""The largest layout :func:`engine_layout` keeps (ids; 256 MiB of int32): beyond it the pass
is a small part of a replay (whose state then lives in DRAM, not the CPU's caches) and a kept
copy of the trace's ids would be a large one of the memory."""
_MEMO_PER_TRACE = 2
_LAYOUTS: weakref.WeakKeyDictionary[Trace, dict[tuple[int, bool], Layout]] = (
    weakref.WeakKeyDictionary()
)
_LAYOUTS_LOCK = threading.Lock()


def engine_layout(trace: Trace, semantics: Semantics, block_size: int) -> Layout:
    """The accesses :func:`reference_replay` makes under an engine's ``semantics``, request by
    request (:func:`request_blocks`: the first ``n_prompt`` hashes, ``n_output`` output blocks,
    ``n_temp`` temporary blocks), with dense ids: compiled, in two passes over the trace.

    Kept while ``trace`` lives (its last two layouts, of up to 2**26 ids each), so that a sweep
    over policies and capacities lays a trace out once: the layout depends only on
    ``block_size`` and ``cache_output_blocks`` (both engines lay out alike, and the free order
    is the replay's). Its arrays are read-only: they are shared."""
    kept = _kept_layout(trace, semantics, block_size)
    if kept is not None:
        return kept
    key = (int(block_size), semantics.cache_output_blocks)
    layout = _lay_out(trace, semantics, block_size)
    layout.ids.flags.writeable = False
    layout.offsets.flags.writeable = False
    if len(layout.ids) <= _MEMO_IDS:
        with _LAYOUTS_LOCK:
            layouts = _LAYOUTS.setdefault(trace, {})
            layouts[key] = layout
            while len(layouts) > _MEMO_PER_TRACE:
                del layouts[next(iter(layouts))]  # the oldest
    return layout


def _kept_layout(trace: Trace, semantics: Semantics, block_size: int) -> Layout | None:
    """The layout :func:`engine_layout` keeps for these arguments, or None."""
    with _LAYOUTS_LOCK:
        return _LAYOUTS.get(trace, {}).get((int(block_size), semantics.cache_output_blocks))


def _lay_out(trace: Trace, semantics: Semantics, block_size: int) -> Layout:
    code = semantics.code
    out = semantics.cache_output_blocks
    n, n_blocks = len(trace.block_ids), trace.n_blocks
    if not out and n_blocks + n < 2**31 and trace.offsets[0] == 0:  # one pass and a copy
        ids = trace.block_ids.astype(np.int32)
        n_ids, longest = _layout_in_place(
            code, ids, trace.offsets, trace.input_lengths, block_size, n_blocks
        )
        if n_ids >= 0:
            n_temp = int(n_ids) - n_blocks
            return Layout(ids, trace.offsets.view(), int(n_ids), n_blocks, 0, n_temp, int(longest))
    sizes = (trace.offsets, trace.input_lengths, trace.output_lengths, block_size, out)
    n_accesses, n_output, n_temp = _layout_sizes(code, *sizes)
    temp_base = trace.n_blocks + n_output
    n_ids = temp_base + n_temp
    ids = np.empty(n_accesses, np.int32 if n_ids < 2**31 else np.int64)
    offsets = np.zeros(trace.n_requests + 1, np.int64)
    longest = _layout_fill(code, trace.block_ids, *sizes, trace.n_blocks, temp_base, ids, offsets)
    return Layout(
        ids, offsets, int(n_ids), int(temp_base), int(n_output), int(n_temp), int(longest)
    )


def compiled_replay(
    trace: Trace, params: PolicyParams, block_size: int, semantics: Semantics, spec: PolicySpec
) -> tuple[np.ndarray, int, dict[str, int]]:
    """:func:`reference_replay`'s results from the single-cache replay under
    :class:`~prefixsim.engine.rules.EngineRule` (the policy's fast kernel if it has one, else
    the driver over its steps): the same capacity (the null block), the same accesses
    (:func:`engine_layout`), the temporary blocks removed by the rule."""
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
    could schedule (:func:`check_fits`), the policy at the usable capacity, a policy without
    removal when a request holds a temporary block it must free, and the compiled driver's state
    for the accesses the layout makes (:func:`_layout_sizes`: counted, not laid out)."""
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
    pages its decode steps take, :func:`decode_pages`.)"""
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
