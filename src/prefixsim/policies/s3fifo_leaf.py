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

from collections.abc import Hashable
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ..engine.lists import link_bytes, pop_head
from ..engine.steps import Steps, counters, extend_state, per_id
from .base import ix, register
from .lru_leaf import ChainTree, adopt, release
from .s3fifo import (
    _K,
    _M,
    S3FIFOParams,
    S3FIFOReference,
    S3FIFOState,
    first_moves,
    into_ghost,
    into_main,
    main_is_full,
    requeue_head,
    s3fifo_hit,
    s3fifo_is_resident,
    s3fifo_remove,
)


@dataclass(frozen=True)
class S3FIFOLeafParams(S3FIFOParams):
    policy: ClassVar[str] = "S3FIFO_LEAF"


class S3FIFOLeafReference(ChainTree, S3FIFOReference):
    """S3FIFO's reference with LRU_LEAF's tree (:class:`~.lru_leaf.ChainTree`, over the blocks
    in S ∪ M); ``admit_to_M`` and ``insert_to_G`` are the rules of the module docstring."""

    counter_names = (*S3FIFOReference.counter_names, "leaf_skips", "forced_evictions")
    removable = True

    def __init__(self, params: S3FIFOLeafParams) -> None:
        super().__init__(params)
        self.init_tree()

    def access(self, h: Hashable) -> None:
        self.access_request([h])  # a block accessed alone is a one-block request

    def hit(self, h: Hashable, pred: Hashable | None = None) -> None:
        super().access(h)  # S3FIFO's access rule for a resident block

    def _miss(self, h: Hashable, pred: Hashable | None) -> None:
        super().access(h)  # S3FIFO's miss path (a ghost hit, or a new block)
        self.adopt(h, pred)

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
            self.insert_to_G(victim)
            break
        self.M[h] = freq

    def insert_to_G(self, h: Hashable) -> None:
        # Only ever called with a block leaving S ∪ M: its parent loses a resident child.
        self.release(h)
        super().insert_to_G(h)

    def remove(self, h: Hashable) -> None:
        super().remove(h)
        self.release(h)


# --- steps ----------------------------------------------------------------------------------
# S3FIFO's state and steps (s3fifo.py: S, M and G as lists) plus ``parent`` / ``children``
# arrays: the M drain counts ``skipped`` (a skip is a requeue without a decrement), both
# evictions (S's cold head to G, M's victim to G) and a removal decrement the victim's parent's
# count, and the admitted block is adopted by its predecessor once its admission is done.


S3FIFOLeafState = extend_state(
    S3FIFOState,
    "S3FIFOLeafState",
    cnt=counters(S3FIFOLeafReference),  # S3FIFO's counters, then its own
    parent=per_id(np.int32, zeroed=False),  # written at every admission before it is read
    children=per_id(np.int32),
)


def s3fifo_leaf_admit(s, q, h, pred):
    to_m, to_m_freq, victim = first_moves(s, q, h)  # as S3FIFO's, and a cold head of S
    if victim >= 0:
        release(s, victim)  # leaves S ∪ M
    if to_m >= 0:
        if main_is_full(s, q):
            # second chance, skipping freq-0 heads with resident children
            skipped = 0
            while True:
                v = s.sc[ix(_K * q + _M)]
                vs = s.st[ix(v)]
                if vs >= 4:
                    s.st[ix(requeue_head(s, q))] = vs - 4
                    skipped = 0
                    continue
                if s.children[ix(v)] > 0:
                    if skipped < s.main_cap:
                        requeue_head(s, q)
                        skipped += 1
                        s.cnt[ix(q), 4] += 1
                        continue
                    s.cnt[ix(q), 5] += 1  # forced: |M| skips in a row
                pop_head(s.link, s.sc, _K * q + _M)
                victim = v
                release(s, v)
                break
        into_main(s, q, to_m, to_m_freq)
    if victim >= 0:
        into_ghost(s, q, victim)
    adopt(s, h, pred)  # h is now resident (in S, or in M after a ghost hit)
    return victim


def s3fifo_leaf_remove(s, q, h):
    s3fifo_remove(s, q, h)
    release(s, h)


STEPS = Steps(
    S3FIFOLeafState,
    is_resident=s3fifo_is_resident,
    hit=s3fifo_hit,
    admit=s3fifo_leaf_admit,
    remove=s3fifo_leaf_remove,
)


def _state_bytes(p: S3FIFOLeafParams, n_blocks: int, n_accesses: int) -> int:
    """S3FIFO's steps' state (``link``, ``st``: int64 at most, per id) and ``parent`` and
    ``children`` (int32) per id; S, M and G are lists over the ids, nothing per slot."""
    return link_bytes(n_blocks) + 16 * n_blocks


SPEC = register(S3FIFOLeafParams, S3FIFOLeafReference, STEPS, state_bytes=_state_bytes)
