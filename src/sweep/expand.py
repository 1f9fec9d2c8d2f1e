"""Expand a sweep's grid: one pass over the grid keys, each family of keys turned into its
values by one small function, then one product (:func:`grid_points`).

:func:`expand` calls the families in this order, which is also the order in which their
errors are reported (after :func:`sweep.grid.check_every_value`, the rules every key follows):

=================  ================================================================  =========
family             keys                                                              values
=================  ================================================================  =========
traces             ``trace``                                                         names
caches             ``policy`` and the policy parameters (:func:`policy_family`), or  per policy
                   ``tiers.mode`` and every tier's keys (:func:`tier_family`)        or hierarchy
block sizes        ``block_size``                                                    ints
cost               ``model``, ``hardware``, ``cache_tier`` (each tier's ``medium``)  a setup
sizes              ``capacity`` or ``cache_size`` (with the cost's model)            triples
routers            ``instances``, ``router`` and the router parameters               clusters
semantics          ``semantics`` and its options                                     semantics
=================  ================================================================  =========

Every family function has the shape ``(cfg, axes) -> values``: it reads its own keys of
``cfg`` and the families expanded before it (``axes``), validates its values with the engine
(a bad value is a :class:`prefixsim.ParameterError` or a :class:`~sweep.points.PlanError`
naming the key) and calls nothing else of the sweep. A key a family does not have does not
multiply it: a policy parameter multiplies only the policies that have it, a router
parameter only its routers, a semantics option only the semantics that have it.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import operator
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import prefixsim
from prefixsim import ParameterError, PolicyParams
from prefixsim.cost_bounds import capacity_from_size
from prefixsim.hardware import TIERS, HardwareProfile, load_hardware
from prefixsim.models import ModelProfile, load_model
from prefixsim.params_grid import make_params_grid
from prefixsim.semantics import FREE_ORDERS, SEMANTICS, Semantics
from prefixsim.tiers import Hierarchy, Tier, make_tier
from prefixsim.units import MAX_BYTES

from .cluster import DEFAULT_LOAD_HARDWARE, DEFAULT_LOAD_MODEL, ClusterSpec
from .config import (
    DEFAULT_CAPACITIES,
    POLICY_PARAM_KEYS,
    ROUTER_PARAM_KEYS,
    TIER_LEVELS,
    SweepConfig,
    TierConfig,
)
from .costing import CostSetup
from .points import GridPoint, PlanError
from .semantics import SPEC
from .values import unique

if TYPE_CHECKING:
    from prefixsim.cluster import LoadModel

log = logging.getLogger("sweep")


@dataclass(frozen=True)
class PolicyCaches:
    """One policy's caches: its name and the combinations of the parameters it has."""

    policy: str
    combos: list[dict[str, Any]]


Caches = PolicyCaches | Hierarchy
Size = tuple[Any, int, int | None]
"""``(capacity, block_size, cache_bytes)``: a cache's size at one block size."""
Planned = tuple[PolicyParams, int, int | None, ClusterSpec | None]
"""A point but its trace and semantics: parameters, block size, cache bytes, cluster."""


@dataclass
class Axes:
    """The grid keys expanded, family by family (:func:`expand` fills them in order)."""

    traces: list[str] = field(default_factory=list)
    caches: list[Caches] = field(default_factory=list)
    block_sizes: list[int] = field(default_factory=list)
    setup: CostSetup | None = None
    sizes: list[Size] = field(default_factory=list)
    """Single-cache grids only (a hierarchy's sizes are its tiers')."""
    clusters: list[ClusterSpec | None] = field(default_factory=lambda: [None])
    semantics: list[Semantics] = field(default_factory=lambda: [SPEC])


def expand(cfg: SweepConfig) -> Axes:
    """Every family of grid keys expanded, in the module's order (one call each)."""
    axes = Axes()
    axes.traces = trace_family(cfg, axes)
    axes.caches = (policy_family if cfg.tiers is None else tier_family)(cfg, axes)
    axes.block_sizes = block_size_family(cfg, axes)
    axes.setup = cost_family(cfg, axes)
    axes.sizes = size_family(cfg, axes)
    axes.clusters = router_family(cfg, axes)
    axes.semantics = semantics_family(cfg, axes)
    return axes


