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

import contextlib
import dataclasses
import gc
import hashlib
import json
import operator
from collections.abc import Iterator, Sequence
from typing import Any

import prefixsim
from prefixsim import ParameterError, PolicyParams
from prefixsim.semantics import Semantics

from .cluster import ClusterSpec
from .config import POLICY_PARAM_KEYS, SweepConfig
from .expand import expand, grid_points
from .points import GridPoint, PlanError, Point
from .semantics import SPEC
from .semantics import key_document as semantics_document
from .values import unique


def point_key(
    trace_sha256: str,
    params: PolicyParams,
    block_size: int,
    *,
    cache_bytes: int | None = None,
    cost_identity: dict[str, Any] | None = None,
    cluster: ClusterSpec | None = None,
    semantics: Semantics = SPEC,
) -> str:
    """Stable identity of a point: a digest of the trace content, the block size and every
    parameter of the policy (so a changed default is a different point); with a model, also
    the cache's bytes and the cost model's inputs (:meth:`sweep.costing.CostSetup.identity`);
    for a cluster point its instances, router and load model; under an engine's semantics,
    the semantics. Without a model, a cluster or an engine's semantics the key is what it
    always was."""
    doc = {"trace_sha256": trace_sha256, "block_size": block_size, **params.to_dict()}
    doc.update(semantics_document(semantics))
    if cache_bytes is not None:
        doc["cache_bytes"] = cache_bytes
    if cost_identity:
        doc.update(cost_identity)
    if cluster is not None:
        doc["cluster"] = cluster.to_dict()
    canonical = json.dumps(doc, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:20]


_SLOTS = ("capacity", "cache_bytes")
"""The fields of a point key's document that :func:`point_keys` fills in per point."""


def point_keys(
    grid: Sequence[GridPoint], shas: dict[Any, str], cost_identity: dict[str, Any] | None = None
) -> list[tuple[str, str]]:
    """``(trace_sha256, point_key(...))`` of every grid point, exactly as :func:`point_key`
    gives it, without serialising a document per point.

    Points that differ only in ``capacity`` and ``cache_bytes`` share one canonical JSON
    document but for those two integers, so it is rendered once (by ``json.dumps`` itself, with
    a placeholder in each of the two places) and each point's text is the template with its
    integers written in (``json.dumps`` writes an ``int`` as ``int.__repr__`` does). Points
    whose parameters render themselves (a ``to_dict`` of their own, as hierarchies have) or
    carry something other than plain integers there go through :func:`point_key`."""
    templates: dict[tuple[Any, ...], list[str] | None] = {}
    others_of: dict[type, Any] = {}
    out: list[tuple[str, str]] = []
    for gp in grid:
        # Traces hashed at each block size (token, chat) are keyed by (trace, block_size).
        sha = shas.get((gp.trace, gp.block_size)) or shas[gp.trace]
        params = gp.params
        capacity, cache_bytes = params.capacity, gp.cache_bytes
        cls = type(params)
        others = others_of.get(cls)
        if others is None:
            others = others_of[cls] = _other_fields(cls)
        template = None
        if others is not False and type(capacity) is int and type(cache_bytes) in (int, _None):
            # repr tells apart what == does not (1, 1.0, True; 0.0, -0.0) but JSON does
            shape = (
                sha, gp.block_size, cls, repr(others(params)), gp.cluster, gp.semantics,
                cache_bytes is None,
            )  # fmt: skip
            template = templates.get(shape, _MISSING)
            if template is _MISSING:
                template = templates[shape] = _key_template(sha, gp, cost_identity)
        if template is None:
            key = point_key(
                sha,
                params,
                gp.block_size,
                cache_bytes=cache_bytes,
                cost_identity=cost_identity,
                cluster=gp.cluster,
                semantics=gp.semantics,
            )
        else:
            if len(template) == 3:  # capacity only
                text = f"{template[0]}{capacity}{template[2]}"
            else:  # cache_bytes, then capacity (the keys are sorted)
                text = f"{template[0]}{cache_bytes}{template[2]}{capacity}{template[4]}"
            key = hashlib.sha256(text.encode()).hexdigest()[:20]
        out.append((sha, key))
    return out


_None = type(None)
_MISSING: Any = object()


def _other_fields(cls: type[PolicyParams]) -> Any:
    """A getter of the fields but capacity (a tuple), or False when ``cls`` renders its own
    ``to_dict`` (the template would not know where its capacity goes)."""
    if cls.to_dict is not PolicyParams.to_dict:
        return False
    names = [n for n in cls.field_names() if n != "capacity"]
    return operator.attrgetter(*names) if names else lambda p: ()


