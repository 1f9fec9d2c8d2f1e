"""Cluster kernels for the routers that look at the caches or the load (``least_loaded``,
``kv_aware``): every instance's policy state in instance-indexed arrays, routing, replay and
the FCFS load model in one compiled pass.

Per-(instance, block) state (residency, links, frequency) is indexed by a dense *pair id*,
numbered in order of the pair's first access, like the single-cache kernels' dense block ids:
``pair[block * n_instances + i]`` holds the pair id + 1 (0: instance ``i`` never accessed the
block, so it is not resident there). There are at most as many pairs as block accesses, so the
state stays as compact as one cache's instead of ``n_instances * n_blocks`` entries scattered
over tens of MB (which cost a cache miss per access: 10x slower at 16 instances), and the
table keeps a block's entries for all instances in one cache line for ``kv_aware``'s probes.
Per-instance scalars (list heads, queue lengths) are arrays indexed by ``i``, loaded into locals
for the chosen instance and stored back after its request. The access code of each policy is
the one of its single-cache kernel (``prefixsim.policies.lru`` / ``s3fifo``) on pair ids; the
routing code is the definition of ``docs/cluster.md``. Everything is one function per policy
with scalar locals (numba reference-counts array arguments of helper calls, which made
helper-per-rule kernels many times slower); the only helper, :func:`prefill_seconds`, takes
scalars.

Kernel contract::

    kernel(block_ids, offsets, input_lengths, output_lengths, arrival, n_blocks, block_size,
           n_instances, router_code, overlap_weight, decode_s, consts, cnt, pair, *policy_args)
        -> (instance int32[n], hit_tokens int64[n], delay, prefill, service float64[n],
            final_cache_blocks int64[n_instances])

``cnt`` is int64 ``[n_instances, len(counter_names)]``, zeroed, filled in place; ``pair`` is
``n_blocks * n_instances`` zeros (int32, or int64 when the accesses could pass int32), used in
place.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit

from ..policies.base import ix
from .load import prefill_seconds
from .routers import KERNEL_KV_AWARE

# Every subscript in the request loop is ``a[ix(i)]`` (:data:`~prefixsim.policies.base.ix`), so
# numba skips its negative-index fix-up: request numbers, instance numbers (``best`` is -1 only
# before the first instance is looked at), pair ids (``pair``'s 0, no pair, gives -1 and is
# tested before it is used), ring positions and ``pair`` slots are non-negative, and an end of a
# list, -1, is tested before it is used, or the list is known not to be empty there (a full
# cache). Measured 1.07-1.17x (docs/performance.md).


@njit(cache=True)
def lru_cluster_kernel(
    block_ids, offsets, input_lengths, output_lengths, arrival, n_blocks, block_size,
    n_instances, router_code, overlap_weight, decode_s, consts, cnt, pair, capacity,
):  # fmt: skip
    bs, two_p, coeff, eff, kvb, bw = consts
    # Per-(instance, block) state is indexed by a dense pair id (see the module docstring).
    max_pairs = min(block_ids.shape[0], n_instances * n_blocks)
    resident = np.zeros(max_pairs, np.bool_)
    prev = np.empty(max_pairs, pair.dtype)
    nxt = np.empty(max_pairs, pair.dtype)
    n_pairs = 0
    heads = np.full(n_instances, -1, np.int64)
    tails = np.full(n_instances, -1, np.int64)
    sizes = np.zeros(n_instances, np.int64)
    free = np.full(n_instances, -np.inf)  # idle until given work (timestamps may be < 0)
    n_requests = input_lengths.shape[0]
    instance = np.empty(n_requests, np.int32)
    hit_tokens = np.empty(n_requests, np.int64)
    delay = np.empty(n_requests, np.float64)
    prefill = np.empty(n_requests, np.float64)
    service = np.empty(n_requests, np.float64)
    for r in range(n_requests):
        start = offsets[ix(r)]
        end = offsets[ix(r + 1)]
        n = input_lengths[ix(r)]
        t = arrival[ix(r)]
        # Route: the lowest cost, ties to the lowest index (strict <).
        best = -1
        best_cost = 0.0
        best_hit = 0
        memo_hit = -1
        memo_p = 0.0
        for i in range(n_instances):
            load = (free[ix(i)] if free[ix(i)] > t else t) - t
            cost = load
            hit = 0
            if router_code == KERNEL_KV_AWARE:
                k = start
                while k < end:
                    q = pair[ix(block_ids[ix(k)] * n_instances + i)] - 1
                    if q < 0 or not resident[ix(q)]:
                        break
                    k += 1
                hit = min((k - start) * block_size, n)
                if hit != memo_hit:  # instances often share a prefix length: reuse its time
                    memo_hit = hit
                    memo_p = prefill_seconds(n, hit, bs, two_p, coeff, eff, kvb, bw)
                cost = overlap_weight * memo_p + load
            if best < 0 or cost < best_cost:
                best = i
                best_cost = cost
                best_hit = hit
        i = best
        if router_code != KERNEL_KV_AWARE:  # least_loaded: the prefix of the chosen one only
            k = start
            while k < end:
                q = pair[ix(block_ids[ix(k)] * n_instances + i)] - 1
                if q < 0 or not resident[ix(q)]:
                    break
                k += 1
            best_hit = min((k - start) * block_size, n)
        instance[ix(r)] = i
        hit_tokens[ix(r)] = best_hit
        # Load model: FCFS on instance i.
        p = prefill_seconds(n, best_hit, bs, two_p, coeff, eff, kvb, bw)
        begin = free[ix(i)] if free[ix(i)] > t else t
        delay[ix(r)] = begin - t
        prefill[ix(r)] = p
        service[ix(r)] = p + float(output_lengths[ix(r)]) * decode_s
        free[ix(i)] = begin + service[ix(r)]
        # Access every block of the request in instance i's LRU (lru_kernel, on pair ids).
        head = heads[ix(i)]
        tail = tails[ix(i)]
        size = sizes[ix(i)]
        hits = 0
        evictions = 0
        for j in range(start, end):
            slot = block_ids[ix(j)] * n_instances + i
            h = pair[ix(slot)] - 1
            if h < 0:  # the block's first access on instance i: a new pair, not resident
                h = n_pairs
                n_pairs += 1
                pair[ix(slot)] = h + 1
            if resident[ix(h)]:
                hits += 1
                if h == tail:
                    continue
                p_ = prev[ix(h)]
                n_ = nxt[ix(h)]
                if p_ >= 0:
                    nxt[ix(p_)] = n_
                else:
                    head = n_
                prev[ix(n_)] = p_
            else:
                if size >= capacity:
                    victim = head
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
            prev[ix(h)] = tail
            nxt[ix(h)] = -1
            if tail >= 0:
                nxt[ix(tail)] = h
            else:
                head = h
            tail = h
        heads[ix(i)] = head
        tails[ix(i)] = tail
        sizes[ix(i)] = size
        cnt[ix(i), 0] += hits
        cnt[ix(i), 1] += evictions
    return instance, hit_tokens, delay, prefill, service, sizes


_NONE, _IN_S, _IN_M, _IN_G = 0, 1, 2, 3


@njit(cache=True)
def s3fifo_cluster_kernel(
    block_ids, offsets, input_lengths, output_lengths, arrival, n_blocks, block_size,
    n_instances, router_code, overlap_weight, decode_s, consts, cnt, pair,
    small_cap, main_cap, max_freq, ghost_freq,
):  # fmt: skip
    bs, two_p, coeff, eff, kvb, bw = consts
    # Per-(instance, block) state is indexed by a dense pair id (see the module docstring).
    max_pairs = min(block_ids.shape[0], n_instances * n_blocks)
    n_pairs = 0
    where = np.zeros(max_pairs, np.int8)
    freq = np.zeros(max_pairs, np.int32)
    g_link = np.empty((max_pairs, 2), pair.dtype)  # [prev, next] pair ids within the instance
    s_rings = np.empty((n_instances, small_cap), pair.dtype)
    m_rings = np.empty((n_instances, main_cap), pair.dtype)
    s_heads = np.zeros(n_instances, np.int64)
    s_lens = np.zeros(n_instances, np.int64)
    m_heads = np.zeros(n_instances, np.int64)
    m_lens = np.zeros(n_instances, np.int64)
    g_lens = np.zeros(n_instances, np.int64)
    g_heads = np.full(n_instances, -1, np.int64)
    g_tails = np.full(n_instances, -1, np.int64)
    ghost_cap = main_cap
    free = np.full(n_instances, -np.inf)  # idle until given work (timestamps may be < 0)
    n_requests = input_lengths.shape[0]
    instance = np.empty(n_requests, np.int32)
    hit_tokens = np.empty(n_requests, np.int64)
    delay = np.empty(n_requests, np.float64)
    prefill = np.empty(n_requests, np.float64)
    service = np.empty(n_requests, np.float64)
    for r in range(n_requests):
        start = offsets[ix(r)]
        end = offsets[ix(r + 1)]
        n = input_lengths[ix(r)]
        t = arrival[ix(r)]
        # Route: the lowest cost, ties to the lowest index (strict <).
        best = -1
        best_cost = 0.0
        best_hit = 0
        memo_hit = -1
        memo_p = 0.0
        for i in range(n_instances):
            load = (free[ix(i)] if free[ix(i)] > t else t) - t
            cost = load
            hit = 0
            if router_code == KERNEL_KV_AWARE:
                k = start
                while k < end:
                    q = pair[ix(block_ids[ix(k)] * n_instances + i)] - 1
                    if q < 0 or (where[ix(q)] != _IN_S and where[ix(q)] != _IN_M):
                        break
                    k += 1
                hit = min((k - start) * block_size, n)
                if hit != memo_hit:  # instances often share a prefix length: reuse its time
                    memo_hit = hit
                    memo_p = prefill_seconds(n, hit, bs, two_p, coeff, eff, kvb, bw)
                cost = overlap_weight * memo_p + load
            if best < 0 or cost < best_cost:
                best = i
                best_cost = cost
                best_hit = hit
        i = best
        if router_code != KERNEL_KV_AWARE:  # least_loaded: the prefix of the chosen one only
            k = start
            while k < end:
                q = pair[ix(block_ids[ix(k)] * n_instances + i)] - 1
                if q < 0 or (where[ix(q)] != _IN_S and where[ix(q)] != _IN_M):
                    break
                k += 1
            best_hit = min((k - start) * block_size, n)
        instance[ix(r)] = i
        hit_tokens[ix(r)] = best_hit
        # Load model: FCFS on instance i.
        p = prefill_seconds(n, best_hit, bs, two_p, coeff, eff, kvb, bw)
        begin = free[ix(i)] if free[ix(i)] > t else t
        delay[ix(r)] = begin - t
        prefill[ix(r)] = p
        service[ix(r)] = p + float(output_lengths[ix(r)]) * decode_s
        free[ix(i)] = begin + service[ix(r)]
        # Access every block in instance i's S3FIFO (s3fifo_kernel, on pair ids).
        s_ring = s_rings[ix(i)]
        m_ring = m_rings[ix(i)]
        s_head = s_heads[ix(i)]
        s_len = s_lens[ix(i)]
        m_head = m_heads[ix(i)]
        m_len = m_lens[ix(i)]
        g_len = g_lens[ix(i)]
        g_head = g_heads[ix(i)]
        g_tail = g_tails[ix(i)]
        hits = evictions = ghost_hits = promotions = 0
        for j in range(start, end):
            slot = block_ids[ix(j)] * n_instances + i
            h = pair[ix(slot)] - 1
            if h < 0:  # the block's first access on instance i: a new pair, not resident
                h = n_pairs
                n_pairs += 1
                pair[ix(slot)] = h + 1
            w = where[ix(h)]
            if w == _IN_S or w == _IN_M:  # noqa: SIM109
                hits += 1
                f = freq[ix(h)] + 1
                freq[ix(h)] = f if f < max_freq else max_freq
                continue
            to_g = -1
            to_m = -1
            to_m_freq = 0
            to_s = -1
            if w == _IN_G:
                ghost_hits += 1
                p_ = g_link[ix(h), 0]
                n_ = g_link[ix(h), 1]
                if p_ >= 0:
                    g_link[ix(p_), 1] = n_
                else:
                    g_head = n_
                if n_ >= 0:
                    g_link[ix(n_), 0] = p_
                else:
                    g_tail = p_
                g_len -= 1
                to_m = h
                to_m_freq = ghost_freq
            else:
                to_s = h
            while True:
                if to_g >= 0:
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
                    while m_len >= main_cap:
                        victim = m_ring[ix(m_head)]
                        m_head += 1
                        if m_head == main_cap:
                            m_head = 0
                        vf = freq[ix(victim)]
                        if vf >= 1:
                            freq[ix(victim)] = vf - 1
                            continue
                        m_len -= 1
                        evictions += 1
                        to_g = victim
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
        s_heads[ix(i)] = s_head
        s_lens[ix(i)] = s_len
        m_heads[ix(i)] = m_head
        m_lens[ix(i)] = m_len
        g_lens[ix(i)] = g_len
        g_heads[ix(i)] = g_head
        g_tails[ix(i)] = g_tail
        cnt[ix(i), 0] += hits
        cnt[ix(i), 1] += evictions
        cnt[ix(i), 2] += ghost_hits
        cnt[ix(i), 3] += promotions
    return instance, hit_tokens, delay, prefill, service, s_lens + m_lens


CLUSTER_KERNELS: dict[str, Any] = {"LRU": lru_cluster_kernel, "S3FIFO": s3fifo_cluster_kernel}
"""Policies the cluster kernel supports, by name; their ``kernel_args`` are those of the
single-cache kernel."""
