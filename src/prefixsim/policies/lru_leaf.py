"""LRU_LEAF: LRU over the radix tree of block chains, evicting leaves only.

Variant: a block-level, leaf-only LRU: only a block with no resident child may be evicted,
least recently used first, so a chain is cut from its tail and a shared prefix stays as long as
any continuation of it is cached. It is not SGLang's radix cache, which keeps recency per radix
node (a run of blocks inserted together, refreshed as a whole, split by a match that ends inside
it) and evicts whole leaf nodes: that is ``RADIX`` (:mod:`prefixsim.policies.radix`), which with
split refresh, whole-node eviction and its spare page switched off is this policy (tested).

The tree. A block gets its parent when it is admitted (on a miss): the block accessed just
before it in the same request (``h_{i-1}``), or none for ``h_0``. The parent is kept while the
block stays resident (a hit does not re-parent it, whatever its predecessor in the hitting
request), and is assigned anew when an evicted block is admitted again; with Mooncake-style
hashes every block has one predecessor anyway. ``children[b]`` counts the *resident* blocks
whose parent is ``b``, whether or not ``b`` itself is resident. A block is admitted after the
eviction it causes, so it is not its parent's child during that eviction: its parent, the most
recently used block, is evicted only if no other resident block is a leaf (e.g. when the chain
being extended fills the cache). Recency is the last access (hit or admission). ::

    access_request([h_0, ..., h_{n-1}]):
        for i, h in enumerate(hash_ids):
            access(h, parent=h_{i-1} if i > 0 else none)

    access(h, parent):
        if h resident: block hit; move h to the MRU end; return
        if |cache| >= capacity:
            v = the LRU resident block with children[v] == 0
                or, if there is none, the LRU resident block   # forced eviction
            remove v; if parent(v) is not none: children[parent(v)] -= 1
        insert h at the MRU end; parent(h) = parent
        if parent is not none: children[parent] += 1

A duplicate ``h_i == h_{i-1}`` is always a hit (``h_{i-1}`` was just accessed), so no block is
its own parent. A resident set without a leaf needs a cycle of parent links (``a`` admitted
under ``b`` after ``b`` was evicted, then ``b`` readmitted under ``a``); only then is an
eviction forced, and it is well defined.

Counters: ``block_hits``, ``evictions``, ``forced_evictions`` (evictions of a block that had a
resident child because no resident block was a leaf).
"""

from __future__ import annotations

from collections import OrderedDict, defaultdict
from collections.abc import Collection, Hashable
from dataclasses import dataclass
from typing import ClassVar, NamedTuple

import numpy as np
from numba import njit

from ..engine import heaps
from ..engine.lists import (
    link_array,
    link_bytes,
    linked,
    pop_head,
    push,
    push_front,
    scalars,
    take,
    to_tail,
    unlink,
)
from ..engine.steps import Space, Steps, counter_array
from .base import (
    COMMON_COUNTERS,
    DEMOTED,
    PolicyParams,
    ReferencePolicy,
    ix,
    register,
    zeroed_state,
)
from .lru import lru_is_resident

_NO_PARENT = object()  # parent of a request's first block


@dataclass(frozen=True)
class LRULeafParams(PolicyParams):
    policy: ClassVar[str] = "LRU_LEAF"


class ChainTree:
    """The tree of block chains of a prefix-aware reference (LRU_LEAF, S3FIFO_LEAF): ``parent``
    holds the cached blocks' parents, ``children`` the number of cached children per block."""

    parent: dict[Hashable, object]
    children: defaultdict[Hashable, int]

    def init_tree(self) -> None:
        self.parent = {}
        self.children = defaultdict(int)

    def adopt(self, h: Hashable, pred: Hashable | None) -> None:
        """``h`` enters the cache: the request's previous block adopts it (a request's first
        block, or a block demoted from a faster tier, has no parent)."""
        parent = _NO_PARENT if pred is None or pred is DEMOTED else pred
        self.parent[h] = parent
        if parent is not _NO_PARENT:
            self.children[parent] += 1

    def release(self, h: Hashable) -> None:
        """``h`` leaves the cache: its parent loses a child."""
        parent = self.parent.pop(h)
        if parent is not _NO_PARENT:
            self.children[parent] -= 1


class LRULeafReference(ChainTree, ReferencePolicy):
    """``cache`` is ordered from least (head) to most (tail) recently used; the tree is
    :class:`ChainTree`'s."""

    counter_names = (*COMMON_COUNTERS, "forced_evictions")
    removable = True

    def __init__(self, params: LRULeafParams) -> None:
        super().__init__(params)
        self.cache: OrderedDict[Hashable, None] = OrderedDict()
        self.init_tree()

    def residents(self) -> Collection[Hashable]:
        return self.cache

    def access(self, h: Hashable) -> None:
        self.access_request([h])  # a block accessed alone is a one-block request

    def hit(self, h: Hashable, pred: Hashable | None = None) -> None:
        self.counters["block_hits"] += 1
        self.cache.move_to_end(h)  # a hit does not re-parent h

    def _miss(self, h: Hashable, pred: Hashable | None) -> None:
        if len(self.cache) >= self.capacity:
            leaves = (b for b in self.cache if self.children[b] == 0)
            victim = next(leaves, None)
            if victim is None:  # no leaf (a cycle of parent links): plain LRU
                victim = next(iter(self.cache))
                self.counters["forced_evictions"] += 1
            self.remove(victim)
            self.evicted(victim)
        self.cache[h] = None
        self.adopt(h, pred)

    def remove(self, h: Hashable) -> None:
        del self.cache[h]
        self.release(h)


