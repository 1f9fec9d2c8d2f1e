"""Plan a sweep: the grid's points, deduplicated and validated before any replay.

A point is one replay: a trace, a policy with validated parameters, and a block size. The grid
is the Cartesian product of the grid keys, except that a policy parameter a policy does not have
(``PolicyParams.field_names()``) does not multiply that policy: ``policy=S3FIFO,LRU
small_ratio=0.05,0.1`` has two S3FIFO points per capacity and one LRU point, whose
``small_ratio`` is null. Every point is validated with :func:`prefixsim.make_params` while
planning, so a bad value fails the sweep before the first replay.

Points are identified across runs by :func:`point_key`, a digest of the trace's content
(sha256, not its name or path), the block size and every parameter of the policy.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import prefixsim
from prefixsim import ParameterError, PolicyParams

from .cluster import ClusterSpec, cluster_specs
from .config import POLICY_PARAM_KEYS, SweepConfig
from .costing import cost_setup, grid_sizes


class PlanError(prefixsim.PrefixSimError):
    """A grid that cannot be run (one line for the user)."""


@dataclass(frozen=True)
class GridPoint:
    """A point before its trace is loaded (the trace is referred to as typed)."""

    trace: str
    params: PolicyParams
    block_size: int
    cache_bytes: int | None = None
    """The cache in bytes (with a model: the ``cache_size`` given, or capacity times the bytes
    per block); None without a model."""
    cluster: ClusterSpec | None = None
    """Instances behind a router (``sweep.cluster``); None for a single-cache point."""

    @property
    def policy(self) -> str:
        return self.params.policy

    def describe(self) -> str:
        """``trace=conversation policy=S3FIFO capacity=1024 ...`` (for messages)."""
        items = {"trace": self.trace, "block_size": self.block_size, **self.params.to_dict()}
        if self.cache_bytes is not None:
            items["cache_bytes"] = self.cache_bytes
        if self.cluster is not None:
            items.update(self.cluster.describe())
        return " ".join(f"{k}={v}" for k, v in items.items())


@dataclass(frozen=True)
class Point:
    """A point of the sweep, with its identity in the run directory."""

    point_id: int
    key: str
    trace: str
    """The trace as typed (bundled name or path), as loaded into :class:`prefixsim.Trace`."""
    trace_sha256: str
    params: PolicyParams
    block_size: int
    cache_bytes: int | None = None
    """See :attr:`GridPoint.cache_bytes`."""
    cluster: ClusterSpec | None = None
    """See :attr:`GridPoint.cluster`."""

    @property
    def policy(self) -> str:
        return self.params.policy

    def param(self, name: str) -> Any:
        """Value of a policy parameter, or None when the policy does not have it."""
        return getattr(self.params, name, None)

    def describe(self) -> str:
        items = {
            "point_id": self.point_id,
            "trace": self.trace,
            "block_size": self.block_size,
            **self.params.to_dict(),
        }
        if self.cluster is not None:
            items.update(self.cluster.describe())
        return " ".join(f"{k}={v}" for k, v in items.items())


def point_key(
    trace_sha256: str,
    params: PolicyParams,
    block_size: int,
    *,
    cache_bytes: int | None = None,
    cost_identity: dict[str, Any] | None = None,
    cluster: ClusterSpec | None = None,
) -> str:
    """Stable identity of a point: a digest of the trace content, the block size and every
    parameter of the policy (so a changed default is a different point); with a model, also
    the cache's bytes and the cost model's inputs (:meth:`sweep.costing.CostSetup.identity`);
    for a cluster point its instances, router and load model. Without a model or a cluster the
    key is what it always was."""
    doc = {"trace_sha256": trace_sha256, "block_size": block_size, **params.to_dict()}
    if cache_bytes is not None:
        doc["cache_bytes"] = cache_bytes
    if cost_identity:
        doc.update(cost_identity)
    if cluster is not None:
        doc["cluster"] = cluster.to_dict()
    canonical = json.dumps(doc, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:20]


def _unique(values: Iterable[Any]) -> list[Any]:
    seen: set[Any] = set()
    out = []
    for v in values:
        marker = (type(v), v)
        if marker not in seen:
            seen.add(marker)
            out.append(v)
    return out


def _check_block_size(value: int) -> int:
    from prefixsim.policies.base import check_int

    return check_int("block_size", value, 1)


def plan_grid(cfg: SweepConfig) -> list[GridPoint]:
    """The grid's points in order (trace, policy, capacity, block_size, then the policy's
    parameters), deduplicated, each validated by the engine. The capacities are ``capacity``,
    or with a model those of ``cache_size`` at each block size (:func:`sweep.costing.grid_sizes`:
    both given is an error), or the defaults.

    Raises :class:`PlanError` (an empty grid key, an invalid point) naming the key, the value,
    what is allowed and, for an invalid point, how many points are invalid.
    """
    if cfg.tiers is not None:  # a hierarchy's grid (the tiers group): sweep/tiers.py
        from .tiers import plan_tiers

        return plan_tiers(cfg)
    for key in ("trace", "policy", "capacity", "cache_size", "block_size"):
        if getattr(cfg, key) is not None and not getattr(cfg, key):
            raise PlanError(f"{key}: empty list; the grid needs at least one value")
    traces = _unique(cfg.trace)
    policies = _unique(cfg.policy)
    for name in policies:
        prefixsim.get_policy(name)  # unknown policy: ParameterError naming the known ones
    block_sizes = [_check_block_size(b) for b in _unique(cfg.block_size)]
    if cfg.capacity is not None:
        cfg = dataclasses.replace(cfg, capacity=_unique(cfg.capacity))
    sizes = grid_sizes(cfg, block_sizes, cost_setup(cfg))
    param_values = {k: _unique(getattr(cfg, k)) for k in POLICY_PARAM_KEYS}
    try:
        clusters = cluster_specs(cfg)
    except ParameterError as err:
        raise PlanError(str(err)) from None

    points: list[GridPoint] = []
    errors: list[tuple[dict[str, Any], ParameterError]] = []
    seen: set[tuple[str, int, PolicyParams, int | None, ClusterSpec | None]] = set()
    for trace in traces:
        for policy in policies:
            names = prefixsim.get_policy(policy).params_type.field_names()
            applicable = [k for k in POLICY_PARAM_KEYS if k in names]
            for key in applicable:
                if not param_values[key]:
                    raise PlanError(f"{key}: empty list; {policy} needs at least one value")
            combos = itertools.product(*(param_values[k] for k in applicable))
            combos_list = [dict(zip(applicable, c, strict=True)) for c in combos]
            for capacity, block_size, cache_bytes in sizes:
                for extra in combos_list:
                    try:
                        params = prefixsim.make_params(policy, capacity, **extra)
                    except ParameterError as err:
                        errors.append(({"policy": policy, "capacity": capacity, **extra}, err))
                        continue
                    for cluster in clusters:
                        marker = (trace, block_size, params, cache_bytes, cluster)
                        if marker in seen:
                            continue
                        seen.add(marker)
                        points.append(GridPoint(trace, params, block_size, cache_bytes, cluster))
    if errors:
        where, first = errors[0]
        described = " ".join(f"{k}={v}" for k, v in where.items())
        n = len(errors)
        raise PlanError(f"{first} ({n} invalid point{'s' if n > 1 else ''}; first: {described})")
    return points


def unused_parameters(cfg: SweepConfig) -> list[str]:
    """Policy parameters given several values that no policy of the grid has (a warning)."""
    if cfg.tiers is not None:
        return []  # a hierarchy's grid does not use the top-level policy keys
    out = []
    for key in POLICY_PARAM_KEYS:
        values = getattr(cfg, key)
        has = [
            p
            for p in _unique(cfg.policy)
            if key in prefixsim.get_policy(p).params_type.field_names()
        ]
        if not has and len(_unique(values)) > 1:
            out.append(key)
    return out


def assign_points(
    grid: Sequence[GridPoint],
    shas: dict[Any, str],
    registry: dict[str, int],
    cost_identity: dict[str, Any] | None = None,
) -> tuple[list[Point], dict[str, int]]:
    """Give every grid point its key and id. ``shas`` maps a trace as typed (or a trace and a
    block size, for traces hashed at each block size) to its sha256;
    ``registry`` maps the keys already known in the run directory to their ids, which are kept;
    new keys get the next ids in grid order. Points of different traces with the same content
    (the same sha256) are one point (the first trace name wins).

    Returns the points and the updated registry.
    """
    registry = dict(registry)
    next_id = max(registry.values(), default=-1) + 1
    points: list[Point] = []
    seen: set[str] = set()
    for gp in grid:
        # Traces hashed at each block size (token, chat) are keyed by (trace, block_size).
        sha = shas.get((gp.trace, gp.block_size)) or shas[gp.trace]
        key = point_key(
            sha,
            gp.params,
            gp.block_size,
            cache_bytes=gp.cache_bytes,
            cost_identity=cost_identity,
            cluster=gp.cluster,
        )
        if key in seen:
            continue
        seen.add(key)
        if key not in registry:
            registry[key] = next_id
            next_id += 1
        points.append(
            Point(
                registry[key],
                key,
                gp.trace,
                sha,
                gp.params,
                gp.block_size,
                gp.cache_bytes,
                gp.cluster,
            )
        )
    return points, registry
