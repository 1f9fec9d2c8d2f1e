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

The replays under these rules (the plain reference, the dispatch to the compiled driver) are
:mod:`prefixsim.mode_replay`'s. The compiled layout of a trace (:func:`engine_layout`) is here:
its kernels call the compiled :func:`request_blocks`, and numba's disk cache (``cache=True``)
checks only the file of the function it compiled, so a kernel calling a compiled function of
another file could run a stale build of it after that file is edited. Keep them together.
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass
from typing import Any

import numpy as np
from numba import njit

from .engine.steps import ix
from .errors import ParameterError
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
    own (:class:`~prefixsim.mode_replay._Fresh`'s hashes)."""
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
    """The accesses :func:`~prefixsim.mode_replay.reference_replay` makes under an engine's
    ``semantics``, request by request (:func:`request_blocks`: the first ``n_prompt`` hashes,
    ``n_output`` output blocks, ``n_temp`` temporary blocks), with dense ids: compiled, in two
    passes over the trace.

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
