"""S3FIFO (Yang et al., SOSP'23, "FIFO queues are all you need for cache eviction").

Variant: the one fixed by the project's specification (``prefix-caching-s3fifo.md``): three
FIFO queues (tail = most recently added), a per-block saturating frequency in ``[0, max_freq]``,
S sized ``round(capacity * small_ratio)`` with Python's (banker's) ``round``, M the rest, and a
ghost G of hashes only, as large as M. A ghost hit re-admits to M with ``ghost_freq`` (0 in the
canonical variant, 1 in the variant some papers use). Residency is ``S ∪ M``; G is not resident
and does not count in the final size. Pseudocode, as in the specification::

    access(h):
        if h in S or h in M: freq[h] = min(freq[h] + 1, max_freq)
        elif h in G:         remove h from G; admit_to_M(h, ghost_freq)
        else:                admit_to_S(h)

    admit_to_S(h):
        while |S| >= small_cap:
            (victim, vf) = pop_head(S)
            if vf >= 1: admit_to_M(victim, vf)      # freq preserved, NOT reset
            else:       insert_to_G(victim)
        append (h, freq=0) at tail of S

    admit_to_M(h, freq):
        while |M| >= main_cap:
            (victim, vf) = peek_head(M)
            if vf >= 1: pop_head(M); append (victim, vf - 1) at tail of M; continue
            else:       pop_head(M); insert_to_G(victim); break  # exactly one real eviction
        append (h, freq) at tail of M

    insert_to_G(h):
        if h in G: remove h from G
        elif |G| >= ghost_cap: pop_head(G)
        append h at tail of G                       # ghost_cap = main_cap

Counters: ``block_hits`` (access found h in S or M), ``evictions`` (a block left S ∪ M for G),
``ghost_hits`` (access found h in G), ``promotions`` (S head moved to M because its freq >= 1).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple

import numpy as np
from numba import njit

from ..engine.lists import link_bytes, links, per_cache, pop_head, push, push_bounded, take
from ..engine.rules import hit_tokens, release_from, scan_limit
from ..engine.steps import Space, Steps, counters, made, param
from ..errors import ParameterError
from .base import (
    COMMON_COUNTERS,
    Check,
    PolicyParams,
    ReferencePolicy,
    check_int,
    ix,
    register,
    zeroed_state,
)

MAX_FREQ_LIMIT = 2**31 - 1  # the kernel keeps freq in int32


def _check_small_ratio(ratio: object) -> tuple[float]:
    if isinstance(ratio, bool) or not isinstance(ratio, (int, float, np.floating)):
        raise ParameterError("small_ratio", ratio, "expected a number in (0, 1)")
    ratio = float(ratio)
    if not 0.0 < ratio < 1.0:
        raise ParameterError("small_ratio", ratio, "expected a number in (0, 1)")
    return (ratio,)


def _check_queues(capacity: int, ratio: float) -> tuple[int, float]:
    """Both queues non-empty: S = round(capacity * small_ratio) (as ``small_cap``), M the rest."""
    small = round(capacity * ratio)
    if small < 1 or capacity - small < 1:
        raise ParameterError(
            "small_ratio",
            ratio,
            f"with capacity={capacity}, round(capacity * small_ratio) = {small} leaves "
            f"{'S' if small < 1 else 'M'} empty; both queues need at least one block "
            f"(capacity >= 2 and 1 <= round(capacity * small_ratio) <= capacity - 1)",
        )
    return capacity, ratio


def _check_max_freq(max_freq: object) -> tuple[int]:
    return (check_int("max_freq", max_freq, 0, MAX_FREQ_LIMIT),)


def _check_ghost_freq(max_freq: int, ghost_freq: object) -> tuple[int, int]:
    return max_freq, check_int("ghost_freq", ghost_freq, 0, max_freq)


@dataclass(frozen=True)
class SMGParams(PolicyParams):
    """Parameters of a policy with S3FIFO's three queues: each variant sizes S and G its own
    way (``small_cap``, ``ghost_cap``); M always has the rest of ``capacity``."""

    @property
    def small_cap(self) -> int:
        raise NotImplementedError

    @property
    def main_cap(self) -> int:
        return self.capacity - self.small_cap

    @property
    def ghost_cap(self) -> int:
        raise NotImplementedError


@dataclass(frozen=True)
class S3FIFOParams(SMGParams):
    policy: ClassVar[str] = "S3FIFO"
    small_ratio: float = 0.1
    """Fraction of ``capacity`` given to S, rounded with Python's ``round()``."""
    max_freq: int = 3
    """Saturation value of the per-block frequency counter."""
    ghost_freq: int = 0
    """Frequency a block re-admitted from G starts with in M (0 canonical, 1 variant)."""

    checks: ClassVar[tuple[Check, ...]] = (
        *PolicyParams.checks,  # capacity
        (("small_ratio",), _check_small_ratio),
        (("capacity", "small_ratio"), _check_queues),
        (("max_freq",), _check_max_freq),
        (("max_freq", "ghost_freq"), _check_ghost_freq),
    )

    @property
    def small_cap(self) -> int:
        # round(), not int(): round(4096 * 0.1) == 410, int() would give 409.
        return round(self.capacity * self.small_ratio)

    @property
    def ghost_cap(self) -> int:
        # Ghost is sized like main, not like small.
        return self.main_cap


