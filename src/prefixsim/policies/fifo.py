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

from collections.abc import Hashable
from dataclasses import dataclass
from typing import ClassVar

from ..engine.lists import link_bytes
from ..engine.steps import Steps
from .base import PolicyParams, register
from .lru import LRUReference, LRUState, lru_admit, lru_is_resident, lru_make_room, lru_remove


@dataclass(frozen=True)
class FIFOParams(PolicyParams):
    policy: ClassVar[str] = "FIFO"


class FIFOReference(LRUReference):
    """FIFO is LRU without the move on a hit (as its steps below are LRU's): ``cache`` is then
    ordered from the oldest (head) to the newest (tail) insertion, and the LRU end that a miss
    evicts is the oldest inserted."""

    def refresh(self, h: Hashable) -> None:
        return None  # a hit changes nothing


# --- steps ----------------------------------------------------------------------------------
# LRU's list and steps without the move on a hit: the list runs from the oldest insertion (its
# head) to the newest (its tail), admission evicts the head, removal unlinks.


class FIFOState(LRUState):
    """LRU's state, as a class of FIFO's own (a driver is compiled per state class)."""

    __slots__ = ()


def fifo_hit(s, q, h, pred):
    return None  # a hit changes nothing


STEPS = Steps(
    FIFOState,
    is_resident=lru_is_resident,
    hit=fifo_hit,
    admit=lru_admit,
    remove=lru_remove,
    make_room=lru_make_room,
)


def _state_bytes(p: FIFOParams, n_blocks: int, n_accesses: int) -> int:
    """LRU's state (:class:`~.lru.LRUState`): ``link`` per id, nothing per capacity slot."""
    return link_bytes(n_blocks)


SPEC = register(FIFOParams, FIFOReference, STEPS, state_bytes=_state_bytes)
