"""The ``tiers`` group of the sweep: hierarchy grids, their replay and their result columns.

``python -m sweep tiers=hbm_dram tiers.dram.capacity=16384,65536 tiers.dram.policy=S3FIFO,LRU``
replays every combination of the hierarchy's grid keys (``tiers.mode`` and each tier's
``policy``, ``capacity`` and S3FIFO keys, a parameter a tier's policy does not have not
multiplying it) on every trace and block size. A point's parameters are a
:class:`prefixsim.tiers.Hierarchy`, whose ``to_dict()`` (and so the point's ``point_key``)
names every tier; ``policy`` is ``TIERS`` and ``capacity`` the total over the tiers. The
engine does the work (:func:`prefixsim.tiers.replay_hierarchy`); this module only declares.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

import prefixsim
from prefixsim import ParameterError, PolicyParams, Trace
from prefixsim.hardware import HardwareProfile
from prefixsim.semantics import Semantics
from prefixsim.tiers import (
    COUNTER_NAMES,
    MEDIA,
    Hierarchy,
    Tier,
    TieredResult,
    make_tier,
    replay_hierarchy,
)
from prefixsim.units import MAX_BYTES

from .config import POLICY_PARAM_KEYS, TIER_LEVELS, SweepConfig, TierConfig
from .costing import CostSetup, cost_setup

if TYPE_CHECKING:
    from .grid import GridPoint, Point
    from .run import Outcome

MAX_TIERS = len(TIER_LEVELS)
"""Tiers with columns of their own in results.parquet (``tier0_*`` ... ``tier3_*``)."""
TIER_INT_COLUMNS: tuple[str, ...] = ("capacity", "hit_tokens", "final_cache_blocks", *COUNTER_NAMES)
TIER_STRING_COLUMNS: tuple[str, ...] = ("name", "policy", "medium")

TIER_FIELDS: tuple[pa.Field, ...] = (
    pa.field("mode", pa.string()),
    pa.field("tiers", pa.string()),
    *(
        pa.field(f"tier{t}_{c}", pa.string() if c in TIER_STRING_COLUMNS else pa.int64())
        for t in range(MAX_TIERS)
        for c in (*TIER_STRING_COLUMNS, *TIER_INT_COLUMNS)
    ),
)
"""Columns of results.parquet for hierarchy points (null for single-cache points): the mode,
the tiers as JSON, then per tier ``t``, fastest first, its name, policy, medium, capacity, hit
tokens (summed over requests), final occupancy and counters."""


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


def plan_tiers(cfg: SweepConfig) -> list[GridPoint]:
    """The hierarchy grid's points: traces x block sizes x modes x each tier's grid."""
    from .grid import GridPoint, PlanError, _check_block_size
    from .values import unique

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
    hierarchies: list[Hierarchy] = []
    for mode in unique(tc.mode):
        for tiers in itertools.product(*per_level):
            try:
                hierarchy = Hierarchy.of(tiers, mode)
            except ParameterError as err:
                # "tiers[1].policy" from the engine is "tiers.dram.policy" here.
                match = re.fullmatch(r"tiers\[(\d+)\]\.(\w+)", err.name)
                name = f"{levels[int(match[1])]}.{match[2]}" if match else err.name
                raise ParameterError(f"tiers.{name}", err.value, err.allowed) from None
            hierarchies.append(hierarchy)
    block_sizes = [_check_block_size(b) for b in unique(cfg.block_size)]
    setup = cost_setup(cfg)
    if setup is not None and setup.hardware is not None:
        for level in levels:  # every tier's hits are charged at its medium's bandwidth
            _check_medium(level, getattr(tc, level).medium, setup.hardware)
    return [
        GridPoint(trace, h, b, _hierarchy_bytes(h, b, setup))
        for trace in unique(cfg.trace)
        for h in hierarchies
        for b in block_sizes
    ]


def _check_medium(level: str, medium: str | None, hardware: HardwareProfile) -> None:
    """With hardware, a tier needs a medium the hardware has a bandwidth for."""
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


def hierarchy_cost_inputs(params: PolicyParams, outcome: Outcome) -> dict[str, Any]:
    """The keyword arguments of :meth:`CostSetup.point_columns` that make a hierarchy point's
    cost per tier (none for a single cache)."""
    if not isinstance(params, Hierarchy):
        return {}
    if outcome.tier_hit_tokens is None:  # cannot happen: kept with the hit tokens
        raise RuntimeError(f"point {outcome.point_id}: no tier hit tokens for the cost columns")
    return {
        "tier_hit_tokens": outcome.tier_hit_tokens,
        "media": [t.medium for t in params.tiers],
    }


def replay_point(
    trace: Trace, params: PolicyParams, block_size: int, semantics: Semantics | None = None
) -> prefixsim.ReplayResult | TieredResult:
    """One point's replay: a hierarchy through the tier engine, a policy through its own."""
    if isinstance(params, Hierarchy):
        return replay_hierarchy(trace, params, block_size, semantics=semantics)
    if semantics is None or semantics.name == "spec":
        return prefixsim.replay_params(trace, params, block_size)  # today's call, as it was
    return prefixsim.replay_params(trace, params, block_size, semantics=semantics)


def tier_columns(points: Sequence[Point], outcomes: Sequence[Outcome]) -> dict[str, list[Any]]:
    """The :data:`TIER_FIELDS` columns of result rows (nulls for single-cache points)."""
    cols: dict[str, list[Any]] = {f.name: [] for f in TIER_FIELDS}
    for p, o in zip(points, outcomes, strict=True):
        h = p.params if isinstance(p.params, Hierarchy) else None
        counters = o.counters or {}
        cols["mode"].append(h.mode if h else None)
        cols["tiers"].append(h.describe() if h else None)
        for t in range(MAX_TIERS):
            tier = h.tiers[t] if h and t < len(h.tiers) else None
            values: dict[str, Any] = dict.fromkeys((*TIER_STRING_COLUMNS, *TIER_INT_COLUMNS))
            if tier is not None:
                values.update(name=tier.name, policy=tier.policy, medium=tier.medium)
                values["capacity"] = tier.params.capacity
                for c in ("hit_tokens", "final_cache_blocks", *COUNTER_NAMES):
                    values[c] = counters.get(f"tier{t}_{c}")
            for c, v in values.items():
                cols[f"tier{t}_{c}"].append(v)
    return cols
