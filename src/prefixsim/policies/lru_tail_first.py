"""LRU_TAIL_FIRST: LRU in which a request's chain is evicted tail first.

Variant: the recency order vLLM v1's KV cache manager produces. While a request runs, its
blocks are held (``BlockPool.touch`` takes a hit block out of the free queue); when it finishes,
they are returned to the LRU free queue in reverse (``SingleTypeKVCacheManager.free``:
``reversed(req_blocks)``), so after the request ``h_{n-1}`` is the least recent of its blocks
and ``h_0`` the most recent, and the cache loses a chain from its tail, never from its head.
The order is vLLM's; the hit rule is the specification's. Under vLLM's own rules
(:mod:`prefixsim.semantics`, ``"vllm"``: full blocks only, the ``L - 1`` cap, the null block,
the partial block freed to the front) it gives vLLM's hits request by request, checked against
:mod:`prefixsim.oracles.vllm_v1`, as long as vLLM keeps no second copy of a block it recomputed
(the last block of a fully cached prompt of whole blocks: vLLM caches the copy beside the
original, a policy holds one block per hash).

Exact rule. The cache is an LRU list of the blocks of earlier requests (``old``) followed, at
the most recent end, by the blocks the current request has placed so far (``placed``, kept in
the order ``h_0`` most recent, each newly placed block becoming the least recent of them).
Blocks are accessed in request order, hit or miss; a duplicate already placed by this request
is a hit and does not move; a miss into a full cache evicts the least recent block of ``old``,
or, when ``old`` is empty (the request has already placed ``capacity`` blocks), the least
recent placed block, i.e. the request's block placed last (its current tail). So a request with
more distinct blocks than ``capacity`` leaves its first ``capacity - 1`` distinct blocks and the
last block it placed resident. ::

    access_request([h_0, ..., h_{n-1}]):
        placed = []                              # this request's blocks, h_0 first
        for h in hash_ids:
            if h in placed: block hit; continue  # a duplicate keeps its place
            if h in old: block hit; remove h from old
            elif |old| + |placed| >= capacity:
                if old: evict the LRU end of old
                else:   evict placed.pop()        # the request's own tail
            placed.append(h)
        append reversed(placed) at the MRU end of old   # h_{n-1} .. h_0, h_0 most recent

As steps (``ReferencePolicy``): ``begin_request`` starts an empty ``placed``, ``hit`` and
``admit`` are the loop's body, ``end_request`` appends ``reversed(placed)``; a block is resident
if it is in ``old`` or in ``placed``. A block a faster tier demotes into this one during a
request is not the request's: it joins the most recent end of ``old``, not ``placed``.

Every accessed block is resident right after its access, as under LRU (so BELADY's block-hit
bound applies). Plain LRU would leave ``h_{n-1}`` most recent and lose a chain's head first; and
LRU evicts the request's own earliest blocks when it does not fit, where this keeps the head.

Counters: ``block_hits``, ``evictions``, ``self_evictions`` (evictions of a block the current
request had placed, when it does not fit in the cache).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import ClassVar, NamedTuple

import numpy as np
from numba import njit

from ..engine.lists import (
    after,
    insert_before,
    link_bytes,
    links,
    per_cache,
    pop_head,
    push,
    room_at_head,
    take,
    unlink,
)
from ..engine.steps import DEMOTED as DEMOTED_ID
from ..engine.steps import Steps, counters, param, per_id
from .base import COMMON_COUNTERS, DEMOTED, PolicyParams, ReferencePolicy, ix, register
from .lru import lru_is_resident


@dataclass(frozen=True)
class LRUTailFirstParams(PolicyParams):
    policy: ClassVar[str] = "LRU_TAIL_FIRST"


class LRUTailFirstReference(ReferencePolicy):
    """``old`` is ordered from least (head) to most (tail) recently used; between requests it
    holds every resident block, and during one ``placed`` holds the request's (h_0 first)."""

    counter_names = (*COMMON_COUNTERS, "self_evictions")
    removable = True

    def __init__(self, params: LRUTailFirstParams) -> None:
        super().__init__(params)
        self.old: OrderedDict[Hashable, None] = OrderedDict()
        self.placed: OrderedDict[Hashable, None] = OrderedDict()

    def is_resident(self, h: Hashable) -> bool:
        return h in self.old or h in self.placed

    def resident_count(self) -> int:
        return len(self.old) + len(self.placed)

    def access(self, h: Hashable) -> None:
        self.access_request([h])  # a block accessed alone is a one-block request

    def begin_request(self, hash_ids: Sequence[Hashable]) -> None:
        self.placed = OrderedDict()

    def hit(self, h: Hashable, pred: Hashable | None = None) -> None:
        self.counters["block_hits"] += 1
        if h in self.placed:
            return  # a duplicate already placed keeps its place
        del self.old[h]
        self.placed[h] = None

    def _miss(self, h: Hashable, pred: Hashable | None) -> None:
        if len(self.old) + len(self.placed) >= self.capacity:
            if self.old:
                victim, _ = self.old.popitem(last=False)
            else:
                victim, _ = self.placed.popitem(last=True)  # the request's own tail
                self.counters["self_evictions"] += 1
            self.evicted(victim)
        if pred is DEMOTED:
            self.old[h] = None  # not the request's block
        else:
            self.placed[h] = None

    def end_request(self) -> None:
        for h in reversed(self.placed):
            self.old[h] = None
        self.placed = OrderedDict()

    def remove(self, h: Hashable) -> None:
        if h in self.placed:
            del self.placed[h]
        else:
            del self.old[h]


