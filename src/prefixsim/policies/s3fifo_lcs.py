"""S3FIFO_LCS: S3FIFO as libCacheSim 0.3.5 implements it (the S3FIFO paper's artifact).

Variant: ``libCacheSim/cache/eviction/S3FIFO.c`` (read in 1a1a11a/libCacheSim at 035d832c7757
and 687f14c6579c; the ``libcachesim`` 0.3.5 package on PyPI runs a later revision whose
``S3FIFO_init`` also refuses an empty queue, as here). The tests hold this policy equal to that
package, access by access. It differs from the specification's S3FIFO (``S3FIFO``) in these
ways, each from the source:

* sizes truncate: ``small_cap = int(capacity * small_ratio)``, ``main_cap = capacity -
  small_cap``, and the ghost holds ``int(capacity * ghost_ratio)`` hashes (0.9 of the cache,
  not ``main_cap``) (``S3FIFO_init``);
* eviction happens only when the whole cache is full (``cache_get_base``: while ``|S| + |M| +
  1 > capacity``), so S may grow into room M does not use, and M past ``main_cap``;
* an eviction (``S3FIFO_evict``) takes from M when M is over ``main_cap`` or S is empty, else
  from S; from S (``S3FIFO_evict_small``) the head moves to M with freq 0 while its freq is at
  least ``move_to_main_threshold`` (2), and the first head below it goes to the ghost (one
  eviction); from M (``S3FIFO_evict_main``) a head with freq >= 1 is requeued at the tail with
  ``min(freq, 3) - 1`` (a 2-bit clock), the first with freq 0 is evicted, *not* to the ghost;
* freq counts every hit without saturation (``S3FIFO_find``: ``freq += 1``); it is capped only
  by the requeue;
* before the first eviction, a new block goes to M once S is full (``S3FIFO_insert``,
  ``has_evicted``); a ghost hit inserts into M with freq 0;
* a small queue of no slot is refused (``S3FIFO_init``: "Invalid cache size configuration",
  which aborts libcachesim 0.3.5); a block cannot enter a small queue of one slot
  (``S3FIFO_insert`` refuses an object as large as the small queue) and nothing reaches M
  without passing S, so with ``int(capacity * small_ratio) == 1`` (10 to 19 blocks at the
  default ratio) the cache stays empty, as libCacheSim reports: replayed as it is.

Residency is ``S ∪ M``; the ghost holds hashes only. Pseudocode, per block access::

    access(h):
        hit_on_ghost = false
        if h in S: S.freq[h] += 1; hit; return
        if h in G: remove h from G; hit_on_ghost = true
        if h in M: M.freq[h] += 1; hit; return
        if small_cap == 1 and not hit_on_ghost: return   # never inserted, nothing resident
        while |S| + |M| + 1 > capacity: evict()
        if hit_on_ghost: append (h, 0) to M
        elif not has_evicted and |S| >= small_cap: append (h, 0) to M
        else: append (h, 0) to S

    evict():
        has_evicted = true
        if |M| > main_cap or |S| == 0: evict_main() else: evict_small()
    evict_small(): while S: (v, f) = pop_head(S)
        if f >= threshold: append (v, 0) to M          # a promotion
        else: ghost_insert(v); break                   # one eviction
    evict_main(): while M: (v, f) = pop_head(M)
        if f >= 1: append (v, min(f, 3) - 1) to M
        else: break                                    # one eviction, no ghost entry
    ghost_insert(v): if |G| >= ghost_cap: pop_head(G); append v to G   (ghost_cap 0: no ghost)

Counters: ``block_hits``, ``evictions`` (blocks leaving S ∪ M), ``ghost_hits``, ``promotions``
(S heads moved to M).
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple

import numpy as np
from numba import njit

from ..engine.lists import link_array, link_bytes, pop_head, push, scalars, take, to_tail
from ..engine.rules import hit_tokens, release_from, scan_limit
from ..engine.steps import Space, Steps, counter_array
from ..errors import ParameterError
from .base import (
    Check,
    PolicyParams,
    check_int,
    ix,
    register,
    zeroed_state,
)
from .s3fifo import SMGParams, SMGReference


def _check_ratio(name: str, upper_open: bool):
    bound = "[0, 1)" if upper_open else ">= 0"

    def check(value: object) -> tuple[float]:
        if isinstance(value, bool) or not isinstance(value, (int, float, np.floating)):
            raise ParameterError(name, value, f"expected a number in {bound}")
        v = float(value)
        if not (v >= 0.0 and (v < 1.0 if upper_open else v < 2**31)):
            raise ParameterError(name, value, f"expected a number in {bound}")
        return (v,)

    return check


def _check_small(capacity: int, ratio: float) -> tuple[int, float]:
    if int(capacity * ratio) < 1:
        raise ParameterError(
            "small_ratio",
            ratio,
            f"with capacity={capacity}, int(capacity * small_ratio) = 0: libCacheSim refuses a "
            "small queue of no slot (S3FIFO_init: 'Invalid cache size configuration')",
        )
    return capacity, ratio


def _check_threshold(value: object) -> tuple[int]:
    return (check_int("move_to_main_threshold", value, 0, 2**31 - 1),)


@dataclass(frozen=True)
class S3FIFOLCSParams(SMGParams):
    policy: ClassVar[str] = "S3FIFO_LCS"
    small_ratio: float = 0.1
    """Fraction of ``capacity`` for S, truncated: ``int(capacity * small_ratio)``."""
    ghost_ratio: float = 0.9
    """Ghost entries as a fraction of ``capacity``, truncated (0: no ghost)."""
    move_to_main_threshold: int = 2
    """An S head with at least this freq moves to M (with freq 0) instead of the ghost."""

    checks: ClassVar[tuple[Check, ...]] = (
        *PolicyParams.checks,
        (("small_ratio",), _check_ratio("small_ratio", True)),
        (("capacity", "small_ratio"), _check_small),
        (("ghost_ratio",), _check_ratio("ghost_ratio", False)),
        (("move_to_main_threshold",), _check_threshold),
    )

    @property
    def small_cap(self) -> int:
        return int(self.capacity * self.small_ratio)  # (int64_t)cache_size * ratio, truncated

    @property
    def ghost_cap(self) -> int:
        return int(self.capacity * self.ghost_ratio)


class S3FIFOLCSReference(SMGReference):
    """The pseudocode of the module docstring, over :class:`SMGReference`'s queues (S and M map
    a hash to its freq, head first)."""

    def __init__(self, params: S3FIFOLCSParams) -> None:
        super().__init__(params)
        self.threshold = params.move_to_main_threshold
        self.has_evicted = False

    def access(self, h: Hashable) -> None:
        hit_on_ghost = False
        if h in self.S:
            self.S[h] += 1
            self.counters["block_hits"] += 1
            return
        if h in self.G:
            del self.G[h]
            hit_on_ghost = True
            self.counters["ghost_hits"] += 1
        if h in self.M:
            self.M[h] += 1
            self.counters["block_hits"] += 1
            return
        if self.small_cap == 1 and not hit_on_ghost:
            return  # S3FIFO_insert: not inserted (and nothing is ever resident)
        while len(self.S) + len(self.M) + 1 > self.capacity:
            self.evict()
        if hit_on_ghost or (not self.has_evicted and len(self.S) >= self.small_cap):
            self.M[h] = 0
        else:
            self.S[h] = 0

    def evict(self) -> None:
        self.has_evicted = True
        if len(self.M) > self.main_cap or not self.S:
            self.evict_main()
        else:
            self.evict_small()

    def evict_small(self) -> None:
        while self.S:
            victim, freq = self.S.popitem(last=False)
            if freq >= self.threshold:
                self.counters["promotions"] += 1
                self.M[victim] = 0
                continue
            self.evicted(victim)
            if self.ghost_cap > 0:
                if len(self.G) >= self.ghost_cap:
                    self.G.popitem(last=False)
                self.G[victim] = None
            return

    def evict_main(self) -> None:
        while self.M:
            victim, freq = self.M.popitem(last=False)
            if freq >= 1:
                self.M[victim] = min(freq, 3) - 1  # requeued at the tail
                continue
            self.evicted(victim)
            return


# --- steps ----------------------------------------------------------------------------------
# S, M and G are lists (engine.lists' link pairs; an id is in at most one of them), so that a
# block can leave S or M from the middle (a tier's removal). Per id: ``where`` (0 nowhere,
# 1 G, 2 S, 3 M) and ``freq`` (int64: it counts hits without bound). Per cache
# ``sc[10q:10q+10]`` = the ends of S, M and G, then |S|, |M|, |G| and ``has_evicted``. An
# admission into a full cache evicts exactly one block: ``evict_small`` may only promote (every
# head of S warm), and then S is empty and ``evict_main`` evicts one; so ``admit`` returns one
# victim, as the steps' contract asks.
#
# A small queue of one slot admits nothing (``S3FIFO_insert``, see the module docstring): the
# cache stays empty, which no admit step can express ("afterwards h is resident"), so the
# steps refuse it (``make_state``); the single cache still replays it through the fast kernel.

_NONE, _IN_G, _IN_S, _IN_M = 0, 1, 2, 3
_S, _M, _G, _NS, _NM, _NG, _EVICTED = 0, 2, 4, 6, 7, 8, 9  # offsets in a cache's scalars
_K = 10


class S3FIFOLCSState(NamedTuple):
    link: np.ndarray
    where: np.ndarray
    freq: np.ndarray
    sc: np.ndarray
    cnt: np.ndarray
    capacity: int
    small_cap: int
    main_cap: int
    ghost_cap: int
    threshold: int


def _refuse_one_slot(p: S3FIFOLCSParams) -> None:
    if p.small_cap == 1:
        raise ParameterError(
            "small_ratio",
            p.small_ratio,
            f"with capacity={p.capacity}, int(capacity * small_ratio) = 1: libCacheSim's small "
            "queue of one slot admits nothing (the cache stays empty), which only the single "
            "cache replays; a tier or a cluster instance needs a small queue of 2 slots or more",
        )


def s3fifo_lcs_state(p: S3FIFOLCSParams, space: Space) -> S3FIFOLCSState:
    _refuse_one_slot(p)
    return S3FIFOLCSState(
        link_array(space.n_ids),
        zeroed_state(space.n_ids, np.int8),
        np.empty(space.n_ids, np.int64),  # written at every admission before it is read
        scalars(space.n_caches, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0),
        counter_array(space.n_caches, S3FIFOLCSReference.counter_names),
        p.capacity,
        p.small_cap,
        p.main_cap,
        p.ghost_cap,
        p.move_to_main_threshold,
    )


def s3fifo_lcs_is_resident(s, q, h):
    return s.where[ix(h)] >= _IN_S


def s3fifo_lcs_hit(s, q, h, pred):
    s.freq[ix(h)] += 1


@njit(inline="always")
def _append(s, q, off, code, h):
    """``h`` (in no list) at the tail of S, M or G (``off``), its ``where`` ``code``."""
    push(s.link, s.sc, _K * q + off, h)
    s.sc[ix(_K * q + _NS + off // 2)] += 1
    s.where[ix(h)] = code


@njit(inline="always")
def _take(s, q, off, h):
    """``h`` out of S, M or G (``off``), in no list now."""
    take(s.link, s.sc, _K * q + off, _K * q + _NS + off // 2, h)
    s.where[ix(h)] = _NONE


@njit(inline="always")
def _pop(s, q, off):
    """The head of non-empty S, M or G (``off``), out of its list (``where`` unchanged)."""
    s.sc[ix(_K * q + _NS + off // 2)] -= 1
    return pop_head(s.link, s.sc, _K * q + off)


@njit
def _evict_main(s, q):
    """S3FIFO_evict_main: requeue warm heads (a 2-bit clock), evict the first cold one (not
    to the ghost); -1 if M is empty."""
    while s.sc[ix(_K * q + _NM)] > 0:
        v = s.sc[ix(_K * q + _M)]
        f = s.freq[ix(v)]
        if f >= 1:
            s.freq[ix(v)] = min(f, 3) - 1
            to_tail(s.link, s.sc, _K * q + _M, v)
            continue
        _pop(s, q, _M)
        s.where[ix(v)] = _NONE
        return v
    return -1


@njit
def _evict_small(s, q):
    """S3FIFO_evict_small: warm heads move to M with freq 0, the first cold one goes to the
    ghost (one eviction); -1 if every head was warm."""
    while s.sc[ix(_K * q + _NS)] > 0:
        v = _pop(s, q, _S)
        if s.freq[ix(v)] >= s.threshold:
            s.cnt[ix(q), 3] += 1
            s.freq[ix(v)] = 0
            _append(s, q, _M, _IN_M, v)
            continue
        s.where[ix(v)] = _NONE
        if s.ghost_cap > 0:
            if s.sc[ix(_K * q + _NG)] >= s.ghost_cap:
                s.where[ix(_pop(s, q, _G))] = _NONE
            _append(s, q, _G, _IN_G, v)
        return v
    return -1


def s3fifo_lcs_admit(s, q, h, pred):
    e = _K * q
    hit_on_ghost = s.where[ix(h)] == _IN_G
    if hit_on_ghost:  # out of G
        s.cnt[ix(q), 2] += 1
        _take(s, q, _G, h)
    victim = -1
    while s.sc[ix(e + _NS)] + s.sc[ix(e + _NM)] + 1 > s.capacity:
        s.sc[ix(e + _EVICTED)] = 1
        if s.sc[ix(e + _NM)] > s.main_cap or s.sc[ix(e + _NS)] == 0:
            v = _evict_main(s, q)
        else:
            v = _evict_small(s, q)
        if v >= 0:
            victim = v
    s.freq[ix(h)] = 0
    if hit_on_ghost or (s.sc[ix(e + _EVICTED)] == 0 and s.sc[ix(e + _NS)] >= s.small_cap):
        _append(s, q, _M, _IN_M, h)
    else:
        _append(s, q, _S, _IN_S, h)
    return victim


def s3fifo_lcs_remove(s, q, h):
    _take(s, q, _S if s.where[ix(h)] == _IN_S else _M, h)


STEPS = Steps(
    S3FIFOLCSState,
    s3fifo_lcs_state,
    s3fifo_lcs_is_resident,
    s3fifo_lcs_hit,
    s3fifo_lcs_admit,
    remove=s3fifo_lcs_remove,
    refuse=_refuse_one_slot,
)


# --- fast kernel ----------------------------------------------------------------------------
# The single cache's replay, fused (libCacheSim's loop, scalar locals), kept as S3FIFO_LCS's
# fast path where it measured faster than the driver over the steps above, and held equal to
# it per request (tests/test_engine.py); it also replays a small queue of one slot, which the
# steps refuse. Per block: ``where`` (0 nowhere, 1 G, 2 S, 3 M) and ``freq`` (int64: it counts
# hits without bound). S and M are rings of ``capacity + 1`` slots (each holds at most
# ``capacity`` blocks: S ∪ M never exceeds it) with a head and a length: only heads leave them,
# but for a rule's temporary blocks (an engine's partial block, ``release_from``), removed when
# their request ends: the entries behind one move up a slot. A temporary block is admitted
# last and never hit: in S it is at S's tail (only admissions join S); it is in M only when it
# was admitted before the cache's first eviction (S full), and then only the evictions that the
# request's later temporary blocks make can have put blocks behind it. The arrays come from
# :func:`_kernel_state` (the kernel allocates nothing).
# G loses entries from the middle (ghost hits), so it is a doubly linked list threaded through
# ``gprev`` / ``gnext``. One function with scalar locals, no array-taking helpers (see
# s3fifo.py). Every subscript is ``a[ix(i)]``: block ids, ring slots and list links are tested
# non-negative before use.


def s3fifo_lcs_fused(stamp: str) -> Any:
    """The fast kernel's template (:func:`prefixsim.engine.single.fast_kernel`), compiled once
    per hit rule with its functions (``scan_limit``, ``hit_tokens``, ``release_from``) bound
    and inlined."""

    def s3fifo_lcs_kernel(
        block_ids, offsets, input_lengths, rule, cnt, out,
        capacity, small_cap, main_cap, ghost_cap, threshold,
        where, freq, gprev, gnext, ring_s, ring_m,
    ):  # fmt: skip
        stamp  # noqa: B018 (the disk cache's key, see prefixsim.engine.build)
        slots = ring_s.shape[0]  # capacity + 1
        s_head = s_len = m_head = m_len = 0
        g_head = g_tail = -1
        g_len = 0
        has_evicted = False
        hits = evictions = ghost_hits = promotions = 0
        n_requests = input_lengths.shape[0]
        for r in range(n_requests):
            start = offsets[ix(r)]
            end = offsets[ix(r + 1)]
            length = input_lengths[ix(r)]
            stop = start + scan_limit(rule, end - start, length)
            k = start
            while k < stop and where[ix(block_ids[ix(k)])] >= 2:
                k += 1
            out[ix(r)] = hit_tokens(rule, k - start, length)
            for i in range(start, end):
                h = block_ids[ix(i)]
                w = where[ix(h)]
                if w >= 2:  # in S or M: a hit
                    freq[ix(h)] += 1
                    hits += 1
                    continue
                hit_on_ghost = w == 1
                if hit_on_ghost:  # out of G
                    ghost_hits += 1
                    p = gprev[ix(h)]
                    q = gnext[ix(h)]
                    if p >= 0:
                        gnext[ix(p)] = q
                    else:
                        g_head = q
                    if q >= 0:
                        gprev[ix(q)] = p
                    else:
                        g_tail = p
                    g_len -= 1
                    where[ix(h)] = 0
                if small_cap == 1 and not hit_on_ghost:
                    continue  # never inserted (S3FIFO_insert); the cache stays empty
                while s_len + m_len + 1 > capacity:
                    has_evicted = True
                    if m_len > main_cap or s_len == 0:
                        while m_len > 0:  # evict_main
                            v = ring_m[ix(m_head)]
                            m_head += 1
                            if m_head == slots:
                                m_head = 0
                            m_len -= 1
                            f = freq[ix(v)]
                            if f >= 1:
                                freq[ix(v)] = min(f, 3) - 1
                                t = m_head + m_len
                                if t >= slots:
                                    t -= slots
                                ring_m[ix(t)] = v
                                m_len += 1
                                continue
                            where[ix(v)] = 0
                            evictions += 1
                            break
                    else:
                        while s_len > 0:  # evict_small
                            v = ring_s[ix(s_head)]
                            s_head += 1
                            if s_head == slots:
                                s_head = 0
                            s_len -= 1
                            if freq[ix(v)] >= threshold:
                                promotions += 1
                                freq[ix(v)] = 0
                                where[ix(v)] = 3
                                t = m_head + m_len
                                if t >= slots:
                                    t -= slots
                                ring_m[ix(t)] = v
                                m_len += 1
                                continue
                            evictions += 1
                            where[ix(v)] = 0
                            if ghost_cap > 0:
                                if g_len >= ghost_cap:  # drop G's head
                                    old = g_head
                                    g_head = gnext[ix(old)]
                                    if g_head >= 0:
                                        gprev[ix(g_head)] = -1
                                    else:
                                        g_tail = -1
                                    where[ix(old)] = 0
                                    g_len -= 1
                                gprev[ix(v)] = g_tail
                                gnext[ix(v)] = -1
                                if g_tail >= 0:
                                    gnext[ix(g_tail)] = v
                                else:
                                    g_head = v
                                g_tail = v
                                g_len += 1
                                where[ix(v)] = 1
                            break
                freq[ix(h)] = 0
                if hit_on_ghost or (not has_evicted and s_len >= small_cap):
                    t = m_head + m_len
                    if t >= slots:
                        t -= slots
                    ring_m[ix(t)] = h
                    m_len += 1
                    where[ix(h)] = 3
                else:
                    t = s_head + s_len
                    if t >= slots:
                        t -= slots
                    ring_s[ix(t)] = h
                    s_len += 1
                    where[ix(h)] = 2
            # The request's temporary blocks still resident leave S or M (the rule's; none under
            # the specification's), the others keep their order: the entries after one move up
            # a slot (it is its queue's tail, or near it: see above).
            for j in range(release_from(rule, block_ids, start, end), end):
                h = block_ids[ix(j)]
                w = where[ix(h)]
                if w < 2:
                    continue
                where[ix(h)] = 0
                in_s = w == 2
                ring = ring_s if in_s else ring_m
                pos = (s_head + s_len - 1) if in_s else (m_head + m_len - 1)
                if pos >= slots:
                    pos -= slots
                carry = ring[ix(pos)]
                while carry != h:
                    pos = pos - 1 if pos > 0 else slots - 1
                    x = ring[ix(pos)]
                    ring[ix(pos)] = carry
                    carry = x
                if in_s:
                    s_len -= 1
                else:
                    m_len -= 1
        cnt[0] += hits
        cnt[1] += evictions
        cnt[2] += ghost_hits
        cnt[3] += promotions
        return s_len + m_len

    return s3fifo_lcs_kernel


def _kernel_args(p: S3FIFOLCSParams) -> tuple[int, int, int, int, int]:
    return (p.capacity, p.small_cap, p.main_cap, p.ghost_cap, p.move_to_main_threshold)


def _kernel_state(p: S3FIFOLCSParams, n_blocks: int) -> tuple[np.ndarray, ...]:
    """``where`` (nowhere) and ``freq`` per block, zeroed; the ghost's links per block and the
    rings of S and M (``capacity + 1`` slots each), written before they are read."""
    slots = p.capacity + 1
    return (
        zeroed_state(n_blocks, np.int8),
        zeroed_state(n_blocks, np.int64),
        np.empty(n_blocks, np.int32),
        np.empty(n_blocks, np.int32),
        np.empty(slots, np.int32),
        np.empty(slots, np.int32),
    )


def _state_bytes(p: S3FIFOLCSParams, n_blocks: int, n_accesses: int) -> int:
    """The larger of the fast kernel's :func:`_kernel_state` (``where``, int8, ``freq``,
    int64, the ghost's two int32 links per block, and two int32 rings of ``capacity + 1``
    slots) and the steps' :func:`s3fifo_lcs_state` (``link``, ``where`` and ``freq`` per id)."""
    fast = (1 + 8 + 4 + 4) * n_blocks + 2 * 4 * (p.capacity + 1)
    return max(fast, link_bytes(n_blocks) + 9 * n_blocks)


SPEC = register(
    S3FIFOLCSParams,
    S3FIFOLCSReference,
    STEPS,
    fast_kernel=s3fifo_lcs_fused,
    kernel_args=_kernel_args,
    kernel_state=_kernel_state,
    state_bytes=_state_bytes,
)
