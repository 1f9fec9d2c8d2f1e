"""The ``tiers`` group of the sweep: hierarchy points' result columns (their grid is expanded
by :func:`sweep.expand.tier_family`).

``python -m sweep tiers=hbm_dram tiers.dram.capacity=16384,65536 tiers.dram.policy=S3FIFO,LRU``
replays every combination of the hierarchy's grid keys (``tiers.mode`` and each tier's
``policy``, ``capacity`` and S3FIFO keys, a parameter a tier's policy does not have not
multiplying it) on every trace and block size. A point's parameters are a
:class:`prefixsim.tiers.Hierarchy`, whose ``to_dict()`` (and so the point's ``point_key``)
names every tier; ``policy`` is ``TIERS`` and ``capacity`` the total over the tiers. The
engine does the work (:func:`prefixsim.run_scenario`); this module only declares.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from prefixsim import PolicyParams
from prefixsim.tiers import COUNTER_NAMES, Hierarchy

from .config import TIER_LEVELS
from .points import Point

if TYPE_CHECKING:
    from .outcome import Outcome

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
