"""Exact LRU results for every capacity at once, from one pass over a trace.

LRU has the *stack property*: at any moment the resident blocks of an LRU cache of capacity
``C`` are the ``C`` most recently used distinct blocks (all of them while fewer than ``C`` have
been seen), because a hit only reorders blocks and a miss into a full cache evicts exactly the
least recently used one. Define, at a moment between two accesses, the *stack distance* of a
block ``h`` that has been accessed before as

    d(h) = number of distinct blocks accessed since, and including, h's last access

(so a block accessed just now has ``d = 1``; a block never accessed has ``d = inf``). Then ``h``
is resident under LRU of capacity ``C`` iff ``d(h) <= C``, for every ``C`` simultaneously.

For the longest-prefix rule (``prefix-caching-s3fifo.md``) this gives, for a request with blocks
``h_0 .. h_{n-1}`` and *arrival* distances ``d_j = d(h_j)`` (all measured before any access of
the request, so duplicates inside the request share the same value), the prefix length

    k(C) = number of leading j with  m_j = max(d_0, .., d_j) <= C

which is non-decreasing in ``C`` (``m`` is non-decreasing, so ``k(C)`` is a binary search).
An access is a hit at capacity ``C`` iff the block's distance just *before that access* is
``<= C``, so ``block_hits(C)`` is the number of accesses with distance ``<= C``; every miss
admits one block, so ``evictions(C) = misses(C) - final_cache_blocks(C)`` with
``final_cache_blocks(C) = min(C, distinct blocks in the trace)``.

Distances come from a Fenwick tree over access positions (the flat index into
``trace.block_ids``). Position ``p`` becomes *superseded* when the block accessed at ``p`` is
accessed again; the distinct blocks accessed in positions ``[p, t)`` are the positions there
that are not superseded, so with ``last[h]`` the position of h's latest access before ``t``::

    d(h) at time t = (t - last[h]) - (superseded positions in [last[h], t))

Every re-access costs one tree update. Tree queries are needed far less often: at arrival, the
running maximum of a request's leading distances only changes at a block whose latest access is
earlier than every leading block's before it (a later latest access means nearer the top of the
stack), and the scan stops at a never-seen block or once the maximum exceeds the largest
capacity asked for (nothing further can hit); during the accesses, a block whose latest access
directly follows that of the block accessed just before it has that block's distance again
(both windows hold the same distinct blocks), which is the common re-read of a prefix in order.

The per-request result is kept compact: the prefix maxima ``m_j`` of every request, flat. The
per-capacity totals, counters and (lazily) per-request hit tokens are derived from it.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
from numba import njit

from ._exact import HitTotals, exact_sum
from .errors import ParameterError
from .policies import get_policy
from .policies.base import check_int, ix
from .replay import MAX_BLOCK_SIZE, ReplayResult, make_params
from .trace import Trace, check_block_size_matches

ENGINE = "lru_curve"
"""``engine`` of the :class:`~prefixsim.replay.ReplayResult` objects built from a curve."""


# --- compiled kernels ----------------------------------------------------------------------
# One function each, scalar locals only: numba keeps array arguments of helper calls
# reference-counted, which costs a lot in hot loops. ``_hit`` is a pure-scalar helper.
# Every subscript in their loops is ``a[ix(i)]`` (:data:`~prefixsim.policies.base.ix`): block
# ids, access positions (``last``'s -1, never seen, is tested first; the Fenwick loops stop at
# 0), stack distances (>= 1), prefix and binary-search positions are non-negative, so numba's
# negative-index fix-up is skipped (the one pass 1.14x, the ceiling 1.5x, docs/performance.md).


@njit(cache=True, nogil=True)
def _hit(k, block_size, input_length):
    """``min(k * block_size, input_length)`` without overflowing int64."""
    if input_length <= 0:
        return input_length if input_length < 0 else 0
    if k > (input_length - 1) // block_size:  # k * block_size >= input_length
        return input_length
    return k * block_size


@njit(cache=True, nogil=True)
def _curve_kernel(block_ids, offsets, n_blocks, max_capacity):
    """Prefix maxima of the requests' arrival distances, and the access-distance histogram.

    Returns ``(prefix_max, prefix_offsets, hits_at_most, n_distinct)``: request ``r``'s prefix
    maxima are ``prefix_max[prefix_offsets[r]:prefix_offsets[r + 1]]`` (leading blocks only,
    cut before the first never-seen block or the first maximum above ``max_capacity``);
    ``hits_at_most[c]`` is the number of accesses with stack distance ``<= c`` (for ``c`` up to
    ``n_blocks``); ``n_distinct`` the number of distinct blocks accessed.
    """
    n_acc = block_ids.shape[0]
    n_req = offsets.shape[0] - 1
    last = np.full(n_blocks, -1, np.int64)  # position of each block's latest access
    tree = np.zeros(n_acc + 1, np.int32)  # Fenwick tree: index p + 1 counts position p
    n_superseded = 0
    prefix_max = np.empty(n_acc, np.int32)
    prefix_offsets = np.zeros(n_req + 1, np.int64)
    hist = np.zeros(n_blocks + 1, np.int64)  # accesses by stack distance (1..n_blocks)
    n_distinct = 0
    n_out = 0
    for r in range(n_req):
        start = offsets[ix(r)]
        end = offsets[ix(r + 1)]
        # Arrival distances of the leading blocks (no access of this request applied yet). A
        # block whose latest access is later than an earlier leading block's is nearer the top
        # of the stack, so the running maximum only changes at a new earliest latest access:
        # only those need a tree query.
        running = 0
        earliest = start  # earliest latest access among the leading blocks so far
        first_d = -1  # arrival distance of the request's first block
        for i in range(start, end):
            p = last[ix(block_ids[ix(i)])]
            if p < 0:
                break  # never seen: not resident at any capacity
            if p < earliest:
                earliest = p
                below = 0  # superseded positions < p
                j = p
                while j > 0:
                    below += tree[ix(j)]
                    j -= j & -j
                running = (start - p) - (n_superseded - below)
                if i == start:
                    first_d = running
                if running > max_capacity:
                    break
            prefix_max[ix(n_out)] = running
            n_out += 1
        prefix_offsets[ix(r + 1)] = n_out
        # Then every block is accessed in order: its distance just before the access, then its
        # previous latest access becomes superseded. If the previous access of this request
        # re-accessed the block at position q and this one's latest access is q + 1, both
        # windows hold the same distinct blocks, so the distance repeats (a prefix re-read in
        # order); the first block's distance is its arrival distance.
        prev_p = -2
        d = first_d
        for i in range(start, end):
            h = block_ids[ix(i)]
            p = last[ix(h)]
            if p >= 0:
                if p != prev_p + 1 and not (i == start and first_d > 0):
                    below = 0
                    j = p
                    while j > 0:
                        below += tree[ix(j)]
                        j -= j & -j
                    d = (i - p) - (n_superseded - below)
                hist[ix(d)] += 1
                j = p + 1
                while j <= n_acc:
                    tree[ix(j)] += 1
                    j += j & -j
                n_superseded += 1
            else:
                n_distinct += 1
            prev_p = p if p >= 0 else -2
            last[ix(h)] = i
    hits_at_most = np.cumsum(hist)
    return prefix_max[:n_out].copy(), prefix_offsets, hits_at_most, n_distinct


@njit(cache=True, nogil=True)
def _totals_kernel(prefix_max, prefix_offsets, input_lengths, block_size, sorted_capacities):
    """Total hit tokens at each of ``sorted_capacities`` (ascending, all ``<=`` the curve's
    largest capacity): each request adds, at the first capacity ``>= m_j``, the hit tokens its
    ``(j+1)``-th prefix block brings."""
    n_caps = sorted_capacities.shape[0]
    diff = np.zeros(n_caps + 1, np.int64)
    for r in range(input_lengths.shape[0]):
        start = prefix_offsets[ix(r)]
        end = prefix_offsets[ix(r + 1)]
        length = input_lengths[ix(r)]
        before = 0
        i = start
        while i < end:
            m = prefix_max[ix(i)]
            while i + 1 < end and prefix_max[ix(i + 1)] == m:
                i += 1
            hit = _hit(i - start + 1, block_size, length)
            if hit > before:
                lo = 0  # first capacity >= m
                hi = n_caps
                while lo < hi:
                    mid = (lo + hi) >> 1
                    if sorted_capacities[ix(mid)] < m:
                        lo = mid + 1
                    else:
                        hi = mid
                diff[ix(lo)] += hit - before
                before = hit
            if hit >= length:
                break
            i += 1
    return np.cumsum(diff[:n_caps])


@njit(cache=True, nogil=True)
def _hits_kernel(prefix_max, prefix_offsets, input_lengths, block_size, capacity):
    """Per-request hit tokens at one capacity (``<=`` the curve's largest)."""
    n_req = input_lengths.shape[0]
    out = np.empty(n_req, np.int64)
    for r in range(n_req):
        lo = prefix_offsets[ix(r)]  # first prefix maximum > capacity
        hi = prefix_offsets[ix(r + 1)]
        start = lo
        while lo < hi:
            mid = (lo + hi) >> 1
            if prefix_max[ix(mid)] <= capacity:
                lo = mid + 1
            else:
                hi = mid
        out[ix(r)] = _hit(lo - start, block_size, input_lengths[ix(r)])
    return out


@njit(cache=True, nogil=True)
def _ceiling_kernel(block_ids, offsets, input_lengths, n_blocks, block_size):
    """Per-request hit tokens of an unbounded cache: the leading blocks seen before arrival."""
    seen = np.zeros(n_blocks, np.bool_)
    n_req = input_lengths.shape[0]
    out = np.empty(n_req, np.int64)
    for r in range(n_req):
        start = offsets[ix(r)]
        end = offsets[ix(r + 1)]
        k = start
        while k < end and seen[ix(block_ids[ix(k)])]:
            k += 1
        out[ix(r)] = _hit(k - start, block_size, input_lengths[ix(r)])
        for i in range(start, end):
            seen[ix(block_ids[ix(i)])] = True
    return out


# --- public API ----------------------------------------------------------------------------


def _check_capacities(capacities: Iterable[int]) -> np.ndarray:
    if isinstance(capacities, str | bytes) or not isinstance(capacities, Iterable):
        raise ParameterError(
            "capacities", capacities, "expected a sequence of integers >= 1 (cache sizes)"
        )
    values = [check_int("capacity", c, 1) for c in capacities]
    if not values:
        raise ParameterError("capacities", capacities, "expected at least one capacity")
    if max(values) > np.iinfo(np.int64).max:
        raise ParameterError("capacity", max(values), "expected an integer < 2**63")
    return np.array(values, dtype=np.int64)


@dataclass(frozen=True, eq=False)
class LRUCurve:
    """LRU results of one trace at every capacity of ``capacities`` (in the order given,
    duplicates kept). Per-capacity arrays are aligned with ``capacities``; per-request hit
    tokens are derived on demand (:meth:`hit_tokens`, :meth:`result`) for any capacity from 1
    to ``max_capacity``, each exactly what ``replay_params(trace, make_params("LRU", C),
    block_size)`` returns."""

    trace_name: str
    trace_sha256: str
    block_size: int
    capacities: np.ndarray  # int64, as given
    prompt_tokens: np.ndarray  # int64, the requests' input_length
    total_hit_tokens: np.ndarray  # int64, per capacity
    final_cache_blocks: np.ndarray  # int64, per capacity
    block_hits: np.ndarray  # int64, per capacity
    evictions: np.ndarray  # int64, per capacity
    n_accesses: int
    n_distinct_blocks: int
    seconds: float = field(compare=False)
    """Wall time of the curve (the trace pass and the per-capacity totals); the first call in
    a process also includes loading (or compiling) the kernels."""
    _prefix_max: np.ndarray = field(repr=False)  # int32, flat per request
    _prefix_offsets: np.ndarray = field(repr=False)  # int64, n_requests + 1
    _hits_at_most: np.ndarray = field(repr=False)  # int64, index = stack distance

    @property
    def max_capacity(self) -> int:
        return int(self.capacities.max())

    @property
    def n_requests(self) -> int:
        return len(self.prompt_tokens)

    @property
    def total_prompt_tokens(self) -> int:
        return exact_sum(self.prompt_tokens)

    @property
    def overall_hit_rate(self) -> np.ndarray:
        """``total_hit_tokens / total_prompt_tokens`` per capacity (0.0 without prompt
        tokens)."""
        total = self.total_prompt_tokens
        if not total:
            return np.zeros(len(self.capacities), dtype=np.float64)
        return self.total_hit_tokens / total

    def _capacity(self, capacity: int) -> int:
        capacity = check_int("capacity", capacity, 1)
        if capacity > self.max_capacity:
            raise ParameterError(
                "capacity",
                capacity,
                f"expected an integer in [1, {self.max_capacity}] (the curve's largest capacity)",
            )
        return capacity

    def hit_tokens(self, capacity: int) -> np.ndarray:
        """Per-request hit tokens (int64, trace order) at ``capacity`` (1..``max_capacity``)."""
        capacity = self._capacity(capacity)
        return _hits_kernel(
            self._prefix_max, self._prefix_offsets, self.prompt_tokens, self.block_size, capacity
        )

    def hit_token_matrix(self) -> np.ndarray:
        """``(len(capacities), n_requests)`` int64 hit tokens (8 bytes per cell)."""
        out = np.empty((len(self.capacities), self.n_requests), dtype=np.int64)
        for i, capacity in enumerate(self.capacities.tolist()):
            out[i] = self.hit_tokens(capacity)
        return out

    def counters(self, capacity: int) -> dict[str, int]:
        """The counters LRU's replay reports at ``capacity`` (any integer >= 1)."""
        capacity = check_int("capacity", capacity, 1)
        hits = int(self._hits_at_most[min(capacity, len(self._hits_at_most) - 1)])
        final = min(capacity, self.n_distinct_blocks)
        return {
            "block_accesses": self.n_accesses,
            "block_hits": hits,
            "evictions": self.n_accesses - hits - final,
        }

    def result(self, capacity: int) -> ReplayResult:
        """The :class:`ReplayResult` of LRU at ``capacity`` (1..``max_capacity``), equal field
        by field to the replay's except ``engine="lru_curve"`` and ``seconds``, which is this
        capacity's extraction plus an equal share of the curve's time."""
        start = time.perf_counter()
        params = make_params("LRU", self._capacity(capacity))
        hit_tokens = self.hit_tokens(params.capacity)
        counters = self.counters(params.capacity)
        seconds = time.perf_counter() - start + self.seconds / len(self.capacities)
        return ReplayResult(
            params=params,
            block_size=self.block_size,
            trace_name=self.trace_name,
            trace_sha256=self.trace_sha256,
            hit_tokens=hit_tokens,
            prompt_tokens=self.prompt_tokens,
            final_cache_blocks=min(params.capacity, self.n_distinct_blocks),
            counters=counters,
            engine=ENGINE,
            seconds=seconds,
        )

    def results(self) -> list[ReplayResult]:
        """:meth:`result` of every capacity, in the order of ``capacities``."""
        return [self.result(c) for c in self.capacities.tolist()]


# The counters :meth:`LRUCurve.counters` derives; a new LRU counter must be added there.
_COUNTERS = ("block_hits", "evictions")


def lru_curve(trace: Trace, capacities: Iterable[int], block_size: int = 512) -> LRUCurve:
    """Exact LRU results of ``trace`` at every capacity in ``capacities`` from one pass.

    Capacities are integers >= 1, in any order, duplicates allowed (the output keeps the order).
    """
    if get_policy("LRU").counter_names != _COUNTERS:
        raise AssertionError("LRU counters changed; update prefixsim.lru_curve")
    caps = _check_capacities(capacities)
    block_size = check_int("block_size", block_size, 1, MAX_BLOCK_SIZE)
    check_block_size_matches(trace, block_size)
    start = time.perf_counter()
    max_capacity = int(caps.max())
    prefix_max, prefix_offsets, hits_at_most, n_distinct = _curve_kernel(
        trace.block_ids, trace.offsets, trace.n_blocks, max_capacity
    )
    order = np.argsort(caps, kind="stable")
    totals = np.empty(len(caps), dtype=np.int64)
    totals[order] = _totals_kernel(
        prefix_max, prefix_offsets, trace.input_lengths, block_size, caps[order]
    )
    n_accesses = trace.n_accesses
    final = np.minimum(caps, n_distinct)
    block_hits = hits_at_most[np.minimum(caps, len(hits_at_most) - 1)]
    seconds = time.perf_counter() - start
    return LRUCurve(
        trace_name=trace.name,
        trace_sha256=trace.sha256,
        block_size=block_size,
        capacities=caps,
        prompt_tokens=trace.input_lengths,
        total_hit_tokens=totals,
        final_cache_blocks=final,
        block_hits=block_hits,
        evictions=n_accesses - block_hits - final,
        n_accesses=n_accesses,
        n_distinct_blocks=int(n_distinct),
        seconds=seconds,
        _prefix_max=prefix_max,
        _prefix_offsets=prefix_offsets,
        _hits_at_most=hits_at_most,
    )


@dataclass(frozen=True, eq=False)
class Ceiling(HitTotals):
    """Hits of an unbounded cache (every block ever seen stays resident): the value every
    policy's curve is bounded by, and LRU's at any capacity >= the trace's distinct blocks."""

    trace_name: str
    block_size: int
    hit_tokens: np.ndarray  # int64, per request
    prompt_tokens: np.ndarray  # int64, per request


def ceiling(trace: Trace, block_size: int = 512) -> Ceiling:
    """Per-request hit tokens of an infinite cache: the longest prefix of blocks seen before."""
    block_size = check_int("block_size", block_size, 1, MAX_BLOCK_SIZE)
    check_block_size_matches(trace, block_size)
    hit_tokens = _ceiling_kernel(
        trace.block_ids, trace.offsets, trace.input_lengths, trace.n_blocks, block_size
    )
    return Ceiling(trace.name, block_size, hit_tokens, trace.input_lengths)
