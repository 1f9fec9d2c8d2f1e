"""LRU_TAIL_FIRST: LRU in which a request's chain is evicted tail first.

Variant: the recency order vLLM's block manager produces. While a request runs, its blocks are
held (not evictable while any older block is left); when it finishes, they are returned to the
LRU free queue in reverse, so after the request ``h_{n-1}`` is the least recent of its blocks
and ``h_0`` the most recent, and the cache loses a chain from its tail, never from its head.

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
from typing import ClassVar

import numpy as np
from numba import njit

from .base import COMMON_COUNTERS, PolicyParams, PolicySpec, ReferencePolicy, ix, register


@dataclass(frozen=True)
class LRUTailFirstParams(PolicyParams):
    policy: ClassVar[str] = "LRU_TAIL_FIRST"


class LRUTailFirstReference(ReferencePolicy):
    """``old`` is ordered from least (head) to most (tail) recently used; between requests it
    holds every resident block."""

    counter_names = (*COMMON_COUNTERS, "self_evictions")

    def __init__(self, params: LRUTailFirstParams) -> None:
        super().__init__(params)
        self.capacity = params.capacity
        self.old: OrderedDict[Hashable, None] = OrderedDict()

    def is_resident(self, h: Hashable) -> bool:
        return h in self.old

    def resident_count(self) -> int:
        return len(self.old)

    def access(self, h: Hashable) -> None:
        self.access_request([h])  # a block accessed alone is a one-block request

    def access_request(self, hash_ids: Sequence[Hashable]) -> None:
        placed: OrderedDict[Hashable, None] = OrderedDict()  # h_0 first
        for h in hash_ids:
            if h in placed:
                self.counters["block_hits"] += 1
                continue
            if h in self.old:
                self.counters["block_hits"] += 1
                del self.old[h]
            elif len(self.old) + len(placed) >= self.capacity:
                if self.old:
                    self.old.popitem(last=False)
                else:
                    placed.popitem(last=True)
                    self.counters["self_evictions"] += 1
                self.counters["evictions"] += 1
            placed[h] = None
        for h in reversed(placed):
            self.old[h] = None


# --- compiled kernel ------------------------------------------------------------------------
# One doubly linked list as in lru.py (``head`` least recent, ``tail`` most recent). The blocks
# the current request has placed form the run from ``seg`` (the least recent of them) to
# ``tail``; ``stamp[h] == r`` marks a block placed by request r (still placed iff resident). A
# newly placed block is linked just before ``seg`` (at the tail when nothing is placed yet) and
# becomes ``seg``, so when the request ends the run is already h_{n-1} .. h_0 and nothing is
# moved. Evictions take ``head``, which is a placed block only when no old block is left.


# Every subscript in the loop is ``a[ix(i)]`` (:data:`~prefixsim.policies.base.ix`): block ids
# and ``offsets`` positions are non-negative; an end of the list (-1) or ``seg`` before the
# request placed a block is tested before it is used, and ``head`` of a full cache is a block, so
# numba's negative-index fix-up is skipped (1.04-1.05x, docs/performance.md).


@njit(cache=True, nogil=True)
def lru_tail_first_kernel(block_ids, offsets, input_lengths, n_blocks, block_size, cnt, capacity):
    resident = np.zeros(n_blocks, np.bool_)
    stamp = np.full(n_blocks, -1, np.int64)
    prev = np.empty(n_blocks, np.int32)
    nxt = np.empty(n_blocks, np.int32)
    head = -1
    tail = -1
    size = 0
    hits = 0
    evictions = 0
    self_evictions = 0
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
        seg = -1
        for i in range(start, end):
            h = block_ids[ix(i)]
            if resident[ix(h)]:
                hits += 1
                if stamp[ix(h)] == r:
                    continue  # a duplicate already placed keeps its place
                # unlink the old block h (it is not placed, so it is not seg)
                p = prev[ix(h)]
                n = nxt[ix(h)]
                if p >= 0:
                    nxt[ix(p)] = n
                else:
                    head = n
                if n >= 0:
                    prev[ix(n)] = p
                else:
                    tail = p
            else:
                if size >= capacity:
                    victim = head
                    if victim == seg:  # nothing old is left: the request's own tail goes
                        seg = nxt[ix(victim)]
                        self_evictions += 1
                    head = nxt[ix(victim)]
                    if head >= 0:
                        prev[ix(head)] = -1
                    else:
                        tail = -1
                    resident[ix(victim)] = False
                    size -= 1
                    evictions += 1
                resident[ix(h)] = True
                size += 1
            stamp[ix(h)] = r
            # place h: just before seg, or at the MRU end if nothing is placed yet
            if seg < 0:
                prev[ix(h)] = tail
                nxt[ix(h)] = -1
                if tail >= 0:
                    nxt[ix(tail)] = h
                else:
                    head = h
                tail = h
            else:
                p = prev[ix(seg)]
                prev[ix(h)] = p
                nxt[ix(h)] = seg
                prev[ix(seg)] = h
                if p >= 0:
                    nxt[ix(p)] = h
                else:
                    head = h
            seg = h
    cnt[0] += hits
    cnt[1] += evictions
    cnt[2] += self_evictions
    return hit_tokens, size


def _kernel_args(p: LRUTailFirstParams) -> tuple[int]:
    return (p.capacity,)


SPEC = register(
    PolicySpec(
        name="LRU_TAIL_FIRST",
        params_type=LRUTailFirstParams,
        reference=LRUTailFirstReference,
        fast_kernel=lru_tail_first_kernel,
        kernel_args=_kernel_args,
    )
)
