"""The cluster driver for the routers that look at the caches or the load (``least_loaded``,
``kv_aware``): every instance's cache, routing at arrival, the replay and the FCFS load model
in one compiled pass, for any policy.

Invariants (``docs/cluster.md``): requests in trace order; for request ``r`` arriving at
``arrival[r]``:

1. route: the instance of lowest cost, ties to the lowest index; the cost is the load
   ``max(free_i, t) - t``, plus for ``kv_aware`` ``overlap_weight`` times the estimated
   prefill time of the request's hit tokens on instance ``i`` (its prefix read with
   ``is_resident`` only, as the caches are at arrival). Every instance's cost is first that
   of 0 hit tokens, in a loop without a branch on the data; only an instance with a pair for
   the request's first block probes its prefix (any other hits 0 tokens). The costs go through
   ``costs`` (one float per instance) to one search for the lowest;
2. on the chosen instance ``i``, exactly the single cache's request
   (:func:`prefixsim.engine.rules.replay_request`: ``begin``, ``hit`` or ``admit`` per block,
   ``end``), so an instance's hits are those of a single-cache replay of its sub-trace;
3. the load model queues it first come first served on ``i``.

The rule is the driver's ``rule`` (:mod:`prefixsim.engine.rules`): under the engines' rule the
trace is laid out by :func:`prefixsim.semantics.engine_layout` (each request's cached blocks,
then its temporary ones), the scan and ``kv_aware``'s probe stop at ``scan_limit`` and count
``hit_tokens`` (whole blocks), and :func:`~prefixsim.engine.rules.replay_request` frees the
temporary blocks when the request ends (``released``).

All instances are one policy state over dense *pair ids*, numbered in order of the (instance,
block) pair's first access (at most one per block access, so the state is as compact as one
cache's, instead of ``n_instances * n_blocks`` entries scattered over tens of MB, which cost a
cache miss per access: 10x slower at 16 instances); ``pair[block * n_instances + i]`` holds the
pair id + 1 (0: instance ``i`` never accessed the block, so it is not resident there), one cache
line for a block's entries on every instance, which ``kv_aware``'s probes read. Before its
accesses, the request's blocks are translated to the chosen instance's pair ids (``ids``), so
the steps see one cache's ids, with ``q = i``. A temporary block (layout id ``>= temp_from``)
is accessed once, by one request on one instance: it has no entry in the table and takes the
pair id ``temp_to + (id - temp_from)``, past every other pair id, which is where the rule
(``EngineRule.temp_base = temp_to``) finds it. The driver counts each instance's block hits
and evictions (``cnt[i, 0:2]``) and its removals (``released[i]``: the temporary blocks released,
and the accesses that left no resident block, which only a request-level policy's request
reports); its final size is its misses minus its evictions and removals.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import cost
from ..cost import prefill_seconds
from ..engine.rules import (
    EngineRule,
    SpecRule,
    hit_tokens,
    one_policy_driver,
    replay_request,
    scan_limit,
)
from ..engine.steps import Space, Steps, is_resident, ix
from ..semantics import Layout
from . import load, routers
from .load import serve_fcfs
from .routers import KERNEL_KV_AWARE


def _template(stamp: str) -> Any:
    def cluster_driver(
        block_ids, offsets, input_lengths, output_lengths, arrival, rule, temp_from, temp_to,
        n_instances, router_code, overlap_weight, decode_s, consts, pair, s, ids, costs,
        instance, out, delay, prefill, service, free, released,
    ):  # fmt: skip
        stamp  # noqa: B018 (the disk cache's key, see prefixsim.engine.build)
        bs, two_p, coeff, reuse, eff, kvb, bw = consts
        n_pairs = 0
        for r in range(input_lengths.shape[0]):
            start = offsets[ix(r)]
            end_ = offsets[ix(r + 1)]
            n = input_lengths[ix(r)]
            t = arrival[ix(r)]
            stop = start + scan_limit(rule, end_ - start, n)
            # Route: the lowest cost, ties to the lowest index (strict <). First every
            # instance's load (plus, for kv_aware, the weighted time of 0 hit tokens: an
            # instance with no pair for the request's first block hits none), without a branch
            # on the data; then only the instances that have such a pair probe their prefix.
            if router_code == KERNEL_KV_AWARE:
                memo_hit = hit_tokens(rule, 0, n)
                memo_p = prefill_seconds(n, memo_hit, bs, two_p, coeff, reuse, eff, kvb, bw)
                w0 = overlap_weight * memo_p
                for i in range(n_instances):
                    costs[ix(i)] = max(free[ix(i)], t) - t + w0
                first = block_ids[ix(start)] if start < stop else temp_from
                if first < temp_from:  # (a temporary block is never resident at arrival)
                    row = first * n_instances
                    for i in range(n_instances):
                        if pair[ix(row + i)] == 0:
                            continue
                        k = start
                        while k < stop:
                            b = block_ids[ix(k)]
                            if b >= temp_from:
                                break
                            q = pair[ix(b * n_instances + i)] - 1
                            if q < 0:
                                break
                            if not is_resident(s, i, q):
                                break
                            k += 1
                        hit = hit_tokens(rule, k - start, n)
                        if hit != memo_hit:  # instances often share a prefix length
                            memo_hit = hit
                            memo_p = prefill_seconds(n, hit, bs, two_p, coeff, reuse, eff, kvb, bw)
                        costs[ix(i)] = max(free[ix(i)], t) - t + overlap_weight * memo_p
            else:
                for i in range(n_instances):
                    costs[ix(i)] = max(free[ix(i)], t) - t
            best = 0
            best_cost = costs[0]
            for i in range(1, n_instances):
                if costs[ix(i)] < best_cost:
                    best = i
                    best_cost = costs[ix(i)]
            i = best
            instance[ix(r)] = i
            # The request's blocks as instance i's pair ids (a new pair at a first access).
            for j in range(start, end_):
                b = block_ids[ix(j)]
                if b >= temp_from:
                    ids[ix(j - start)] = temp_to + (b - temp_from)
                    continue
                slot = b * n_instances + i
                q = pair[ix(slot)] - 1
                if q < 0:
                    q = n_pairs
                    n_pairs += 1
                    pair[ix(slot)] = q + 1
                ids[ix(j - start)] = q
            tokens, hits, evictions, removed = replay_request(s, i, ids, 0, end_ - start, n, rule)
            out[ix(r)] = tokens
            s.cnt[ix(i), 0] += hits
            s.cnt[ix(i), 1] += evictions
            released[ix(i)] += removed
            # Load model: FCFS on instance i.
            p = prefill_seconds(n, tokens, bs, two_p, coeff, reuse, eff, kvb, bw)
            serve_fcfs(r, i, t, p, output_lengths[ix(r)], decode_s, free, delay, prefill, service)

    return cluster_driver


def _pair_dtype(n_accesses: int) -> type[np.signedinteger[Any]]:
    return np.int32 if n_accesses < 2**31 - 1 else np.int64


def pair_map_bytes(n_blocks: int, n_accesses: int, instances: int) -> int:
    """What :func:`run` allocates beside the policy's state: the (instance, block) -> pair id
    map and the request's ids (at most one per access); the state itself is over at most
    ``min(n_accesses, instances * n_blocks)`` pair ids (``check_cluster`` bounds it by
    ``instances`` states of ``n_blocks`` ids)."""
    item = np.dtype(_pair_dtype(n_accesses)).itemsize
    return item * (n_blocks * instances + n_accesses)


def run(
    steps: Steps,
    params: Any,
    trace: Any,
    arrival: np.ndarray,
    block_size: int,
    instances: int,
    router_code: int,
    overlap_weight: float,
    decode_seconds_per_token: float,
    consts: tuple[Any, ...],
    layout: Layout | None = None,
    free_front: bool = True,
    cache_output_blocks: bool = False,
) -> tuple[np.ndarray, ...]:
    """One cluster replay (``params`` at the usable capacity): under the specification's rule
    over the trace's ids, or with ``layout`` (:func:`prefixsim.semantics.engine_layout`) under
    the engines' (``free_front``: the temporary blocks leave the cache when their request
    ends; ``cache_output_blocks``: the decode steps' pages are kept, and the state gets the
    requests' output lengths, :attr:`~prefixsim.engine.steps.Space.output_lengths`). Per
    request the instance, hit tokens, queueing delay, prefill and service seconds;
    per instance the counters ``[instance, counter]``, the block accesses and the temporary
    blocks held and released."""
    n = trace.n_requests
    if layout is None:
        block_ids, offsets = trace.block_ids, trace.offsets
        temp_from, n_temp = trace.n_blocks, 0  # no id is temporary
    else:
        block_ids, offsets = layout.ids, layout.offsets
        temp_from, n_temp = layout.temp_base, layout.n_temp
    n_accesses = len(block_ids)
    # At most one pair per access of a cached block; int64 ids only when they could pass int32.
    max_pairs = min(n_accesses - n_temp, instances * temp_from)
    rule: Any = SpecRule(block_size)
    if layout is not None:  # the temporary blocks' pair ids come after every other
        rule = EngineRule.of(block_size, max_pairs, free_front)
    dtype = _pair_dtype(n_accesses)
    pair = np.zeros(temp_from * instances, dtype)  # untouched pages stay unallocated
    outputs = trace.output_lengths if cache_output_blocks else None
    s = steps.make_state(params, Space(max_pairs + n_temp, instances, block_ids, outputs))
    lengths = np.diff(offsets)
    ids = np.empty(int(lengths.max()) if len(lengths) else 0, dtype)
    instance = np.empty(n, np.int32)
    out = np.empty(n, np.int64)
    delay, prefill, service = np.empty(n), np.empty(n), np.empty(n)
    free = np.full(instances, -np.inf)  # idle until given work (timestamps may be < 0)
    released = np.zeros(instances, np.int64)
    driver(steps, type(rule))(
        block_ids,
        offsets,
        trace.input_lengths,
        trace.output_lengths,
        arrival,
        rule,
        temp_from,
        max_pairs,
        instances,
        router_code,
        overlap_weight,
        decode_seconds_per_token,
        consts,
        pair,
        s,
        ids,
        np.empty(instances),
        instance,
        out,
        delay,
        prefill,
        service,
        free,
        released,
    )
    accesses = np.bincount(instance, weights=lengths, minlength=instances).astype(np.int64)
    held = np.zeros(instances, np.int64)
    if n_temp:  # each instance's temporary blocks: those of the requests routed to it
        request_of = np.repeat(np.arange(n), lengths)
        held = np.bincount(instance[request_of[block_ids >= temp_from]], minlength=instances)
    return instance, out, delay, prefill, service, s.cnt, accesses, held, released


def driver(steps: Steps, rule: type = SpecRule) -> Any:
    """The compiled cluster driver of ``steps`` (a numba dispatcher). Its disk cache is keyed
    by the files of what it calls besides the engine's and the policies': numba checks only the
    driver's own file, so an edit of the load model's prefill formula alone would otherwise
    leave a stale compiled driver."""
    return one_policy_driver(_template, steps, rule, _CALLEES)


_CALLEES = (cost.__file__, routers.__file__, load.__file__)  # prefill_seconds, routers, FCFS