# --- steps ----------------------------------------------------------------------------------
# One list as in lru.py (head least recent, tail most recent). The blocks the current request
# has placed form the run from ``seg`` (the least recent of them) to the tail; ``stamp[h]`` is
# the number of the request that last placed h (requests counted from 1 per cache, so a zeroed
# array marks none; h is placed iff resident and stamped with the current request). A newly
# placed block is linked just before ``seg`` (at the tail when nothing is placed yet) and becomes
# ``seg``, so when the request ends the run is already h_{n-1} .. h_0 and nothing is moved.
# Evictions take the head, which is a placed block only when no old block is left. Per cache
# ``sc[5q:5q+5]`` = the list's ends, its size, the current request's number, ``seg``.

_SIZE, _REQ, _SEG = 2, 3, 4


class LRUTailFirstState(NamedTuple):
    link: np.ndarray = links()
    stamp: np.ndarray = per_id(np.int64)
    sc: np.ndarray = per_cache(-1, -1, 0, 0, -1)
    cnt: np.ndarray = counters(LRUTailFirstReference)
    capacity: int = param("capacity")


def lru_tail_first_begin(s, q, ids, start, end):
    s.sc[ix(5 * q + _REQ)] += 1
    s.sc[ix(5 * q + _SEG)] = -1


@njit(inline="always")
def _before_placed(s, q, h):
    """Link ``h`` (in no list) just before the request's placed blocks (the tail if none)."""
    seg = s.sc[ix(5 * q + _SEG)]
    if seg < 0:
        push(s.link, s.sc, 5 * q, h)
    else:
        insert_before(s.link, s.sc, 5 * q, h, seg)


@njit(inline="always")
def _place(s, q, h):
    """``h`` (in no list) becomes the least recent of the request's placed blocks."""
    s.stamp[ix(h)] = s.sc[ix(5 * q + _REQ)]
    _before_placed(s, q, h)
    s.sc[ix(5 * q + _SEG)] = h


def lru_tail_first_hit(s, q, h, pred):
    if s.stamp[ix(h)] == s.sc[ix(5 * q + _REQ)]:
        return  # a duplicate already placed keeps its place
    unlink(s.link, s.sc, 5 * q, h)  # an old block (not placed, so not seg)
    _place(s, q, h)


def lru_tail_first_admit(s, q, h, pred):
    e = 5 * q
    victim = -1
    if s.sc[ix(e + _SIZE)] >= s.capacity:
        victim = s.sc[ix(e)]
        if victim == s.sc[ix(e + _SEG)]:  # nothing old is left: the request's own tail goes
            s.sc[ix(e + _SEG)] = after(s.link, victim)
            s.cnt[ix(q), 2] += 1
        pop_head(s.link, s.sc, e)
    else:
        s.sc[ix(e + _SIZE)] += 1
    if pred == DEMOTED_ID:  # not the request's block: the most recent old one
        s.stamp[ix(h)] = 0
        _before_placed(s, q, h)
    else:
        _place(s, q, h)
    return victim


def lru_tail_first_remove(s, q, h):
    e = 5 * q
    if h == s.sc[ix(e + _SEG)]:
        s.sc[ix(e + _SEG)] = after(s.link, h)  # the next placed block, or none
    take(s.link, s.sc, e, e + _SIZE, h)


def lru_tail_first_make_room(s, q, ids, start, end, pred):
    # Each temporary block would be placed (before seg) and removed (seg restored) with no end
    # step between; a full cache then still holds old blocks (the request's fit), so the head
    # that leaves is never placed.
    return room_at_head(s.link, s.sc, 5 * q, s.capacity, end - start)


STEPS = Steps(
    LRUTailFirstState,
    is_resident=lru_is_resident,
    hit=lru_tail_first_hit,
    admit=lru_tail_first_admit,
    remove=lru_tail_first_remove,
    begin=lru_tail_first_begin,
    make_room=lru_tail_first_make_room,
)


def _state_bytes(p: LRUTailFirstParams, n_blocks: int, n_accesses: int) -> int:
    """:class:`LRUTailFirstState`: ``link`` and ``stamp`` (int64) per id."""
    return link_bytes(n_blocks) + 8 * n_blocks


SPEC = register(LRUTailFirstParams, LRUTailFirstReference, STEPS, state_bytes=_state_bytes)