def _key_template(
    sha: str, gp: GridPoint, cost_identity: dict[str, Any] | None
) -> list[str] | None:
    """:func:`point_key`'s canonical document for ``gp`` split around its capacity (and cache
    bytes): ``[text, "capacity", text]`` or ``[text, "cache_bytes", text, "capacity", text]``.
    None when the document is not of that shape (a placeholder would be ambiguous)."""
    doc = {"trace_sha256": sha, "block_size": gp.block_size, **gp.params.to_dict()}
    if any(type(v) not in (str, int, float, bool, _None) for v in doc.values()):
        return None  # only scalars have one rendering per repr
    doc.update(semantics_document(gp.semantics))
    marks = {name: f"\x00{name}\x00" for name in _SLOTS}
    doc["capacity"] = marks["capacity"]
    if gp.cache_bytes is not None:
        doc["cache_bytes"] = marks["cache_bytes"]
    if cost_identity:
        doc.update(cost_identity)
    if gp.cluster is not None:
        doc["cluster"] = gp.cluster.to_dict()
    if doc["capacity"] != marks["capacity"] or doc.get("cache_bytes") not in (
        None,
        marks["cache_bytes"],
    ):
        return None  # the cost identity overwrote a slot
    canonical = json.dumps(doc, sort_keys=True, separators=(",", ":"))
    pieces: list[str] = [canonical]
    for name in sorted(n for n in _SLOTS if n in doc):  # the order json.dumps wrote them
        token = json.dumps(marks[name])
        head, sep, tail = pieces[-1].partition(token)
        if not sep or token in tail or any(token in p for p in pieces[:-1]):
            return None
        pieces[-1:] = [head, name, tail]
    return pieces


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while a plan builds its objects (several per point):
    they form no cycles, and with hundreds of thousands of them alive, each collection the
    allocations trigger walks them all (about half of the planning time, measured). Reference
    counting still frees everything; the collector resumes as it was."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


@gc_paused()
def plan_grid(cfg: SweepConfig) -> list[GridPoint]:
    """The grid's points in order (trace, policy, capacity, block_size, then the policy's
    parameters, the cluster and the semantics; for a hierarchy: trace, hierarchy, block size),
    deduplicated, each validated by the engine: every key's rules first
    (:func:`check_every_value`), then one pass over the grid keys, each family expanded by
    one function (:func:`sweep.expand.expand`), and their product. The capacities are
    ``capacity``, or with a model those of ``cache_size`` at each block size (both given is an
    error), or the defaults.

    Raises :class:`PlanError` (an empty grid key, an invalid point) naming the key, the value,
    what is allowed and, for an invalid point, how many points are invalid.
    """
    check_every_value(cfg)
    return grid_points(expand(cfg))


NOT_WITH_TIERS: tuple[str, ...] = ("capacity", "cache_size", "instances", "router")
"""Keys a hierarchy's grid does not use and that are null unless given: refused with ``tiers``
(its capacities are each tier's, and a hierarchy does not run behind a router)."""

TIER_OWN_KEYS: tuple[str, ...] = ("policy", *POLICY_PARAM_KEYS)
"""Top-level keys a hierarchy does not use and that have a default: each tier has its own
(``tiers.LEVEL.policy``, ``tiers.LEVEL.small_ratio``, ...). Refused with ``tiers`` when given:
a value other than the schema's default, or (from the command line) typed at all."""


def check_tier_own_keys(cfg: SweepConfig, overrides: Sequence[str] | None = None) -> None:
    """Refuse a top-level :data:`TIER_OWN_KEYS` key with ``tiers``, naming it and the tier
    key to use: it would be silently ignored (``tiers=hbm_dram policy=LRU`` ran each tier's
    own policy). ``overrides`` (the command line's, as Hydra records them) also catch a value
    typed equal to the default. (The semantics keys apply to a hierarchy: its top tier.)"""
    if cfg.tiers is None:
        return
    typed = {o.split("=", 1)[0].lstrip("+~") for o in overrides or () if "=" in o}
    for key in TIER_OWN_KEYS:
        if key in typed or unique(getattr(cfg, key)) != unique(_default_of(key)):
            raise PlanError(
                f"{key}: does not apply to a hierarchy (tiers={cfg.tiers.name or '...'}): "
                f"each tier has its own; use tiers.LEVEL.{key} (e.g. tiers.hbm.{key}) or "
                f"remove {key}"
            )


