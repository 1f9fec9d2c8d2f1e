"""FIFO: evict the resident block that was inserted first.

Variant: plain FIFO over block accesses. A hit changes nothing (no reordering, no bit); a miss
into a full cache evicts exactly one block, the oldest inserted, and appends the new block::

    access(h):
        if h resident: nothing
        else:
            if |queue| >= capacity: evict the head (oldest inserted)
            append h at the tail

A block that is evicted and accessed again is a new insertion (it re-enters at the tail).

Counters: ``block_hits`` (access found h resident), ``evictions``.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from numba import njit

from .base import PolicyParams, PolicySpec, ReferencePolicy, ix, register


@dataclass(frozen=True)
class FIFOParams(PolicyParams):
    policy: ClassVar[str] = "FIFO"


class FIFOReference(ReferencePolicy):
    """``queue`` is ordered from the oldest (head) to the newest (tail) insertion."""

    reports_victims = True
    removable = True

    def __init__(self, params: FIFOParams) -> None:
        super().__init__(params)
        self.capacity = params.capacity
        self.queue: OrderedDict[Hashable, None] = OrderedDict()

    def is_resident(self, h: Hashable) -> bool:
        return h in self.queue

    def resident_count(self) -> int:
        return len(self.queue)

    def access(self, h: Hashable) -> None:
        if h in self.queue:
            self.counters["block_hits"] += 1
            return  # a hit changes nothing
        if len(self.queue) >= self.capacity:
            victim, _ = self.queue.popitem(last=False)
            self.evicted(victim)
        self.queue[h] = None

    def remove(self, h: Hashable) -> None:
        del self.queue[h]  # the others keep their insertion order


# --- compiled kernel ------------------------------------------------------------------------
# The queue is a ring of exactly ``capacity`` slots. While it fills, slot ``size`` takes the new
# block; once full, ``head`` is the slot of the oldest block: the new block overwrites it and
# ``head`` advances, so the ring read from ``head`` is always oldest-to-newest.


# Every subscript in the loop is ``a[ix(i)]`` (:data:`~prefixsim.policies.base.ix`): block ids,
# ring positions (``head`` and ``size`` stay in ``[0, capacity)``) and ``offsets`` positions are
# non-negative, so numba's negative-index fix-up is skipped (1.5-1.8x, docs/performance.md).


@njit(cache=True, nogil=True)
def fifo_kernel(block_ids, offsets, input_lengths, n_blocks, block_size, cnt, capacity):
    resident = np.zeros(n_blocks, np.bool_)
    ring = np.empty(capacity, np.int32)
    head = 0
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
        for i in range(start, end):
            h = block_ids[ix(i)]
            if resident[ix(h)]:
                hits += 1
                continue
            if size >= capacity:
                resident[ix(ring[ix(head)])] = False
                evictions += 1
                ring[ix(head)] = h
                head += 1
                if head == capacity:
                    head = 0
            else:
                ring[ix(size)] = h  # head stays 0 until the ring is full
                size += 1
            resident[ix(h)] = True
    cnt[0] += hits
    cnt[1] += evictions
    return hit_tokens, size


def _kernel_args(p: FIFOParams) -> tuple[int]:
    return (p.capacity,)


SPEC = register(
    PolicySpec(
        name="FIFO",
        params_type=FIFOParams,
        reference=FIFOReference,
        fast_kernel=fifo_kernel,
        kernel_args=_kernel_args,
    )
)
