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
# indexed by dense block id, -1 ends it: ``link[2h]`` = prev, ``link[2h + 1]`` = next, so a
# block's two links share one 8-byte pair and unlinking or appending a block touches one cache
# line per block involved (on 100M+ distinct blocks those are cache misses). The pairs are one
# flat array, not a (n, 2) one: a 2-D argument's row stride is a run-time value, and indexing
# through it measured 15-20% slower than ``2 * h``. ``resident`` stays a separate dense bool
# array: the prefix scan and the hit test read only it, and at one byte per block it stays in
# the CPU caches far longer than the links (residency kept in the link pairs, or a
# capacity-sized node pool behind a per-block slot index, measured slower: see README).
# Both arrays come from :func:`_kernel_state` (numpy: huge pages on large arrays).
# Invariants: ``link`` starts uninitialised (``np.empty``) and a block's pair is read only while
# the block is resident, after the access that made it resident wrote it; int32 links are exact
# (dense block ids are int32); ``size`` never exceeds ``capacity``.
#
# The prefix scan and the accesses of the request's leading hits are one loop: a hit changes no
# block's residency, so while every block so far was a hit, "resident now" is "resident at
# arrival", and the first miss ends the prefix. The rest of the request runs the general
# access loop.


@njit(cache=True, nogil=True)
def lru_kernel(
    block_ids, offsets, input_lengths, n_blocks, block_size, cnt, capacity, resident, link
):  # fmt: skip
    head = -1
    tail = -1
    size = 0
    hits = 0
    n_requests = input_lengths.shape[0]
    hit_tokens = np.empty(n_requests, np.int64)
    for r in range(n_requests):
        start = offsets[r]
        end = offsets[r + 1]
        # The longest resident prefix, each of its blocks accessed (a hit) as it is counted.
        i = start
        while i < end:
            h = block_ids[i]
            if not resident[h]:
                break
            i += 1
            if h == tail:
                continue
            # move h to the most recently used end (h is resident and not the tail, so a
            # block follows it, and tail >= 0)
            p = link[2 * h]
            n = link[2 * h + 1]
            if p >= 0:
                link[2 * p + 1] = n
            else:
                head = n
            link[2 * n] = p
            link[2 * h] = tail
            link[2 * h + 1] = -1
            link[2 * tail + 1] = h
            tail = h
        hits += i - start
        hit_tokens[r] = min((i - start) * block_size, input_lengths[r])
        # Then the remaining blocks, from the first miss on, hit or miss, in order.
        for j in range(i, end):
            h = block_ids[j]
            if resident[h]:
                hits += 1
                if h == tail:
                    continue
                # unlink h (it is not the tail, so its next is a block)
                p = link[2 * h]
                n = link[2 * h + 1]
                if p >= 0:
                    link[2 * p + 1] = n
                else:
                    head = n
                link[2 * n] = p
            else:
                if size >= capacity:
                    victim = head
                    head = link[2 * victim + 1]
                    if head >= 0:
                        link[2 * head] = -1
                    else:
                        tail = -1
                    resident[victim] = False
                    size -= 1
                resident[h] = True
                size += 1
            # append h at the most recently used end
            link[2 * h] = tail
            link[2 * h + 1] = -1
            if tail >= 0:
                link[2 * tail + 1] = h
            else:
                head = h
            tail = h
    cnt[0] += hits
    # evictions: every miss adds one block, every eviction removes one (one register fewer)
    cnt[1] += (offsets[n_requests] - offsets[0]) - hits - size
    return hit_tokens, size


def _kernel_state(p: LRUParams, n_blocks: int) -> tuple[np.ndarray, np.ndarray]:
    """``resident`` (all False) and ``link`` (uninitialised: see the invariants above)."""
    return np.zeros(n_blocks, np.bool_), np.empty(2 * n_blocks, np.int32)


def _kernel_args(p: LRUParams) -> tuple[int]:
    return (p.capacity,)


SPEC = register(
    PolicySpec(
        name="LRU",
        params_type=LRUParams,
        reference=LRUReference,
        kernel=lru_kernel,
        kernel_args=_kernel_args,
        kernel_state=_kernel_state,
    )
)