def check_every_value(cfg: SweepConfig) -> None:
    """The rules every grid key follows, whether or not a point of this grid uses it: no
    empty list (``capacity=[]``, ``router=[]``, ``tiers.dram.capacity=[]`` alike), no key a
    hierarchy would ignore, and every value valid for the policies and routers that have the
    key (``overlap_weight=-1`` with no ``kv_aware`` point is refused like with one). Raises
    :class:`PlanError` or :class:`ParameterError` naming the key."""
    from .config import GRID_KEYS, TIER_LEVELS, TIER_PARAM_KEYS

    lists: list[tuple[str, Any]] = [(k, getattr(cfg, k)) for k in GRID_KEYS]
    if cfg.tiers is not None:
        lists.append(("tiers.mode", cfg.tiers.mode))
        for level in TIER_LEVELS:
            tier = getattr(cfg.tiers, level)
            if tier is not None:
                lists.extend((f"tiers.{level}.{k}", getattr(tier, k)) for k in TIER_PARAM_KEYS)
    for key, values in lists:
        if values is not None and not len(values):
            raise PlanError(f"{key}: empty list; the grid needs at least one value")
    _check_grid_size(cfg)
    if cfg.tiers is not None:
        given = [k for k in NOT_WITH_TIERS if getattr(cfg, k) is not None]
        if given:
            raise PlanError(
                f"{given[0]}: does not apply to a hierarchy (tiers={cfg.tiers.name or '...'}): "
                "its capacities are tiers.LEVEL.capacity and it runs as one cache; remove "
                f"{' and '.join(given)} or tiers"
            )
    check_tier_own_keys(cfg)
    _check_unused_values(cfg)
    if cfg.tiers is not None:
        from .config import TierConfig

        defaults = dataclasses.asdict(TierConfig())
        for level in TIER_LEVELS:
            tier = getattr(cfg.tiers, level)
            if tier is None:
                continue
            used = {
                k
                for p in unique(tier.policy)
                for k in prefixsim.get_policy(p).params_type.field_names()
            }
            for key in POLICY_PARAM_KEYS:
                values = unique(getattr(tier, key))
                if key not in used and values != defaults[key]:
                    check_policy_values(f"tiers.{level}.{key}", key, values)


def _distinct(values: Sequence[Any] | None, default: int = 1) -> int:
    return default if values is None else len(unique(values))


def grid_size_bound(cfg: SweepConfig) -> int:
    """How many points the grid has at most (before repeats are removed), counted from the
    lengths of its lists without building a point: a parameter a policy (or router) lacks
    does not multiply it, as in :func:`plan_grid` and :func:`sweep.expand.router_family`."""
    from .config import DEFAULT_CAPACITIES, ROUTER_PARAM_KEYS, TIER_LEVELS

    traces = _distinct(cfg.trace) * _distinct(cfg.block_size)
    if cfg.tiers is not None:
        tiers = _distinct(cfg.tiers.mode)
        for level in TIER_LEVELS:
            tier = getattr(cfg.tiers, level)
            if tier is None or level not in cfg.tiers.order:
                continue
            tiers *= _distinct(tier.capacity) * _per_policy(unique(tier.policy), tier)
        return traces * tiers
    if cfg.cache_size is not None:
        sizes = _distinct(cfg.cache_size)
    else:
        sizes = _distinct(cfg.capacity, len(DEFAULT_CAPACITIES))
    clusters = 1
    if cfg.instances is not None or cfg.router is not None:
        from prefixsim.cluster import get_router

        clusters = 0
        for name in unique(cfg.router if cfg.router is not None else ["round_robin"]):
            try:
                names = get_router(name).params_type.field_names()
            except ParameterError:
                continue  # an unknown router: router_family names it
            combos = 1
            for key in ROUTER_PARAM_KEYS:
                if key in names:
                    combos *= _distinct(getattr(cfg, key))
            clusters += combos
        clusters *= _distinct(cfg.instances)
    # At most: each option multiplies only the semantics that have it (sweep.semantics).
    semantics = (
        _distinct(cfg.semantics) * _distinct(cfg.unhashed_free) * _distinct(cfg.cache_output_blocks)
    )
    return traces * sizes * _per_policy(unique(cfg.policy), cfg) * clusters * semantics


def _per_policy(policies: Sequence[str], values: Any) -> int:
    """The points of one capacity: each policy times the values of the parameters it has."""
    total = 0
    for policy in policies:
        try:
            names = prefixsim.get_policy(policy).params_type.field_names()
        except ParameterError:
            continue  # an unknown policy: the planner names it
        combos = 1
        for key in POLICY_PARAM_KEYS:
            if key in names:
                combos *= _distinct(getattr(values, key))
        total += combos
    return total


