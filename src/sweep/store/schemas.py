"""The run directory's tables: file names, Arrow schemas and the columns they hold.

Every reader and writer of a run directory takes its columns from here, so the files, the
figures and the docs (``docs/columns.md`` lists them for users) agree on one schema.
"""

from __future__ import annotations

import functools

import pyarrow as pa

import prefixsim
from prefixsim.policies import COMMON_COUNTERS

from ..cluster import RESULT_FIELDS as CLUSTER_FIELDS
from ..config import POLICY_PARAM_KEYS
from ..costing import PER_REQUEST_COST_COLUMNS, RESULT_COST_COLUMNS
from ..semantics import RESULT_FIELDS as SEMANTICS_FIELDS
from ..tiers import TIER_FIELDS

RESULTS_FILE = "results.parquet"
TRACES_FILE = "traces.parquet"
REQUESTS_FILE = "requests.parquet"
PER_REQUEST_FILE = "per_request.parquet"
MANIFEST_FILE = "manifest.json"
CONFIG_FILE = "config.yaml"
LOG_FILE = "sweep.log"
STATE_DIR = ".sweep"


def _counter_names() -> list[str]:
    names = ["block_accesses"]
    for policy in prefixsim.policy_names():
        for name in prefixsim.get_policy(policy).counter_names:
            if name not in names:
                names.append(name)
    return [*names, "temporary_blocks"]


COUNTER_COLUMNS: tuple[str, ...] = tuple(_counter_names())
"""``block_accesses`` then every registered policy's counters (null for a policy without it),
then ``temporary_blocks`` (blocks held for a request and never cached: null under ``spec``)."""

ALWAYS_COUNTED: tuple[str, ...] = ("block_accesses", *COMMON_COUNTERS)
"""Counters every policy reports (never null)."""

_PARAM_TYPES = {"small_ratio": pa.float64(), "max_freq": pa.int64(), "ghost_freq": pa.int64()}

RESULT_SCHEMA = pa.schema(
    [
        pa.field("point_id", pa.int64(), nullable=False),
        pa.field("trace", pa.string(), nullable=False),
        pa.field("trace_sha256", pa.string(), nullable=False),
        pa.field("policy", pa.string(), nullable=False),
        pa.field("capacity", pa.int64(), nullable=False),
        pa.field("block_size", pa.int64(), nullable=False),
        *(pa.field(k, _PARAM_TYPES[k]) for k in POLICY_PARAM_KEYS),
        *SEMANTICS_FIELDS,  # the point's hit rule (docs/semantics.md)
        pa.field("n_requests", pa.int64(), nullable=False),
        pa.field("total_prompt_tokens", pa.int64(), nullable=False),
        pa.field("total_hit_tokens", pa.int64(), nullable=False),
        pa.field("overall_hit_rate", pa.float64(), nullable=False),
        pa.field("final_cache_blocks", pa.int64(), nullable=False),
        *(pa.field(c, pa.int64(), nullable=c not in ALWAYS_COUNTED) for c in COUNTER_COLUMNS),
        *(pa.field(c, getattr(pa, t)()) for c, t in RESULT_COST_COLUMNS),
        pa.field("replay_seconds", pa.float64(), nullable=False),
        pa.field("point_key", pa.string(), nullable=False),
        *CLUSTER_FIELDS,  # cluster points (issue 14); null for single-cache points
        *TIER_FIELDS,  # hierarchy points (the tiers group); null for a single cache
    ]
)
"""Columns of ``results.parquet``, in order."""

NULLABLE_INT_COLUMNS: tuple[str, ...] = tuple(
    f.name for f in RESULT_SCHEMA if f.nullable and pa.types.is_integer(f.type)
)
"""Integer columns that are null for some policies: ``pandas.read_parquet`` gives them pandas'
nullable ``Int64`` dtype (recorded in the file's pandas metadata) instead of float64."""

TIMING_COLUMNS: tuple[str, ...] = ("replay_seconds",)
"""Columns that differ between two runs of the same points."""