class SMGReference(ReferencePolicy):
    """What S3FIFO and its variants (``S3FIFO_LCS``) share: the three queues, residency and a
    tier's removal. Their admission and eviction rules differ and stay in each subclass.

    Each queue is an ``OrderedDict`` iterated head (oldest) to tail (newest); S and M map a block
    hash to its freq, G maps a hash to ``None``. A hash is in at most one of the three.
    """

    counter_names = (*COMMON_COUNTERS, "ghost_hits", "promotions")
    removable = True

    def __init__(self, params: SMGParams) -> None:
        super().__init__(params)
        self.small_cap = params.small_cap
        self.main_cap = params.main_cap
        self.ghost_cap = params.ghost_cap
        self.S: OrderedDict[Hashable, int] = OrderedDict()
        self.M: OrderedDict[Hashable, int] = OrderedDict()
        self.G: OrderedDict[Hashable, None] = OrderedDict()

    def is_resident(self, h: Hashable) -> bool:
        return h in self.S or h in self.M  # G is metadata only

    def resident_count(self) -> int:
        return len(self.S) + len(self.M)  # never |G|

    def remove(self, h: Hashable) -> None:
        # A tier's removal (the block moved to a faster tier): out of S or M, no ghost entry.
        if h in self.S:
            del self.S[h]
        else:
            del self.M[h]


class S3FIFOReference(SMGReference):
    """Line-by-line transcription of the pseudocode in the module docstring (the queues as
    :class:`SMGReference` keeps them)."""

    def __init__(self, params: S3FIFOParams) -> None:
        super().__init__(params)
        self.max_freq = params.max_freq
        self.ghost_freq = params.ghost_freq

    def access(self, h: Hashable) -> None:
        if h in self.S:
            self.counters["block_hits"] += 1
            self.S[h] = min(self.S[h] + 1, self.max_freq)
        elif h in self.M:
            self.counters["block_hits"] += 1
            self.M[h] = min(self.M[h] + 1, self.max_freq)
        elif h in self.G:
            self.counters["ghost_hits"] += 1
            del self.G[h]
            self.admit_to_M(h, self.ghost_freq)
        else:
            self.admit_to_S(h)

    def admit_to_S(self, h: Hashable) -> None:
        while len(self.S) >= self.small_cap:
            victim, vf = self.S.popitem(last=False)
            if vf >= 1:
                self.counters["promotions"] += 1
                self.admit_to_M(victim, vf)
            else:
                self.insert_to_G(victim)
        self.S[h] = 0

    def admit_to_M(self, h: Hashable, freq: int) -> None:
        while len(self.M) >= self.main_cap:
            victim, vf = next(iter(self.M.items()))
            if vf >= 1:
                del self.M[victim]
                self.M[victim] = vf - 1  # requeued at the tail
                continue
            del self.M[victim]
            self.insert_to_G(victim)
            break
        self.M[h] = freq

    def insert_to_G(self, h: Hashable) -> None:
        self.evicted(h)  # h leaves S ∪ M for G: every call is an eviction
        if h in self.G:
            del self.G[h]
        elif len(self.G) >= self.ghost_cap:
            self.G.popitem(last=False)
        self.G[h] = None


