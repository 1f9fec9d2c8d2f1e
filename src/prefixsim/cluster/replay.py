"""``replay_cluster``: a trace through ``instances`` caches behind a router (``docs/cluster.md``).

``engine="reference"`` runs :mod:`prefixsim.cluster.reference`. ``engine="kernel"``:

* routers with an ``assign`` (round_robin, random, session) route the whole trace first, then
  each instance's sub-trace is replayed by the policy's own single-cache kernel (exact: the
  instances are independent and a sub-trace keeps the trace order), then the FCFS kernel;
* least_loaded and kv_aware run the cluster driver of :mod:`prefixsim.cluster.driver`, any
  online policy with steps, under any semantics (the engines' rule in the routing decision
  too: ``kv_aware`` scores each instance by the hit the engine would give there).

Under an engine's semantics the static routers route first and replay each instance's
sub-trace as one engine cache (:func:`prefixsim.cluster.modes.semantics_cluster`).

An offline policy (BELADY) runs behind the static routers only: they place every request before
any replay, so each instance's future is known (its sub-trace); a router that looks at the
caches or the load places a request from hits that depend on that future.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._exact import HitTotals
from .._memory import check_fits
from ..engine import single
from ..errors import ParameterError
from ..first_use import noted
from ..hardware import HardwareProfile
from ..mode_replay import _no_removal, _with_capacity, reference_only
from ..models import ModelProfile
from ..policies import PolicyParams, get_policy
from ..policies.base import check_int, check_state_fits
from ..replay import MAX_BLOCK_SIZE, Engine, check_engine, make_params
from ..semantics import Semantics, engine_layout
from ..semantics import check_fits as check_engine_fits
from ..trace import Trace, load_trace
from . import driver as cluster_driver
from .load import LoadModel, split_subtraces
from .modes import arrival_seconds, route, semantics_cluster, static_queue
from .reference import RawCluster, Setup, reference_cluster
from .routers import RouterParams, get_router, make_router

MAX_INSTANCES = 4096


@dataclass(frozen=True, eq=False)
class ClusterResult(HitTotals):
    """Outcome of one cluster replay. Per-request arrays are in trace order; per-instance ones
    are indexed by instance. The time arrays are None without a load model."""

    params: PolicyParams
    router: RouterParams
    instances: int
    block_size: int
    load: LoadModel | None
    trace_name: str
    trace_sha256: str
    instance: np.ndarray  # int32, per request
    hit_tokens: np.ndarray  # int64, per request
    prompt_tokens: np.ndarray  # int64, per request
    queueing_delay: np.ndarray | None  # float64 seconds, per request
    est_prefill_seconds: np.ndarray | None
    service_seconds: np.ndarray | None
    final_cache_blocks: np.ndarray  # int64, per instance
    instance_counters: list[dict[str, int]]
    """Per instance: ``block_accesses``, ``block_hits``, ``evictions`` and the policy's own."""
    engine: str
    seconds: float = field(default=0.0, compare=False)
    semantics: Semantics = field(default_factory=Semantics)
    """Each instance's hit rule (``docs/semantics.md``, :mod:`prefixsim.cluster.modes`)."""

    @property
    def est_ttft_seconds(self) -> np.ndarray | None:
        """Queueing delay + prefill time, per request."""
        if self.queueing_delay is None or self.est_prefill_seconds is None:
            return None
        return self.queueing_delay + self.est_prefill_seconds

    @property
    def instance_requests(self) -> np.ndarray:
        return np.bincount(self.instance, minlength=self.instances).astype(np.int64)

    @property
    def instance_hit_tokens(self) -> np.ndarray:
        out = np.zeros(self.instances, np.int64)
        np.add.at(out, self.instance, self.hit_tokens)  # exact int64 (bincount is float)
        return out

    @property
    def instance_prompt_tokens(self) -> np.ndarray:
        out = np.zeros(self.instances, np.int64)
        np.add.at(out, self.instance, self.prompt_tokens)
        return out

    @property
    def instance_hit_rate(self) -> np.ndarray:
        prompt = self.instance_prompt_tokens
        hits = self.instance_hit_tokens
        return np.divide(hits, prompt, out=np.zeros(self.instances), where=prompt > 0)

    @property
    def busy_seconds(self) -> np.ndarray | None:
        """Sum of the service times of each instance's requests (``math.fsum``)."""
        if self.service_seconds is None:
            return None
        out = np.zeros(self.instances)
        for i in range(self.instances):
            out[i] = math.fsum(self.service_seconds[self.instance == i].tolist())
        return out

    @property
    def load_imbalance(self) -> float | None:
        """max / mean busy time over all instances (1.0 when nothing was busy)."""
        busy = self.busy_seconds
        if busy is None:
            return None
        mean = math.fsum(busy.tolist()) / self.instances
        return float(busy.max() / mean) if mean > 0 else 1.0

    def ttft_percentile(self, q: float) -> float | None:
        ttft = self.est_ttft_seconds
        if ttft is None or len(ttft) == 0:
            return None
        return float(np.percentile(ttft, q))

    @property
    def counters(self) -> dict[str, int]:
        """Counters summed over the instances."""
        out: dict[str, int] = {}
        for c in self.instance_counters:
            for k, v in c.items():
                out[k] = out.get(k, 0) + v
        return out

    def summary(self) -> dict[str, Any]:
        """One flat row: the cluster's totals (what the sweep writes)."""
        busy = self.busy_seconds
        return {
            "instances": self.instances,
            **self.router.to_dict(),
            "n_requests": self.n_requests,
            "total_prompt_tokens": self.total_prompt_tokens,
            "total_hit_tokens": self.total_hit_tokens,
            "overall_hit_rate": self.overall_hit_rate,
            "final_cache_blocks": int(self.final_cache_blocks.sum()),
            **self.counters,
            "est_ttft_p50_seconds": self.ttft_percentile(50),
            "est_ttft_p99_seconds": self.ttft_percentile(99),
            "est_queueing_delay_mean_seconds": (
                None
                if self.queueing_delay is None
                else math.fsum(self.queueing_delay.tolist()) / max(self.n_requests, 1)
            ),
            "busy_seconds_max": None if busy is None else float(busy.max()),
            "busy_seconds_mean": None if busy is None else math.fsum(busy.tolist()) / len(busy),
            "load_imbalance": self.load_imbalance,
        }


