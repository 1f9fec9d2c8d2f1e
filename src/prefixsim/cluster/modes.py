"""A cluster under an engine's semantics (``vllm``, ``sglang``): each instance is one cache of
that engine, and the routing is unchanged.

Defined for the routers that look at neither the caches nor the load (``round_robin``,
``random``, ``session``: they have an ``assign``): the router assigns every request first, as
under the specification, and each instance's sub-trace (its requests in trace order) is
replayed as one engine cache (:func:`prefixsim.semantics.replay_arrays`), exact because the
instances are independent. The load model then queues the requests on their instances with
the hit tokens the engine's rule gave. The routers that read the caches or the loads
(``least_loaded``, ``kv_aware``) would need the engine's own prefix match inside the routing
decision, which is not defined yet: :func:`check_router` refuses them.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from ..errors import ParameterError
from ..policies import PolicyParams
from ..semantics import Semantics, replay_arrays
from ..trace import Trace
from .load import LoadModel, fcfs_kernel
from .reference import RawCluster
from .routers import RouterParams, get_router


def check_router(semantics: Semantics, router: RouterParams) -> None:
    """Refuse a router whose decision reads the caches or the loads under an engine's
    semantics (one line naming it)."""
    if semantics.name != "spec" and get_router(router.router).assign is None:
        raise ParameterError(
            "semantics",
            semantics.name,
            f"router={router.router} reads the caches or the loads, which under an engine's "
            "semantics is not defined yet; use round_robin, random or session, or semantics=spec",
        )


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


def semantics_cluster(
    trace: Trace,
    params: PolicyParams,
    block_size: int,
    instances: int,
    router: RouterParams,
    load: LoadModel | None,
    semantics: Semantics,
    engine: str,
) -> tuple[RawCluster, Literal["kernel", "reference"]]:
    """Route first, then each instance's sub-trace as one cache under ``semantics``;
    ``(the cluster's raw result, the engine that ran)``."""
    check_router(semantics, router)
    assign = get_router(router.router).assign
    instance = np.asarray(assign(router, instances, trace), np.int32)
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
    delay = prefill = service = None
    if load is not None:
        delay, prefill, service = fcfs_kernel(
            trace.timestamps / 1000.0,  # the trace's ms as seconds, as the other paths
            instance,
            trace.input_lengths,
            hits,
            trace.output_lengths,
            instances,
            load.decode_seconds_per_token,
            load.constants(block_size),
        )
    return RawCluster(instance, hits, delay, prefill, service, finals, counters), ran