# --- steps ----------------------------------------------------------------------------------
# S, M and G are lists (engine.lists' link pairs; an id is in at most one of them), so that a
# block can leave S or M from the middle (a tier's removal). Per id, ``st[h] = freq * 4 +
# where`` as in the fast kernel below (where 0: none, 1: G, 2: S, 3: M; resident is ``st & 2``).
# Per cache ``sc[9q:9q+9]`` = the ends of S, M and G, then |S|, |M|, |G|. One admission evicts
# at most one block into G (S's cold head, or M's victim after a promotion or a ghost hit), so
# ``admit`` is straight-line code: the block's own move (to S, or from G to M), then the
# admission to M of the block that goes there, if any, then the one G insertion, if any. Those
# steps touch disjoint blocks, so this order changes no outcome of the specification's.

_NONE, _IN_G, _IN_S, _IN_M = 0, 1, 2, 3
_INT32_MAX_FIELD = 2**29  # x * 4 + 3 <= 2**31 - 1 for every x < 2**29
_S, _M, _G, _NS, _NM, _NG = 0, 2, 4, 6, 7, 8  # offsets in a cache's scalars
_K = 9


def _st(p: S3FIFOParams, space: Space) -> np.ndarray:
    return zeroed_state(space.n_ids, np.int64 if p.max_freq >= _INT32_MAX_FIELD else np.int32)


class S3FIFOState(NamedTuple):
    link: np.ndarray = links()
    st: np.ndarray = made(_st)
    sc: np.ndarray = per_cache(-1, -1, -1, -1, -1, -1, 0, 0, 0)
    cnt: np.ndarray = counters(S3FIFOReference)
    small_cap: int = param("small_cap")
    main_cap: int = param("main_cap")
    saturated: int = made(lambda p, space: p.max_freq * 4)  # st[h] < it iff freq < max_freq
    ghost_freq: int = param("ghost_freq")


def s3fifo_is_resident(s, q, h):
    return s.st[ix(h)] & 2 != 0


def s3fifo_hit(s, q, h, pred):
    x = s.st[ix(h)]
    if x < s.saturated:
        s.st[ix(h)] = x + 4


@njit(inline="always")
def from_ghost(s, q, h):
    """A ghost hit: ``h`` leaves G (for M)."""
    s.cnt[ix(q), 2] += 1
    take(s.link, s.sc, _K * q + _G, _K * q + _NG, h)


@njit(inline="always")
def into_small(s, q, h):
    """admit_to_S(h): S's head leaves first if S is full; returns it (-1 if none). ``h`` joins
    S's tail with freq 0 at once: it touches none of the blocks the head's move does."""
    v = push_bounded(s.link, s.sc, _K * q + _S, _K * q + _NS, s.small_cap, h)
    s.st[ix(h)] = _IN_S
    return v


@njit(inline="always")
def main_is_full(s, q):
    """Whether an admission to M must evict; if not, M grows by the block to come."""
    if s.sc[ix(_K * q + _NM)] >= s.main_cap:
        return True
    s.sc[ix(_K * q + _NM)] += 1
    return False


@njit(inline="always")
def requeue_head(s, q):
    """Second chance: M's head moves to M's tail; returns it."""
    v = pop_head(s.link, s.sc, _K * q + _M)
    push(s.link, s.sc, _K * q + _M, v)
    return v


@njit(inline="always")
def into_main(s, q, h, freq):
    push(s.link, s.sc, _K * q + _M, h)
    s.st[ix(h)] = freq * 4 + _IN_M