PER_REQUEST_SCHEMA = pa.schema(
    [
        pa.field("point_id", pa.int64(), nullable=False),
        pa.field("request", pa.int32(), nullable=False),
        pa.field("prompt_tokens", pa.int64(), nullable=False),
        pa.field("hit_tokens", pa.int64(), nullable=False),
    ]
)
"""Columns of ``per_request.parquet``, in order (sorted by point_id, then request), when no
point in it has a model; otherwise :data:`PER_REQUEST_COST_FIELDS` follow
(:func:`per_request_schema`)."""

PER_REQUEST_COST_FIELDS: tuple[pa.Field, ...] = tuple(
    pa.field(c, pa.float64()) for c in PER_REQUEST_COST_COLUMNS
)
"""The cost model's per-request columns: in ``per_request.parquet`` only when some point
written to the run directory had a model (null for the points without one; ``est_`` ones
also without hardware). Without a model they would be 2 x 8 bytes of nulls per row, written
and read for nothing."""


def per_request_schema(with_cost: bool) -> pa.Schema:
    """The schema of ``per_request.parquet``, with the cost columns or without."""
    if not with_cost:
        return PER_REQUEST_SCHEMA
    return pa.schema([*PER_REQUEST_SCHEMA, *PER_REQUEST_COST_FIELDS])


TRACES_SCHEMA = pa.schema(
    [
        pa.field("trace", pa.string(), nullable=False),
        pa.field("trace_sha256", pa.string(), nullable=False),
        pa.field("block_size", pa.int64(), nullable=False),
        pa.field("n_requests", pa.int64(), nullable=False),
        pa.field("n_blocks", pa.int64(), nullable=False),
        pa.field("total_prompt_tokens", pa.int64(), nullable=False),
        pa.field("ceiling_hit_tokens", pa.int64(), nullable=False),
        pa.field("ceiling_hit_rate", pa.float64(), nullable=False),
    ]
)
"""Columns of ``traces.parquet``: the infinite-cache ceiling is what a cache that never evicts
would hit (``prefixsim.ceiling``), the bound every capacity curve meets."""

REQUESTS_SCHEMA = pa.schema(
    [
        pa.field("trace_sha256", pa.string(), nullable=False),
        pa.field("request", pa.int32(), nullable=False),
        pa.field("timestamp", pa.float64(), nullable=False),
        pa.field("prompt_tokens", pa.int64(), nullable=False),
    ]
)
"""Columns of ``requests.parquet`` (``timestamp``: the trace's arrival time, ms)."""


def part_list_name(column: str) -> str:
    """A per-request column's name in a part file (``prefill_flops_saved`` is also a result
    column there: its per-request list is ``prefill_flops_saved@request``)."""
    return f"{column}@request"


PART_SCHEMA = pa.schema(
    [
        *RESULT_SCHEMA,
        pa.field("hit_tokens", pa.list_(pa.int64())),
        *(pa.field(part_list_name(c), pa.list_(pa.float64())) for c in PER_REQUEST_COST_COLUMNS),
    ]
)
"""A part file: result rows plus each point's per-request hit tokens (null when not saved) and
per-request cost columns (null without a model)."""

PART_LIST_COLUMNS: tuple[str, ...] = (
    "hit_tokens",
    *(part_list_name(c) for c in PER_REQUEST_COST_COLUMNS),
)
"""The per-request (list) columns of a part file."""


@functools.cache
def results_metadata() -> dict[bytes, bytes]:
    """pandas metadata of results.parquet (nullable integer columns as ``Int64``)."""
    import pandas as pd

    empty = pd.DataFrame(
        {
            f.name: pd.Series(
                [],
                dtype="Int64"
                if f.name in NULLABLE_INT_COLUMNS
                else (object if pa.types.is_string(f.type) else f.type.to_pandas_dtype()),
            )
            for f in RESULT_SCHEMA
        }
    )
    table = pa.Table.from_pandas(empty, schema=RESULT_SCHEMA, preserve_index=False)
    return dict(table.schema.metadata or {})
