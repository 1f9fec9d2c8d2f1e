"""A part file's table from a batch's outcomes: the result row of each point, its per-request
hit tokens and, with a model, its cost columns (:data:`sweep.store.PART_SCHEMA`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from prefixsim import Trace

from .cluster import RESULT_FIELDS as CLUSTER_FIELDS
from .config import POLICY_PARAM_KEYS
from .costing import PER_REQUEST_COST_COLUMNS, RESULT_COST_COLUMNS, CostSetup
from .grid import Point
from .outcome import Outcome
from .semantics import result_columns as semantics_columns
from .store import COUNTER_COLUMNS, PART_LIST_COLUMNS, PART_SCHEMA, part_list_name
from .tiers import hierarchy_cost_inputs, tier_columns


def part_table(
    points: dict[int, Point],
    outcomes: Sequence[Outcome],
    setup: CostSetup | None = None,
    traces: dict[str, Trace] | None = None,
    keep_hits: bool = True,
) -> pa.Table:
    """A part file's table from a batch's successful outcomes. With a cost ``setup`` (a model),
    the cost columns are computed from each outcome's hit tokens and its trace's prompt tokens
    (``traces`` by sha256); ``keep_hits=False`` then drops the hit tokens (per-request output
    off)."""
    pts = [points[o.point_id] for o in outcomes]
    cols: dict[str, Any] = {
        "point_id": [p.point_id for p in pts],
        "trace": [p.trace for p in pts],
        "trace_sha256": [p.trace_sha256 for p in pts],
        "policy": [p.policy for p in pts],
        "capacity": [p.params.capacity for p in pts],
        "block_size": [p.block_size for p in pts],
    }
    for k in POLICY_PARAM_KEYS:
        cols[k] = [p.param(k) for p in pts]
    cols.update(semantics_columns([p.semantics for p in pts]))
    cols.update(
        n_requests=[o.n_requests for o in outcomes],
        total_prompt_tokens=[o.total_prompt_tokens for o in outcomes],
        total_hit_tokens=[o.total_hit_tokens for o in outcomes],
        overall_hit_rate=[o.overall_hit_rate for o in outcomes],
        final_cache_blocks=[o.final_cache_blocks for o in outcomes],
    )
    for c in COUNTER_COLUMNS:
        cols[c] = [(o.counters or {}).get(c) for o in outcomes]
    cost_rows, cost_lists = _cost_columns(pts, outcomes, setup, traces)
    for c, _ in RESULT_COST_COLUMNS:
        cols[c] = [row.get(c) for row in cost_rows]
    cols["cache_bytes"] = [p.cache_bytes for p in pts]
    cols["replay_seconds"] = [o.seconds for o in outcomes]
    cols["point_key"] = [p.key for p in pts]
    for f in CLUSTER_FIELDS:  # cluster points (issue 14); null for single-cache points
        cols[f.name] = [None if o.cluster is None else o.cluster[f.name] for o in outcomes]
    cols.update(tier_columns(pts, outcomes))
    arrays = [
        pa.array(cols[f.name], f.type) for f in PART_SCHEMA if f.name not in PART_LIST_COLUMNS
    ]
    hits = [o.hit_tokens for o in outcomes if o.hit_tokens is not None]
    per_request = keep_hits and bool(hits) and len(hits) == len(outcomes)
    arrays.append(
        _list_column(hits if per_request else None, PART_SCHEMA.field("hit_tokens"), len(outcomes))
    )
    for c in PER_REQUEST_COST_COLUMNS:
        values = cost_lists.get(c) if per_request else None
        arrays.append(_list_column(values, PART_SCHEMA.field(part_list_name(c)), len(outcomes)))
    return pa.Table.from_arrays(arrays, schema=PART_SCHEMA)


def _list_column(values: list[np.ndarray] | None, f: pa.Field, n: int) -> pa.Array:
    """One list per outcome (or all null)."""
    if values is None or len(values) != n:
        return pa.nulls(n, f.type)
    offsets = np.zeros(len(values) + 1, np.int64)
    np.cumsum([len(v) for v in values], out=offsets[1:])
    flat = np.concatenate(values) if values else np.zeros(0)
    return pa.LargeListArray.from_arrays(pa.array(offsets), pa.array(flat, f.type.value_type))


def _cost_columns(
    pts: Sequence[Point],
    outcomes: Sequence[Outcome],
    setup: CostSetup | None,
    traces: dict[str, Trace] | None,
) -> tuple[list[dict[str, Any]], dict[str, list[np.ndarray]]]:
    """Result cost columns per outcome, and per-request cost arrays per column (empty without
    a model: the columns are null)."""
    if setup is None or traces is None:
        return [{} for _ in outcomes], {}
    rows: list[dict[str, Any]] = []
    lists: dict[str, list[np.ndarray]] = {}
    for p, o in zip(pts, outcomes, strict=True):
        if o.hit_tokens is None:  # cannot happen: hits are kept for every point with a model
            raise RuntimeError(f"point {p.point_id}: no hit tokens for the cost columns")
        prompt = traces[p.trace_sha256].input_lengths
        totals, per_request = setup.point_columns(
            prompt, o.hit_tokens, p.block_size, **hierarchy_cost_inputs(p.params, o)
        )
        rows.append(totals)
        for c, values in per_request.items():
            lists.setdefault(c, []).append(values)
    return rows, lists