# --- steps ----------------------------------------------------------------------------------
# Two lists (engine.lists' link pairs), both ordered by last access (``last[b]``, the cache's
# clock ``sc[_NOW]`` at the access, unique): the LRU list of all resident blocks (``link``),
# used only for forced evictions, and the list of leaves (``llink``). An accessed leaf goes to
# the leaf tail, a block that gains a child leaves the list. A block that becomes a leaf again
# when its last resident child leaves keeps its old ``last``: it goes to the leaf head if it is
# older than the head (the usual case: a chain cut from its tail), to the leaf tail if it is
# newer than the tail (its child was the request's last block, removed when the request ended:
# an engine's temporary block), otherwise into a binary
# min-heap (engine.heaps) keyed by ``last << 31 | id``; an entry is live iff its block is
# resident, not in the list, a leaf, and still has that ``last``. The LRU leaf is the older of
# the list head and the heap's top live entry. A key is pushed at most once (a block can become
# a leaf again only after gaining a child, i.e. after being accessed, which changes ``last``),
# so live entries are distinct blocks, at most min(capacity, n_ids), and there are at most as
# many pushes as steps. Dead entries are dropped when popped or when the heap reaches its
# threshold ``sc[_HEAP_CAP]`` (compaction keeps the live entries; the threshold doubles, up to
# 2 * capacity + 2 slots, when that leaves it more than half full); it starts small so that tests
# reach compaction. Per cache ``sc[8q:8q+8]`` = the two lists' ends, size, clock, the heap's
# length and threshold; cache q's heap is ``heap[q * heap_size:]``.

_LEAVES, _SIZE, _NOW, _HEAP_LEN, _HEAP_CAP = 2, 4, 5, 6, 7
_ID_BITS = 31
_ID_MASK = (1 << _ID_BITS) - 1


class LRULeafState(NamedTuple):
    link: np.ndarray
    llink: np.ndarray
    parent: np.ndarray
    children: np.ndarray
    last: np.ndarray
    heap: np.ndarray
    sc: np.ndarray
    cnt: np.ndarray
    capacity: int
    heap_size: int


def lru_leaf_state(p: LRULeafParams, space: Space) -> LRULeafState:
    # Heap keys hold an id (< 2**31: the arrays are int32) and a clock value (at most one step
    # per access, < 2**32): exact in int64.
    if space.n_ids >= 2**_ID_BITS or len(space.stream) >= 2**32:
        raise ValueError("LRU_LEAF's heap keys hold ids below 2**31 and fewer than 2**32 steps")
    heap_size = min(2 * p.capacity + 2, len(space.stream) + 1)
    return LRULeafState(
        link_array(space.n_ids),
        link_array(space.n_ids),
        np.empty(space.n_ids, np.int32),
        zeroed_state(space.n_ids, np.int32),
        np.empty(space.n_ids, np.int64),
        np.empty(space.n_caches * heap_size, np.int64),
        scalars(space.n_caches, -1, -1, -1, -1, 0, 0, 0, min(16, heap_size)),
        counter_array(space.n_caches, LRULeafReference.counter_names),
        p.capacity,
        heap_size,
    )


@njit(inline="always")
def _tick(s, q, h):
    """``h`` is accessed now: its ``last`` is the cache's clock, which advances."""
    now = s.sc[ix(8 * q + _NOW)]
    s.sc[ix(8 * q + _NOW)] = now + 1
    s.last[ix(h)] = now


@njit
def _live(s, key):
    b = key & _ID_MASK
    if not linked(s.link, b) or linked(s.llink, b):
        return False
    return (s.last[ix(b)] == key >> _ID_BITS) & (s.children[ix(b)] == 0)


@njit
def _leaf_again(s, q, b):
    """Resident ``b`` lost its last resident child: a leaf again, with its old last access."""
    e = 8 * q
    lv = s.last[ix(b)]
    lhead = s.sc[ix(e + _LEAVES)]
    if lhead < 0 or lv < s.last[ix(lhead)]:
        push_front(s.llink, s.sc, e + _LEAVES, b)
        return
    if lv > s.last[ix(s.sc[ix(e + _LEAVES + 1)])]:
        # newer than the tail (a block whose only child was the request's temporary block,
        # freed when the request ends: the engines' rule): the list stays ordered
        push(s.llink, s.sc, e + _LEAVES, b)
        return
    base = q * s.heap_size
    n = s.sc[ix(e + _HEAP_LEN)]
    if n == s.sc[ix(e + _HEAP_CAP)]:
        # compaction: keep the live entries, then heapify
        m = 0
        for j in range(n):
            key = s.heap[ix(base + j)]
            if _live(s, key):
                s.heap[ix(base + m)] = key
                m += 1
        n = m
        if 2 * n > s.sc[ix(e + _HEAP_CAP)]:
            s.sc[ix(e + _HEAP_CAP)] = min(2 * s.sc[ix(e + _HEAP_CAP)], s.heap_size)
        heaps.heapify(s.heap, base, n)
    heaps.push(s.heap, base, n, (lv << _ID_BITS) | b)
    s.sc[ix(e + _HEAP_LEN)] = n + 1


