"""A cluster under an engine's semantics (``vllm``, ``sglang``) behind a static router: each
instance is one cache of that engine, and the routing is unchanged.

For the routers that look at neither the caches nor the load (``round_robin``, ``random``,
``session``: they have an ``assign``): the router assigns every request first, as under the
specification, and each instance's sub-trace (its requests in trace order) is replayed as one
engine cache (:func:`prefixsim.mode_replay.replay_arrays`), exact because the instances are
independent. The load model then queues the requests on their instances with the hit tokens
the engine's rule gave. The routers that read the caches or the loads (``least_loaded``,
``kv_aware``) run the cluster driver under the engine's rule instead
(:mod:`prefixsim.cluster.driver`; ``docs/semantics.md``, "In a cluster").
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from ..mode_replay import replay_arrays
from ..semantics import Semantics
from ..trace import Trace
from .load import LoadModel, fcfs_kernel
from .reference import RawCluster, Setup
from .routers import RouterParams, get_router


def subtrace(trace: Trace, rows: np.ndarray) -> Trace:
    """The requests ``rows`` of ``trace`` (in that order) as a trace of their own, with their
    block ids, lengths, arrival times and file lines (so a refusal names the right line)."""
    starts, ends = trace.offsets[rows], trace.offsets[rows + 1]
    lengths = ends - starts
    offsets = np.zeros(len(rows) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    if len(rows):
        take = np.concatenate([np.arange(s, e) for s, e in zip(starts, ends, strict=True)])
    else:
        take = np.zeros(0, np.int64)
    return Trace(
        name=trace.name,
        sha256=trace.sha256,
        timestamps=trace.timestamps[rows],
        input_lengths=trace.input_lengths[rows],
        output_lengths=trace.output_lengths[rows],
        offsets=offsets,
        block_ids=trace.block_ids[take.astype(np.int64)],
        n_blocks=trace.n_blocks,
        line_numbers=trace.line_numbers[rows],
        block_size=trace.block_size,
        session_ids=None if trace.session_ids is None else trace.session_ids[rows],
    )


# What every static (route-first) cluster does before and after its instances' replays, in
# every semantics and engine: one routing and one FCFS queue, so that they cannot drift apart.


def arrival_seconds(trace: Trace) -> np.ndarray:
    return trace.timestamps / 1000.0  # the trace's ms as seconds (the reference's division)


def route(trace: Trace, router: RouterParams, instances: int) -> np.ndarray:
    """The instance of each request (int32), routed before any cache is replayed."""
    assign = get_router(router.router).assign
    return np.asarray(assign(router, instances, trace), np.int32)


def static_queue(
    trace: Trace,
    instance: np.ndarray,
    hits: np.ndarray,
    instances: int,
    load: LoadModel | None,
    block_size: int,
) -> tuple[np.ndarray | None, np.ndarray | None, np.ndarray | None]:
    """``(delay, prefill, service)`` of the FCFS queue over the routed requests and their
    hits (all None without a load model)."""
    if load is None:
        return None, None, None
    return fcfs_kernel(
        arrival_seconds(trace),
        instance,
        trace.input_lengths,
        hits,
        trace.output_lengths,
        instances,
        load.decode_seconds_per_token,
        load.constants(block_size),
    )


def semantics_cluster(
    trace: Trace, setup: Setup, semantics: Semantics, engine: str
) -> tuple[RawCluster, Literal["kernel", "reference"]]:
    """Route first, then each instance's sub-trace as one cache under ``semantics``;
    ``(the cluster's raw result, the engine that ran)``. Takes the :class:`Setup` the spec
    paths take (``cluster.replay`` and ``cluster.reference``)."""
    params, block_size, instances, router, load = (
        setup.params, setup.block_size, setup.instances, setup.router, setup.load,
    )  # fmt: skip
    instance = route(trace, router, instances)
    hits = np.zeros(trace.n_requests, np.int64)
    finals: list[int] = []
    counters: list[dict[str, int]] = []
    ran: Literal["kernel", "reference"] = "reference"
    for i in range(instances):
        rows = np.flatnonzero(instance == i)
        sub_hits, final, cnt, ran = replay_arrays(
            subtrace(trace, rows), params, block_size, semantics, engine
        )
        hits[rows] = sub_hits
        finals.append(int(final))
        counters.append(cnt)
    delay, prefill, service = static_queue(trace, instance, hits, instances, load, block_size)
    return RawCluster(instance, hits, delay, prefill, service, finals, counters), ran
