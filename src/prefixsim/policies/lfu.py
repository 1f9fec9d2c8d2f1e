"""LFU: evict the resident block with the fewest accesses, the least recently used among ties.

Variant: *in-cache* LFU over block accesses (counts are kept only while a block is resident, as
opposed to *perfect* LFU, which remembers the counts of evicted blocks). A block's count is 1
when it is inserted and grows by 1 on every hit; an evicted block loses its count, so if it
comes back it starts again at 1. A miss into a full cache evicts exactly one block: the one with
the smallest count, and among the blocks sharing that count the least recently *accessed* one
(last insertion or hit)::

    access(h):
        now += 1
        if h resident: count[h] += 1
        else:
            if |cache| >= capacity:
                evict argmin over resident b of (count[b], last[b])
            count[h] = 1
        last[h] = now

Counters: ``block_hits`` (access found h resident), ``evictions``.
"""

from __future__ import annotations

import heapq
from collections.abc import Hashable
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from numba import njit

from .base import PolicyParams, PolicySpec, ReferencePolicy, ix, register


@dataclass(frozen=True)
class LFUParams(PolicyParams):
    policy: ClassVar[str] = "LFU"


class LFUReference(ReferencePolicy):
    """The pseudocode above, with the argmin found by a heap of ``(count, last, h)`` entries
    and lazy deletion: every access pushes the block's new key; an entry is current only if
    ``last[h]`` still equals its ``last`` (access times are unique, so this also means the
    block is resident and its count is the entry's). Stale entries are dropped when they reach
    the top. ``h`` itself is never compared: ``last`` breaks every tie.
    """

    reports_victims = True
    removable = True

    def __init__(self, params: LFUParams) -> None:
        super().__init__(params)
        self.capacity = params.capacity
        self.count: dict[Hashable, int] = {}  # resident blocks only
        self.last: dict[Hashable, int] = {}  # time of the last access, resident blocks only
        self.heap: list[tuple[int, int, Hashable]] = []
        self.now = 0

    def is_resident(self, h: Hashable) -> bool:
        return h in self.count

    def resident_count(self) -> int:
        return len(self.count)

    def access(self, h: Hashable) -> None:
        self.now += 1
        if h in self.count:
            self.counters["block_hits"] += 1
            self.count[h] += 1
        else:
            if len(self.count) >= self.capacity:
                victim = self.victim()
                del self.count[victim]  # the count is forgotten
                del self.last[victim]
                self.evicted(victim)
            self.count[h] = 1
        self.last[h] = self.now
        heapq.heappush(self.heap, (self.count[h], self.now, h))

    def remove(self, h: Hashable) -> None:
        # Its count is forgotten, as on eviction; its heap entries become stale.
        del self.count[h]
        del self.last[h]

    def victim(self) -> Hashable:
        """The resident block with the smallest ``(count, last)``."""
        while True:
            _, last, h = self.heap[0]
            if self.last.get(h) == last:
                return h
            heapq.heappop(self.heap)  # stale: h was accessed again or evicted since


# --- compiled kernel ------------------------------------------------------------------------
# The O(1) LFU scheme: one doubly linked list per count value (a "frequency bucket"), ordered
# from least (bucket head) to most (bucket tail) recently accessed. A block enters bucket f
# exactly when its count becomes f (insertion for f = 1, a hit otherwise), and leaves it at its
# next access, so appending at the bucket's tail keeps each bucket in order of last access, and
# the victim is the head of the lowest non-empty bucket ``min_f``. ``min_f`` only has to be
# right when a victim is taken: a miss resets it to 1 (the new block's count), and a hit
# raises it by one when it empties bucket ``min_f`` (the hit block is then in ``min_f + 1``).
#
# Per block (dense id): ``count`` (0 = not resident) and ``link[b] = (prev, next)`` inside its
# bucket, -1 ending the list. Per count value: ``bhead`` / ``btail``, -1 when empty. A count
# never exceeds the block's number of accesses in the trace, which sizes the bucket arrays.


# Every subscript in the loop is ``a[ix(i)]`` (:data:`~prefixsim.policies.base.ix`): block ids,
# counts (>= 1 wherever they index a bucket) and ``offsets`` positions are non-negative, and an
# end of a bucket's list, -1, is tested before it is used, so numba's negative-index fix-up is
# skipped (1.10-1.26x, docs/performance.md).


@njit(cache=True, nogil=True)
def lfu_kernel(block_ids, offsets, input_lengths, n_blocks, block_size, cnt, capacity):
    count = np.zeros(n_blocks, np.int32)
    for i in range(block_ids.shape[0]):  # occurrences per block, to size the buckets
        count[block_ids[i]] += 1
    max_count = 0
    for b in range(n_blocks):
        if count[b] > max_count:
            max_count = count[b]
        count[b] = 0
    bhead = np.full(max_count + 2, -1, np.int32)
    btail = np.full(max_count + 2, -1, np.int32)
    link = np.empty((n_blocks, 2), np.int32)  # [prev, next]: one cache line per block
    min_f = 1
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
        while k < end and count[ix(block_ids[ix(k)])] > 0:
            k += 1
        hit_tokens[ix(r)] = min((k - start) * block_size, input_lengths[ix(r)])
        # Then every block of the request is accessed, hit or miss, in order.
        for i in range(start, end):
            h = block_ids[ix(i)]
            f = count[ix(h)]
            if f > 0:
                hits += 1
                # unlink h from bucket f
                p = link[ix(h), 0]
                n = link[ix(h), 1]
                if p >= 0:
                    link[ix(p), 1] = n
                else:
                    bhead[ix(f)] = n
                if n >= 0:
                    link[ix(n), 0] = p
                else:
                    btail[ix(f)] = p
                if f == min_f and n < 0 and p < 0:
                    min_f = f + 1
                f += 1
            else:
                if size >= capacity:
                    # evict the least recently accessed block of the lowest bucket
                    victim = bhead[ix(min_f)]
                    n = link[ix(victim), 1]
                    bhead[ix(min_f)] = n
                    if n >= 0:
                        link[ix(n), 0] = -1
                    else:
                        btail[ix(min_f)] = -1
                    count[ix(victim)] = 0
                    size -= 1
                    evictions += 1
                size += 1
                f = 1
                min_f = 1
            # append h at the most recent end of bucket f
            count[ix(h)] = f
            t = btail[ix(f)]
            link[ix(h), 0] = t
            link[ix(h), 1] = -1
            if t >= 0:
                link[ix(t), 1] = h
            else:
                bhead[ix(f)] = h
            btail[ix(f)] = h
    cnt[0] += hits
    cnt[1] += evictions
    return hit_tokens, size


def _kernel_args(p: LFUParams) -> tuple[int]:
    return (p.capacity,)


SPEC = register(
    PolicySpec(
        name="LFU",
        params_type=LFUParams,
        reference=LFUReference,
        fast_kernel=lfu_kernel,
        kernel_args=_kernel_args,
    )
)
