"""S3FIFO_LEAF: S3FIFO whose main queue does not evict a block that still has resident children.

Variant: the specification's S3FIFO (see ``s3fifo.py``: same queues, sizes, freq rules, ghost,
parameters and counters) with one change to the second-chance drain of M, plus the block tree
of ``lru_leaf.py``:

* The tree: a block gets its parent when it becomes resident (admitted to S as a new block, or
  to M on a ghost hit): the block accessed just before it in the same request (``h_{i-1}``), or
  none for ``h_0``. It keeps that parent while it stays in S ∪ M (a hit or an S -> M promotion
  does not re-parent it) and gets a new one when it is admitted again after an eviction.
  ``children[b]`` counts the blocks in S ∪ M whose parent is ``b`` (``b`` itself may be
  anywhere). A block becomes its parent's child after the evictions its own admission causes.
* The drain of M: a head with freq >= 1 is requeued with freq - 1 as in S3FIFO; a head with
  freq 0 and a resident child is *skipped*: requeued at the tail with freq 0 (no decrement, it
  has none); a head with freq 0 and no resident child is evicted to G. If the drain has skipped
  |M| heads in a row (then every block of M has freq 0 and a resident child), it evicts the
  block then at the head regardless (a *forced* eviction): the first one skipped in that run.
* S is unchanged: its head goes to M if freq >= 1 and to G otherwise, children or not.

::

    access_request([h_0, ..., h_{n-1}]):
        for i, h in enumerate(hash_ids):
            resident_before = h in S or h in M
            S3FIFO access(h)                     # with admit_to_M below
            if not resident_before:              # h was admitted (to S, or to M from G)
                parent(h) = h_{i-1} if i > 0 else none
                if parent(h) is not none: children[parent(h)] += 1

    admit_to_M(h, freq):
        skipped = 0
        while |M| >= main_cap:
            (victim, vf) = peek_head(M)
            if vf >= 1:
                pop_head(M); append (victim, vf - 1) at tail of M; skipped = 0; continue
            if children[victim] > 0 and skipped < |M|:
                pop_head(M); append (victim, 0) at tail of M; skipped += 1; continue
            pop_head(M); insert_to_G(victim); break       # exactly one real eviction
        append (h, freq) at tail of M

    insert_to_G(h):                              # h leaves S ∪ M (from S or from M)
        if parent(h) is not none: children[parent(h)] -= 1
        S3FIFO insert_to_G(h)

Every drain still ends in exactly one eviction (freq only decreases during a drain, and after
|M| consecutive skips the head goes), so the queues keep S3FIFO's bounds (|S| <= small_cap,
|M| <= main_cap, |G| <= main_cap) and every accessed block is resident right after its
access. As in ``lru_leaf.py``, no block is its own parent. A forced eviction needs every block
of M to have freq 0 and a resident child, e.g. M holding only ancestors of chains whose tails
sit in S, or a cycle of parent links.

Counters: S3FIFO's (``block_hits``, ``evictions``, ``ghost_hits``, ``promotions``), plus
``leaf_skips`` (heads requeued for having a resident child) and ``forced_evictions`` (evictions
from M of a block with a resident child after |M| skips in a row).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from numba import njit

from .base import PolicySpec, ix, register
from .s3fifo import S3FIFOParams, S3FIFOReference

_NO_PARENT = object()  # parent of a request's first block


@dataclass(frozen=True)
class S3FIFOLeafParams(S3FIFOParams):
    policy: ClassVar[str] = "S3FIFO_LEAF"


class S3FIFOLeafReference(S3FIFOReference):
    """S3FIFO's reference with the tree kept in ``parent`` (blocks in S ∪ M) and ``children``;
    ``admit_to_M`` and ``insert_to_G`` are the rules of the module docstring."""

    counter_names = (*S3FIFOReference.counter_names, "leaf_skips", "forced_evictions")
    # A request-level policy (its accesses depend on the request's chain): not a tier of a
    # multi-tier hierarchy, whatever S3FIFO allows.
    reports_victims = False
    removable = False

    def __init__(self, params: S3FIFOLeafParams) -> None:
        super().__init__(params)
        self.parent: dict[Hashable, object] = {}
        self.children: defaultdict[Hashable, int] = defaultdict(int)

    def access_request(self, hash_ids: Sequence[Hashable]) -> None:
        parent: object = _NO_PARENT
        for h in hash_ids:
            self.access_under(h, parent)
            parent = h

    def access_under(self, h: Hashable, parent: object) -> None:
        resident_before = self.is_resident(h)
        super().access(h)  # S3FIFO's access rule (hit, ghost hit, or new block)
        if not resident_before:
            self.parent[h] = parent
            if parent is not _NO_PARENT:
                self.children[parent] += 1

    def access(self, h: Hashable) -> None:
        self.access_under(h, _NO_PARENT)  # a block accessed alone is a one-block request

    def admit_to_M(self, h: Hashable, freq: int) -> None:
        skipped = 0
        while len(self.M) >= self.main_cap:
            victim, vf = next(iter(self.M.items()))
            if vf >= 1:
                del self.M[victim]
                self.M[victim] = vf - 1  # requeued at the tail
                skipped = 0
                continue
            if self.children[victim] > 0 and skipped < len(self.M):
                del self.M[victim]
                self.M[victim] = 0  # skipped: requeued at the tail, freq stays 0
                skipped += 1
                self.counters["leaf_skips"] += 1
                continue
            if self.children[victim] > 0:
                self.counters["forced_evictions"] += 1
            del self.M[victim]
            self.counters["evictions"] += 1
            self.insert_to_G(victim)
            break
        self.M[h] = freq

    def insert_to_G(self, h: Hashable) -> None:
        # Only ever called with a block leaving S ∪ M: its parent loses a resident child.
        parent = self.parent.pop(h)
        if parent is not _NO_PARENT:
            self.children[parent] -= 1
        super().insert_to_G(h)


# --- compiled kernel ------------------------------------------------------------------------
# The layout of s3fifo.py's kernel before it kept S, M and G in one ring array with one
# position per ring (separate rings, a head and a length each), plus ``parent`` / ``children``
# arrays: the M drain counts ``skipped`` (a skip is just advancing the head of the full ring,
# like a requeue), both evictions (S head to G, M head to G) decrement the victim's parent's
# count, and the accessed block is adopted by its predecessor once its admission loop is done.
# One function with scalar locals, no array-taking helpers (see s3fifo.py).

_NONE, _IN_S, _IN_M, _IN_G = 0, 1, 2, 3


# Every subscript in the loop is ``a[ix(i)]`` (:data:`~prefixsim.policies.base.ix`): block ids,
# ring positions and ``offsets`` positions are non-negative; G's ends and a parent's -1 (none)
# are tested before they are used, so numba's negative-index fix-up is skipped (1.08-1.43x,
# docs/performance.md).


@njit(cache=True, nogil=True)
def s3fifo_leaf_kernel(
    block_ids, offsets, input_lengths, n_blocks, block_size, cnt,
    small_cap, main_cap, max_freq, ghost_freq,
):  # fmt: skip
    where = np.zeros(n_blocks, np.int8)
    freq = np.zeros(n_blocks, np.int32)
    parent = np.empty(n_blocks, np.int32)
    children = np.zeros(n_blocks, np.int32)
    g_link = np.empty((n_blocks, 2), np.int32)  # [prev, next]
    s_ring = np.empty(small_cap, np.int32)
    m_ring = np.empty(main_cap, np.int32)
    s_head = s_len = m_head = m_len = g_len = 0
    g_head = g_tail = -1
    ghost_cap = main_cap
    hits = evictions = ghost_hits = promotions = leaf_skips = forced = 0
    n_requests = input_lengths.shape[0]
    hit_tokens = np.empty(n_requests, np.int64)
    for r in range(n_requests):
        start = offsets[ix(r)]
        end = offsets[ix(r + 1)]
        # Longest resident prefix at arrival: stops at the first block outside S ∪ M.
        k = start
        while k < end:
            w = where[ix(block_ids[ix(k)])]
            if w != _IN_S and w != _IN_M:
                break
            k += 1
        hit_tokens[ix(r)] = min((k - start) * block_size, input_lengths[ix(r)])
        # Then every block of the request is accessed, hit or miss, in order.
        pred = -1
        for i in range(start, end):
            h = block_ids[ix(i)]
            w = where[ix(h)]
            if w == _IN_S or w == _IN_M:  # noqa: SIM109 (plain compares in the hot loop)
                hits += 1
                f = freq[ix(h)] + 1
                freq[ix(h)] = f if f < max_freq else max_freq
                pred = h
                continue
            # A miss: pending moves as in s3fifo.py (to_g, to_m, to_s).
            to_g = -1
            to_m = -1
            to_m_freq = 0
            to_s = -1
            if w == _IN_G:
                ghost_hits += 1
                p = g_link[ix(h), 0]
                n = g_link[ix(h), 1]
                if p >= 0:
                    g_link[ix(p), 1] = n
                else:
                    g_head = n
                if n >= 0:
                    g_link[ix(n), 0] = p
                else:
                    g_tail = p
                g_len -= 1
                to_m = h
                to_m_freq = ghost_freq
            else:
                to_s = h
            while True:
                if to_g >= 0:
                    # insert_to_G (the parent count was already released at eviction)
                    if g_len >= ghost_cap:
                        old = g_head
                        g_head = g_link[ix(old), 1]
                        if g_head >= 0:
                            g_link[ix(g_head), 0] = -1
                        else:
                            g_tail = -1
                        where[ix(old)] = _NONE
                        g_len -= 1
                    g_link[ix(to_g), 0] = g_tail
                    g_link[ix(to_g), 1] = -1
                    if g_tail >= 0:
                        g_link[ix(g_tail), 1] = to_g
                    else:
                        g_head = to_g
                    g_tail = to_g
                    g_len += 1
                    where[ix(to_g)] = _IN_G
                    to_g = -1
                if to_m >= 0:
                    # admit_to_M: second chance, skipping freq-0 heads with resident children.
                    skipped = 0
                    while m_len >= main_cap:
                        victim = m_ring[ix(m_head)]
                        vf = freq[ix(victim)]
                        if vf >= 1:
                            m_head += 1  # M is full: advancing the head requeues at the tail
                            if m_head == main_cap:
                                m_head = 0
                            freq[ix(victim)] = vf - 1
                            skipped = 0
                            continue
                        if children[ix(victim)] > 0:
                            if skipped < m_len:
                                m_head += 1
                                if m_head == main_cap:
                                    m_head = 0
                                skipped += 1
                                leaf_skips += 1
                                continue
                            forced += 1
                        m_head += 1
                        if m_head == main_cap:
                            m_head = 0
                        m_len -= 1
                        evictions += 1
                        vp = parent[ix(victim)]
                        if vp >= 0:
                            children[ix(vp)] -= 1
                        to_g = victim  # inserted at the top of the next round
                        break
                    pos = m_head + m_len
                    if pos >= main_cap:
                        pos -= main_cap
                    m_ring[ix(pos)] = to_m
                    m_len += 1
                    where[ix(to_m)] = _IN_M
                    freq[ix(to_m)] = to_m_freq
                    to_m = -1
                    continue
                if to_s < 0:
                    break
                if s_len >= small_cap:
                    # admit_to_S drains S's head: warm to M (freq kept), cold to G.
                    victim = s_ring[ix(s_head)]
                    s_head += 1
                    if s_head == small_cap:
                        s_head = 0
                    s_len -= 1
                    vf = freq[ix(victim)]
                    if vf >= 1:
                        promotions += 1
                        to_m = victim
                        to_m_freq = vf
                    else:
                        evictions += 1
                        vp = parent[ix(victim)]
                        if vp >= 0:
                            children[ix(vp)] -= 1
                        to_g = victim
                    continue
                pos = s_head + s_len
                if pos >= small_cap:
                    pos -= small_cap
                s_ring[ix(pos)] = to_s
                s_len += 1
                where[ix(to_s)] = _IN_S
                freq[ix(to_s)] = 0
                break
            # h is now resident (in S, or in M after a ghost hit): its predecessor adopts it.
            parent[ix(h)] = pred
            if pred >= 0:
                children[ix(pred)] += 1
            pred = h
    cnt[0] += hits
    cnt[1] += evictions
    cnt[2] += ghost_hits
    cnt[3] += promotions
    cnt[4] += leaf_skips
    cnt[5] += forced
    return hit_tokens, s_len + m_len


def _kernel_args(p: S3FIFOLeafParams) -> tuple[int, int, int, int]:
    return (p.small_cap, p.main_cap, p.max_freq, p.ghost_freq)


SPEC = register(
    PolicySpec(
        name="S3FIFO_LEAF",
        params_type=S3FIFOLeafParams,
        reference=S3FIFOLeafReference,
        fast_kernel=s3fifo_leaf_kernel,
        kernel_args=_kernel_args,
    )
)
