"""LRU: evict the least recently used resident block.

Variant: exact LRU over block accesses; every access (hit or miss) makes the block the most
recently used, and a miss into a full cache evicts exactly one block, the least recently used::

    access(h):
        if h resident: move h to the MRU end
        else:
            if |cache| >= capacity: evict the LRU end
            insert h at the MRU end

Counters: ``block_hits`` (access found h resident), ``evictions``.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from numba import njit

from .base import PolicyParams, PolicySpec, ReferencePolicy, register


@dataclass(frozen=True)
class LRUParams(PolicyParams):
    policy: ClassVar[str] = "LRU"


class LRUReference(ReferencePolicy):
    """``cache`` is ordered from least (head) to most (tail) recently used."""

    reports_victims = True
    removable = True

    def __init__(self, params: LRUParams) -> None:
        super().__init__(params)
        self.capacity = params.capacity
        self.cache: OrderedDict[Hashable, None] = OrderedDict()

    def is_resident(self, h: Hashable) -> bool:
        return h in self.cache

    def resident_count(self) -> int:
        return len(self.cache)

    def access(self, h: Hashable) -> None:
        if h in self.cache:
            self.counters["block_hits"] += 1
            self.cache.move_to_end(h)
            return
        if len(self.cache) >= self.capacity:
            victim, _ = self.cache.popitem(last=False)
            self.evicted(victim)
        self.cache[h] = None

    def remove(self, h: Hashable) -> None:
        del self.cache[h]


# --- compiled kernel ------------------------------------------------------------------------
# A doubly linked list from ``head`` (least recently used) to ``tail`` (most recently used),
# indexed by dense block id, -1 ends it: ``link[h] = [prev, next]``, one 8-byte row per block,
# so unlinking or appending a block touches one cache line per block involved instead of one in
# each of two arrays (on 100M+ distinct blocks those are cache misses). ``resident`` stays a
# separate dense bool array: the prefix scan and the hit test read only it, and at one byte
# per block it stays in the CPU caches far longer than the links (keeping residency in the
# link rows instead, or a capacity-sized node pool behind a per-block slot index, measured
# slower in most runs: see README, "Millions of requests").
# int32 links are exact: dense block ids are int32. ``size`` never exceeds ``capacity``.


@njit(cache=True, nogil=True)
def lru_kernel(block_ids, offsets, input_lengths, n_blocks, block_size, cnt, capacity):
    resident = np.zeros(n_blocks, np.bool_)
    link = np.empty((n_blocks, 2), np.int32)  # [prev, next]
    head = -1
    tail = -1
    size = 0
    hits = 0
    evictions = 0
    n_requests = input_lengths.shape[0]
    hit_tokens = np.empty(n_requests, np.int64)
    for r in range(n_requests):
        start = offsets[r]
        end = offsets[r + 1]
        # Longest resident prefix at arrival: stops at the first non-resident block.
        k = start
        while k < end and resident[block_ids[k]]:
            k += 1
        hit_tokens[r] = min((k - start) * block_size, input_lengths[r])
        # Then every block of the request is accessed, hit or miss, in order.
        for i in range(start, end):
            h = block_ids[i]
            if resident[h]:
                hits += 1
                if h == tail:
                    continue
                # unlink h (it is not the tail, so its next is a block)
                p = link[h, 0]
                n = link[h, 1]
                if p >= 0:
                    link[p, 1] = n
                else:
                    head = n
                link[n, 0] = p
            else:
                if size >= capacity:
                    victim = head
                    head = link[victim, 1]
                    if head >= 0:
                        link[head, 0] = -1
                    else:
                        tail = -1
                    resident[victim] = False
                    size -= 1
                    evictions += 1
                resident[h] = True
                size += 1
            # append h at the most recently used end
            link[h, 0] = tail
            link[h, 1] = -1
            if tail >= 0:
                link[tail, 1] = h
            else:
                head = h
            tail = h
    cnt[0] += hits
    cnt[1] += evictions
    return hit_tokens, size


def _kernel_args(p: LRUParams) -> tuple[int]:
    return (p.capacity,)


SPEC = register(
    PolicySpec(
        name="LRU",
        params_type=LRUParams,
        reference=LRUReference,
        kernel=lru_kernel,
        kernel_args=_kernel_args,
    )
)
