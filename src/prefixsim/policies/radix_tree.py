"""RADIX's radix tree over arrays: the compiled form of :class:`RadixReference
<prefixsim.policies.radix.RadixReference>`'s tree (its match, insertion and eviction), which the
request step of :mod:`prefixsim.policies.radix` calls. Kept apart from the policy (its
parameters, its reference, its allocation rule and its registration) as the part that is about
the tree's arrays only; the drivers' disk cache is keyed by this file too (the policy's
``Steps(files=...)``).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit

from ..engine import heaps
from .base import ix

# --- the tree's arrays ----------------------------------------------------------------------
# A request-level policy (prefixsim.engine.steps): one ``request`` step serves a whole request
# as ``RadixReference.serve_request`` does, over arrays. Per block id: ``node`` (its node, -1
# when not resident) and the links of its node's run, ``nxt`` and ``prv`` (-1 at the ends), so a
# walk follows a node's key block by block from any of its blocks. Per node (cache q's are
# ``q * n_nodes ..``, its root the first; a free list ``free`` holds the unused ones): its run's
# ``head`` and ``last`` blocks, ``parent``, ``nchild`` (children), ``time`` (-1 when free) and
# ``mark``, the last request that walked it. Every non-root node holds a block, so a cache has
# at most min(capacity, n_ids) of them besides its root.
#
# Locks. SGLang locks the nodes a request's match walked and their ancestors while it evicts
# for it (at its prefill, and at each of its decode steps); a locked *leaf* is then a walked
# node: a locked ancestor has a walked node below it, which no eviction takes (it is locked),
# so it never becomes a leaf while the request runs. So the lock is the mark: a leaf marked by
# the running request is skipped, by each of its evictions.
#
# The eviction order: the leaf of least (time, node) first. Times are unique (a clock per
# cache, advanced at every refresh and creation), so the order is the reference's (its uid
# never breaks a tie). A binary min-heap (engine.heaps) holds keys ``time << bits | local node``;
# ``queued[n]`` says that the key of n's current time is in the heap (pushed at most once per
# time). An entry is live iff its node still has that time and no child: dead entries are
# dropped when popped, or at compaction when the heap reaches its threshold (as LRU_LEAF's).
# Every non-root leaf is queued; a node gets a new time only by a walk (queued again if a
# leaf) or at creation. The lower part of a split keeps its node (as the reference's object),
# the upper part is a new node; with ``split_refresh=False`` the walk leaves the lower part's
# time as it was instead of restoring it after the split (the order is the same).
#
# Per cache ``sc[8q:8q+8]``: resident blocks, clock, the request stamp, the heap's length and
# threshold, the free list's length.

SIZE, CLOCK, STAMP, HEAP_LEN, HEAP_CAP, FREE = range(6)
EVICTED_NODES, SPLITS, DUPLICATES = 2, 3, 4  # counter columns


class RadixState(NamedTuple):
    node: np.ndarray
    nxt: np.ndarray
    prv: np.ndarray
    head: np.ndarray
    last: np.ndarray
    parent: np.ndarray
    nchild: np.ndarray
    time: np.ndarray
    mark: np.ndarray
    queued: np.ndarray
    free: np.ndarray
    heap: np.ndarray
    stash: np.ndarray
    sc: np.ndarray
    cnt: np.ndarray
    capacity: int
    n_nodes: int
    heap_size: int
    bits: int
    split_refresh: bool
    whole_node: bool
    spare: int
    shortfall: bool
    outputs: np.ndarray
    """The requests' output lengths, in the order they are served (``Space.output_lengths``);
    empty without ``decode``."""
    served: np.ndarray
    """``served[0]``: the requests served so far by any cache (the next one's index into
    ``outputs``: the drivers serve each request once, in trace order)."""
    decode: bool
    """The decode steps' pages are kept (``cache_output_blocks``)."""


@njit(inline="always")
def _tick(s, q):
    now = s.sc[ix(8 * q + CLOCK)]
    s.sc[ix(8 * q + CLOCK)] = now + 1
    return now


@njit
def _compact(s, q, n):
    """Keep the heap's live entries (their nodes' current time, no child), then heapify."""
    e = 8 * q
    base = q * s.heap_size
    first = q * s.n_nodes
    mask = (1 << s.bits) - 1
    m = 0
    for j in range(n):
        key = s.heap[ix(base + j)]
        x = first + (key & mask)
        if s.time[ix(x)] == key >> s.bits:
            if s.nchild[ix(x)] == 0:
                s.heap[ix(base + m)] = key
                m += 1
            else:
                s.queued[ix(x)] = False
    if 2 * m > s.sc[ix(e + HEAP_CAP)]:
        s.sc[ix(e + HEAP_CAP)] = min(2 * s.sc[ix(e + HEAP_CAP)], s.heap_size)
    heaps.heapify(s.heap, base, m)
    return m


@njit
def _queue(s, q, x):
    """Leaf ``x``'s current time into the heap, unless it is there."""
    if s.queued[ix(x)]:
        return
    e = 8 * q
    n = s.sc[ix(e + HEAP_LEN)]
    if n == s.sc[ix(e + HEAP_CAP)]:
        n = _compact(s, q, n)
    key = (s.time[ix(x)] << s.bits) | (x - q * s.n_nodes)
    heaps.push(s.heap, q * s.heap_size, n, key)
    s.sc[ix(e + HEAP_LEN)] = n + 1
    s.queued[ix(x)] = True


@njit
def _refresh(s, q, x):
    """A walk reaches ``x``: it gets the current time (queued again if a leaf)."""
    s.time[ix(x)] = _tick(s, q)
    s.queued[ix(x)] = False
    if s.nchild[ix(x)] == 0:
        _queue(s, q, x)