@njit(inline="always")
def into_ghost(s, q, v):
    """insert_to_G(v), for a victim of S or M (so never already in G); ghost_cap = main_cap."""
    oldest = push_bounded(s.link, s.sc, _K * q + _G, _K * q + _NG, s.main_cap, v)
    if oldest >= 0:  # G dropped its oldest
        s.st[ix(oldest)] = _NONE
    s.st[ix(v)] = _IN_G


@njit(inline="always")
def first_moves(s, q, h):
    """An admission's first moves: ``h`` from G to M (a ghost hit), or ``h`` into S, whose head
    then leaves, warm to M (freq kept: a promotion), cold out of S ∪ M. Returns the block to
    admit to M with its freq (-1 if none), and the cold head (-1 if none)."""
    if s.st[ix(h)] & 3 == _IN_G:  # a ghost hit re-admits h to M with ghost_freq
        from_ghost(s, q, h)
        return h, s.ghost_freq, -1
    v = into_small(s, q, h)
    if v >= 0 and s.st[ix(v)] >= 4:
        s.cnt[ix(q), 3] += 1
        return v, s.st[ix(v)] >> 2, -1
    return -1, 0, v


def s3fifo_admit(s, q, h, pred):
    # victim: the block this access evicts into G, if any
    to_m, to_m_freq, victim = first_moves(s, q, h)
    if to_m >= 0:
        if main_is_full(s, q):  # second chance until exactly one block is evicted
            while True:
                v = s.sc[ix(_K * q + _M)]
                vs = s.st[ix(v)]
                if vs < 4:  # freq 0: evicted to G
                    pop_head(s.link, s.sc, _K * q + _M)
                    victim = v
                    break
                s.st[ix(requeue_head(s, q))] = vs - 4  # requeued at the tail with freq - 1
        into_main(s, q, to_m, to_m_freq)
    if victim >= 0:
        into_ghost(s, q, victim)
    return victim


@njit(inline="always")  # S3FIFO_LEAF's removal calls it
def s3fifo_remove(s, q, h):
    # Out of S or M without a ghost entry: the block moved to a faster tier.
    e = _K * q
    if s.st[ix(h)] & 3 == _IN_S:
        take(s.link, s.sc, e + _S, e + _NS, h)
    else:
        take(s.link, s.sc, e + _M, e + _NM, h)
    s.st[ix(h)] = _NONE


STEPS = Steps(
    S3FIFOState,
    is_resident=s3fifo_is_resident,
    hit=s3fifo_hit,
    admit=s3fifo_admit,
    remove=s3fifo_remove,
)