def _check_grid_size(cfg: SweepConfig) -> None:
    """Refuse a grid of more than :data:`sweep.ranges.MAX_GRID_POINTS` points before any is
    built (``capacity=range(1,100000) block_size=range(1,100000)`` is ten billion), with the
    memory it would need."""
    from .config import GRID_KEYS, TIER_LEVELS, TIER_PARAM_KEYS
    from .ranges import too_many

    reason = too_many("the grid", grid_size_bound(cfg), "points")
    if reason is not None:
        lists = [(key, getattr(cfg, key)) for key in GRID_KEYS if key != "policy" or not cfg.tiers]
        if cfg.tiers is not None:
            for level in TIER_LEVELS:
                tier = getattr(cfg.tiers, level)
                if tier is not None and level in cfg.tiers.order:
                    lists.extend((f"tiers.{level}.{k}", getattr(tier, k)) for k in TIER_PARAM_KEYS)
        lengths = [f"{key}: {n:,}" for key, values in lists if (n := _distinct(values, 0)) > 1]
        raise PlanError(f"{reason}; values per key: {', '.join(lengths)}")


_SCHEMA_DEFAULTS: dict[str, Any] = {}


def _default_of(key: str) -> Any:
    """The schema's default of a top-level key (a value the engine's rules always accept)."""
    if not _SCHEMA_DEFAULTS:
        _SCHEMA_DEFAULTS.update(dataclasses.asdict(SweepConfig()))
    return _SCHEMA_DEFAULTS.get(key)


def _check_unused_values(cfg: SweepConfig) -> None:
    """The values of a policy or router parameter that no policy or router of the grid has,
    checked by the engine's rule for that key alone, for each registered policy or router
    that has it: a value no point uses is refused as it would be in a point. (Values equal to
    the schema's defaults are skipped: the routers' module is not imported for a grid that
    gives none.)"""
    from .config import ROUTER_PARAM_KEYS

    if cfg.tiers is None:
        used = {
            k for p in unique(cfg.policy) for k in prefixsim.get_policy(p).params_type.field_names()
        }
        for key in POLICY_PARAM_KEYS:
            values = unique(getattr(cfg, key))
            if key not in used and values != _default_of(key):
                check_policy_values(key, key, values)
    given = [k for k in ROUTER_PARAM_KEYS if unique(getattr(cfg, k)) != _default_of(k)]
    if not given:
        return
    from prefixsim.cluster import get_router, make_router, router_names

    routers = cfg.router if cfg.router is not None else ["round_robin"]
    has = {k for r in unique(routers) for k in get_router(r).params_type.field_names()}
    for key in given:
        if key in has and (cfg.router is not None or cfg.instances is not None):
            continue  # checked in the points (sweep.expand.router_family)
        for name in router_names():
            if key in get_router(name).params_type.field_names():
                for value in unique(getattr(cfg, key)):
                    make_router(name, **{key: value})  # ParameterError naming the key


def check_policy_values(name: str, key: str, values: Sequence[Any]) -> None:
    """``values`` of the policy parameter ``key`` (the sweep's ``name`` for it, e.g.
    ``tiers.dram.small_ratio``) through the rules of every registered policy that read that
    field alone (:attr:`PolicyParams.checks`)."""
    for policy in prefixsim.policy_names():
        params_type = prefixsim.get_policy(policy).params_type
        for reads, rule in getattr(params_type, "checks", ()):
            if reads == (key,):
                for value in values:
                    try:
                        rule(value)
                    except ParameterError as err:
                        raise ParameterError(name, err.value, err.allowed) from None


def unused_parameters(cfg: SweepConfig) -> list[str]:
    """Policy parameters given several values that no policy of the grid has (a warning)."""
    if cfg.tiers is not None:
        return []  # a hierarchy's grid does not use the top-level policy keys
    out = []
    for key in POLICY_PARAM_KEYS:
        values = getattr(cfg, key)
        has = [
            p
            for p in unique(cfg.policy)
            if key in prefixsim.get_policy(p).params_type.field_names()
        ]
        if not has and len(unique(values)) > 1:
            out.append(key)
    return out


@gc_paused()
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
    for gp, (sha, key) in zip(grid, point_keys(grid, shas, cost_identity), strict=True):
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
                gp.semantics,
            )
        )
    return points, registry