def grid_points(axes: Axes) -> list[GridPoint]:
    """The product of the families, in grid order: trace, then caches (a policy's points by
    size, block size, parameters, then cluster; a hierarchy's by block size), then semantics.
    A policy's points are validated together (:func:`_policy_points`); the invalid ones are
    one :class:`PlanError`: the first one's error, how many, and its parameters."""
    planned: list[list[Planned]] = []
    errors: list[tuple[dict[str, Any], ParameterError]] = []
    for caches in axes.caches:  # a policy's points do not depend on the trace: once each
        if isinstance(caches, Hierarchy):
            planned.append(
                [
                    (caches, b, _hierarchy_bytes(caches, b, axes.setup), None)
                    for b in axes.block_sizes
                ]
            )
            continue
        points, policy_errors = _policy_points(caches, axes.sizes, axes.clusters)
        planned.append(points)
        errors.extend(policy_errors)
    if errors:
        where, first = errors[0]
        described = " ".join(f"{k}={v}" for k, v in where.items())
        n = len(errors) * len(axes.traces)  # each trace's points are invalid alike
        raise PlanError(f"{first} ({n} invalid point{'s' if n > 1 else ''}; first: {described})")
    return [
        GridPoint(trace, params, block_size, cache_bytes, cluster, sem)
        for trace in axes.traces
        for points in planned
        for params, block_size, cache_bytes, cluster in points
        for sem in axes.semantics
    ]


# --- the families -----------------------------------------------------------------------------


def trace_family(cfg: SweepConfig, axes: Axes) -> list[str]:
    """``trace``: the traces as typed (read later, by the run)."""
    return unique(cfg.trace)


def policy_family(cfg: SweepConfig, axes: Axes) -> list[Caches]:
    """``policy`` and the policy parameters: each policy with the combinations of the
    parameters it has (validated with the sizes, in :func:`grid_points`)."""
    out: list[Caches] = []
    values = {k: unique(getattr(cfg, k)) for k in POLICY_PARAM_KEYS}
    for policy in unique(cfg.policy):
        names = prefixsim.get_policy(policy).params_type.field_names()  # unknown: its error
        own = [k for k in POLICY_PARAM_KEYS if k in names]
        for key in own:
            if not values[key]:
                raise PlanError(f"{key}: empty list; {policy} needs at least one value")
        combos = itertools.product(*(values[k] for k in own))
        out.append(PolicyCaches(policy, [dict(zip(own, c, strict=True)) for c in combos]))
    return out


def tier_family(cfg: SweepConfig, axes: Axes) -> list[Caches]:
    """``tiers.order``, ``tiers.mode`` and every tier's keys: the hierarchies, by mode then
    each tier's grid (:func:`_tier_grid`), each validated by the engine."""
    tc = cfg.tiers
    assert tc is not None
    if not tc.order:
        raise PlanError("tiers.order: empty; name the tiers in use, fastest first")
    levels = list(tc.order)
    for level in levels:
        if level not in TIER_LEVELS:
            raise PlanError(f"tiers.order: {level!r} is not one of {', '.join(TIER_LEVELS)}")
        if getattr(tc, level) is None:
            raise PlanError(f"tiers.order: tier {level!r} has no configuration (tiers.{level})")
    if len(set(levels)) != len(levels):
        raise PlanError(f"tiers.order: {levels} names a tier twice")
    per_level = [_tier_grid(level, getattr(tc, level)) for level in levels]
    out: list[Caches] = []
    for mode in unique(tc.mode):
        for tiers in itertools.product(*per_level):
            try:
                out.append(Hierarchy.of(tiers, mode))
            except ParameterError as err:
                # "tiers[1].policy" from the engine is "tiers.dram.policy" here.
                match = re.fullmatch(r"tiers\[(\d+)\]\.(\w+)", err.name)
                name = f"{levels[int(match[1])]}.{match[2]}" if match else err.name
                raise ParameterError(f"tiers.{name}", err.value, err.allowed) from None
    return out


def block_size_family(cfg: SweepConfig, axes: Axes) -> list[int]:
    """``block_size``: integers >= 1."""
    from prefixsim.policies.base import check_int

    return [check_int("block_size", b, 1) for b in unique(cfg.block_size)]


