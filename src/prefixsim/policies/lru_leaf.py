"""LRU_LEAF: LRU over the radix tree of block chains, evicting leaves only.

Variant: SGLang's radix cache, at block granularity: only a block with no resident child may be
evicted, least recently used first, so a chain is cut from its tail and a shared prefix stays as
long as any continuation of it is cached.

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
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from numba import njit

from .base import COMMON_COUNTERS, PolicyParams, PolicySpec, ReferencePolicy, ix, register

_NO_PARENT = object()  # parent of a request's first block


@dataclass(frozen=True)
class LRULeafParams(PolicyParams):
    policy: ClassVar[str] = "LRU_LEAF"


class LRULeafReference(ReferencePolicy):
    """``cache`` is ordered from least (head) to most (tail) recently used; ``parent`` holds the
    resident blocks' parents, ``children`` the number of resident children per block."""

    counter_names = (*COMMON_COUNTERS, "forced_evictions")

    def __init__(self, params: LRULeafParams) -> None:
        super().__init__(params)
        self.capacity = params.capacity
        self.cache: OrderedDict[Hashable, None] = OrderedDict()
        self.parent: dict[Hashable, object] = {}
        self.children: defaultdict[Hashable, int] = defaultdict(int)

    def is_resident(self, h: Hashable) -> bool:
        return h in self.cache

    def resident_count(self) -> int:
        return len(self.cache)

    def access(self, h: Hashable) -> None:
        self.access_request([h])  # a block accessed alone is a one-block request

    def access_request(self, hash_ids: Sequence[Hashable]) -> None:
        parent: object = _NO_PARENT
        for h in hash_ids:
            self.access_under(h, parent)
            parent = h

    def access_under(self, h: Hashable, parent: object) -> None:
        if h in self.cache:
            self.counters["block_hits"] += 1
            self.cache.move_to_end(h)
            return
        if len(self.cache) >= self.capacity:
            leaves = (b for b in self.cache if self.children[b] == 0)
            victim = next(leaves, None)
            if victim is None:  # no leaf (a cycle of parent links): plain LRU
                victim = next(iter(self.cache))
                self.counters["forced_evictions"] += 1
            del self.cache[victim]
            self.counters["evictions"] += 1
            victim_parent = self.parent.pop(victim)
            if victim_parent is not _NO_PARENT:
                self.children[victim_parent] -= 1
        self.cache[h] = None
        self.parent[h] = parent
        if parent is not _NO_PARENT:
            self.children[parent] += 1


# --- compiled kernel ------------------------------------------------------------------------
# Two doubly linked lists threaded through per-block arrays, both ordered by last access
# (``last[b]``, a stream position, unique): the LRU list of all resident blocks (``prev`` /
# ``nxt``, ``head`` .. ``tail``), used only for forced evictions, and the list of leaves
# (``lprev`` / ``lnext``, ``lhead`` .. ``ltail``; ``in_list`` marks its members). An accessed
# leaf is appended at the leaf tail, a block that gains a child leaves the list. A block that
# becomes a leaf again when its last resident child is evicted keeps its old ``last``: it goes
# to the leaf head if it is older than the head (the usual case: a chain cut from its tail),
# otherwise into a binary min-heap ``heap`` of last-access positions (``block_ids[key]`` is the
# block); a heap entry is live iff its block is resident, not in the list, a leaf, and still has
# ``last[b] == key``. The LRU leaf is the older of the list head and the heap's top live entry.
# A key is pushed at most once (a block can only become a leaf again after gaining a child, i.e.
# after being accessed, which changes ``last``), so live entries are distinct blocks, at most
# min(capacity, n_blocks), and there are at most as many pushes as accesses. Dead entries are
# dropped when popped or when the heap reaches ``heap_cap``: compaction keeps the live entries
# and re-heapifies, and ``heap_cap`` doubles (up to the array's 2 * capacity + 2 slots) when that
# leaves it more than half full, so compaction is amortised O(1) per push. ``heap_cap`` starts
# small so that tests reach compaction.
# One function with scalar locals, no array-taking helpers (see s3fifo.py).