def _as_trace(trace_or_path: Trace | str | os.PathLike[str]) -> Trace:
    return trace_or_path if isinstance(trace_or_path, Trace) else load_trace(trace_or_path)


@noted  # a line on stderr while the kernels compile (first use only)
def replay_cluster(
    trace_or_path: Trace | str | os.PathLike[str],
    instances: int = 4,
    router: str | RouterParams = "round_robin",
    policy: str = "S3FIFO",
    capacity: int = 4096,
    block_size: int = 512,
    *,
    router_params: dict[str, Any] | None = None,
    policy_params: dict[str, Any] | None = None,
    model: str | ModelProfile | None = None,
    hardware: str | HardwareProfile | None = None,
    cache_tier: str = "hbm",
    decode_seconds_per_token: float = 0.0,
    engine: Engine = "kernel",
    semantics: Semantics | str | None = None,
) -> ClusterResult:
    """Replay a trace through ``instances`` caches of ``policy`` (each of ``capacity`` blocks)
    behind ``router``. With ``model`` and ``hardware`` (profile names, YAML paths or profiles)
    the load model gives queueing delays and estimated TTFTs; ``least_loaded`` and ``kv_aware``
    need them. ``semantics`` (``docs/semantics.md``): each instance's hit rule, with every
    router (``kv_aware`` scores the instances by that rule's hit)."""
    if not isinstance(router, RouterParams):
        router = make_router(router, **(router_params or {}))
    elif router_params:
        raise ParameterError("router_params", router_params, "give them in the RouterParams")
    params = make_params(policy, capacity, **(policy_params or {}))
    if (model is None) != (hardware is None):
        raise ParameterError(
            "model" if model is None else "hardware", None, "the load model needs both"
        )
    load = None
    if model is not None and hardware is not None:
        load = LoadModel(model, hardware, cache_tier, decode_seconds_per_token)  # type: ignore[arg-type]
    return replay_cluster_params(
        _as_trace(trace_or_path),
        params,
        block_size,
        instances,
        router,
        load,
        engine=engine,
        semantics=semantics,
    )