def cost_family(cfg: SweepConfig, axes: Axes) -> CostSetup | None:
    """``model``, ``hardware`` and ``cache_tier`` as engine profiles (:func:`cost_setup`);
    with hardware, every tier of a hierarchy needs a medium it has a bandwidth for."""
    setup = cost_setup(cfg)
    if cfg.tiers is not None and setup is not None and setup.hardware is not None:
        for level in cfg.tiers.order:  # every tier's hits are charged at its medium's bandwidth
            _check_medium(level, getattr(cfg.tiers, level).medium, setup.hardware)
    return setup


def size_family(cfg: SweepConfig, axes: Axes) -> list[Size]:
    """``capacity`` or ``cache_size``: ``(capacity, block_size, cache_bytes)`` in order (size,
    then block size); cache_bytes is capacity times the model's bytes per block (None without
    a model), and ``cache_size`` gives whole blocks (floor). Neither: :data:`DEFAULT_CAPACITIES`.
    None for a hierarchy: its capacities are its tiers'."""
    if cfg.tiers is not None:
        return []
    capacity = None if cfg.capacity is None else unique(cfg.capacity)
    if capacity is not None and cfg.cache_size is not None:
        raise ParameterError(
            "cache_size",
            ",".join(str(s) for s in cfg.cache_size),
            f"give capacity (blocks) or cache_size (bytes), not both (capacity={capacity}; "
            "capacity=null clears one set by an experiment)",
        )
    setup = axes.setup
    out: list[Size] = []
    if cfg.cache_size is not None:
        if setup is None:
            raise ParameterError(
                "cache_size", ",".join(cfg.cache_size), "needs a model (model=NAME)"
            )
        for size in dict.fromkeys(cfg.cache_size):
            for b in axes.block_sizes:
                blocks, size_bytes = capacity_from_size(size, setup.model, b)
                out.append((blocks, b, size_bytes))
        return out
    for c in list(DEFAULT_CAPACITIES) if capacity is None else capacity:
        for b in axes.block_sizes:
            cache_bytes: int | None = None
            if setup is not None and isinstance(c, int) and c >= 1:
                cache_bytes = c * setup.model.kv_bytes_per_block(b)
                if cache_bytes > MAX_BYTES:
                    raise ParameterError("capacity", c, f"{cache_bytes} bytes: past int64")
            out.append((c, b, cache_bytes))
    return out


def router_family(cfg: SweepConfig, axes: Axes) -> list[ClusterSpec | None]:
    """``instances``, ``router`` and the router parameters: the clusters, each router by the
    parameters it has, then by instances; ``[None]`` (single-cache points) when the grid gives
    neither ``instances`` nor ``router``. A bad value is a :class:`PlanError`."""
    if cfg.instances is None and cfg.router is None:
        return [None]
    from prefixsim.cluster import get_router, make_router
    from prefixsim.policies.base import check_int

    try:
        names = unique(cfg.router if cfg.router is not None else ["round_robin"])
        specs = {name: get_router(name) for name in names}  # an unknown name fails first
        load = _load_model(cfg, axes.setup)
        out: list[ClusterSpec | None] = []
        for name, spec in specs.items():
            own = [k for k in ROUTER_PARAM_KEYS if k in spec.params_type.field_names()]
            for combo in itertools.product(*(unique(getattr(cfg, k)) for k in own)):
                router = make_router(name, **dict(zip(own, combo, strict=True)))
                for n in unique(cfg.instances if cfg.instances is not None else [1]):
                    check_int("instances", n, 1, 4096)
                    out.append(ClusterSpec(int(n), router, load))
    except ParameterError as err:
        raise PlanError(str(err)) from None
    return out


_APPLIES: dict[str, tuple[str, ...]] = {
    "unhashed_free": ("vllm",),
    "cache_output_blocks": ("vllm", "sglang"),
}
"""The semantics options and the semantics that have each."""
_DEFAULTS: dict[str, Any] = {"unhashed_free": "front", "cache_output_blocks": False}