# --- fast kernel ----------------------------------------------------------------------------
# The single cache, hand-fused: S, M and G as rings instead of lists (a ring cannot lose a block
# from the middle, so this layout has no removal; nothing leaves the middle of one cache).
# Per-block state, indexed by dense block id, is one integer ``st[h] = x * 4 + where``:
#
#   where  0: in no queue (never seen, or dropped from G)     x = 0
#          1: in G                                            x = h's slot in ``ring``
#          2: in S                                            x = freq
#          3: in M                                            x = freq
#
# so residency (S ∪ M) is ``st[h] & 2``, a hit is one load and at most one store (freq saturates
# at max_freq: ``st[h] < max_freq * 4`` exactly when freq < max_freq, and nothing is written once
# it is saturated), and freq lives in the cache line the residency test has just loaded. A block
# leaves G only to M (a ghost hit, which sets its freq) or to nowhere, so G never needs its freq.
# ``st`` is int32 when ``4 * max_freq + 3`` and ``4 * len(ring) + 1`` fit (every realistic
# parameter), int64 otherwise (:func:`_kernel_state`): the values are exact either way.
#
# S and M are ring buffers of exactly small_cap / main_cap slots: only their heads are removed,
# so a ring suffices, and requeueing the head of a full M is just advancing the head. Neither
# ever shrinks (S loses its head only to admit a block, M evicts exactly one block per
# admission once full), so each fills once and then stays full: its slots start at -1 (empty),
# one position per ring is both its head and where its next entry goes (a full ring's tail
# slot is the one its head just left), and popping a -1 means "not full yet, nothing leaves".
# The final sizes follow from the admissions: |S| = min(S admissions, small_cap), |M| =
# min(promotions + ghost hits, main_cap). One position instead of a head and a length per ring
# frees two registers in the loop and measured 1.14-1.26x on the bundled trace.
#
# The one exception is a rule's removal of a request's temporary blocks when it ends (an
# engine's partial block, ``release_from``; none under the specification's rule). A resident
# temporary block is always at S's tail: it is admitted to S (its id is its own, never in G),
# it is never hit, so its freq stays 0 and it never reaches M, and the request's temporary
# blocks are its last accesses, so nothing joins S after them; those of them still resident
# are S's last entries. Removing them moves S's position back over their slots and empties
# them: S's empty slots stay one run starting at its position, which the next admissions fill
# (popping -1: nothing leaves), as a FIFO of fewer than small_cap entries does. S's size is then
# counted from its slots at the end.
# G loses entries from the middle too (a ghost hit), so it is a ring of ``2 * ghost_cap`` slots
# with tombstones, from ``g_head`` (its oldest entry or tombstone) to ``g_tail`` (where the next
# entry goes): a ghost hit overwrites the block's slot with -1 (found through ``st``), popping
# G's oldest entry skips tombstones, and an insertion that fills the ring with live entries and
# tombstones (``g_tail`` meets ``g_head``; at least ghost_cap tombstones then) packs the live
# entries, in order, from the head (``st`` follows each moved one). Packing right after the
# insertion, not before the next, keeps "the tail meets the head" unambiguous (the ring has at
# least one entry then), so G needs no count of used slots. This replaced a doubly linked list
# threaded through two more int32 per block: same order, same removals, but no per-block links
# (1.1 GB fewer at 142M distinct blocks) and no pointer chasing on every ghost insertion and
# eviction.
#
# The three rings are one array, ``ring``: S in ``[0, small_cap)``, M in ``[small_cap,
# capacity)``, G in ``[capacity, capacity + 2 * ghost_cap)``, each position kept absolute. One
# base address instead of three is one register fewer in the loop (6-7% fewer instructions
# under valgrind, about 5% faster over a sample of the 1,008-point grid).
#
# One access evicts at most one block into G (S's cold head, or M's victim after a promotion
# or a ghost hit), so the miss path is straight-line code: admit to S (or take the ghost hit),
# then admit to M if a block must go there, then insert the one G entry if there is one. Those
# steps touch disjoint blocks (the accessed block is never G's oldest entry: it was not in G, or
# has just left it), so doing S's append before M's admission, or M's before G's insertion,
# changes no outcome of the specification's order.
#
# The prefix scan and the accesses of the request's leading hits are one loop: a hit changes no
# block's residency, so while every block so far was a hit, "resident now" is "resident at
# arrival", and the first miss ends the prefix.
#
# Everything is one function with scalar locals: numba keeps array arguments of helper calls
# reference-counted (atomic increments per call), which made a helper-per-rule kernel 30x slower.
# Few locals live through the loop, so more of them stay in registers: only the rare events are
# counted (ghost hits, promotions, and S's laps); hits and evictions are derived at the end.
# Every access is a hit, a ghost hit or an admission to S (``s_laps * small_cap + s_pos`` of
# them), so hits = accesses - ghost hits - S admissions; each miss adds one block to S ∪ M and
# each eviction removes one, so evictions = misses - final size. Deriving evictions measured
# 1-7% faster on the bundled trace; hits, with G's count of used slots gone, about 3% over a
# sample of the 1,008-point grid (3% fewer instructions under valgrind).
#
# Every subscript is ``a[ix(i)]`` (:data:`~prefixsim.policies.base.ix`): each index above is
# non-negative, so numba's negative-index fix-up, three instructions in every address, is
# skipped (1.24-1.32x).