@njit(inline="always")  # S3FIFO_LEAF's steps call it, as adopt
def release(s, b):
    """``b`` left the cache: its parent loses a resident child (:meth:`ChainTree.release`).
    Returns the parent, -1 if none."""
    vp = s.parent[ix(b)]
    if vp >= 0:
        s.children[ix(vp)] -= 1
    return vp


@njit(inline="always")
def adopt(s, h, pred):
    """``h`` was admitted: the request's previous block adopts it (:meth:`ChainTree.adopt`; a
    demoted block has none). Returns the parent, -1 if none."""
    parent = pred if pred >= 0 else -1
    s.parent[ix(h)] = parent
    if parent >= 0:
        s.children[ix(parent)] += 1
    return parent


@njit
def _release(s, q, b):
    """``b`` left the cache: its parent, resident and childless now, is a leaf again."""
    vp = release(s, b)
    if vp >= 0 and s.children[ix(vp)] == 0 and linked(s.link, vp):
        _leaf_again(s, q, vp)


def lru_leaf_hit(s, q, h, pred):
    e = 8 * q
    _tick(s, q, h)
    to_tail(s.link, s.sc, e, h)
    if s.children[ix(h)] == 0:
        # a leaf: to the leaf tail (from the list, or from the heap, whose entry dies as last[h]
        # changed)
        if linked(s.llink, h):
            to_tail(s.llink, s.sc, e + _LEAVES, h)
        else:
            push(s.llink, s.sc, e + _LEAVES, h)


def lru_leaf_admit(s, q, h, pred):
    e = 8 * q
    victim = -1
    if s.sc[ix(e + _SIZE)] >= s.capacity:
        # the LRU leaf: the leaf-list head or the heap's top live entry, the older. Pop the
        # heap's top while it is dead, and once more if it is the victim.
        base = q * s.heap_size
        lhead = s.sc[ix(e + _LEAVES)]
        while s.sc[ix(e + _HEAP_LEN)] > 0:
            key = s.heap[ix(base)]
            live = _live(s, key)
            if live and lhead >= 0 and key >> _ID_BITS >= s.last[ix(lhead)]:
                break  # the leaf list's head is older: the heap's top stays
            heaps.pop(s.heap, base, s.sc[ix(e + _HEAP_LEN)])
            s.sc[ix(e + _HEAP_LEN)] -= 1
            if live:
                victim = key & _ID_MASK
                break
        if victim < 0 and lhead >= 0:
            victim = pop_head(s.llink, s.sc, e + _LEAVES)
        elif victim < 0:  # no resident leaf (a cycle of parent links): plain LRU
            victim = s.sc[ix(e)]
            s.cnt[ix(q), 2] += 1
        unlink(s.link, s.sc, e, victim)
        _release(s, q, victim)
    else:
        s.sc[ix(e + _SIZE)] += 1
    # admit h at the MRU end, under the request's previous block (a demoted block has none)
    _tick(s, q, h)
    push(s.link, s.sc, e, h)
    parent = adopt(s, h, pred)
    if parent >= 0 and linked(s.llink, parent):  # the parent was a leaf: it leaves the list
        unlink(s.llink, s.sc, e + _LEAVES, parent)
    if s.children[ix(h)] == 0:
        push(s.llink, s.sc, e + _LEAVES, h)
    return victim


def lru_leaf_remove(s, q, h):
    e = 8 * q
    take(s.link, s.sc, e, e + _SIZE, h)
    if linked(s.llink, h):
        unlink(s.llink, s.sc, e + _LEAVES, h)
    _release(s, q, h)


STEPS = Steps(
    LRULeafState,
    lru_leaf_state,
    lru_is_resident,
    lru_leaf_hit,
    lru_leaf_admit,
    remove=lru_leaf_remove,
)


def _state_bytes(p: LRULeafParams, n_blocks: int, n_accesses: int) -> int:
    """:func:`lru_leaf_state` for one cache: ``link`` and ``llink``, ``parent`` and ``children``
    (int32) and ``last`` (int64) per id, and the heap of ``min(2 * capacity + 2, n_accesses +
    1)`` int64."""
    return 2 * link_bytes(n_blocks) + 16 * n_blocks + 8 * min(2 * p.capacity + 2, n_accesses + 1)


SPEC = register(LRULeafParams, LRULeafReference, STEPS, state_bytes=_state_bytes)
