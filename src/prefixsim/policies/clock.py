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

from collections.abc import Collection, Hashable
from dataclasses import dataclass
from typing import ClassVar, NamedTuple

import numpy as np

from ..engine.lists import scalars
from ..engine.steps import Space, Steps, counter_array
from .base import PolicyParams, ReferencePolicy, ix, register, zeroed_state


@dataclass(frozen=True)
class CLOCKParams(PolicyParams):
    policy: ClassVar[str] = "CLOCK"


class CLOCKReference(ReferencePolicy):
    """A literal ring: ``slots[i]`` is the block in slot ``i`` (``None`` while still free),
    ``bit[i]`` its reference bit, ``slot_of`` the inverse map, ``hand`` the clock hand."""

    def __init__(self, params: CLOCKParams) -> None:
        super().__init__(params)
        self.slots: list[Hashable | None] = [None] * self.capacity
        self.bit: list[int] = [0] * self.capacity
        self.slot_of: dict[Hashable, int] = {}
        self.used = 0  # slots 0..used-1 are filled; they fill in ring order before any eviction
        self.hand = 0

    def residents(self) -> Collection[Hashable]:
        return self.slot_of

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


# --- steps ----------------------------------------------------------------------------------
# Per id ``slot_of[h]`` = its slot + 1 (0: not resident; slots of all caches numbered in one
# space, cache q's ``capacity`` slots from ``q * capacity``); per slot the id in it (``slots``)
# and its reference bit (``bit``, contiguous, as the sweep reads them); per cache ``sc[2q]`` the
# filled slots (they fill in ring order until the ring is full) and ``sc[2q + 1]`` the hand.


class CLOCKState(NamedTuple):
    slot_of: np.ndarray
    slots: np.ndarray
    bit: np.ndarray
    sc: np.ndarray
    cnt: np.ndarray
    capacity: int


def clock_state(p: CLOCKParams, space: Space) -> CLOCKState:
    n_slots = p.capacity * space.n_caches
    return CLOCKState(
        zeroed_state(space.n_ids, np.int64 if n_slots >= 2**31 - 1 else np.int32),
        np.empty(n_slots, np.int64 if space.n_ids >= 2**31 else np.int32),
        np.zeros(n_slots, np.uint8),
        scalars(space.n_caches, 0, 0),
        counter_array(space.n_caches, CLOCKReference.counter_names),
        p.capacity,
    )


def clock_is_resident(s, q, h):
    return s.slot_of[ix(h)] != 0


def clock_hit(s, q, h, pred):
    s.bit[ix(s.slot_of[ix(h)] - 1)] = 1  # set on hit only


def clock_admit(s, q, h, pred):
    cap = s.capacity
    base = q * cap
    used = s.sc[ix(2 * q)]
    victim = -1
    if used < cap:
        slot = used
        s.sc[ix(2 * q)] = used + 1
    else:
        hand = s.sc[ix(2 * q + 1)]
        while s.bit[ix(base + hand)] != 0:  # second chance
            s.bit[ix(base + hand)] = 0
            hand += 1
            if hand == cap:
                hand = 0
        slot = hand
        victim = s.slots[ix(base + slot)]
        s.slot_of[ix(victim)] = 0
        hand += 1
        if hand == cap:
            hand = 0
        s.sc[ix(2 * q + 1)] = hand
    s.slots[ix(base + slot)] = h
    s.bit[ix(base + slot)] = 0  # inserted with bit 0
    s.slot_of[ix(h)] = base + slot + 1
    return victim


# No remove: a removed block would leave a free slot behind the hand, and where the next block
# goes (that slot, or the ring's next in order) is a rule the classic CLOCK does not have.
STEPS = Steps(CLOCKState, clock_state, clock_is_resident, clock_hit, clock_admit)


def _state_bytes(p: CLOCKParams, n_blocks: int, n_accesses: int) -> int:
    """:func:`clock_state` for one cache: ``slot_of`` per id (int32 while the slots' indices
    fit), ``slots`` (int32 while the ids fit) and ``bit`` (uint8) per slot of the capacity."""
    per_id = 4 if p.capacity < 2**31 - 1 else 8
    per_slot = (4 if n_blocks < 2**31 else 8) + 1
    return per_id * n_blocks + per_slot * p.capacity


SPEC = register(CLOCKParams, CLOCKReference, STEPS, state_bytes=_state_bytes)