@njit
def _new_node(s, q, parent):
    e = 8 * q
    top = s.sc[ix(e + FREE)] - 1
    s.sc[ix(e + FREE)] = top
    x = s.free[ix(q * s.n_nodes + top)]
    s.parent[ix(x)] = parent
    s.nchild[ix(x)] = 0
    s.queued[ix(x)] = False
    s.time[ix(x)] = _tick(s, q)
    return x


@njit
def _split(s, q, x, b):
    """Node ``x``'s blocks up to ``b`` become a new node above it (created now), returned."""
    u = _new_node(s, q, s.parent[ix(x)])
    c = s.head[ix(x)]
    s.head[ix(u)] = c
    s.last[ix(u)] = b
    while c != b:
        s.node[ix(c)] = u
        c = s.nxt[ix(c)]
    s.node[ix(b)] = u
    rest = s.nxt[ix(b)]
    s.nxt[ix(b)] = -1
    s.prv[ix(rest)] = -1
    s.head[ix(x)] = rest
    s.parent[ix(x)] = u
    s.nchild[ix(u)] = 1
    s.cnt[ix(q), SPLITS] += 1
    return u


@njit
def _run(s, ids, i, stop):
    """From block ``ids[i]`` of its node, the last block of the node's run that ``ids[i:stop]``
    follows, and the index after it."""
    b = ids[ix(i)]
    i += 1
    while i < stop:
        nx = s.nxt[ix(b)]
        if nx < 0 or nx != ids[ix(i)]:
            break
        b = nx
        i += 1
    return b, i


@njit
def match(s, q, ids, start, stop, stamp):
    """RadixReference._match over ``ids[start:stop]`` (resident): refresh, split where the key
    ends inside a node, mark the nodes walked."""
    i = start
    while i < stop:
        x = s.node[ix(ids[ix(i)])]
        b, i = _run(s, ids, i, stop)
        split = i == stop and s.nxt[ix(b)] >= 0
        if s.split_refresh or not split:
            _refresh(s, q, x)
        if split:
            x = _split(s, q, x, b)
        s.mark[ix(x)] = stamp


@njit
def insert(s, q, ids, start, stop):
    """RadixReference._insert over ``ids[start:stop]``: the leading blocks already in the tree
    (all of them: ``stop - start``)."""
    parent = q * s.n_nodes  # the root
    i = start
    leading = -1
    added = 0
    while i < stop:
        x = s.node[ix(ids[ix(i)])]
        if x < 0:  # the blocks up to the next resident one (or a repeat) make a new leaf
            if leading < 0:
                leading = i - start
            leaf = _new_node(s, q, parent)
            s.nchild[ix(parent)] += 1
            s.head[ix(leaf)] = ids[ix(i)]
            prev = -1
            while i < stop and s.node[ix(ids[ix(i)])] < 0:
                b = ids[ix(i)]
                s.node[ix(b)] = leaf
                s.prv[ix(b)] = prev
                s.nxt[ix(b)] = -1
                if prev >= 0:
                    s.nxt[ix(prev)] = b
                prev = b
                added += 1
                i += 1
            s.last[ix(leaf)] = prev
            _queue(s, q, leaf)
            parent = leaf
            continue
        b, i = _run(s, ids, i, stop)
        split = s.nxt[ix(b)] >= 0
        if s.split_refresh or not split:
            _refresh(s, q, x)
        if split:
            x = _split(s, q, x, b)
        parent = x
    s.sc[ix(8 * q + SIZE)] += added
    return stop - start if leading < 0 else leading


@njit
def evict(s, q, n, stamp):
    """RadixReference._evict: unlocked leaves, least recent first, until ``n`` blocks are
    freed (or none is left); returns the blocks freed."""
    e = 8 * q
    base = q * s.heap_size
    first = q * s.n_nodes
    mask = (1 << s.bits) - 1
    evicted = 0
    stashed = 0
    while evicted < n and s.sc[ix(e + HEAP_LEN)] > 0:
        length = s.sc[ix(e + HEAP_LEN)]
        key = s.heap[ix(base)]
        heaps.pop(s.heap, base, length)
        s.sc[ix(e + HEAP_LEN)] = length - 1
        x = first + (key & mask)
        if s.time[ix(x)] != key >> s.bits:
            continue  # dead: an older time of x, or a freed node
        s.queued[ix(x)] = False
        if s.nchild[ix(x)] > 0:
            continue  # not a leaf (any more)
        if s.mark[ix(x)] == stamp:  # locked by the request: kept, queued again below
            s.stash[ix(first + stashed)] = x
            stashed += 1
            continue
        if s.whole_node or s.head[ix(x)] == s.last[ix(x)]:
            b = s.head[ix(x)]
            while b >= 0:
                s.node[ix(b)] = -1
                b = s.nxt[ix(b)]
                evicted += 1
            s.cnt[ix(q), EVICTED_NODES] += 1
            p = s.parent[ix(x)]
            s.nchild[ix(p)] -= 1
            s.time[ix(x)] = -1
            top = s.sc[ix(e + FREE)]
            s.free[ix(first + top)] = x
            s.sc[ix(e + FREE)] = top + 1
            if s.nchild[ix(p)] == 0 and p != first:
                _queue(s, q, p)
        else:  # its last block only; the node stays a leaf with its time
            b = s.last[ix(x)]
            s.node[ix(b)] = -1
            pb = s.prv[ix(b)]
            s.nxt[ix(pb)] = -1
            s.last[ix(x)] = pb
            evicted += 1
            _queue(s, q, x)
    for j in range(stashed):
        _queue(s, q, s.stash[ix(first + j)])
    s.sc[ix(e + SIZE)] -= evicted
    return evicted
