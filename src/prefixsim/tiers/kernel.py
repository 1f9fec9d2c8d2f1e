"""The compiled hierarchy replay: one numba kernel, every tier's state in flat arrays.

The single-cache kernels each replay a whole trace in one function with scalar locals, which
cannot be composed. Tiers need a policy's steps (hit, admit returning its victim, remove)
callable per tier, so this kernel holds the state of tier ``t`` in column ``t`` of per-block
arrays and dispatches every step on a small policy code (:data:`CODES`). The step functions
are ``inline="always"`` and the loop that calls them is compiled without numba's runtime
(``_nrt=False``, see :func:`_replay`), so passing arrays to them costs no reference counting
(the reason the single-cache S3FIFO kernel is one function).

State, for block ``h`` in tier ``t``, in ``st[h, t] = (where, aux, prev, next)``: ``where``
(0 absent; 1 resident, S3FIFO: in S; 2 S3FIFO: in M; 3 S3FIFO: in the ghost), ``aux`` (S3FIFO
freq, SIEVE visited bit, LFU count) and its links in the one list of that tier holding it; one
row, so a block's state in every tier shares a cache line or two (10% faster than three
arrays). Per tier, list ``l`` runs from ``lh[t, l]`` (oldest) to ``lt[t, l]`` (newest) with
``ln[t, l]`` entries; LRU, FIFO and SIEVE use list 0, S3FIFO lists 0 (S), 1 (M) and 2 (G), LFU
one list per count value in ``bh``/``bt`` (and ``ln[t, 0]`` for its size). Lists replace the
rings of the single-cache FIFO and S3FIFO kernels because a block promoted to a faster tier
leaves from the middle (circular lists, whose turn would make S3FIFO's second chance as cheap
as the ring's, measured 15% slower). Every admission of these policies evicts at most one
block (S3FIFO: an S drain pops one head, and admit_to_M evicts exactly one), so a step returns
one victim or -1.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ..policies.base import ix

CODES: dict[str, int] = {"LRU": 0, "FIFO": 1, "SIEVE": 2, "LFU": 3, "S3FIFO": 4}
"""Policies the kernel runs, in any tier."""
_LRU, _FIFO, _SIEVE, _LFU, _S3FIFO = 0, 1, 2, 3, 4
_ABSENT, _RES, _IN_M, _IN_G = 0, 1, 2, 3  # _RES is also S3FIFO's S
_S, _M, _G = 0, 1, 2  # S3FIFO's lists
_W, _A, _P, _N = 0, 1, 2, 3  # fields of st[h, t]: where, aux, prev, next
_HITS, _ADMISSIONS, _DEMOTIONS_IN, _EVICTIONS, _PROMOTIONS_OUT = 0, 1, 2, 3, 4


# Every subscript in the step functions and the replay loop is ``a[ix(i)]``
# (:data:`~prefixsim.policies.base.ix`), so numba skips its negative-index fix-up: block ids,
# tier numbers, list numbers (S3FIFO's ``where - 1`` of a resident block is 0 or 1), LFU counts
# (>= 1) and ``offsets`` positions are non-negative, and an end of a list, -1, is tested before it
# is used as an index, or the list is known not to be empty there (a full tier, or a SIEVE hand
# that falls back to the oldest entry). Measured 1.06-1.09x (docs/performance.md); a flat ``st``
# with shifts instead of the 3-d array's multiplications measured no faster and was not kept.


@njit(inline="always")
def _unlink(st, heads, tails, t, lst, h):
    p = st[ix(h), ix(t), _P]
    n = st[ix(h), ix(t), _N]
    if p >= 0:
        st[ix(p), ix(t), _N] = n
    else:
        heads[ix(t), ix(lst)] = n
    if n >= 0:
        st[ix(n), ix(t), _P] = p
    else:
        tails[ix(t), ix(lst)] = p


@njit(inline="always")
def _pop_head(st, heads, tails, t, lst):
    """Unlink and return the oldest entry of non-empty list ``lst`` of tier ``t``."""
    v = heads[ix(t), ix(lst)]
    n = st[ix(v), ix(t), _N]
    heads[ix(t), ix(lst)] = n
    if n >= 0:
        st[ix(n), ix(t), _P] = -1
    else:
        tails[ix(t), ix(lst)] = -1
    return v


@njit(inline="always")
def _push(st, heads, tails, t, lst, h):
    """Append ``h`` at the newest end of list ``lst`` of tier ``t``."""
    old = tails[ix(t), ix(lst)]
    st[ix(h), ix(t), _P] = old
    st[ix(h), ix(t), _N] = -1
    if old >= 0:
        st[ix(old), ix(t), _N] = h
    else:
        heads[ix(t), ix(lst)] = h
    tails[ix(t), ix(lst)] = h


@njit(inline="always")
def _hit(code, t, h, st, bh, bt, min_f, max_freq, lh, lt):
    """The access rule of a block resident in tier ``t``."""
    if code == _LRU:
        if lt[ix(t), 0] != h:
            _unlink(st, lh, lt, t, 0, h)
            _push(st, lh, lt, t, 0, h)
    elif code == _SIEVE:
        st[ix(h), ix(t), _A] = 1
    elif code == _LFU:
        f = st[ix(h), ix(t), _A]
        _unlink(st, bh, bt, t, f, h)
        if f == min_f[ix(t)] and bh[ix(t), ix(f)] < 0:
            min_f[ix(t)] = f + 1
        st[ix(h), ix(t), _A] = f + 1
        _push(st, bh, bt, t, f + 1, h)
    elif code == _S3FIFO:
        f = st[ix(h), ix(t), _A] + 1
        st[ix(h), ix(t), _A] = f if f < max_freq else max_freq
    # FIFO: a hit changes nothing


@njit(inline="always")
def _remove(code, t, h, st, bh, bt, lh, lt, ln, hand):
    """Take resident ``h`` out of tier ``t``: no ghost entry, not an eviction."""
    if code == _LFU:
        _unlink(st, bh, bt, t, st[ix(h), ix(t), _A], h)
        ln[ix(t), 0] -= 1  # min_f stays a lower bound of the smallest count
    else:
        lst = st[ix(h), ix(t), _W] - 1  # S3FIFO: S is list 0, M list 1; the others use list 0
        if code == _SIEVE and hand[ix(t)] == h:
            hand[ix(t)] = st[ix(h), ix(t), _N]  # as after evicting h: toward the newer neighbour
        _unlink(st, lh, lt, t, lst, h)
        ln[ix(t), ix(lst)] -= 1
    st[ix(h), ix(t), _W] = _ABSENT


@njit(inline="always")
def _admit(
    code, t, h, st, bh, bt, min_f, lh, lt, ln, hand,
    cap, small_cap, max_freq, ghost_freq,
):  # fmt: skip
    """The miss path of tier ``t`` for ``h`` (not resident there); returns its victim or -1."""
    victim = -1
    if code == _LRU or code == _FIFO:  # noqa: SIM109 (plain compares in the hot loop)
        if ln[ix(t), 0] >= cap:
            victim = _pop_head(st, lh, lt, t, 0)
            st[ix(victim), ix(t), _W] = _ABSENT
            ln[ix(t), 0] -= 1
        _push(st, lh, lt, t, 0, h)
        st[ix(h), ix(t), _W] = _RES
        ln[ix(t), 0] += 1
    elif code == _SIEVE:
        # The paper's list from its tail (oldest, lh) to its head (newest, lt): the paper's
        # o.prev (toward the head) is st[o, t, _N].
        if ln[ix(t), 0] >= cap:
            o = hand[ix(t)]
            if o < 0:
                o = lh[ix(t), 0]
            while st[ix(o), ix(t), _A] == 1:
                st[ix(o), ix(t), _A] = 0
                o = st[ix(o), ix(t), _N]
                if o < 0:
                    o = lh[ix(t), 0]
            hand[ix(t)] = st[ix(o), ix(t), _N]
            _unlink(st, lh, lt, t, 0, o)
            st[ix(o), ix(t), _W] = _ABSENT
            ln[ix(t), 0] -= 1
            victim = o
        _push(st, lh, lt, t, 0, h)
        st[ix(h), ix(t), _W] = _RES
        st[ix(h), ix(t), _A] = 0
        ln[ix(t), 0] += 1
    elif code == _LFU:
        if ln[ix(t), 0] >= cap:
            f = min_f[ix(t)]
            while bh[ix(t), ix(f)] < 0:  # stale after a removal emptied the lowest bucket
                f += 1
            victim = _pop_head(st, bh, bt, t, f)
            st[ix(victim), ix(t), _W] = _ABSENT
            ln[ix(t), 0] -= 1
        min_f[ix(t)] = 1
        st[ix(h), ix(t), _A] = 1
        _push(st, bh, bt, t, 1, h)
        st[ix(h), ix(t), _W] = _RES
        ln[ix(t), 0] += 1
    else:  # S3FIFO, as in its single-cache kernel, with lists for S and M
        main_cap = cap - small_cap
        to_g = -1
        to_m = -1
        to_m_freq = 0
        to_s = -1
        if st[ix(h), ix(t), _W] == _IN_G:
            _unlink(st, lh, lt, t, _G, h)
            ln[ix(t), _G] -= 1
            to_m = h
            to_m_freq = ghost_freq
        else:
            to_s = h
        while True:
            if to_g >= 0:
                if ln[ix(t), _G] >= main_cap:
                    old = _pop_head(st, lh, lt, t, _G)
                    st[ix(old), ix(t), _W] = _ABSENT
                    ln[ix(t), _G] -= 1
                _push(st, lh, lt, t, _G, to_g)
                ln[ix(t), _G] += 1
                st[ix(to_g), ix(t), _W] = _IN_G
                to_g = -1
            if to_m >= 0:
                while ln[ix(t), _M] >= main_cap:
                    v = _pop_head(st, lh, lt, t, _M)
                    vf = st[ix(v), ix(t), _A]
                    if vf >= 1:
                        st[ix(v), ix(t), _A] = vf - 1
                        _push(st, lh, lt, t, _M, v)  # second chance: requeued at the tail
                        continue
                    ln[ix(t), _M] -= 1
                    victim = v
                    to_g = v
                    break
                _push(st, lh, lt, t, _M, to_m)
                ln[ix(t), _M] += 1
                st[ix(to_m), ix(t), _W] = _IN_M
                st[ix(to_m), ix(t), _A] = to_m_freq
                to_m = -1
                continue
            if to_s < 0:
                break
            if ln[ix(t), _S] >= small_cap:
                v = _pop_head(st, lh, lt, t, _S)
                ln[ix(t), _S] -= 1
                vf = st[ix(v), ix(t), _A]
                if vf >= 1:
                    to_m = v
                    to_m_freq = vf
                else:
                    victim = v
                    to_g = v
                continue
            _push(st, lh, lt, t, _S, to_s)
            ln[ix(t), _S] += 1
            st[ix(to_s), ix(t), _W] = _RES
            st[ix(to_s), ix(t), _A] = 0
            break
    return victim


@njit(cache=True)
def tiers_kernel(
    block_ids, offsets, input_lengths, n_blocks, block_size, exclusive,
    codes, caps, small_caps, max_freqs, ghost_freqs, tier_hit_tokens, tcnt, occupancy,
):  # fmt: skip
    """Replay the trace through the hierarchy (``docs/tiers.md``); fills ``tier_hit_tokens``
    ``[tier, request]``, the tier counters ``tcnt[tier, counter]`` and ``occupancy[tier]``;
    returns the hit tokens per request."""
    n_tiers = codes.shape[0]
    st = np.zeros((n_blocks, n_tiers, 4), np.int32)  # where 0: nothing resident anywhere
    lh = np.full((n_tiers, 3), -1, np.int64)
    lt = np.full((n_tiers, 3), -1, np.int64)
    ln = np.zeros((n_tiers, 3), np.int64)
    hand = np.full(n_tiers, -1, np.int64)
    min_f = np.ones(n_tiers, np.int64)
    # LFU buckets, one per count value: a count grows only on hits, so it stays below the
    # block's occurrences in the trace + 2.
    n_buckets = 1
    for t in range(n_tiers):
        if codes[t] == _LFU:
            occ = np.zeros(n_blocks, np.int64)
            for i in range(block_ids.shape[0]):
                occ[block_ids[i]] += 1
            n_buckets = occ.max() + 3 if n_blocks > 0 else 3
            break
    bh = np.full((n_tiers, n_buckets), -1, np.int64)
    bt = np.full((n_tiers, n_buckets), -1, np.int64)
    hit_tokens = np.empty(input_lengths.shape[0], np.int64)
    _replay(
        block_ids, offsets, input_lengths, block_size, exclusive,
        codes, caps, small_caps, max_freqs, ghost_freqs, tier_hit_tokens, tcnt, occupancy,
        st, lh, lt, ln, hand, min_f, bh, bt, hit_tokens,
    )  # fmt: skip
    return hit_tokens


@njit(cache=True, _nrt=False)  # type: ignore[call-overload]  # numba's private flag
def _replay(
    block_ids, offsets, input_lengths, block_size, exclusive,
    codes, caps, small_caps, max_freqs, ghost_freqs, tier_hit_tokens, tcnt, occupancy,
    st, lh, lt, ln, hand, min_f, bh, bt, hit_tokens,
):  # fmt: skip
    """The replay loop over state allocated by :func:`tiers_kernel`. Compiled without numba's
    runtime (``_nrt=False``): it allocates nothing, so the arrays it passes to the step
    functions carry no reference counts (with them, every step call cost two atomic
    operations per array argument, and the kernel ran 30-100x slower)."""
    n_tiers = codes.shape[0]
    n_requests = input_lengths.shape[0]
    for r in range(n_requests):
        start = offsets[ix(r)]
        end = offsets[ix(r + 1)]
        length = input_lengths[ix(r)]
        # The prefix scan at arrival over the union; block j to the fastest tier holding it.
        k = start
        while k < end:
            h = block_ids[ix(k)]
            t = 0
            while t < n_tiers:
                w = st[ix(h), ix(t), _W]
                if w == _RES or w == _IN_M:  # noqa: SIM109 (plain compares in the hot loop)
                    break
                t += 1
            if t == n_tiers:
                break
            lo = (k - start) * block_size
            hi = lo + block_size
            if hi > length:
                hi = length
            if hi > lo:
                tier_hit_tokens[ix(t), ix(r)] += hi - lo
            k += 1
        hit_tokens[ix(r)] = min((k - start) * block_size, length)
        for i in range(start, end):
            h = block_ids[ix(i)]
            t = 0
            while t < n_tiers:
                w = st[ix(h), ix(t), _W]
                if w == _RES or w == _IN_M:  # noqa: SIM109
                    break
                t += 1
            if t < n_tiers:
                tcnt[ix(t), _HITS] += 1
            if exclusive:
                if t == 0:
                    _hit(codes[0], 0, h, st, bh, bt, min_f, max_freqs[0], lh, lt)
                    continue
                if t < n_tiers:
                    _remove(codes[ix(t)], t, h, st, bh, bt, lh, lt, ln, hand)
                    tcnt[ix(t), _PROMOTIONS_OUT] += 1
                # Admit to tier 0; each victim is demoted one tier down (dropped from the last).
                u = 0
                x = h
                tcnt[0, _ADMISSIONS] += 1
                while True:
                    v = _admit(
                        codes[ix(u)], u, x, st, bh, bt, min_f, lh, lt, ln, hand,
                        caps[ix(u)], small_caps[ix(u)], max_freqs[ix(u)], ghost_freqs[ix(u)],
                    )  # fmt: skip
                    if v < 0:
                        break
                    tcnt[ix(u), _EVICTIONS] += 1
                    u += 1
                    if u == n_tiers:
                        break
                    tcnt[ix(u), _ADMISSIONS] += 1
                    tcnt[ix(u), _DEMOTIONS_IN] += 1
                    x = v
            else:
                if t < n_tiers:
                    _hit(codes[ix(t)], t, h, st, bh, bt, min_f, max_freqs[ix(t)], lh, lt)
                    if t > 0:
                        tcnt[ix(t), _PROMOTIONS_OUT] += 1
                for u in range(t):  # a miss (t == n_tiers) goes to every tier
                    tcnt[ix(u), _ADMISSIONS] += 1
                    v = _admit(
                        codes[ix(u)], u, h, st, bh, bt, min_f, lh, lt, ln, hand,
                        caps[ix(u)], small_caps[ix(u)], max_freqs[ix(u)], ghost_freqs[ix(u)],
                    )  # fmt: skip
                    if v >= 0:
                        tcnt[ix(u), _EVICTIONS] += 1
    for t in range(n_tiers):
        occupancy[t] = ln[t, 0] + (ln[t, _M] if codes[t] == _S3FIFO else 0)