def s3fifo_fused(stamp: str) -> Any:
    """The fast kernel's template (:func:`prefixsim.engine.single.fast_kernel`), compiled once
    per hit rule with its functions (``scan_limit``, ``hit_tokens``, ``release_from``) bound
    and inlined."""

    def s3fifo_kernel(
        block_ids, offsets, input_lengths, rule, cnt, out,
        small_cap, main_cap, max_freq, ghost_freq, st, ring,
    ):  # fmt: skip
        stamp  # noqa: B018 (the disk cache's key, see prefixsim.engine.build)
        capacity = small_cap + main_cap
        s_pos = 0  # the slot of S's head, which is also where its next entry goes
        s_laps = 0  # times s_pos went round: S admissions = s_laps * small_cap + s_pos
        m_pos = small_cap  # the same for M
        ghost_hits = promotions = 0
        g_end = ring.shape[0]  # G's slots are ring[capacity:g_end]
        g_head = g_tail = capacity  # G's oldest entry or tombstone, and where the next one goes
        g_len = 0  # live entries
        ghost_cap = main_cap
        saturated = max_freq * 4  # st[h] < saturated  <=>  freq < max_freq (where < 4)
        removed = 0  # temporary blocks the rule took out of S (S's tail, see above)
        n_requests = input_lengths.shape[0]
        for r in range(n_requests):
            start = offsets[ix(r)]
            end = offsets[ix(r + 1)]
            length = input_lengths[ix(r)]
            stop = start + scan_limit(rule, end - start, length)
            # The longest resident prefix, each of its blocks accessed (a hit) as it is counted.
            i = start
            while i < stop:
                h = block_ids[ix(i)]
                s = st[ix(h)]
                if not s & 2:
                    break
                if s < saturated:
                    st[ix(h)] = s + 4
                i += 1
            out[ix(r)] = hit_tokens(rule, i - start, length)
            # Then the remaining blocks, from the first miss on, hit or miss, in order.
            for j in range(i, end):
                h = block_ids[ix(j)]
                s = st[ix(h)]
                if s & 2:  # in S or M: a hit
                    if s < saturated:
                        st[ix(h)] = s + 4
                    continue
                to_g = -1  # the block this access evicts into G, if any
                to_m = -1  # the block this access admits to M, if any, with freq to_m_freq
                to_m_freq = 0
                if s & 1:  # in G: a ghost hit re-admits h to M with ghost_freq
                    ghost_hits += 1
                    ring[ix(s >> 2)] = -1  # tombstone
                    g_len -= 1
                    to_m = h
                    to_m_freq = ghost_freq
                else:  # admit_to_S: S's head leaves first, warm to M (freq kept), cold to G
                    victim = ring[ix(s_pos)]  # S's head, or -1 while S is filling
                    ring[ix(s_pos)] = h  # h takes the head's slot: the tail of a full ring
                    s_pos += 1
                    if s_pos == small_cap:
                        s_pos = 0
                        s_laps += 1
                    st[ix(h)] = _IN_S  # freq 0
                    if victim >= 0:
                        vs = st[ix(victim)]
                        if vs >= 4:
                            promotions += 1
                            to_m = victim
                            to_m_freq = vs >> 2
                        else:
                            to_g = victim
                if to_m >= 0:  # admit_to_M: second chance until exactly one block is evicted
                    victim = ring[ix(m_pos)]  # M's head, or -1 while M is filling
                    while victim >= 0:
                        vs = st[ix(victim)]
                        if vs < 4:  # freq 0: evicted to G, to_m takes its slot
                            to_g = victim
                            break
                        # requeued at the tail, which in a full ring is its own slot; freq - 1
                        st[ix(victim)] = vs - 4
                        m_pos += 1
                        if m_pos == capacity:
                            m_pos = small_cap
                        victim = ring[ix(m_pos)]
                    ring[ix(m_pos)] = to_m
                    m_pos += 1
                    if m_pos == capacity:
                        m_pos = small_cap
                    st[ix(to_m)] = to_m_freq * 4 + _IN_M
                if to_g >= 0:  # insert_to_G (a victim of S or M, so never already in G)
                    if g_len >= ghost_cap:
                        # drop G's oldest live entry (there is one: g_len >= 1), tombstones with it
                        while True:
                            old = ring[ix(g_head)]
                            g_head += 1
                            if g_head == g_end:
                                g_head = capacity
                            if old >= 0:
                                st[ix(old)] = _NONE
                                g_len -= 1
                                break
                    ring[ix(g_tail)] = to_g
                    st[ix(to_g)] = g_tail * 4 + _IN_G
                    g_len += 1
                    g_tail += 1
                    if g_tail == g_end:
                        g_tail = capacity
                    if g_tail == g_head:
                        # Full of live entries and tombstones: pack the live ones from g_head on.
                        # g_len <= ghost_cap here, so at least ghost_cap slots come free.
                        rd = wr = g_head
                        for _ in range(g_end - capacity):
                            x = ring[ix(rd)]
                            if x >= 0:
                                if wr != rd:
                                    ring[ix(wr)] = x
                                    st[ix(x)] = wr * 4 + _IN_G
                                wr += 1
                                if wr == g_end:
                                    wr = capacity
                            rd += 1
                            if rd == g_end:
                                rd = capacity
                        g_tail = wr
            # The request's temporary blocks still resident leave S (the rule's; none under
            # the specification's): they are its last admissions, so S's last entries.
            taken = 0
            for j in range(release_from(rule, block_ids, start, end), end):
                h = block_ids[ix(j)]
                if st[ix(h)] & 2:
                    st[ix(h)] = _NONE
                    taken += 1
            for _ in range(taken):  # S's tail slots become empty: S's next admissions fill them
                if s_pos == 0:
                    s_pos = small_cap
                    s_laps -= 1
                s_pos -= 1
                ring[ix(s_pos)] = -1
            removed += taken
        # Every access is a hit, a ghost hit or an admission to S, so hits need no count of
        # their own.
        s_admissions = s_laps * small_cap + s_pos + removed
        misses = ghost_hits + s_admissions
        hits = (offsets[ix(n_requests)] - offsets[0]) - misses
        # M never shrinks: it fills to its size, then every admission evicts one entry. Nor
        # does S without removals; with them its empty slots are counted.
        s_size = min(s_admissions, small_cap)
        if removed:
            s_size = 0
            for x in range(small_cap):
                if ring[ix(x)] >= 0:
                    s_size += 1
        final = s_size + min(promotions + ghost_hits, main_cap)
        cnt[0] += hits
        # evictions: every miss puts one block into S ∪ M, every eviction or removal takes one
        # out
        cnt[1] += misses - final - removed
        cnt[2] += ghost_hits
        cnt[3] += promotions
        return final

    return s3fifo_kernel