# Every subscript in the loop is ``a[ix(i)]`` (:data:`~prefixsim.policies.base.ix`): block ids,
# access positions (the heap's keys), heap slots and ``offsets`` positions are non-negative; an
# end of a list or a parent's -1 is tested before it is used, or the list is known not to be
# empty there (a full cache), so numba's negative-index fix-up is skipped (1.07-1.31x,
# docs/performance.md).


@njit(cache=True, nogil=True)
def lru_leaf_kernel(block_ids, offsets, input_lengths, n_blocks, block_size, cnt, capacity):
    resident = np.zeros(n_blocks, np.bool_)
    in_list = np.zeros(n_blocks, np.bool_)
    prev = np.empty(n_blocks, np.int32)
    nxt = np.empty(n_blocks, np.int32)
    lprev = np.empty(n_blocks, np.int32)
    lnext = np.empty(n_blocks, np.int32)
    parent = np.empty(n_blocks, np.int32)
    children = np.zeros(n_blocks, np.int32)
    last = np.empty(n_blocks, np.int64)
    heap = np.empty(min(2 * capacity + 2, block_ids.shape[0] + 1), np.int64)
    heap_cap = min(16, heap.shape[0])  # compaction threshold, doubled as needed
    heap_len = 0
    head = tail = lhead = ltail = -1
    size = 0
    hits = 0
    evictions = 0
    forced = 0
    n_requests = input_lengths.shape[0]
    hit_tokens = np.empty(n_requests, np.int64)
    for r in range(n_requests):
        start = offsets[ix(r)]
        end = offsets[ix(r + 1)]
        # Longest resident prefix at arrival: stops at the first non-resident block.
        k = start
        while k < end and resident[ix(block_ids[ix(k)])]:
            k += 1
        hit_tokens[ix(r)] = min((k - start) * block_size, input_lengths[ix(r)])
        # Then every block of the request is accessed, hit or miss, in order.
        pred = -1
        for i in range(start, end):
            h = block_ids[ix(i)]
            if resident[ix(h)]:
                hits += 1
                last[ix(h)] = i
                if h != tail:
                    # unlink h (not the tail, so nxt[h] >= 0) and relink it at the tail
                    p = prev[ix(h)]
                    q = nxt[ix(h)]
                    if p >= 0:
                        nxt[ix(p)] = q
                    else:
                        head = q
                    prev[ix(q)] = p
                    prev[ix(h)] = tail
                    nxt[ix(h)] = -1
                    nxt[ix(tail)] = h
                    tail = h
                if children[ix(h)] == 0:
                    # a leaf: to the leaf tail (from the list, or from the heap, whose entry
                    # dies as last[h] changed)
                    if in_list[ix(h)]:
                        if h == ltail:
                            pred = h
                            continue
                        p = lprev[ix(h)]
                        q = lnext[ix(h)]
                        if p >= 0:
                            lnext[ix(p)] = q
                        else:
                            lhead = q
                        lprev[ix(q)] = p
                    in_list[ix(h)] = True
                    lprev[ix(h)] = ltail
                    lnext[ix(h)] = -1
                    if ltail >= 0:
                        lnext[ix(ltail)] = h
                    else:
                        lhead = h
                    ltail = h
                pred = h
                continue
            if size >= capacity:
                # the LRU leaf: the leaf-list head or the heap's top live entry, the older.
                # Pop the heap's top while it is dead, and once more if it is the victim.
                victim = -1
                while heap_len > 0:
                    key = heap[0]
                    b = block_ids[ix(key)]
                    live = (
                        resident[ix(b)]
                        and not in_list[ix(b)]
                        and last[ix(b)] == key
                        and children[ix(b)] == 0
                    )
                    if live and lhead >= 0 and key >= last[ix(lhead)]:
                        break  # the leaf list's head is older: the heap's top stays
                    heap_len -= 1
                    moved = heap[ix(heap_len)]
                    j = 0
                    while True:
                        c = 2 * j + 1
                        if c >= heap_len:
                            break
                        if c + 1 < heap_len and heap[ix(c + 1)] < heap[ix(c)]:
                            c += 1
                        if heap[ix(c)] >= moved:
                            break
                        heap[ix(j)] = heap[ix(c)]
                        j = c
                    heap[ix(j)] = moved
                    if live:
                        victim = b
                        break
                if victim < 0 and lhead >= 0:
                    victim = lhead
                    lhead = lnext[ix(victim)]
                    if lhead >= 0:
                        lprev[ix(lhead)] = -1
                    else:
                        ltail = -1
                    in_list[ix(victim)] = False
                elif victim < 0:  # no resident leaf (a cycle of parent links): plain LRU
                    victim = head
                    forced += 1
                p = prev[ix(victim)]
                q = nxt[ix(victim)]
                if p >= 0:
                    nxt[ix(p)] = q
                else:
                    head = q
                if q >= 0:
                    prev[ix(q)] = p
                else:
                    tail = p
                resident[ix(victim)] = False
                size -= 1
                evictions += 1
                vp = parent[ix(victim)]
                if vp >= 0:
                    children[ix(vp)] -= 1
                    if children[ix(vp)] == 0 and resident[ix(vp)]:
                        # vp is a leaf again, with its old last access
                        lv = last[ix(vp)]
                        if lhead < 0 or lv < last[ix(lhead)]:
                            in_list[ix(vp)] = True
                            lprev[ix(vp)] = -1
                            lnext[ix(vp)] = lhead
                            if lhead >= 0:
                                lprev[ix(lhead)] = vp
                            else:
                                ltail = vp
                            lhead = vp
                        else:
                            if heap_len == heap_cap:
                                # compaction: keep the live entries, then heapify
                                m = 0
                                for s in range(heap_len):
                                    key = heap[ix(s)]
                                    b = block_ids[ix(key)]
                                    if (
                                        resident[ix(b)] and not in_list[ix(b)]
                                        and last[ix(b)] == key and children[ix(b)] == 0
                                    ):  # fmt: skip
                                        heap[ix(m)] = key
                                        m += 1
                                heap_len = m
                                if 2 * heap_len > heap_cap:
                                    heap_cap = min(2 * heap_cap, heap.shape[0])
                                for s in range(heap_len // 2 - 1, -1, -1):
                                    moved = heap[ix(s)]
                                    j = s
                                    while True:
                                        c = 2 * j + 1
                                        if c >= heap_len:
                                            break
                                        if c + 1 < heap_len and heap[ix(c + 1)] < heap[ix(c)]:
                                            c += 1
                                        if heap[ix(c)] >= moved:
                                            break
                                        heap[ix(j)] = heap[ix(c)]
                                        j = c
                                    heap[ix(j)] = moved
                            j = heap_len  # push lv: sift up
                            heap_len += 1
                            while j > 0:
                                p = (j - 1) >> 1
                                if heap[ix(p)] <= lv:
                                    break
                                heap[ix(j)] = heap[ix(p)]
                                j = p
                            heap[ix(j)] = lv
            # admit h at the MRU end, under pred
            resident[ix(h)] = True
            size += 1
            last[ix(h)] = i
            prev[ix(h)] = tail
            nxt[ix(h)] = -1
            if tail >= 0:
                nxt[ix(tail)] = h
            else:
                head = h
            tail = h
            parent[ix(h)] = pred
            if pred >= 0:
                children[ix(pred)] += 1
                if in_list[ix(pred)]:  # pred was a leaf: it leaves the leaf list
                    p = lprev[ix(pred)]
                    q = lnext[ix(pred)]
                    if p >= 0:
                        lnext[ix(p)] = q
                    else:
                        lhead = q
                    if q >= 0:
                        lprev[ix(q)] = p
                    else:
                        ltail = p
                    in_list[ix(pred)] = False
            if children[ix(h)] == 0:
                in_list[ix(h)] = True
                lprev[ix(h)] = ltail
                lnext[ix(h)] = -1
                if ltail >= 0:
                    lnext[ix(ltail)] = h
                else:
                    lhead = h
                ltail = h
            pred = h
    cnt[0] += hits
    cnt[1] += evictions
    cnt[2] += forced
    return hit_tokens, size


def _kernel_args(p: LRULeafParams) -> tuple[int]:
    return (p.capacity,)


SPEC = register(
    PolicySpec(
        name="LRU_LEAF",
        params_type=LRULeafParams,
        reference=LRULeafReference,
        fast_kernel=lru_leaf_kernel,
        kernel_args=_kernel_args,
    )
)
