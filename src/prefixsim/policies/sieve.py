"""SIEVE (Zhang et al., NSDI'24, "SIEVE is simpler than LRU: an efficient turn-key eviction
algorithm for web caches").

Variant: exactly the paper's Algorithm 1, one block = one object of size 1. One FIFO queue T
(new objects at the head, the oldest at the tail), one visited bit per object, and a hand
that moves from the tail toward the head, wrapping to the tail. Visited objects are retained
*in place* (never moved), and the hand keeps its position across evictions: after evicting
``o`` it rests on ``o``'s neighbour toward the head (``o.prev``), or on nothing if ``o`` was
the head, in which case the next eviction starts again from the tail. The paper's Algorithm 1
(``o.prev`` is the neighbour toward the head)::

    Input: The request x, doubly-linked queue T, cache size C, hand p
     1: if x is in T then                          ▷ Cache Hit
     2:     x.visited ← 1
     3: else                                       ▷ Cache Miss
     4:     if |T| = C then                        ▷ Cache Full
     5:         o ← p
     6:         if o is NULL then
     7:             o ← tail of T
     8:         while o.visited = 1 do
     9:             o.visited ← 0
    10:             o ← o.prev
    11:             if o is NULL then
    12:                 o ← tail of T
    13:         p ← o.prev
    14:         Discard o in T                     ▷ Eviction
    15:     Insert x in the head of T.
    16:     x.visited ← 0                          ▷ Insertion

Differences from CLOCK that show in the numbers: a new object goes to the head, so it lies
*ahead* of a hand that is somewhere in the middle (CLOCK puts it just behind its hand), and
retained objects keep their insertion order.

Counters: ``block_hits`` (access found x in T), ``evictions``.
"""

from __future__ import annotations

from collections.abc import Collection, Hashable
from dataclasses import dataclass
from typing import ClassVar, NamedTuple

import numpy as np

from ..engine.lists import after, link_bytes, linked, links, per_cache, push, take, unlink
from ..engine.steps import Steps, counters, param, per_id
from .base import PolicyParams, ReferencePolicy, ix, register


@dataclass(frozen=True)
class SIEVEParams(PolicyParams):
    policy: ClassVar[str] = "SIEVE"


class _Node:
    """An object of T. ``prev`` is the neighbour toward the head (newer), as in the paper;
    ``next`` the neighbour toward the tail (older); ``None`` past either end."""

    __slots__ = ("key", "next", "prev", "visited")

    def __init__(self, key: Hashable) -> None:
        self.key = key
        self.visited = 0
        self.prev: _Node | None = None
        self.next: _Node | None = None


class SIEVEReference(ReferencePolicy):
    """Line-by-line transcription of Algorithm 1 (line numbers in the comments)."""

    removable = True

    def __init__(self, params: SIEVEParams) -> None:
        super().__init__(params)
        self.C = params.capacity
        self.T: dict[Hashable, _Node] = {}
        self.head: _Node | None = None  # newest
        self.tail: _Node | None = None  # oldest
        self.p: _Node | None = None  # the hand

    def residents(self) -> Collection[Hashable]:
        return self.T

    def access(self, h: Hashable) -> None:
        if h in self.T:  # 1
            self.counters["block_hits"] += 1
            self.T[h].visited = 1  # 2
            return
        if len(self.T) == self.C:  # 4
            o = self.p  # 5
            if o is None:  # 6
                o = self.tail  # 7
            assert o is not None  # T is full and C >= 1
            while o.visited == 1:  # 8
                o.visited = 0  # 9
                o = o.prev  # 10
                if o is None:  # 11
                    o = self.tail  # 12
                assert o is not None
            self.p = o.prev  # 13
            self.discard(o)  # 14
            self.evicted(o.key)
        x = _Node(h)
        self.insert_at_head(x)  # 15
        x.visited = 0  # 16

    def remove(self, h: Hashable) -> None:
        o = self.T[h]
        if self.p is o:
            self.p = o.prev  # as after evicting o (line 13): the hand keeps its place
        self.discard(o)

    def discard(self, o: _Node) -> None:
        if o.prev is not None:
            o.prev.next = o.next
        else:
            self.head = o.next
        if o.next is not None:
            o.next.prev = o.prev
        else:
            self.tail = o.prev
        del self.T[o.key]

    def insert_at_head(self, x: _Node) -> None:
        x.prev = None
        x.next = self.head
        if self.head is not None:
            self.head.prev = x
        else:
            self.tail = x
        self.head = x
        self.T[x.key] = x


# --- steps ----------------------------------------------------------------------------------
# T is a list (engine.lists' link pairs) whose head is the paper's tail (oldest) and whose tail
# is the paper's head (newest), so the paper's ``o.prev`` (toward its head) is ``after(link,
# o)``. Per id its visited bit; per cache ``sc[4q:4q+4]`` = the list's ends, |T|, and the hand
# (-1 for NULL).


class SIEVEState(NamedTuple):
    link: np.ndarray = links()
    visited: np.ndarray = per_id(np.uint8)
    sc: np.ndarray = per_cache(-1, -1, 0, -1)
    cnt: np.ndarray = counters(SIEVEReference)
    capacity: int = param("capacity")


def sieve_is_resident(s, q, h):
    return linked(s.link, h)  # 1: x is in T


def sieve_hit(s, q, h, pred):
    s.visited[ix(h)] = 1  # 2


def sieve_admit(s, q, h, pred):
    e = 4 * q
    victim = -1
    if s.sc[ix(e + 2)] == s.capacity:  # 4: cache full
        o = s.sc[ix(e + 3)]  # 5
        if o < 0:  # 6
            o = s.sc[ix(e)]  # 7: the tail of T
        while s.visited[ix(o)] == 1:  # 8
            s.visited[ix(o)] = 0  # 9
            o = after(s.link, o)  # 10
            if o < 0:  # 11
                o = s.sc[ix(e)]  # 12
        s.sc[ix(e + 3)] = after(s.link, o)  # 13
        unlink(s.link, s.sc, e, o)  # 14
        victim = o
    else:
        s.sc[ix(e + 2)] += 1
    push(s.link, s.sc, e, h)  # 15: insert x in the head of T
    s.visited[ix(h)] = 0  # 16
    return victim


def sieve_remove(s, q, h):
    e = 4 * q
    if s.sc[ix(e + 3)] == h:
        s.sc[ix(e + 3)] = after(s.link, h)  # as after evicting h (line 13)
    take(s.link, s.sc, e, e + 2, h)


STEPS = Steps(
    SIEVEState, is_resident=sieve_is_resident, hit=sieve_hit, admit=sieve_admit, remove=sieve_remove
)


def _state_bytes(p: SIEVEParams, n_blocks: int, n_accesses: int) -> int:
    """:class:`SIEVEState`: ``link`` and ``visited`` (uint8) per id."""
    return link_bytes(n_blocks) + n_blocks


SPEC = register(SIEVEParams, SIEVEReference, STEPS, state_bytes=_state_bytes)
