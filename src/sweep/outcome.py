"""A point's replay and its outcome: the one dispatch of sweep points to the engine.

Every point is a :class:`prefixsim.Scenario` (one cache, a hierarchy or a cluster, with its
block size and semantics), run through :func:`prefixsim.run_scenario`; every result, whatever
its composition, becomes an :class:`Outcome` by :func:`outcome_of`. LRU points of one block
size under ``spec`` are computed from one :func:`prefixsim.lru_curve` pass instead (identical
numbers, ``tests/test_lru_curve.py``). The workers (:func:`sweep.run.run_batch`) call
:func:`replay_items`; planning replays nothing (it asks the engine's checks,
:mod:`sweep.engine_checks`) and imports none of the running.
"""

from __future__ import annotations

import dataclasses
import os
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

import prefixsim
from prefixsim import Scenario, Trace, run_scenario

from .cluster import result_columns as cluster_columns
from .semantics import SPEC

CURVE_MIN_POINTS = 4
"""LRU points of one trace and block size at least this many are computed from one
:func:`prefixsim.lru_curve` pass (which costs about four LRU replays) instead of one replay
each; the numbers are identical either way (``tests/test_lru_curve.py``)."""

Item = tuple[int, Scenario]
"""A point as a worker gets it: its point_id and its scenario."""


@dataclass
class Outcome:
    """One point's result, as returned by a worker (``error`` set when it failed)."""

    point_id: int
    error: str | None = None
    n_requests: int = 0
    total_prompt_tokens: int = 0
    total_hit_tokens: int = 0
    overall_hit_rate: float = 0.0
    final_cache_blocks: int = 0
    counters: dict[str, int] | None = None
    seconds: float = 0.0
    hit_tokens: np.ndarray | None = None
    cluster: dict[str, Any] | None = None
    """A cluster point's columns (``sweep.cluster.RESULT_FIELDS``); None otherwise."""
    tier_hit_tokens: np.ndarray | None = None
    """A hierarchy point's hit tokens per tier, int64 ``[tier, request]`` (kept with the hit
    tokens: the cost columns charge each tier's hits at its medium's bandwidth)."""


def outcome_of(point_id: int, r: Any, per_request: bool) -> Outcome:
    """The outcome of a replay's result, whatever its composition: a cluster's occupancy is
    summed over its instances and its columns kept; a hierarchy keeps its hits per tier."""
    hit, prompt, rate = r.totals()
    tiered = isinstance(r, prefixsim.TieredResult)
    single = tiered or isinstance(r, prefixsim.ReplayResult)
    return Outcome(
        point_id=point_id,
        n_requests=r.n_requests,
        total_prompt_tokens=prompt,
        total_hit_tokens=hit,
        overall_hit_rate=rate,
        final_cache_blocks=int(np.sum(r.final_cache_blocks)),
        counters=dict(r.counters),
        seconds=r.seconds,
        hit_tokens=r.hit_tokens if per_request else None,
        cluster=None if single else cluster_columns(r),
        tier_hit_tokens=r.tier_hit_tokens if per_request and tiered else None,
    )


def failure(point_id: int, err: Exception) -> Outcome:
    """A failed point's outcome: the exception's type, message and where it was raised."""
    where = traceback.extract_tb(err.__traceback__)[-1]
    location = f" (at {os.path.basename(where.filename)}:{where.lineno})"
    return Outcome(point_id, error=f"{type(err).__name__}: {err}{location}")


def _curve_groups(items: Sequence[Item]) -> dict[int, list[int]]:
    """block_size -> indices into ``items`` of the LRU points worth one LRU curve."""
    groups: dict[int, list[int]] = {}
    for i, (_, sc) in enumerate(items):
        if sc.params.policy == "LRU" and sc.cluster is None and sc.semantics == SPEC:
            groups.setdefault(sc.block_size, []).append(i)
    return {b: idx for b, idx in groups.items() if len(idx) >= CURVE_MIN_POINTS}


def replay_items(
    trace: Trace, items: Sequence[Item], per_request: bool
) -> list[Outcome | Exception]:
    """Each item's outcome, or the exception its replay raised, in ``items`` order."""
    out: dict[int, Outcome | Exception] = {}
    for block_size, indices in _curve_groups(items).items():
        try:
            curve = prefixsim.lru_curve(
                trace, [items[i][1].params.capacity for i in indices], block_size
            )
        except Exception:
            continue  # the points are replayed one by one below, failing one by one if need be
        for i in indices:
            point_id, sc = items[i]
            out[i] = outcome_of(point_id, curve.result(sc.params.capacity), per_request)
    for i, (point_id, sc) in enumerate(items):
        if i not in out:
            try:
                out[i] = outcome_of(point_id, run_scenario(trace, sc), per_request)
            except Exception as err:
                out[i] = err
    return [out[i] for i in range(len(items))]


def head(trace: Trace, accesses: int = 1) -> Trace:
    """The first requests of ``trace`` holding about ``accesses`` block accesses (at least one
    request, if it has any), as a trace of their own: ``offsets`` and ``block_ids`` cut at
    those requests, every other array (one value per request) too; plain, writable, contiguous
    copies of the same dtypes (what the compiled kernels see in a worker)."""
    n = int(np.searchsorted(trace.offsets, accesses, side="left"))
    n = max(min(1, trace.n_requests), min(n, trace.n_requests))
    end = int(trace.offsets[n])
    cut = {"offsets": n + 1, "block_ids": end}
    arrays = {
        f.name: np.array(a[: cut.get(f.name, n)], copy=True, order="C", subok=False)
        for f in dataclasses.fields(trace)
        if isinstance(a := getattr(trace, f.name), np.ndarray)
    }
    n_blocks = int(arrays["block_ids"].max()) + 1 if end else 0
    return dataclasses.replace(trace, n_blocks=n_blocks, **arrays)  # type: ignore[arg-type]
