"""CLOCK (second chance): FIFO order on a circular ring with one reference bit per block.

Variant: the classic CLOCK / second-chance description (a circular list of frames swept by one
hand; a referenced frame gets its bit cleared and is passed over, the first unreferenced frame
is replaced in place) over a fixed ring of ``capacity`` slots:

* a hit sets the block's reference bit to 1 and does nothing else;
* a new block is inserted with its bit **0**: the bit records a re-use, not the first use (in
  an operating system the faulting access itself would set the hardware bit; here it does not,
  so a block that is never re-used is the first candidate once the hand reaches it);
* while the ring still has free slots, a new block takes the next free slot in ring order
  (slot 0, 1, 2, ...) and the hand stays on slot 0;
* once the ring is full, a miss sweeps from the hand: a block with bit 1 gets it cleared and the
  hand advances (circularly); the first block with bit 0 is evicted, the new block takes its
  slot, and the hand then points to the next slot::

    access(h):
        if h resident: bit[h] = 1
        elif a slot is free: put h in the next free slot; bit[h] = 0
        else:
            while bit[slot[hand]] == 1:
                bit[slot[hand]] = 0; hand = (hand + 1) mod capacity
            evict slot[hand]; slot[hand] = h; bit[h] = 0
            hand = (hand + 1) mod capacity

The sweep ends within ``capacity + 1`` steps (one full turn clears every bit). The new block
sits just behind the hand, so it is the last one the next sweeps examine: read from the hand,
the ring is FIFO insertion order with second-chance blocks re-queued at the back.

Counters: ``block_hits`` (access found h resident), ``evictions``.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from numba import njit

from .base import PolicyParams, PolicySpec, ReferencePolicy, ix, register


@dataclass(frozen=True)
class CLOCKParams(PolicyParams):
    policy: ClassVar[str] = "CLOCK"


class CLOCKReference(ReferencePolicy):
    """A literal ring: ``slots[i]`` is the block in slot ``i`` (``None`` while still free),
    ``bit[i]`` its reference bit, ``slot_of`` the inverse map, ``hand`` the clock hand."""

    reports_victims = True  # a first tier only: no natural removal

    def __init__(self, params: CLOCKParams) -> None:
        super().__init__(params)
        self.capacity = params.capacity
        self.slots: list[Hashable | None] = [None] * self.capacity
        self.bit: list[int] = [0] * self.capacity
        self.slot_of: dict[Hashable, int] = {}
        self.used = 0  # slots 0..used-1 are filled; they fill in ring order before any eviction
        self.hand = 0

    def is_resident(self, h: Hashable) -> bool:
        return h in self.slot_of

    def resident_count(self) -> int:
        return len(self.slot_of)

    def access(self, h: Hashable) -> None:
        if h in self.slot_of:
            self.counters["block_hits"] += 1
            self.bit[self.slot_of[h]] = 1  # set on hit only
            return
        if self.used < self.capacity:
            s = self.used
            self.used += 1
        else:
            while self.bit[self.hand] == 1:
                self.bit[self.hand] = 0  # second chance
                self.hand = (self.hand + 1) % self.capacity
            s = self.hand
            del self.slot_of[self.slots[s]]
            self.evicted(self.slots[s])
            self.hand = (self.hand + 1) % self.capacity
        self.slots[s] = h
        self.bit[s] = 0  # inserted with bit 0
        self.slot_of[h] = s


# --- compiled kernel ------------------------------------------------------------------------
# ``slot_of`` (per dense block id, -1 = not resident) and the ring ``slots`` / ``bit`` (per
# slot, so the sweep reads the bits contiguously). ``used`` counts filled slots until the ring
# is full; from then on every miss evicts.


# Every subscript in the loop is ``a[ix(i)]`` (:data:`~prefixsim.policies.base.ix`): block ids,
# slots (``slot_of``'s -1, not resident, is tested before it is used as a slot) and ``offsets``
# positions are non-negative, so numba's negative-index fix-up is skipped (1.5-1.9x,
# docs/performance.md).


@njit(cache=True, nogil=True)
def clock_kernel(block_ids, offsets, input_lengths, n_blocks, block_size, cnt, capacity):
    slot_of = np.full(n_blocks, -1, np.int32)
    slots = np.empty(capacity, np.int32)
    bit = np.zeros(capacity, np.uint8)
    used = 0
    hand = 0
    hits = 0
    evictions = 0
    n_requests = input_lengths.shape[0]
    hit_tokens = np.empty(n_requests, np.int64)
    for r in range(n_requests):
        start = offsets[ix(r)]
        end = offsets[ix(r + 1)]
        # Longest resident prefix at arrival: stops at the first non-resident block.
        k = start
        while k < end and slot_of[ix(block_ids[ix(k)])] >= 0:
            k += 1
        hit_tokens[ix(r)] = min((k - start) * block_size, input_lengths[ix(r)])
        # Then every block of the request is accessed, hit or miss, in order.
        for i in range(start, end):
            h = block_ids[ix(i)]
            s = slot_of[ix(h)]
            if s >= 0:
                hits += 1
                bit[ix(s)] = 1
                continue
            if used < capacity:
                s = used
                used += 1
            else:
                while bit[ix(hand)] != 0:
                    bit[ix(hand)] = 0
                    hand += 1
                    if hand == capacity:
                        hand = 0
                s = hand
                slot_of[ix(slots[ix(s)])] = -1
                evictions += 1
                hand += 1
                if hand == capacity:
                    hand = 0
            slots[ix(s)] = h
            bit[ix(s)] = 0
            slot_of[ix(h)] = s
    cnt[0] += hits
    cnt[1] += evictions
    return hit_tokens, used


def _kernel_args(p: CLOCKParams) -> tuple[int]:
    return (p.capacity,)


SPEC = register(
    PolicySpec(
        name="CLOCK",
        params_type=CLOCKParams,
        reference=CLOCKReference,
        fast_kernel=clock_kernel,
        kernel_args=_kernel_args,
    )
)
