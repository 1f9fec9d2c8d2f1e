"""BELADY: the offline optimum for the block stream (Belady's MIN).

Variant: demand paging over the flat block stream of the whole trace (every request's
``hash_ids`` in order, the same stream every other policy sees). Every accessed block is
resident right after its access (a miss always admits; there is no bypass), and a miss into a
full cache evicts exactly one block: the resident block whose next access is farthest in the
future. A block that is never accessed again is infinitely far; among several such blocks the
one whose last access is earliest is evicted (FIFO among dead blocks). Finite next-access
positions are distinct, so that is the only tie. The tie rule is unobservable: a dead block is
never scanned or accessed again, so which one goes changes no hit, no counter and no final
size. ::

    prepare(stream):                     # once, before the replay
        next_use[t] = smallest t' > t with stream[t'] == stream[t], else infinity

    access(h) at stream position t:
        if h resident: block hit
        elif |cache| >= capacity:
            evict the resident b maximising (next_use(b), -last_use(b))
        next_use(h) = next_use[t]; last_use(h) = t

Optimality: among all policies that keep every accessed block resident right after its access
and never hold more than ``capacity`` blocks (LRU, S3FIFO and the prefix-aware policies here
all do), MIN has the most *block hits* (``counters["block_hits"]``) on any trace. It is NOT
optimal for *prefix hits*: it keeps the block reused soonest, even when that is ``h_5`` of a
chain whose ``h_0`` it is about to evict, which makes ``h_5`` useless for a longest-prefix hit.
A policy that keeps chain heads can serve more hit tokens than BELADY.

Counters: ``block_hits``, ``evictions``.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from numba import njit

from .base import PolicyParams, PolicySpec, ReferencePolicy, ix, register


@dataclass(frozen=True)
class BeladyParams(PolicyParams):
    policy: ClassVar[str] = "BELADY"


class BeladyReference(ReferencePolicy):
    """``cache`` maps a resident block to ``(next_use, -last_use)``, the eviction key (max
    evicted). ``prepare`` must be given the exact stream the accesses then follow."""

    reports_victims = True  # a first tier only: no natural removal

    def __init__(self, params: BeladyParams) -> None:
        super().__init__(params)
        self.capacity = params.capacity
        self.cache: dict[Hashable, tuple[float, int]] = {}
        self.stream: list[Hashable] | None = None
        self.next_use: list[float] = []
        self.t = 0  # position of the next access in the stream

    def prepare(self, block_ids: Sequence[Hashable], offsets: Sequence[int]) -> None:
        self.stream = list(block_ids)
        self.next_use = [math.inf] * len(self.stream)
        seen: dict[Hashable, int] = {}
        for t in range(len(self.stream) - 1, -1, -1):  # backward: the nearest later access
            h = self.stream[t]
            self.next_use[t] = seen.get(h, math.inf)
            seen[h] = t
        self.t = 0

    def is_resident(self, h: Hashable) -> bool:
        return h in self.cache

    def resident_count(self) -> int:
        return len(self.cache)

    def access(self, h: Hashable) -> None:
        if self.stream is None or self.t >= len(self.stream) or self.stream[self.t] != h:
            raise ValueError("BELADY accesses must follow the stream given to prepare()")
        if h in self.cache:
            self.counters["block_hits"] += 1
        elif len(self.cache) >= self.capacity:
            victim = max(self.cache, key=self.cache.__getitem__)  # farthest next use
            del self.cache[victim]
            self.evicted(victim)
        self.cache[h] = (self.next_use[self.t], -self.t)
        self.t += 1


# --- compiled kernel ------------------------------------------------------------------------
# ``next_use[t]`` (backward pass; -1 = never again). Resident blocks with a next use are keyed
# in a binary max-heap ``heap`` by that position: keys are positions, so ``block_ids[key]`` is
# the block and no block id is stored. A hit at position t leaves the block's entry (key t)
# stale and pushes the new one; every stale key is <= the current position and every live key
# is > it, so the heap's top is live whenever a live entry exists: stale entries are never
# popped, only dropped when the heap reaches ``heap_cap`` entries: compaction keeps the keys > t
# (at most min(capacity, n_blocks)) and re-heapifies, and ``heap_cap`` doubles (up to the
# array's 2 * capacity + 2 slots; there are at most as many pushes as accesses) when that leaves
# it more than half full, so compaction is amortised O(1) per push. ``heap_cap`` starts small so
# that tests reach compaction.
# Dead resident blocks (no next use) wait in a FIFO ring ``dead`` in order of their last access;
# their key is infinite, so they are evicted first, oldest last access first.
# One function with scalar locals, no array-taking helpers (see s3fifo.py).


# Every subscript in the replay loop is ``a[ix(i)]`` (:data:`~prefixsim.policies.base.ix`):
# block ids, access positions (next uses are pushed only when >= 0), heap slots and ring
# positions are non-negative, so numba's negative-index fix-up is skipped (1.17-1.26x,
# docs/performance.md).


@njit(cache=True, nogil=True)
def belady_kernel(block_ids, offsets, input_lengths, n_blocks, block_size, cnt, capacity):
    n = block_ids.shape[0]
    next_use = np.empty(n, np.int64)
    seen = np.full(n_blocks, -1, np.int64)
    for t in range(n - 1, -1, -1):
        h = block_ids[t]
        next_use[t] = seen[h]
        seen[h] = t
    resident = np.zeros(n_blocks, np.bool_)
    ring_cap = min(capacity, n_blocks) + 1
    dead = np.empty(ring_cap, np.int32)
    dead_head = 0
    dead_len = 0
    heap = np.empty(min(2 * capacity + 2, n + 1), np.int64)
    heap_cap = min(16, heap.shape[0])  # compaction threshold, doubled as needed
    heap_len = 0
    size = 0
    hits = 0
    evictions = 0
    n_requests = input_lengths.shape[0]
    hit_tokens = np.empty(n_requests, np.int64)
    for r in range(n_requests):
        start = offsets[ix(r)]
        end = offsets[ix(r + 1)]
        # Longest resident prefix at arrival: stops at the first non-resident block.
        k = start
        while k < end and resident[ix(block_ids[ix(k)])]:
            k += 1
        hit_tokens[ix(r)] = min((k - start) * block_size, input_lengths[ix(r)])
        # Then every block of the request is accessed, hit or miss, in order.
        for t in range(start, end):
            h = block_ids[ix(t)]
            if resident[ix(h)]:
                hits += 1  # its heap entry (key t) is now stale
            else:
                if size >= capacity:
                    if dead_len > 0:
                        victim = dead[ix(dead_head)]
                        dead_head += 1
                        if dead_head == ring_cap:
                            dead_head = 0
                        dead_len -= 1
                    else:
                        # pop the max (live, see above) and sift the last entry down
                        victim = block_ids[ix(heap[0])]
                        heap_len -= 1
                        key = heap[ix(heap_len)]
                        j = 0
                        while True:
                            c = 2 * j + 1
                            if c >= heap_len:
                                break
                            if c + 1 < heap_len and heap[ix(c + 1)] > heap[ix(c)]:
                                c += 1
                            if heap[ix(c)] <= key:
                                break
                            heap[ix(j)] = heap[ix(c)]
                            j = c
                        heap[ix(j)] = key
                    resident[ix(victim)] = False
                    size -= 1
                    evictions += 1
                resident[ix(h)] = True
                size += 1
            nu = next_use[ix(t)]
            if nu < 0:
                pos = dead_head + dead_len
                if pos >= ring_cap:
                    pos -= ring_cap
                dead[ix(pos)] = h
                dead_len += 1
                continue
            if heap_len == heap_cap:
                # compaction: keep the live keys (> t), then heapify bottom-up
                m = 0
                for q in range(heap_len):
                    if heap[ix(q)] > t:
                        heap[ix(m)] = heap[ix(q)]
                        m += 1
                heap_len = m
                if 2 * heap_len > heap_cap:
                    heap_cap = min(2 * heap_cap, heap.shape[0])
                for s in range(heap_len // 2 - 1, -1, -1):
                    key = heap[ix(s)]
                    j = s
                    while True:
                        c = 2 * j + 1
                        if c >= heap_len:
                            break
                        if c + 1 < heap_len and heap[ix(c + 1)] > heap[ix(c)]:
                            c += 1
                        if heap[ix(c)] <= key:
                            break
                        heap[ix(j)] = heap[ix(c)]
                        j = c
                    heap[ix(j)] = key
            # push nu: sift up
            j = heap_len
            heap_len += 1
            while j > 0:
                p = (j - 1) >> 1
                if heap[ix(p)] >= nu:
                    break
                heap[ix(j)] = heap[ix(p)]
                j = p
            heap[j] = nu
    cnt[0] += hits
    cnt[1] += evictions
    return hit_tokens, size


def _kernel_args(p: BeladyParams) -> tuple[int]:
    return (p.capacity,)


SPEC = register(
    PolicySpec(
        name="BELADY",
        params_type=BeladyParams,
        reference=BeladyReference,
        fast_kernel=belady_kernel,
        kernel_args=_kernel_args,
    )
)
