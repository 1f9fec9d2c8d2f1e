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
from collections.abc import Collection, Hashable, Sequence
from dataclasses import dataclass
from typing import ClassVar, NamedTuple

import numpy as np
from numba import njit

from ..engine import heaps
from ..engine.steps import Space, Steps, counter_array
from .base import PolicyParams, ReferencePolicy, ix, register


@dataclass(frozen=True)
class BeladyParams(PolicyParams):
    policy: ClassVar[str] = "BELADY"


class BeladyReference(ReferencePolicy):
    """``cache`` maps a resident block to ``(next_use, -last_use)``, the eviction key (max
    evicted). ``prepare`` must be given the exact stream the accesses then follow."""

    def __init__(self, params: BeladyParams) -> None:
        super().__init__(params)
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

    def residents(self) -> Collection[Hashable]:
        return self.cache

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


# --- steps ----------------------------------------------------------------------------------
# One cache over the stream it is made for (the single cache, the first tier of a hierarchy, an
# instance's sub-trace behind a static router): its steps are called once per access, in
# stream order, so the state counts the position ``t`` itself (``sc[0]``). ``next_use[t]``
# (computed when the state is made; -1 = never again). Resident blocks with a next use are keyed
# in a binary min-heap (engine.heaps) by ``-next_use``: the farthest next use is on top, keys
# are positions, so ``stream[-key]`` is the block and no block id is stored. A hit at position t
# leaves the block's entry (key -t) stale and pushes the new one; every stale entry's position is
# <= the current one and every live entry's is > it, so the top is live whenever a live entry
# exists: stale entries are never popped, only dropped by compaction when the heap reaches its
# threshold ``sc[5]`` (it keeps the keys whose position is > t, at most min(capacity, n_ids)),
# which doubles up to the array's 2 * capacity + 2 slots; it starts small so that tests reach
# compaction. Dead resident blocks (no next use) wait in a FIFO ring ``dead`` in order of their
# last access; their key is infinite, so they are evicted first, oldest last access first.
# Per cache ``sc`` = t, size, the ring's head and length, the heap's length and threshold.

_T, _SIZE, _DEAD_HEAD, _DEAD_LEN, _HEAP_LEN, _HEAP_CAP = range(6)


class BeladyState(NamedTuple):
    stream: np.ndarray
    next_use: np.ndarray
    resident: np.ndarray
    dead: np.ndarray
    heap: np.ndarray
    sc: np.ndarray
    cnt: np.ndarray
    capacity: int


@njit(cache=True, nogil=True)
def next_uses(stream, n_ids):
    """``next_use[t]``: the next position of ``stream[t]``'s block after t, or -1."""
    n = stream.shape[0]
    next_use = np.empty(n, np.int64)
    seen = np.full(n_ids, -1, np.int64)
    for t in range(n - 1, -1, -1):  # backward: the nearest later access
        h = stream[t]
        next_use[t] = seen[h]
        seen[h] = t
    return next_use


def belady_state(p: BeladyParams, space: Space) -> BeladyState:
    if space.n_caches != 1:
        raise ValueError("BELADY's state is one cache over the stream it knows")
    n = len(space.stream)
    heap_size = min(2 * p.capacity + 2, n + 1)
    return BeladyState(
        space.stream,
        next_uses(space.stream, space.n_ids),
        np.zeros(space.n_ids, np.bool_),
        np.empty(min(p.capacity, space.n_ids) + 1, np.int64),
        np.empty(heap_size, np.int64),
        np.array([0, 0, 0, 0, 0, min(16, heap_size)], np.int64),
        counter_array(1, BeladyReference.counter_names),
        p.capacity,
    )


def belady_is_resident(s, q, h):
    return s.resident[ix(h)]


@njit(inline="always")
def _note_next_use(s, h):
    """File ``h``, accessed at position ``sc[_T]``, by its next use; then advance ``t``."""
    sc, heap = s.sc, s.heap
    t = sc[_T]
    sc[_T] = t + 1
    nu = s.next_use[ix(t)]
    if nu < 0:
        pos = sc[_DEAD_HEAD] + sc[_DEAD_LEN]
        if pos >= s.dead.shape[0]:
            pos -= s.dead.shape[0]
        s.dead[ix(pos)] = h
        sc[_DEAD_LEN] += 1
        return
    n = sc[_HEAP_LEN]
    if n == sc[_HEAP_CAP]:
        # compaction: keep the live keys (next uses > t), then heapify
        m = 0
        for j in range(n):
            if -heap[ix(j)] > t:
                heap[ix(m)] = heap[ix(j)]
                m += 1
        n = m
        if 2 * n > sc[_HEAP_CAP]:
            sc[_HEAP_CAP] = min(2 * sc[_HEAP_CAP], heap.shape[0])
        heaps.heapify(heap, 0, n)
    heaps.push(heap, 0, n, -nu)
    sc[_HEAP_LEN] = n + 1


def belady_hit(s, q, h, pred):
    _note_next_use(s, h)  # its previous entry is now stale


def belady_admit(s, q, h, pred):
    sc = s.sc
    victim = -1
    if sc[_SIZE] >= s.capacity:
        if sc[_DEAD_LEN] > 0:
            victim = s.dead[ix(sc[_DEAD_HEAD])]
            sc[_DEAD_HEAD] += 1
            if sc[_DEAD_HEAD] == s.dead.shape[0]:
                sc[_DEAD_HEAD] = 0
            sc[_DEAD_LEN] -= 1
        else:  # the farthest next use (the top is live, see above)
            victim = s.stream[ix(-s.heap[0])]
            heaps.pop(s.heap, 0, sc[_HEAP_LEN])
            sc[_HEAP_LEN] -= 1
        s.resident[ix(victim)] = False
    else:
        sc[_SIZE] += 1
    s.resident[ix(h)] = True
    _note_next_use(s, h)
    return victim


# No remove: the state follows the stream position by position, which a lower tier (seeing only
# its demotions and the accesses that reach it) does not.
STEPS = Steps(BeladyState, belady_state, belady_is_resident, belady_hit, belady_admit)


def _state_bytes(p: BeladyParams, n_blocks: int, n_accesses: int) -> int:
    """:func:`belady_state`: ``next_use`` (int64 per access; ``seen``, int64 per id, while it is
    made), ``resident`` (bool per id), the ring of dead blocks (int64,
    ``min(capacity, n_blocks) + 1``) and the heap (``min(2 * capacity + 2, n_accesses + 1)``
    int64); the stream is the trace's own array."""
    return (
        8 * n_accesses
        + 9 * n_blocks
        + 8 * (min(p.capacity, n_blocks) + 1)
        + 8 * min(2 * p.capacity + 2, n_accesses + 1)
    )


SPEC = register(BeladyParams, BeladyReference, STEPS, offline=True, state_bytes=_state_bytes)