def _kernel_args(p: S3FIFOParams) -> tuple[int, int, int, int]:
    return (p.small_cap, p.main_cap, p.max_freq, p.ghost_freq)


def _kernel_state(p: S3FIFOParams, n_blocks: int) -> tuple[np.ndarray, np.ndarray]:
    """``st`` (all in no queue) and the rings: S's ``small_cap`` slots, M's ``main_cap``, then
    G's ``2 * ghost_cap``. S's and M's slots start at -1 (empty: the kernel pops them while the
    queue fills); G's start uninitialised: a slot of it is read only after a write put an entry
    there."""
    capacity = p.small_cap + p.main_cap
    ring = np.empty(capacity + 2 * p.ghost_cap, np.int32)
    ring[:capacity] = -1
    small = max(p.max_freq, ring.shape[0]) < _INT32_MAX_FIELD
    st = zeroed_state(n_blocks, np.int32 if small else np.int64)
    return st, ring


def _state_bytes(p: S3FIFOParams, n_blocks: int, n_accesses: int) -> int:
    """The larger of the fast kernel's :func:`_kernel_state` (``st``, int64 at most per block,
    and the rings: int32 per slot of S, M and twice G) and the steps' :class:`S3FIFOState`
    (``link`` and ``st`` per id, nothing per slot)."""
    fast = 8 * n_blocks + 4 * (p.capacity + 2 * p.ghost_cap)
    return max(fast, link_bytes(n_blocks) + 8 * n_blocks)


SPEC = register(
    S3FIFOParams,
    S3FIFOReference,
    STEPS,
    fast_kernel=s3fifo_fused,
    kernel_args=_kernel_args,
    kernel_state=_kernel_state,
    state_bytes=_state_bytes,
)
