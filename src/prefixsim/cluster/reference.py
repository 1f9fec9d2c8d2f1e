"""The cluster replay of ``docs/cluster.md`` in plain Python, written for reading.

One reference policy per instance; for each request in trace order the router chooses an
instance from the caches and loads as they are at arrival, the request is replayed there as in
the single-cache specification, and the load model queues it first come first served.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import numpy as np

from ..policies import PolicyParams, get_policy
from ..policies.base import ReferencePolicy
from ..trace import Trace
from .load import LoadModel, prefill_seconds
from .routers import RouterParams, get_router


def prefix_hit_tokens(
    cache: ReferencePolicy, hash_ids: Sequence[Hashable], input_length: int, block_size: int
) -> int:
    """``min(k * block_size, input_length)``, ``k`` the leading resident blocks."""
    k = 0
    while k < len(hash_ids) and cache.is_resident(hash_ids[k]):
        k += 1
    return min(k * block_size, input_length)


@dataclass
class _View:
    """The cluster as the router sees it when one request arrives (a ``ClusterView``)."""

    caches: list[ReferencePolicy]
    free: list[float]
    t: float
    hash_ids: list[int]
    input_length: int
    block_size: int
    consts: tuple[int, float, float, float, int, float] | None

    @property
    def instances(self) -> int:
        return len(self.caches)

    def hit_tokens(self, instance: int) -> int:
        return prefix_hit_tokens(
            self.caches[instance], self.hash_ids, self.input_length, self.block_size
        )

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


def reference_cluster(
    trace: Trace,
    params: PolicyParams,
    block_size: int,
    instances: int,
    router: RouterParams,
    load: LoadModel | None,
) -> RawCluster:
    spec = get_policy(params.policy)
    caches = [spec.reference(params) for _ in range(instances)]
    chooser = get_router(router.router).reference(router, instances, trace)
    consts = load.constants(block_size) if load is not None else None
    # When each instance finishes the work it has been given (-inf: idle, whatever the time).
    free = [-math.inf] * instances
    block_ids = trace.block_ids.tolist()
    offsets = trace.offsets.tolist()
    n = trace.n_requests
    instance = np.empty(n, np.int32)
    hits = np.empty(n, np.int64)
    delay, prefill, service = np.empty(n), np.empty(n), np.empty(n)
    for r in range(n):
        hash_ids = block_ids[offsets[r] : offsets[r + 1]]
        input_length = int(trace.input_lengths[r])
        t = float(trace.timestamps[r]) / 1000.0  # the trace's ms as seconds
        view = _View(caches, free, t, hash_ids, input_length, block_size, consts)
        i = chooser.choose(r, view)
        instance[r] = i
        # On instance i, exactly the single-cache replay: prefix at arrival, then the accesses.
        hits[r] = prefix_hit_tokens(caches[i], hash_ids, input_length, block_size)
        caches[i].access_request(hash_ids)
        if load is not None and consts is not None:
            # First come, first served on instance i.
            p = prefill_seconds.py_func(input_length, int(hits[r]), *consts)
            start = max(free[i], t)
            delay[r] = start - t
            prefill[r] = p
            service[r] = p + float(trace.output_lengths[r]) * load.decode_seconds_per_token
            free[i] = start + float(service[r])
    timed = load is not None
    return RawCluster(
        instance=instance,
        hit_tokens=hits,
        delay=delay if timed else None,
        prefill=prefill if timed else None,
        service=service if timed else None,
        final_cache_blocks=[c.resident_count() for c in caches],
        counters=[dict(c.counters) for c in caches],
    )
