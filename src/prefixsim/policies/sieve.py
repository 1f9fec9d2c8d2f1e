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

from collections.abc import Hashable
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from numba import njit

from .base import PolicyParams, PolicySpec, ReferencePolicy, ix, register


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

    reports_victims = True
    removable = True

    def __init__(self, params: SIEVEParams) -> None:
        super().__init__(params)
        self.C = params.capacity
        self.T: dict[Hashable, _Node] = {}
        self.head: _Node | None = None  # newest
        self.tail: _Node | None = None  # oldest
        self.p: _Node | None = None  # the hand

    def is_resident(self, h: Hashable) -> bool:
        return h in self.T

    def resident_count(self) -> int:
        return len(self.T)

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


# --- compiled kernel ------------------------------------------------------------------------
# T is a doubly linked list threaded through ``node`` (indexed by dense block id), one row per
# block so that the sweep touches one cache line per object: ``node[b, 0]`` = the paper's
# ``b.prev`` (toward the head, newer), ``node[b, 1]`` = ``b.next`` (toward the tail, older),
# ``node[b, 2]`` = visited (0/1), or -1 when ``b`` is not in T. -1 also ends the list and
# stands for NULL in ``head``, ``tail`` and the hand ``hand``.

_PREV, _NEXT, _VISITED = 0, 1, 2


# Every subscript in the loop is ``a[ix(i)]`` (:data:`~prefixsim.policies.base.ix`): an end of the
# list, -1, is tested before it is used as an index (the hand falls back to the tail, which a
# full cache has), so every index is a block id or an ``offsets`` position, non-negative, and
# numba's negative-index fix-up is skipped (1.2-1.4x, docs/performance.md).


@njit(cache=True, nogil=True)
def sieve_kernel(block_ids, offsets, input_lengths, n_blocks, block_size, cnt, capacity):
    node = np.empty((n_blocks, 3), np.int32)
    node[:, _VISITED] = -1
    head = -1
    tail = -1
    hand = -1
    size = 0
    hits = 0
    evictions = 0
    n_requests = input_lengths.shape[0]
    hit_tokens = np.empty(n_requests, np.int64)
    for r in range(n_requests):
        start = offsets[ix(r)]
        end = offsets[ix(r + 1)]
        # Longest resident prefix at arrival: stops at the first block not in T.
        k = start
        while k < end and node[ix(block_ids[ix(k)]), _VISITED] >= 0:
            k += 1
        hit_tokens[ix(r)] = min((k - start) * block_size, input_lengths[ix(r)])
        # Then every block of the request is accessed, hit or miss, in order.
        for i in range(start, end):
            x = block_ids[ix(i)]
            if node[ix(x), _VISITED] >= 0:  # 1: cache hit
                hits += 1
                node[ix(x), _VISITED] = 1  # 2
                continue
            if size == capacity:  # 4: cache full
                o = hand  # 5
                if o < 0:  # 6
                    o = tail  # 7
                while node[ix(o), _VISITED] == 1:  # 8
                    node[ix(o), _VISITED] = 0  # 9
                    o = node[ix(o), _PREV]  # 10
                    if o < 0:  # 11
                        o = tail  # 12
                p = node[ix(o), _PREV]
                n = node[ix(o), _NEXT]
                hand = p  # 13
                # 14: discard o
                if p >= 0:
                    node[ix(p), _NEXT] = n
                else:
                    head = n
                if n >= 0:
                    node[ix(n), _PREV] = p
                else:
                    tail = p
                node[ix(o), _VISITED] = -1
                size -= 1
                evictions += 1
            # 15: insert x at the head; 16: not visited
            node[ix(x), _PREV] = -1
            node[ix(x), _NEXT] = head
            if head >= 0:
                node[ix(head), _PREV] = x
            else:
                tail = x
            head = x
            node[ix(x), _VISITED] = 0
            size += 1
    cnt[0] += hits
    cnt[1] += evictions
    return hit_tokens, size


def _kernel_args(p: SIEVEParams) -> tuple[int]:
    return (p.capacity,)


SPEC = register(
    PolicySpec(
        name="SIEVE",
        params_type=SIEVEParams,
        reference=SIEVEReference,
        fast_kernel=sieve_kernel,
        kernel_args=_kernel_args,
    )
)
