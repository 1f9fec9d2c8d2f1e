"""The cluster replay of ``docs/cluster.md`` in plain Python, written for reading.

The reference driver of a cluster: one reference policy per instance; for each request in trace
order the router chooses an instance from the caches and loads as they are at arrival, the
request is replayed there by the single cache's reference request
(:func:`prefixsim.replay.reference_request`; under an engine's semantics
:func:`prefixsim.mode_replay.engine_request`, the request's cached blocks then its temporary ones,
each instance at its usable capacity), and the load model queues it first come first served. An
offline policy (behind a static router only) is first told each instance's future.
"""

from __future__ import annotations

import math
from collections.abc import Hashable
from dataclasses import dataclass

import numpy as np

from ..mode_replay import _with_capacity, engine_request, leading_blocks, request_accesses
from ..policies import PolicyParams, ReferencePolicy, get_policy
from ..replay import reference_request
from ..semantics import Semantics, check_fits, hit_tokens
from ..trace import Trace
from .load import LoadModel, prefill_seconds
from .routers import RouterParams, get_router


@dataclass
class _View:
    """The cluster as the router sees it when one request arrives (a ``ClusterView``)."""

    caches: list[ReferencePolicy]
    free: list[float]
    t: float
    blocks: list[Hashable]
    """The request's cached blocks (under ``spec``, its ``hash_ids``)."""
    max_hit: int
    input_length: int
    block_size: int
    code: int
    """The semantics' code (:attr:`prefixsim.semantics.Semantics.code`)."""
    consts: tuple[float, ...] | None

    @property
    def instances(self) -> int:
        return len(self.caches)

    def hit_tokens(self, instance: int) -> int:
        """The semantics' hit rule on ``instance``'s cache as it is now (read-only)."""
        k = leading_blocks(self.caches[instance], self.blocks)
        return hit_tokens(self.code, k, self.max_hit, self.input_length, self.block_size)

    def load(self, instance: int) -> float:
        return max(self.free[instance], self.t) - self.t

    def prefill_seconds(self, hit_tokens: int) -> float:
        assert self.consts is not None, "a router that needs the load model got none"
        return float(prefill_seconds.py_func(self.input_length, hit_tokens, *self.consts))


@dataclass
class RawCluster:
    """Per-request and per-instance outcome of either engine, before totals are derived."""

    instance: np.ndarray  # int32
    hit_tokens: np.ndarray  # int64
    delay: np.ndarray | None  # float64 seconds (None without a load model)
    prefill: np.ndarray | None
    service: np.ndarray | None
    final_cache_blocks: list[int]
    counters: list[dict[str, int]]  # per instance, the policy's counter_names


@dataclass(frozen=True)
class Setup:
    """A cluster replay's inputs, validated (by ``replay_cluster_params``): each instance's
    policy, the block size, the instances, the router and the load model (None: none)."""

    params: PolicyParams
    block_size: int
    instances: int
    router: RouterParams
    load: LoadModel | None


def reference_cluster(trace: Trace, setup: Setup, semantics: Semantics | None = None) -> RawCluster:
    params, block_size, instances, router, load = (
        setup.params, setup.block_size, setup.instances, setup.router, setup.load,
    )  # fmt: skip
    sem = Semantics.of(semantics)
    if sem.name != "spec":  # each instance one engine cache: its null block, its fit
        check_fits(sem, trace, params.capacity, block_size)
        params = _with_capacity(params, sem.usable_capacity(params.capacity))
    spec = get_policy(params.policy)
    caches = [spec.reference(params) for _ in range(instances)]
    chooser = get_router(router.router).reference(router, instances, trace)
    consts = load.constants(block_size) if load is not None else None
    # When each instance finishes the work it has been given (-inf: idle, whatever the time).
    free = [-math.inf] * instances
    cached, temps, max_hits = request_accesses(trace, sem, block_size)
    lengths = trace.input_lengths.tolist()
    outputs = trace.output_lengths.tolist()
    n = trace.n_requests
    instance = np.empty(n, np.int32)
    hits = np.empty(n, np.int64)
    delay, prefill, service = np.empty(n), np.empty(n), np.empty(n)
    if spec.offline:  # a static router (checked by the caller): each instance's future first
        views = (_View(caches, free, 0.0, [], 0, 0, block_size, sem.code, consts) for _ in range(n))
        placed = [chooser.choose(r, view) for r, view in enumerate(views)]
        for i, cache in enumerate(caches):
            own = [r for r in range(n) if placed[r] == i]
            stream = [b for r in own for b in (*cached[r], *temps[r])]
            sizes = [len(cached[r]) + len(temps[r]) for r in own]
            cache.prepare(stream, np.cumsum([0, *sizes]).tolist())
    accesses = [0] * instances
    held = [0] * instances
    for r in range(n):
        t = float(trace.timestamps[r]) / 1000.0  # the trace's ms as seconds
        view = _View(
            caches, free, t, cached[r], max_hits[r], lengths[r], block_size, sem.code, consts
        )
        i = chooser.choose(r, view)
        instance[r] = i
        # On instance i, exactly the single-cache replay: prefix at arrival, then the accesses.
        if sem.name == "spec":
            hits[r] = reference_request(caches[i], cached[r], lengths[r], block_size)
        else:
            hits[r] = engine_request(
                caches[i], cached[r], temps[r], max_hits[r], lengths[r], outputs[r],
                block_size, sem, params.policy,
            )  # fmt: skip
        accesses[i] += len(cached[r]) + len(temps[r])
        held[i] += len(temps[r])
        if load is not None and consts is not None:
            # First come, first served on instance i.
            p = prefill_seconds.py_func(lengths[r], int(hits[r]), *consts)
            start = max(free[i], t)
            delay[r] = start - t
            prefill[r] = p
            service[r] = p + float(outputs[r]) * load.decode_seconds_per_token
            free[i] = start + float(service[r])
    timed = load is not None
    counters = [dict(c.counters) for c in caches]
    if sem.name != "spec":  # as the single engine cache counts them
        for i, c in enumerate(counters):
            c.update(block_accesses=accesses[i], temporary_blocks=held[i])
    return RawCluster(
        instance=instance,
        hit_tokens=hits,
        delay=delay if timed else None,
        prefill=prefill if timed else None,
        service=service if timed else None,
        final_cache_blocks=[c.resident_count() for c in caches],
        counters=counters,
    )