def check_cluster(
    params: PolicyParams,
    block_size: int,
    instances: int,
    router: RouterParams,
    load: LoadModel | None,
    trace: Trace | None = None,
    *,
    engine: Engine = "kernel",
    semantics: Semantics | str | None = None,
) -> tuple[int, int]:
    """Every check of a cluster point before its replay (what the sweep's planning can call per
    point, with or without the trace): ``(block_size, instances)`` normalised, or the
    :class:`ParameterError` (:class:`TraceError`) naming the key (the line). Memory: the
    router's state (the session ring) and, for the routers whose kernel holds every instance's
    cache, ``instances`` copies of the policy's state, refused before anything is allocated."""
    block_size = check_int("block_size", block_size, 1, MAX_BLOCK_SIZE)
    instances = check_int("instances", instances, 1, MAX_INSTANCES)
    spec = get_router(router.router)
    if spec.needs_load and load is None:
        raise ParameterError(
            "router",
            router.router,
            "needs the load model: give a model and a hardware profile",
        )
    if get_policy(params.policy).offline and spec.assign is None:
        raise ParameterError(
            "policy",
            params.policy,
            f"is offline: it needs each instance's future, which router {router.router} only "
            "decides as it goes (the static routers round_robin, random and session take it)",
        )
    check_engine(engine)
    sem = Semantics.of(semantics)
    if engine == "kernel" and (sem.name == "spec" or spec.assign is None):
        get_policy(params.policy).compiled_steps()  # a policy with a reference only is refused
    if sem.name != "spec":
        sem.usable_capacity(params.capacity)  # vLLM's null block leaves one at least
        if trace is not None:
            check_engine_fits(sem, trace, params.capacity, block_size)
    key = router.state_key
    check_fits(
        key,
        instances if key == "instances" else getattr(router, key),
        router.state_bytes(instances),
        f"the {router.router} router's state for {instances} instances",
    )
    copies = instances if spec.assign is None else 1  # one sub-trace at a time otherwise
    n_blocks, n_accesses = (0, 0) if trace is None else (trace.n_blocks, trace.n_accesses)
    # The cluster driver's (instance, block) -> pair id map beside the instances' states
    pairs = 0
    if spec.assign is None:
        pairs = cluster_driver.pair_map_bytes(n_blocks, n_accesses, instances)
    check_state_fits(params, n_blocks, n_accesses, copies=copies, extra=pairs)
    if load is not None and trace is not None:
        load.check_trace(trace.input_lengths, block_size)
    return block_size, instances


def replay_cluster_params(
    trace: Trace,
    params: PolicyParams,
    block_size: int,
    instances: int,
    router: RouterParams,
    load: LoadModel | None,
    *,
    engine: Engine = "kernel",
    semantics: Semantics | str | None = None,
) -> ClusterResult:
    """Replay with already validated parameters (what the sweep calls for a cluster point)."""
    sem = Semantics.of(semantics)
    block_size, instances = check_cluster(
        params, block_size, instances, router, load, trace, engine=engine, semantics=sem
    )
    setup = Setup(params, block_size, instances, router, load)
    spec = get_router(router.router)
    start = time.perf_counter()
    if sem.name != "spec" and spec.assign is not None:
        raw, engine = semantics_cluster(trace, setup, sem, engine)
    elif engine == "reference" or (sem.name != "spec" and reference_only(params, sem)):
        # what the single cache replays on its reference (reference_only: S3FIFO_LCS's
        # one-slot small queue, which its steps refuse) the load-aware routers do too: their
        # driver runs the same steps
        raw, engine = reference_cluster(trace, setup, sem), "reference"
    elif spec.assign is not None:
        raw = _static_cluster(trace, setup)
    else:
        raw = _dynamic_cluster(trace, setup, sem)
    seconds = time.perf_counter() - start
    # Exact: float64 sums of integers below 2**53 (there are fewer accesses than that).
    per_instance_accesses = np.bincount(
        raw.instance, weights=np.diff(trace.offsets), minlength=instances
    ).astype(np.int64)
    counters = [
        {"block_accesses": int(per_instance_accesses[i]), **raw.counters[i]}
        for i in range(instances)
    ]
    return ClusterResult(
        params=params,
        router=router,
        instances=instances,
        block_size=block_size,
        load=load,
        trace_name=trace.name,
        trace_sha256=trace.sha256,
        instance=raw.instance,
        hit_tokens=raw.hit_tokens,
        prompt_tokens=trace.input_lengths,
        queueing_delay=raw.delay,
        est_prefill_seconds=raw.prefill,
        service_seconds=raw.service,
        final_cache_blocks=np.asarray(raw.final_cache_blocks, np.int64),
        instance_counters=counters,
        engine=engine,
        seconds=seconds,
        semantics=sem,
    )


