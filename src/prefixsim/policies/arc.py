"""ARC (Megiddo & Modha, FAST'03, "ARC: A Self-Tuning, Low Overhead Replacement Cache").

Variant: exactly the paper's Figure 4, one block = one page, ``c = capacity``. Four LRU lists:
T1 (resident, seen once recently), T2 (resident, seen at least twice), and their ghosts B1, B2
(hashes only, **not resident**: a block in B1 or B2 is a miss for the prefix scan and does not
count in the final size), plus the adaptive target ``p`` for the size of T1. Figure 4,
transcribed (∈ written "is in"; LRU = least recently used end, MRU = most recently used end)::

    ARC(c)
    INPUT: The request stream x1, x2, ..., xt, ...
    INITIALIZATION: Set p = 0 and set the LRU lists T1, B1, T2, and B2 to empty.

    For every t >= 1 and any xt, one and only one of the following four cases must occur.
    Case I: xt is in T1 or T2. A cache hit has occurred in ARC(c) and DBL(2c).
        Move xt to MRU position in T2.

    Case II: xt is in B1. A cache miss (resp. hit) has occurred in ARC(c) (resp. DBL(2c)).
        ADAPTATION: Update p = min { p + δ1, c }
            where δ1 = 1 if |B1| >= |B2|, |B2|/|B1| otherwise.
        REPLACE(xt, p). Move xt from B1 to the MRU position in T2 (also fetch xt to the cache).

    Case III: xt is in B2. A cache miss (resp. hit) has occurred in ARC(c) (resp. DBL(2c)).
        ADAPTATION: Update p = max { p - δ2, 0 }
            where δ2 = 1 if |B2| >= |B1|, |B1|/|B2| otherwise.
        REPLACE(xt, p). Move xt from B2 to the MRU position in T2 (also fetch xt to the cache).

    Case IV: xt is not in T1 ∪ B1 ∪ T2 ∪ B2. A cache miss has occurred in ARC(c) and DBL(2c).
        Case A: L1 = T1 ∪ B1 has exactly c pages.
            If (|T1| < c)
                Delete LRU page in B1. REPLACE(xt, p).
            else
                Here B1 is empty. Delete LRU page in T1 (also remove it from the cache).
            endif
        Case B: L1 = T1 ∪ B1 has less than c pages.
            If (|T1| + |T2| + |B1| + |B2| >= c)
                Delete LRU page in B2, if (|T1| + |T2| + |B1| + |B2| = 2c).
                REPLACE(xt, p).
            endif
        Finally, fetch xt to the cache and move it to MRU position in T1.

    Subroutine REPLACE(xt, p)
        If ( (|T1| is not empty) and ((|T1| exceeds the target p) or (xt is in B2 and |T1| = p)) )
            Delete the LRU page in T1 (also remove it from the cache), and move it to MRU
            position in B1.
        else
            Delete the LRU page in T2 (also remove it from the cache), and move it to MRU
            position in B2.
        endif

Arithmetic of p: **real division**, as in the paper (δ1 = |B2|/|B1| is not truncated; some
simulators, e.g. libCacheSim, truncate δ to an integer and keep p integral: that is a different
variant), with p an IEEE-754 double. Both engines compute it with the same correctly rounded
operations in the same order: ``δ = float(|B2|) / float(|B1|)`` (or 1.0), then ``p = p + δ``
and ``p = c if p > c`` (Case II), or ``p = p - δ`` and ``p = 0 if p < 0`` (Case III); the
comparisons ``|T1| > p`` and ``|T1| == p`` are exact (|T1| < 2**53). So the reference and the
kernel agree bit for bit, on every trace.

Why not an exact rational p: its denominator divides the lcm of the divisors (|B1| or |B2|)
used since p was last clamped to 0 or c, which no fixed-width integer holds (on the bundled trace it
reaches 155 bits at c = 1024 and 7,639 bits at c = 16384), and no fixed scale represents every
|B2|/|B1| with |B1| <= c. A double differs from the exact p only by accumulated rounding, so a
decision can differ from exact-rational ARC only when ``|T1|`` lies within that accumulated
error (about one ulp of c per adaptation) of the exact p. On the bundled trace, a
``fractions.Fraction`` p gives the same hits per request and the same counters as this double
p at c = 64, 256, 1024, 4096, 16384 and 65536.

Counters: ``block_hits`` (Case I), ``evictions`` (a page leaves T1 ∪ T2: REPLACE or Case IV-A's
"Delete LRU page in T1"; dropping a ghost is not an eviction), ``b1_hits`` (Case II),
``b2_hits`` (Case III).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass
from typing import ClassVar, NamedTuple

import numpy as np

from ..engine.lists import link_bytes, links, per_cache, pop_head, push, to_tail, unlink
from ..engine.steps import Steps, counters, made, param, per_id
from .base import COMMON_COUNTERS, PolicyParams, ReferencePolicy, ix, register


@dataclass(frozen=True)
class ARCParams(PolicyParams):
    policy: ClassVar[str] = "ARC"


class ARCReference(ReferencePolicy):
    """Line-by-line transcription of Figure 4. Each list is an ``OrderedDict`` from its LRU
    end (first) to its MRU end (last); a hash is in at most one of the four."""

    counter_names = (*COMMON_COUNTERS, "b1_hits", "b2_hits")

    def __init__(self, params: ARCParams) -> None:
        super().__init__(params)
        self.c = params.capacity
        self.p = 0.0
        self.T1: OrderedDict[Hashable, None] = OrderedDict()
        self.T2: OrderedDict[Hashable, None] = OrderedDict()
        self.B1: OrderedDict[Hashable, None] = OrderedDict()
        self.B2: OrderedDict[Hashable, None] = OrderedDict()

    def is_resident(self, h: Hashable) -> bool:
        return h in self.T1 or h in self.T2  # B1, B2 are ghosts

    def resident_count(self) -> int:
        return len(self.T1) + len(self.T2)

    def access(self, x: Hashable) -> None:
        T1, T2, B1, B2, c = self.T1, self.T2, self.B1, self.B2, self.c
        if x in T1 or x in T2:  # Case I
            self.counters["block_hits"] += 1
            (T1 if x in T1 else T2).pop(x)
            T2[x] = None
        elif x in B1:  # Case II
            self.counters["b1_hits"] += 1
            delta1 = 1.0 if len(B1) >= len(B2) else len(B2) / len(B1)
            self.p = min(self.p + delta1, float(c))
            self.replace(x)
            del B1[x]
            T2[x] = None
        elif x in B2:  # Case III
            self.counters["b2_hits"] += 1
            delta2 = 1.0 if len(B2) >= len(B1) else len(B1) / len(B2)
            self.p = max(self.p - delta2, 0.0)
            self.replace(x)
            del B2[x]
            T2[x] = None
        else:  # Case IV
            if len(T1) + len(B1) == c:  # Case A
                if len(T1) < c:
                    B1.popitem(last=False)
                    self.replace(x)
                else:  # B1 is empty
                    y, _ = T1.popitem(last=False)
                    self.evicted(y)
            else:  # Case B: |L1| < c
                total = len(T1) + len(T2) + len(B1) + len(B2)
                if total >= c:
                    if total == 2 * c:
                        B2.popitem(last=False)
                    self.replace(x)
            T1[x] = None

    def replace(self, x: Hashable) -> None:
        T1 = self.T1
        if T1 and (len(T1) > self.p or (x in self.B2 and len(T1) == self.p)):
            y, _ = T1.popitem(last=False)
            self.B1[y] = None
        else:
            y, _ = self.T2.popitem(last=False)
            self.B2[y] = None
        self.evicted(y)


# --- steps ----------------------------------------------------------------------------------
# ``where[b]`` says which list holds block b (0 = none). The four lists are engine.lists' link
# pairs from LRU (head) to MRU (tail); a block is in at most one, so one link pair per block
# serves all four. Per cache ``sc[12q:12q+12]`` = the ends of T1, T2, B1, B2, then |T1|, |T2|,
# |B1|, |B2|, and ``p[q]`` its target. A miss is decided first (which ghost or T1 page to drop,
# whether REPLACE runs, where x goes), then the moves run in the paper's order: drop, REPLACE,
# move x.

_NONE, _T1, _T2, _B1, _B2 = 0, 1, 2, 3, 4
_N = 7  # sc[12q + _N + L] = |L|; the ends of list L are at 12q + 2 * (L - 1)


class ARCState(NamedTuple):
    link: np.ndarray = links()
    where: np.ndarray = per_id(np.int8)
    sc: np.ndarray = per_cache(*([-1] * 8), 0, 0, 0, 0)
    p: np.ndarray = made(lambda params, space: np.zeros(space.n_caches, np.float64))
    cnt: np.ndarray = counters(ARCReference)
    capacity: int = param("capacity")


def arc_is_resident(s, q, h):
    w = s.where[ix(h)]
    return (w == _T1) | (w == _T2)  # B1, B2 are ghosts


def arc_hit(s, q, h, pred):
    # Case I: move x to the MRU position in T2.
    e = 12 * q
    if s.where[ix(h)] == _T2:
        to_tail(s.link, s.sc, e + 2, h)
        return
    unlink(s.link, s.sc, e, h)
    push(s.link, s.sc, e + 2, h)
    s.where[ix(h)] = _T2
    s.sc[ix(e + _N + _T1)] -= 1
    s.sc[ix(e + _N + _T2)] += 1


def arc_admit(s, q, h, pred):
    link, sc = s.link, s.sc
    e = 12 * q
    c = s.capacity
    n_t1 = sc[ix(e + _N + _T1)]
    n_t2 = sc[ix(e + _N + _T2)]
    n_b1 = sc[ix(e + _N + _B1)]
    n_b2 = sc[ix(e + _N + _B2)]
    p = s.p[ix(q)]
    w = s.where[ix(h)]
    drop = _NONE  # list whose LRU entry is deleted first
    rep = False  # whether REPLACE(h, p) runs
    victim = -1
    if w == _B1:  # Case II
        s.cnt[ix(q), 2] += 1
        delta = 1.0 if n_b1 >= n_b2 else float(n_b2) / float(n_b1)
        p = p + delta
        if p > float(c):
            p = float(c)
        rep = True
    elif w == _B2:  # Case III
        s.cnt[ix(q), 3] += 1
        delta = 1.0 if n_b2 >= n_b1 else float(n_b1) / float(n_b2)
        p = p - delta
        if p < 0.0:
            p = 0.0
        rep = True
    elif n_t1 + n_b1 == c:  # Case IV A
        if n_t1 < c:
            drop = _B1
            rep = True
        else:
            drop = _T1
    else:  # Case IV B
        total = n_t1 + n_t2 + n_b1 + n_b2
        if total >= c:
            if total == 2 * c:
                drop = _B2
            rep = True
    if drop != _NONE:
        # delete the LRU entry of `drop` (a ghost, or a T1 page leaving the cache)
        y = pop_head(link, sc, e + 2 * (drop - 1))
        s.where[ix(y)] = _NONE
        if drop == _T1:
            n_t1 -= 1
            victim = y
        elif drop == _B1:
            n_b1 -= 1
        else:
            n_b2 -= 1
    if rep:
        # REPLACE(h, p): the LRU page of T1 or T2 goes to the MRU end of B1 or B2
        if n_t1 > 0 and (n_t1 > p or (w == _B2 and n_t1 == p)):
            src, dst = _T1, _B1
            n_t1 -= 1
            n_b1 += 1
        else:
            src, dst = _T2, _B2
            n_t2 -= 1
            n_b2 += 1
        victim = pop_head(link, sc, e + 2 * (src - 1))
        push(link, sc, e + 2 * (dst - 1), victim)
        s.where[ix(victim)] = dst
    if w != _NONE:  # x leaves B1 (Case II) or B2 (Case III) for the MRU end of T2
        unlink(link, sc, e + 2 * (w - 1), h)
        if w == _B1:
            n_b1 -= 1
        else:
            n_b2 -= 1
        dst = _T2
        n_t2 += 1
    else:  # Case IV: fetched to the MRU end of T1
        dst = _T1
        n_t1 += 1
    push(link, sc, e + 2 * (dst - 1), h)
    s.where[ix(h)] = dst
    sc[ix(e + _N + _T1)] = n_t1
    sc[ix(e + _N + _T2)] = n_t2
    sc[ix(e + _N + _B1)] = n_b1
    sc[ix(e + _N + _B2)] = n_b2
    s.p[ix(q)] = p
    return victim


# No remove: REPLACE and Case IV assume the cache is full whenever its directory (T1 ∪ B1 ∪ T2
# ∪ B2) holds c pages or more; a block taken out leaves room the cases do not see (REPLACE would
# then evict while there is room, or from an empty T2).
STEPS = Steps(ARCState, is_resident=arc_is_resident, hit=arc_hit, admit=arc_admit)


def _state_bytes(p: ARCParams, n_blocks: int, n_accesses: int) -> int:
    """:class:`ARCState` per id: ``link`` and ``where`` (int8); the per-cache scalars aside."""
    return link_bytes(n_blocks) + n_blocks


SPEC = register(ARCParams, ARCReference, STEPS, state_bytes=_state_bytes)
