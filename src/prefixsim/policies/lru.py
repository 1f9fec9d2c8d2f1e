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
# All per-block state is one array ``link`` of shape (n_blocks + 1, 2): row ``h`` holds block
# h's [prev, next] on the recency list, so an access touches one 2-int row (never split across
# cache lines) instead of three arrays (residency, prev, next). On traces of 100M+ distinct
# blocks every access is a cache miss, so the number of lines touched is the throughput.
#
# Invariants:
# * the list is circular through a sentinel row ``S = n_blocks``: ``S.next`` is the least and
#   ``S.prev`` the most recently used block (both S itself when the cache is empty), so no
#   link is ever null and relinking has no head/tail branches;
# * a link to node x is stored as ``~x`` (= -x - 1, in [-(n_blocks + 1), -1]), so a row of
#   zeros means "not resident": residency is ``link[h, 0] != 0`` and the array starts from
#   np.zeros (lazily zeroed pages, no initialising pass over 1 GB at 10M requests);
# * the dtype is the smallest of int16 / int32 / int64 holding ``~n_blocks``, i.e.
#   n_blocks <= LINK_MAX_BLOCKS[dtype] (int32 for the bundled trace and for every trace of
#   < 2**31 distinct blocks: 8 bytes per block).

LINK16_MAX_BLOCKS = 2**15 - 1  # ~n_blocks = -(n_blocks + 1) >= -2**15
LINK32_MAX_BLOCKS = 2**31 - 1


@njit(cache=True)
def lru_kernel(block_ids, offsets, input_lengths, n_blocks, block_size, cnt, capacity):
    # One call per replay, so the helper's reference-counted array arguments cost nothing.
    rows = n_blocks + 1
    if n_blocks <= LINK16_MAX_BLOCKS:
        link16 = np.zeros((rows, 2), np.int16)
        return lru_replay(block_ids, offsets, input_lengths, block_size, cnt, capacity, link16)
    if n_blocks <= LINK32_MAX_BLOCKS:
        link32 = np.zeros((rows, 2), np.int32)
        return lru_replay(block_ids, offsets, input_lengths, block_size, cnt, capacity, link32)
    link64 = np.zeros((rows, 2), np.int64)
    return lru_replay(block_ids, offsets, input_lengths, block_size, cnt, capacity, link64)


@njit(cache=True)
def lru_replay(block_ids, offsets, input_lengths, block_size, cnt, capacity, link):
    """The replay over ``link``: zeros of shape (n_blocks + 1, 2) in a dtype that holds
    ``~n_blocks`` (see above; :func:`lru_kernel` chooses it)."""
    sentinel = link.shape[0] - 1
    link[sentinel, 0] = ~sentinel  # empty: the sentinel is its own prev and next
    link[sentinel, 1] = ~sentinel
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
        while k < end and link[block_ids[k], 0] != 0:
            k += 1
        hit_tokens[r] = min((k - start) * block_size, input_lengths[r])
        # Then every block of the request is accessed, hit or miss, in order.
        for i in range(start, end):
            h = block_ids[i]
            if link[h, 0] != 0:
                hits += 1
                if link[sentinel, 0] == ~h:
                    continue  # already the most recently used
                # unlink h
                p = ~link[h, 0]
                n = ~link[h, 1]
                link[p, 1] = ~n
                link[n, 0] = ~p
            else:
                if size >= capacity:
                    # evict the least recently used block, S.next
                    victim = ~link[sentinel, 1]
                    n = ~link[victim, 1]
                    link[sentinel, 1] = ~n
                    link[n, 0] = ~sentinel
                    link[victim, 0] = 0
                    link[victim, 1] = 0
                    size -= 1
                    evictions += 1
                size += 1
            # append h at the most recently used end, between S.prev and S
            t = ~link[sentinel, 0]
            link[h, 0] = ~t
            link[h, 1] = ~sentinel
            link[t, 1] = ~h
            link[sentinel, 0] = ~h
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