def semantics_family(cfg: SweepConfig, axes: Axes) -> list[Semantics]:
    """``semantics`` and its options: each semantics by the options it has, deduplicated. An
    option value none of the grid's semantics has is refused (as :class:`Semantics` refuses
    it). Every composition takes every semantics: a single cache, a hierarchy (the engine's
    rule on the combined prefix, ``docs/semantics.md``), a cluster behind any router."""
    names = unique(cfg.semantics)
    _check_names("semantics", names, SEMANTICS)
    options = {k: unique(getattr(cfg, k)) for k in _APPLIES}
    _check_names("unhashed_free", options["unhashed_free"], FREE_ORDERS)
    for value in options["cache_output_blocks"]:
        if not isinstance(value, bool):
            raise ParameterError("cache_output_blocks", value, "expected true or false")
    for key, values in options.items():
        if not any(n in _APPLIES[key] for n in names) and values != [_DEFAULTS[key]]:
            bad = next(v for v in values if v != _DEFAULTS[key])
            raise ParameterError(
                key,
                bad,
                f"applies to semantics={' or '.join(_APPLIES[key])} only, and the grid has "
                f"semantics={','.join(names)}",
            )
    out: list[Semantics] = []
    for name in names:
        own = [k for k in _APPLIES if name in _APPLIES[k]]
        for combo in itertools.product(*(options[k] for k in own)):
            sem = Semantics(name, **dict(zip(own, combo, strict=True)))
            if sem not in out:
                out.append(sem)
    return out


# --- what the families share with the run ------------------------------------------------------


def as_profile(kind: str, node: Any) -> Any:
    """The engine profile (:class:`ModelProfile` for ``kind="model"``, else
    :class:`HardwareProfile`) of a config value: a Hydra config-group node converted to a
    dataclass, a mapping, a bundled name or YAML path (from Python), a profile, or None."""
    if node is None or isinstance(node, ModelProfile | HardwareProfile):
        return node
    if isinstance(node, str):
        return load_model(node) if kind == "model" else load_hardware(node)
    if dataclasses.is_dataclass(node) and not isinstance(node, type):
        doc = dataclasses.asdict(node)
    else:
        doc = dict(node)
    cls = ModelProfile if kind == "model" else HardwareProfile
    return cls.from_dict(doc, kind)


def cost_setup(cfg: SweepConfig) -> CostSetup | None:
    """The engine profiles of ``cfg.model`` and ``cfg.hardware`` (None without a model).
    A value the engine rejects is a :class:`prefixsim.ParameterError` naming the key: the
    hardware and ``cache_tier`` are checked with or without a model (``hardware.mfu=1e-320``
    or ``cache_tier=hbmm`` ran without one, unused, while a profile file with that mfu was
    refused), so a value is refused or accepted alike whatever the other keys are."""
    hardware = as_profile("hardware", cfg.hardware)
    if hardware is not None:
        hardware.tier_bandwidth(cfg.cache_tier)  # an unknown tier fails here, naming cache_tier
    elif cfg.cache_tier not in TIERS:
        raise ParameterError("cache_tier", cfg.cache_tier, f"expected one of {', '.join(TIERS)}")
    if cfg.model is None:
        return None
    model = as_profile("model", cfg.model)
    return CostSetup(model, hardware, cfg.cache_tier)


# --- the families' helpers ---------------------------------------------------------------------


def _tier_grid(level: str, tc: TierConfig) -> list[Tier]:
    """Every tier a tier's grid keys give, validated (parameters the policy lacks ignored)."""
    out: list[Tier] = []
    for policy in dict.fromkeys(tc.policy):
        names = prefixsim.get_policy(policy).params_type.field_names()
        keys = [k for k in POLICY_PARAM_KEYS if k in names]  # no list is empty: check_every_value
        for capacity in dict.fromkeys(tc.capacity):
            for combo in itertools.product(*(dict.fromkeys(getattr(tc, k)) for k in keys)):
                extra = dict(zip(keys, combo, strict=True))
                try:
                    tier = make_tier(policy, capacity, name=level, medium=tc.medium, **extra)
                except ParameterError as err:
                    raise ParameterError(
                        f"tiers.{level}.{err.name}", err.value, err.allowed
                    ) from None
                if tier not in out:
                    out.append(tier)
    return out


def _check_medium(level: str, medium: str | None, hardware: HardwareProfile) -> None:
    """With hardware, a tier needs a medium the hardware has a bandwidth for."""
    from prefixsim.tiers import MEDIA

    if medium is None:
        raise ParameterError(
            f"tiers.{level}.medium",
            None,
            f"needed for the est_ columns with hardware={hardware.name} (one of "
            f"{', '.join(MEDIA)})",
        )
    try:
        hardware.tier_bandwidth(medium)
    except ParameterError as err:
        raise ParameterError(f"tiers.{level}.medium", medium, err.allowed) from None


