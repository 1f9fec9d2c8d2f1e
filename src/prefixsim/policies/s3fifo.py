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
from typing import ClassVar

import numpy as np
from numba import njit

from ..errors import ParameterError
from .base import (
    COMMON_COUNTERS,
    Check,
    PolicyParams,
    PolicySpec,
    ReferencePolicy,
    check_int,
    register,
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
class S3FIFOParams(PolicyParams):
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
    def main_cap(self) -> int:
        return self.capacity - self.small_cap

    @property
    def ghost_cap(self) -> int:
        # Ghost is sized like main, not like small.
        return self.main_cap


class S3FIFOReference(ReferencePolicy):
    """Line-by-line transcription of the pseudocode in the module docstring.

    Each queue is an ``OrderedDict`` iterated head (oldest) to tail (newest); S and M map a block
    hash to its freq, G maps a hash to ``None``. A hash is in at most one of the three.
    """

    counter_names = (*COMMON_COUNTERS, "ghost_hits", "promotions")
    reports_victims = True
    removable = True

    def __init__(self, params: S3FIFOParams) -> None:
        super().__init__(params)
        self.small_cap = params.small_cap
        self.main_cap = params.main_cap
        self.ghost_cap = params.ghost_cap
        self.max_freq = params.max_freq
        self.ghost_freq = params.ghost_freq
        self.S: OrderedDict[Hashable, int] = OrderedDict()
        self.M: OrderedDict[Hashable, int] = OrderedDict()
        self.G: OrderedDict[Hashable, None] = OrderedDict()

    def is_resident(self, h: Hashable) -> bool:
        return h in self.S or h in self.M  # G is metadata only

    def resident_count(self) -> int:
        return len(self.S) + len(self.M)  # never |G|

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
                self.evicted(victim)
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
            self.evicted(victim)
            self.insert_to_G(victim)
            break
        self.M[h] = freq

    def remove(self, h: Hashable) -> None:
        # Leaves S or M without a ghost entry: the block moved to a faster tier.
        if h in self.S:
            del self.S[h]
        else:
            del self.M[h]

    def insert_to_G(self, h: Hashable) -> None:
        if h in self.G:
            del self.G[h]
        elif len(self.G) >= self.ghost_cap:
            self.G.popitem(last=False)
        self.G[h] = None


# --- compiled kernel ------------------------------------------------------------------------
# Per-block state, indexed by dense block id: ``where`` (which queue holds the block) and
# ``freq``. S and M are ring buffers of exactly small_cap / main_cap slots: only their heads are
# removed, so a ring suffices, and requeueing the head of a full M is just advancing the head.
# G also loses entries from the middle (a ghost hit), so it is a doubly linked list threaded
# through ``g_link[:, 0]`` (prev) / ``g_link[:, 1]`` (next) from ``g_head`` (oldest) to
# ``g_tail``; -1 ends it.
# Everything is one function with scalar locals: numba keeps array arguments of helper calls
# reference-counted (atomic increments per call), which made a helper-per-rule kernel 30x slower.

_NONE, _IN_S, _IN_M, _IN_G = 0, 1, 2, 3


@njit(cache=True, nogil=True)
def s3fifo_kernel(
    block_ids, offsets, input_lengths, n_blocks, block_size, cnt,
    small_cap, main_cap, max_freq, ghost_freq,
):  # fmt: skip
    where = np.zeros(n_blocks, np.int8)
    freq = np.zeros(n_blocks, np.int32)
    g_link = np.empty((n_blocks, 2), np.int32)  # [prev, next]: one cache line per block
    s_ring = np.empty(small_cap, np.int32)
    m_ring = np.empty(main_cap, np.int32)
    s_head = s_len = m_head = m_len = g_len = 0
    g_head = g_tail = -1
    ghost_cap = main_cap
    hits = evictions = ghost_hits = promotions = 0
    n_requests = input_lengths.shape[0]
    hit_tokens = np.empty(n_requests, np.int64)
    for r in range(n_requests):
        start = offsets[r]
        end = offsets[r + 1]
        # Longest resident prefix at arrival: stops at the first block outside S ∪ M.
        k = start
        while k < end:
            w = where[block_ids[k]]
            if w != _IN_S and w != _IN_M:
                break
            k += 1
        hit_tokens[r] = min((k - start) * block_size, input_lengths[r])
        # Then every block of the request is accessed, hit or miss, in order.
        for i in range(start, end):
            h = block_ids[i]
            w = where[h]
            if w == _IN_S or w == _IN_M:  # noqa: SIM109 (plain compares in the hot loop)
                hits += 1
                f = freq[h] + 1
                freq[h] = f if f < max_freq else max_freq
                continue
            # A miss: a ghost hit goes to M with ghost_freq, a new block to S. The admission is
            # run as a small loop over pending moves so that each rule's code appears once:
            # to_g (insert_to_G), to_m (admit_to_M), to_s (admit_to_S, draining S first).
            to_g = -1
            to_m = -1
            to_m_freq = 0
            to_s = -1
            if w == _IN_G:
                ghost_hits += 1
                p = g_link[h, 0]
                n = g_link[h, 1]
                if p >= 0:
                    g_link[p, 1] = n
                else:
                    g_head = n
                if n >= 0:
                    g_link[n, 0] = p
                else:
                    g_tail = p
                g_len -= 1
                to_m = h
                to_m_freq = ghost_freq
            else:
                to_s = h
            while True:
                if to_g >= 0:
                    # insert_to_G: victims come from S or M, so they are never already in G.
                    if g_len >= ghost_cap:
                        old = g_head
                        g_head = g_link[old, 1]
                        if g_head >= 0:
                            g_link[g_head, 0] = -1
                        else:
                            g_tail = -1
                        where[old] = _NONE
                        g_len -= 1
                    g_link[to_g, 0] = g_tail
                    g_link[to_g, 1] = -1
                    if g_tail >= 0:
                        g_link[g_tail, 1] = to_g
                    else:
                        g_head = to_g
                    g_tail = to_g
                    g_len += 1
                    where[to_g] = _IN_G
                    to_g = -1
                if to_m >= 0:
                    # admit_to_M: second chance until exactly one block is evicted to G.
                    while m_len >= main_cap:
                        victim = m_ring[m_head]
                        m_head += 1
                        if m_head == main_cap:
                            m_head = 0
                        vf = freq[victim]
                        if vf >= 1:
                            # M is full, so its tail slot is the old head slot: the victim is
                            # already requeued at the tail by advancing the head.
                            freq[victim] = vf - 1
                            continue
                        m_len -= 1
                        evictions += 1
                        to_g = victim  # inserted at the top of the next round
                        break
                    pos = m_head + m_len
                    if pos >= main_cap:
                        pos -= main_cap
                    m_ring[pos] = to_m
                    m_len += 1
                    where[to_m] = _IN_M
                    freq[to_m] = to_m_freq
                    to_m = -1
                    continue
                if to_s < 0:
                    break
                if s_len >= small_cap:
                    # admit_to_S drains S's head: warm to M (freq kept), cold to G.
                    victim = s_ring[s_head]
                    s_head += 1
                    if s_head == small_cap:
                        s_head = 0
                    s_len -= 1
                    vf = freq[victim]
                    if vf >= 1:
                        promotions += 1
                        to_m = victim
                        to_m_freq = vf
                    else:
                        evictions += 1
                        to_g = victim
                    continue
                pos = s_head + s_len
                if pos >= small_cap:
                    pos -= small_cap
                s_ring[pos] = to_s
                s_len += 1
                where[to_s] = _IN_S
                freq[to_s] = 0
                break
    cnt[0] += hits
    cnt[1] += evictions
    cnt[2] += ghost_hits
    cnt[3] += promotions
    return hit_tokens, s_len + m_len


def _kernel_args(p: S3FIFOParams) -> tuple[int, int, int, int]:
    return (p.small_cap, p.main_cap, p.max_freq, p.ghost_freq)


SPEC = register(
    PolicySpec(
        name="S3FIFO",
        params_type=S3FIFOParams,
        reference=S3FIFOReference,
        kernel=s3fifo_kernel,
        kernel_args=_kernel_args,
    )
)
