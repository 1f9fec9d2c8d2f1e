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
from collections.abc import Collection, Hashable
from dataclasses import dataclass
from typing import ClassVar, NamedTuple

import numpy as np

from ..engine.lists import link_array, link_bytes, pop_head, push, scalars, unlink
from ..engine.steps import Space, Steps, counter_array
from .base import PolicyParams, ReferencePolicy, ix, register, zeroed_state


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

    removable = True

    def __init__(self, params: LFUParams) -> None:
        super().__init__(params)
        self.count: dict[Hashable, int] = {}  # resident blocks only
        self.last: dict[Hashable, int] = {}  # time of the last access, resident blocks only
        self.heap: list[tuple[int, int, Hashable]] = []
        self.now = 0

    def residents(self) -> Collection[Hashable]:
        return self.count

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


# --- steps ----------------------------------------------------------------------------------
# The O(1) LFU scheme: one list per count value (a "frequency bucket", engine.lists' link
# pairs), ordered from least (head) to most (tail) recently accessed. A block enters bucket f
# exactly when its count becomes f (insertion for f = 1, a hit otherwise), and leaves it at its
# next access, so appending at the bucket's tail keeps each bucket in order of last access, and
# the victim is the head of the lowest non-empty bucket ``min_f``. ``min_f`` is a lower bound of
# the lowest count: a miss resets it to 1 (the new block's count), a hit raises it by one when it
# empties bucket ``min_f`` (the hit block is then in ``min_f + 1``), and a removal may leave it
# low (the eviction then looks further up).
#
# Per id its count ``counts[h]`` (0: not resident); per cache ``q`` and count ``f`` the bucket's
# ends at ``ends[2 * (q * n_buckets + f)]``; per cache ``sc[2q:2q+2]`` = size, min_f. A count only
# grows on hits, so it stays below the block's occurrences in the stream + 1, which sizes the
# buckets.


class LFUState(NamedTuple):
    link: np.ndarray
    counts: np.ndarray
    ends: np.ndarray
    sc: np.ndarray
    cnt: np.ndarray
    capacity: int
    n_buckets: int


def lfu_state(p: LFUParams, space: Space) -> LFUState:
    occurrences = np.bincount(space.stream).max() if len(space.stream) else 0
    n_buckets = int(occurrences) + 2
    return LFUState(
        link_array(space.n_ids),
        zeroed_state(space.n_ids, np.int32),
        np.full(2 * space.n_caches * n_buckets, -1, np.int64),
        scalars(space.n_caches, 0, 1),
        counter_array(space.n_caches, LFUReference.counter_names),
        p.capacity,
        n_buckets,
    )


def lfu_is_resident(s, q, h):
    return s.counts[ix(h)] > 0


def lfu_hit(s, q, h, pred):
    f = s.counts[ix(h)]
    bucket = 2 * (q * s.n_buckets + f)
    unlink(s.link, s.ends, bucket, h)
    if f == s.sc[ix(2 * q + 1)] and s.ends[ix(bucket)] < 0:
        s.sc[ix(2 * q + 1)] = f + 1
    s.counts[ix(h)] = f + 1
    push(s.link, s.ends, bucket + 2, h)


def lfu_admit(s, q, h, pred):
    first = 2 * q * s.n_buckets
    victim = -1
    if s.sc[ix(2 * q)] >= s.capacity:
        # the least recently accessed block of the lowest non-empty bucket
        f = s.sc[ix(2 * q + 1)]
        while s.ends[ix(first + 2 * f)] < 0:
            f += 1
        victim = pop_head(s.link, s.ends, first + 2 * f)
        s.counts[ix(victim)] = 0  # the count is forgotten
    else:
        s.sc[ix(2 * q)] += 1
    s.sc[ix(2 * q + 1)] = 1
    s.counts[ix(h)] = 1
    push(s.link, s.ends, first + 2, h)
    return victim


def lfu_remove(s, q, h):
    # Its count is forgotten, as on eviction; min_f stays a lower bound of the lowest count.
    unlink(s.link, s.ends, 2 * (q * s.n_buckets + s.counts[ix(h)]), h)
    s.counts[ix(h)] = 0
    s.sc[ix(2 * q)] -= 1


STEPS = Steps(LFUState, lfu_state, lfu_is_resident, lfu_hit, lfu_admit, remove=lfu_remove)


def _state_bytes(p: LFUParams, n_blocks: int, n_accesses: int) -> int:
    """:func:`lfu_state`: ``link`` and ``counts`` (int32) per id, the count of every id while
    it is made (int64, ``np.bincount``), and the buckets' ends (two int64 per count up to the
    most accesses of an id, at most ``n_accesses``)."""
    return link_bytes(n_blocks) + 12 * n_blocks + 16 * (n_accesses + 2)


SPEC = register(LFUParams, LFUReference, STEPS, state_bytes=_state_bytes)