def _hierarchy_bytes(h: Hierarchy, block_size: int, setup: CostSetup | None) -> int | None:
    """A hierarchy's ``cache_bytes`` with a model: the sum over its tiers (None without)."""
    if setup is None:
        return None
    total = h.capacity * setup.model.kv_bytes_per_block(block_size)  # capacity: the tiers' sum
    if total > MAX_BYTES:
        raise ParameterError("tiers", h.describe(), f"{total} bytes: past int64")
    return total


def _load_model(cfg: SweepConfig, setup: CostSetup | None) -> LoadModel:
    """The load model of the cluster points: the grid's ``model`` and ``hardware``, or
    :data:`~sweep.cluster.DEFAULT_LOAD_MODEL` / :data:`~sweep.cluster.DEFAULT_LOAD_HARDWARE`
    for the one it does not give (logged; the ``load_model`` / ``load_hardware`` columns say
    which ran). The profiles are the cost family's when it has them (converted once)."""
    from prefixsim.cluster import LoadModel

    # a profile, or a bundled profile's name (LoadModel loads it)
    model: Any = setup.model if setup is not None else None
    hardware: Any = setup.hardware if setup is not None else as_profile("hardware", cfg.hardware)
    if model is None:
        log.info("cluster points: no model given; the load model uses %s", DEFAULT_LOAD_MODEL)
        model = DEFAULT_LOAD_MODEL
    if hardware is None:
        log.info("cluster points: no hardware given; the load model uses %s", DEFAULT_LOAD_HARDWARE)
        hardware = DEFAULT_LOAD_HARDWARE
    return LoadModel(model, hardware, cfg.cache_tier, cfg.decode_seconds_per_token)


def _check_names(key: str, values: Sequence[Any], allowed: Sequence[str]) -> None:
    import difflib

    for value in values:
        if value not in allowed:
            close = difflib.get_close_matches(str(value).lower(), allowed, n=1, cutoff=0.5)
            hint = f"; did you mean {close[0]}?" if close else ""
            raise ParameterError(key, value, f"expected one of {', '.join(allowed)}{hint}")


def _policy_points(
    caches: PolicyCaches, sizes: Sequence[Size], clusters: Sequence[ClusterSpec | None]
) -> tuple[list[Planned], list[tuple[dict[str, Any], ParameterError]]]:
    """One policy's points of one trace, in grid order (size, then the policy's parameters, then
    the cluster), deduplicated; and its invalid points with their errors. Each engine rule runs
    once per distinct value (:func:`prefixsim.params_grid.make_params_grid`), not per point."""
    policy, combos = caches.policy, caches.combos
    capacities = unique(capacity for capacity, _, _ in sizes)
    entries = make_params_grid(policy, capacities, combos)
    n = len(combos)
    row = {(type(c), c): i * n for i, c in enumerate(capacities)}  # first entry of a capacity
    points: list[Planned] = []
    errors: list[tuple[dict[str, Any], ParameterError]] = []
    for capacity, block_size, cache_bytes in sizes:
        first = row[type(capacity), capacity]
        for j in range(n):
            params = entries[first + j]
            if isinstance(params, ParameterError):
                errors.append(({"policy": policy, "capacity": capacity, **combos[j]}, params))
                continue
            for cluster in clusters:
                points.append((params, block_size, cache_bytes, cluster))
    return _deduplicated(points, prefixsim.get_policy(policy).params_type), errors


def _deduplicated(points: list[Planned], params_type: type[PolicyParams]) -> list[Planned]:
    """``points`` without repeats, first occurrences in order. Parameters compare by their
    field values, as PolicyParams' == and hash do (the policy is fixed here); the markers are
    built by C-level iteration, and usually nothing repeats."""
    values_of = operator.attrgetter(*params_type.field_names())
    if not points:
        return points
    params, block_sizes, cache_bytes, clusters = zip(*points, strict=True)
    markers = list(zip(block_sizes, cache_bytes, clusters, map(values_of, params), strict=True))
    if len(set(markers)) == len(markers):
        return points
    kept: dict[tuple[Any, ...], None] = {}
    out = []
    for marker, point in zip(markers, points, strict=True):
        if marker not in kept:
            kept[marker] = None
            out.append(point)
    return out
