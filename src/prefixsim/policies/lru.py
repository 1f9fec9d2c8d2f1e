"""LRU: evict the least recently used resident block.

Variant: exact LRU over block accesses; every access (hit or miss) makes the block the most
recently used, and a miss into a full cache evicts exactly one block, the least recently used::

    access(h):
        if h resident: move h to the MRU end
        else:
            if |cache| >= capacity: evict the LRU end
            insert h at the MRU end

Counters: ``block_hits`` (access found h resident), ``evictions``.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Collection, Hashable
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple

import numpy as np

from ..engine.lists import (
    linked,
    links,
    per_cache,
    push_bounded,
    room_at_head,
    take,
    to_tail,
)
from ..engine.rules import hit_tokens, release_from, scan_limit
from ..engine.steps import Steps, counters, param
from .base import PolicyParams, ReferencePolicy, ix, register, zeroed_state


@dataclass(frozen=True)
class LRUParams(PolicyParams):
    policy: ClassVar[str] = "LRU"


class LRUReference(ReferencePolicy):
    """``cache`` is ordered from least (head) to most (tail) recently used."""

    removable = True

    def __init__(self, params: PolicyParams) -> None:  # FIFOParams too: capacity only
        super().__init__(params)
        self.cache: OrderedDict[Hashable, None] = OrderedDict()

    def residents(self) -> Collection[Hashable]:
        return self.cache

    def access(self, h: Hashable) -> None:
        if h in self.cache:
            self.counters["block_hits"] += 1
            self.refresh(h)
            return
        if len(self.cache) >= self.capacity:
            victim, _ = self.cache.popitem(last=False)
            self.evicted(victim)
        self.cache[h] = None

    def refresh(self, h: Hashable) -> None:
        """What a hit does to the order: LRU makes ``h`` the most recently used."""
        self.cache.move_to_end(h)

    def remove(self, h: Hashable) -> None:
        del self.cache[h]  # the others keep their order


# --- steps ----------------------------------------------------------------------------------
# One list per cache (engine.lists' link pairs) from its least (head) to its most (tail)
# recently used id; per cache ``sc[3q:3q+3]`` = head, tail, size.


class LRUState(NamedTuple):
    link: np.ndarray = links()
    sc: np.ndarray = per_cache(-1, -1, 0)
    cnt: np.ndarray = counters(LRUReference)
    capacity: int = param("capacity")


def lru_is_resident(s, q, h):
    return linked(s.link, h)


def lru_hit(s, q, h, pred):
    to_tail(s.link, s.sc, 3 * q, h)


def lru_admit(s, q, h, pred):
    return push_bounded(s.link, s.sc, 3 * q, 3 * q + 2, s.capacity, h)  # evicts the LRU end


def lru_remove(s, q, h):
    take(s.link, s.sc, 3 * q, 3 * q + 2, h)


def lru_make_room(s, q, ids, start, end, pred):
    return room_at_head(s.link, s.sc, 3 * q, s.capacity, end - start)  # no end step between


STEPS = Steps(
    LRUState,
    is_resident=lru_is_resident,
    hit=lru_hit,
    admit=lru_admit,
    remove=lru_remove,
    make_room=lru_make_room,
)


# --- fast kernel ----------------------------------------------------------------------------
# The same list and steps, fused into one loop whose head, tail and size stay in registers.
# A doubly linked list from ``head`` (least recently used) to ``tail`` (most recently used) over
# dense block ids, -1 ends it, held in one flat int32 array of pairs, one pair per block:
#
#   link[2h]     = prev                   (meaningful only while h is resident)
#   link[2h + 1] = next + 2 if h is resident (1: h is the tail), 0 if it is not
#
# so the residency test, the hit and the eviction each read one 8-byte pair: one cache line per
# block involved (on 100M+ distinct blocks those are cache misses). The offset of 2 lets a zeroed
# array mean "nothing resident": ``np.zeros`` (lazily zeroed pages) needs no initialisation pass,
# and unlinking a block copies its stored next into its predecessor unchanged. The pairs are one
# flat array, not an (n, 2) one: a 2-D argument's row stride is a run-time value, and indexing
# through it measured 15-20% slower than ``2 * h``. A separate one-byte ``resident`` array (the
# previous layout) made every hit and every eviction touch a second random cache line; with the
# prefix scan fused into the accesses (below) it no longer saved the scan anything, and folding
# it into the pairs measured 1.4-1.5x faster at 1M and 10M requests (docs/performance.md, "Millions
# of requests"). The array comes from :func:`_kernel_state` (numpy: huge pages on large arrays).
# The pairs are int32 (exact while every id + 2 fits, i.e. below 2**31 - 2 distinct blocks, far
# beyond any trace that fits in memory), int64 beyond. ``size`` never exceeds ``capacity``.
#
# The prefix scan and the accesses of the request's leading hits are one loop: a hit changes no
# block's residency, so while every block so far was a hit, "resident now" is "resident at
# arrival", and the first miss ends the prefix. The rest of the request runs the general access
# loop. Evictions are not counted in the loop but derived at the end (each miss adds one block,
# each eviction or removal takes one out), which keeps one register free. A rule's temporary
# blocks (an engine's partial block, ``release_from``: the request's last) are made room for as
# :func:`lru_make_room` does: each counts in ``size`` and evicts the head of a full cache, but is
# never linked (it would be removed at the request's end with nothing between).
#
# Every subscript is ``a[ix(i)]`` (:data:`~prefixsim.policies.base.ix`): ids, pair indices and
# ``offsets`` positions are non-negative (an end of the list, -1, is never an index: it is
# tested first, or the list is known not to be empty there), so numba's negative-index fix-up,
# three instructions in every address, is skipped (1.21-1.35x).


def lru_fused(stamp: str) -> Any:
    """The fast kernel's template (:func:`prefixsim.engine.single.fast_kernel`): compiled once
    per hit rule, its functions (``scan_limit``, ``hit_tokens``, ``release_from``) bound and
    inlined; under the specification's rule they reduce to the scan of every leading block,
    ``min(k * block_size, L)`` and no release."""

    def lru_kernel(block_ids, offsets, input_lengths, rule, cnt, out, capacity, link):
        stamp  # noqa: B018 (the disk cache's key, see prefixsim.engine.build)
        head = -1
        tail = -1
        size = 0
        hits = 0
        removed = 0
        n_requests = input_lengths.shape[0]
        for r in range(n_requests):
            start = offsets[ix(r)]
            end = offsets[ix(r + 1)]
            length = input_lengths[ix(r)]
            cut = release_from(rule, block_ids, start, end)  # temporary blocks from there
            stop = start + scan_limit(rule, cut - start, length)
            # The longest resident prefix, each of its blocks accessed (a hit) as it is counted.
            i = start
            while i < stop:
                h = block_ids[ix(i)]
                nx = link[ix(2 * h + 1)]
                if nx == 0:  # not resident: the prefix ends
                    break
                i += 1
                if h == tail:
                    continue
                # move h to the most recently used end (h is not the tail, so a block follows
                # it, nx - 2 >= 0, and tail >= 0)
                p = link[ix(2 * h)]
                if p >= 0:
                    link[ix(2 * p + 1)] = nx
                else:
                    head = nx - 2
                link[ix(2 * (nx - 2))] = p
                link[ix(2 * h)] = tail
                link[ix(2 * h + 1)] = 1
                link[ix(2 * tail + 1)] = h + 2
                tail = h
            hits += i - start
            out[ix(r)] = hit_tokens(rule, i - start, length)
            # Then the remaining blocks, from the first miss on, hit or miss, in order.
            for j in range(i, end):
                h = block_ids[ix(j)]
                nx = link[ix(2 * h + 1)] if j < cut else 0
                if nx != 0:
                    hits += 1
                    if h == tail:
                        continue
                    # unlink h (it is not the tail, so its next is a block)
                    p = link[ix(2 * h)]
                    if p >= 0:
                        link[ix(2 * p + 1)] = nx
                    else:
                        head = nx - 2
                    link[ix(2 * (nx - 2))] = p
                else:
                    if size >= capacity:
                        victim = head
                        head = link[ix(2 * victim + 1)] - 2
                        link[ix(2 * victim + 1)] = 0  # no longer resident
                        if head >= 0:
                            link[ix(2 * head)] = -1
                        else:
                            tail = -1
                        size -= 1
                    size += 1
                    if j >= cut:  # a temporary block: it makes room (lru_make_room), unlinked
                        continue
                # append h at the most recently used end
                link[ix(2 * h)] = tail
                link[ix(2 * h + 1)] = 1
                if tail >= 0:
                    link[ix(2 * tail + 1)] = h + 2
                else:
                    head = h
                tail = h
            # The request's temporary blocks leave when it ends (the rule's; none under the
            # specification's): counted in size until then, so each evicts from a full cache.
            size -= end - cut
            removed += end - cut
        cnt[0] += hits
        # evictions: every miss adds one block, every eviction or removal takes one out
        cnt[1] += (offsets[ix(n_requests)] - offsets[0]) - hits - size - removed
        return size

    return lru_kernel


def _kernel_state(p: LRUParams, n_blocks: int) -> tuple[np.ndarray]:
    """``link``, zeroed: no block resident."""
    dtype = np.int32 if n_blocks + 1 <= np.iinfo(np.int32).max else np.int64
    return (zeroed_state(2 * n_blocks, dtype),)


def _kernel_args(p: LRUParams) -> tuple[int]:
    return (p.capacity,)


def _state_bytes(p: LRUParams, n_blocks: int, n_accesses: int) -> int:
    """:func:`_kernel_state` and the steps' :class:`LRUState`: ``link``, two int64 at most per
    block; nothing per capacity slot."""
    return 16 * n_blocks


SPEC = register(
    LRUParams,
    LRUReference,
    STEPS,
    fast_kernel=lru_fused,
    kernel_args=_kernel_args,
    kernel_state=_kernel_state,
    state_bytes=_state_bytes,
)