def _static_cluster(trace: Trace, setup: Setup) -> RawCluster:
    """Route first, then each instance's sub-trace through the single-cache replay."""
    spec = get_policy(setup.params.policy)
    instances, block_size, load = setup.instances, setup.block_size, setup.load
    instance = route(trace, setup.router, instances)
    hits = np.zeros(trace.n_requests, np.int64)
    finals: list[int] = []
    counters: list[dict[str, int]] = []
    rows_all, blocks_all, offsets_all, req_start, acc_start, n_local = split_subtraces(
        trace.block_ids, trace.offsets, instance, instances, trace.n_blocks
    )
    for i in range(instances):
        rows = rows_all[req_start[i] : req_start[i + 1]]
        # offsets_all holds each instance's offsets (n_i + 1 of them) one after the other.
        sub_offsets = offsets_all[req_start[i] + i : req_start[i + 1] + i + 1]
        sub_blocks = blocks_all[acc_start[i] : acc_start[i + 1]]
        sub_hits, final, sub_counters = single.run(
            spec,
            setup.params,
            sub_blocks,
            sub_offsets,
            trace.input_lengths[rows],
            int(n_local[i]),
            block_size,
        )
        hits[rows] = sub_hits
        finals.append(final)
        counters.append(sub_counters)
    delay, prefill, service = static_queue(trace, instance, hits, instances, load, block_size)
    return RawCluster(instance, hits, delay, prefill, service, finals, counters)


def _dynamic_cluster(trace: Trace, setup: Setup, semantics: Semantics) -> RawCluster:
    """least_loaded / kv_aware: the cluster driver over every instance's state, under
    ``semantics`` (each instance at its usable capacity)."""
    load, instances = setup.load, setup.instances
    assert load is not None  # needs_load routers were checked by the caller
    spec = get_policy(setup.params.policy)
    steps = spec.compiled_steps()
    params, layout = setup.params, None
    if semantics.name != "spec":
        params = _with_capacity(params, semantics.usable_capacity(params.capacity))
        layout = engine_layout(trace, semantics, setup.block_size)
        check_state_fits(params, layout.n_ids, len(layout.ids), copies=instances)
        if layout.n_temp and semantics.free_front and steps.per_block and not steps.removable:
            raise _no_removal(params.policy)  # as the reference refuses it, before any replay
    instance, hits, delay, prefill, service, cnt, accesses, held, released = cluster_driver.run(
        steps,
        params,
        trace,
        arrival_seconds(trace),
        setup.block_size,
        instances,
        get_router(setup.router.router).kernel_code,
        float(getattr(setup.router, "overlap_weight", 0.0)),
        load.decode_seconds_per_token,
        load.constants(setup.block_size),
        layout,
        semantics.free_front,
        semantics.cache_output_blocks,
    )
    counters = [dict(zip(spec.counter_names, row, strict=True)) for row in cnt.tolist()]
    # Every admission adds one resident block, every eviction and release takes one out.
    finals = [
        int(a) - c["block_hits"] - c["evictions"] - int(x)
        for a, c, x in zip(accesses, counters, released, strict=True)
    ]
    if semantics.name != "spec":  # as the single engine cache counts them
        for c, a, h in zip(counters, accesses.tolist(), held.tolist(), strict=True):
            c.update(block_accesses=a, temporary_blocks=h)
    return RawCluster(instance, hits, delay, prefill, service, finals, counters)
