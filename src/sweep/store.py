"""The run directory: Parquet schemas, atomic writes, resume and the manifest.

Layout of a run directory::

    config.yaml             the resolved configuration of the latest run
    results.parquet         one row per point (RESULT_SCHEMA), sorted by point_id
    per_request.parquet     one row per point and request (PER_REQUEST_SCHEMA), sorted
    manifest.json           versions, traces, git commit, timings, failures, run history
    traces.parquet          one row per trace and block size (TRACES_SCHEMA): totals and the
                            infinite-cache ceiling, for the figures
    requests.parquet        one row per trace and request (REQUESTS_SCHEMA): arrival time and
                            prompt tokens, for the figures and per_request.parquet
    figures/                the figures drawn from the tables above (``python -m sweep.plot``)
    sweep.log               the log of every run into this directory
    .sweep/lock             held while a sweep writes here (one writer at a time)
    .sweep/points.json      point_key -> point_id of every point ever planned here
    .sweep/parts/           one Arrow IPC file per finished batch, until consolidated

Every file is written to a temporary name in the same directory and renamed into place, so a
killed run never leaves a half-written file under a final name. A batch's part file is written
as soon as the batch finishes; ``results.parquet`` and ``per_request.parquet`` are rebuilt from
the previous files plus the parts at the end of a run (also an interrupted one) and at the start
of the next, after which the parts are deleted. A point counts as done when its row is in
``results.parquet`` or in a part (and, when per-request output is on, its per-request rows too).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import functools
import itertools
import json
import operator
import os
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

import prefixsim
from prefixsim.policies import COMMON_COUNTERS

from .cluster import RESULT_FIELDS as CLUSTER_FIELDS
from .config import POLICY_PARAM_KEYS
from .costing import PER_REQUEST_COST_COLUMNS, RESULT_COST_COLUMNS
from .tiers import TIER_FIELDS

RESULTS_FILE = "results.parquet"
TRACES_FILE = "traces.parquet"
REQUESTS_FILE = "requests.parquet"
PER_REQUEST_FILE = "per_request.parquet"
MANIFEST_FILE = "manifest.json"
CONFIG_FILE = "config.yaml"
LOG_FILE = "sweep.log"
STATE_DIR = ".sweep"
PARQUET_COMPRESSION = "zstd"
PER_REQUEST_ROW_GROUP = 1 << 20


class StoreError(prefixsim.PrefixSimError):
    """A run directory that cannot be used (one line for the user)."""


def describe_os_error(err: OSError) -> str:
    """``cannot write PATH: REASON`` for a failed file operation in a run directory, one line."""
    reason = err.strerror or str(err)
    if err.errno == errno.ENOSPC:
        reason = "no space left on the device"
    elif err.errno == errno.EROFS:
        reason = "read-only file system"
    elif err.errno in (errno.ENOTDIR, errno.EEXIST):
        reason = f"{reason} (a file is in the way of a directory)"
    where = f" {err.filename}" if err.filename else ""
    return f"cannot write{where}: {reason}"


def _counter_names() -> list[str]:
    names = ["block_accesses"]
    for policy in prefixsim.policy_names():
        for name in prefixsim.get_policy(policy).counter_names:
            if name not in names:
                names.append(name)
    return names


COUNTER_COLUMNS: tuple[str, ...] = tuple(_counter_names())
"""``block_accesses`` then every registered policy's counters (null for a policy without it)."""

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
        *(pa.field(c, pa.float64()) for c in PER_REQUEST_COST_COLUMNS),
    ]
)
"""Columns of ``per_request.parquet``, in order (sorted by point_id, then request); the cost
columns are null for points without a model (``est_`` ones also without hardware)."""

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
def _results_metadata() -> dict[bytes, bytes]:
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


# --- atomic files -------------------------------------------------------------------------------


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


_UMASK = _umask()


@contextlib.contextmanager
def atomic_file(path: Path, mode: str = "wb") -> Iterator[IO[Any]]:
    """Open a temporary file beside ``path``; on success fsync it and rename it to ``path``; on
    any error (or interrupt) remove it, leaving ``path`` as it was."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~_UMASK)  # mkstemp creates 0600; final files get the usual mode
        with os.fdopen(fd, mode) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def atomic_write_text(path: Path, text: str) -> None:
    with atomic_file(path, "w") as f:
        f.write(text)


def _atomic_parquet(path: Path, write: Callable[[Any], None]) -> None:
    with atomic_file(path) as f:
        write(f)


# --- the run directory --------------------------------------------------------------------------


@dataclass
class Existing:
    """What a run directory already holds."""

    registry: dict[str, int] = field(default_factory=dict)
    """point_key -> point_id of every point planned here before."""
    done: set[str] = field(default_factory=set)
    """Keys of the points with a result row."""
    with_per_request: set[str] = field(default_factory=set)
    """Keys of the points with per-request rows."""
    n_parts: int = 0


class RunDir:
    """A run directory (see the module docstring for its layout)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(os.path.abspath(path))
        self.state = self.path / STATE_DIR
        self.parts = self.state / "parts"
        self._lock_file: IO[Any] | None = None
        self._part_seq = 0
        self._run_tag = f"{os.getpid()}-{int.from_bytes(os.urandom(4), 'big'):08x}"

    # files
    @property
    def results(self) -> Path:
        return self.path / RESULTS_FILE

    @property
    def per_request(self) -> Path:
        return self.path / PER_REQUEST_FILE

    @property
    def manifest(self) -> Path:
        return self.path / MANIFEST_FILE

    @property
    def traces(self) -> Path:
        return self.path / TRACES_FILE

    @property
    def requests(self) -> Path:
        return self.path / REQUESTS_FILE

    @property
    def config(self) -> Path:
        return self.path / CONFIG_FILE

    @property
    def log(self) -> Path:
        return self.path / LOG_FILE

    @property
    def registry_file(self) -> Path:
        return self.state / "points.json"

    # locking
    def lock(self) -> None:
        """Take the directory's lock; :class:`StoreError` when another sweep holds it."""
        try:
            self.state.mkdir(parents=True, exist_ok=True)
            f = open(self.state / "lock", "a+")  # noqa: SIM115 (held until unlock)
        except OSError as err:
            raise StoreError(f"out_dir={str(self.path)!r}: {describe_os_error(err)}") from None
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            f.close()
            raise StoreError(
                f"out_dir={str(self.path)!r}: another sweep is writing there; wait for it or "
                f"choose another out_dir"
            ) from None
        self._lock_file = f
        self._remove_stale_temporaries()

    def _remove_stale_temporaries(self) -> None:
        """Temporary files of a run killed while writing (we hold the lock: none is in use)."""
        for folder in (self.path, self.state, self.parts, self.state / "prompt_tokens"):
            if folder.is_dir():
                for tmp in folder.glob(".*.tmp"):
                    with contextlib.suppress(OSError):
                        tmp.unlink()

    def unlock(self) -> None:
        if self._lock_file is not None:
            self._lock_file.close()
            self._lock_file = None

    # reading what is there
    def part_files(self) -> list[Path]:
        if not self.parts.is_dir():
            return []
        return sorted(p for p in self.parts.iterdir() if p.suffix == ".arrow")

    def load_existing(self) -> Existing:
        ex = Existing()
        if self.registry_file.exists():
            try:
                doc = json.loads(self.registry_file.read_text())
                ex.registry = {str(k): int(v) for k, v in doc["points"]}
            except (OSError, ValueError, KeyError, TypeError) as err:
                raise StoreError(f"{self.registry_file}: unreadable ({err})") from None
        if self.results.exists():
            table = _read_parquet(self.results, columns=["point_id", "point_key"])
            ids = table.column("point_id").to_numpy()
            keys = table.column("point_key").to_pylist()
            for k, i in zip(keys, ids.tolist(), strict=True):
                ex.registry.setdefault(k, i)
            ex.done.update(keys)
            if self.per_request.exists():
                pr_ids = set(
                    np.unique(
                        _read_parquet(self.per_request, columns=["point_id"])
                        .column("point_id")
                        .to_numpy()
                    ).tolist()
                )
                ex.with_per_request.update(k for k, i in zip(keys, ids, strict=True) if i in pr_ids)
        parts = self.part_files()
        ex.n_parts = len(parts)
        for part in parts:
            table = _read_part(part)
            keys = table.column("point_key").to_pylist()
            ids = table.column("point_id").to_pylist()
            has_pr = table.column("hit_tokens").is_valid().to_pylist()
            for k, i, has in zip(keys, ids, has_pr, strict=True):
                ex.registry.setdefault(k, i)
                ex.done.add(k)
                if has:
                    ex.with_per_request.add(k)
                else:
                    ex.with_per_request.discard(k)
        return ex

    # writing
    def save_registry(self, registry: dict[str, int]) -> None:
        items = sorted(registry.items(), key=operator.itemgetter(1))
        doc = {"version": 1, "points": [[k, i] for k, i in items]}
        atomic_write_text(self.registry_file, json.dumps(doc, separators=(",", ":")) + "\n")

    def save_trace_tables(
        self, traces: Sequence[prefixsim.Trace], block_sizes: Sequence[int]
    ) -> None:
        """Write ``traces.parquet`` and ``requests.parquet`` for ``traces``, keeping the rows of
        traces (and block sizes) that earlier runs into this directory wrote."""
        rows = []
        for trace in traces:
            # A trace hashed at one block size (token, chat) has rows at that size only.
            sizes = block_sizes if trace.block_size is None else [trace.block_size]
            for block_size in sizes:
                top = prefixsim.ceiling(trace, block_size)
                rows.append(
                    {
                        "trace": trace.name,
                        "trace_sha256": trace.sha256,
                        "block_size": block_size,
                        "n_requests": trace.n_requests,
                        "n_blocks": trace.n_blocks,
                        "total_prompt_tokens": top.total_prompt_tokens,
                        "ceiling_hit_tokens": top.total_hit_tokens,
                        "ceiling_hit_rate": top.overall_hit_rate,
                    }
                )
        table = pa.Table.from_pylist(rows, schema=TRACES_SCHEMA)
        self._merge_table(self.traces, table, ["trace_sha256", "block_size"])
        requests = pa.concat_tables(
            pa.Table.from_arrays(
                [
                    pa.array([t.sha256] * t.n_requests, pa.string()),
                    pa.array(np.arange(t.n_requests, dtype=np.int32)),
                    pa.array(t.timestamps),
                    pa.array(t.input_lengths),
                ],
                schema=REQUESTS_SCHEMA,
            )
            for t in traces
        )
        self._merge_table(self.requests, requests, ["trace_sha256"])

    def _merge_table(self, path: Path, new: pa.Table, key: list[str]) -> None:
        """Write ``new`` to ``path`` with the old file's rows whose ``key`` is not in ``new``."""
        if path.exists():
            old = _read_parquet(path)
            if old.schema.equals(new.schema):
                new_keys = {tuple(r.values()) for r in new.select(key).to_pylist()}
                keep = [tuple(r.values()) not in new_keys for r in old.select(key).to_pylist()]
                new = pa.concat_tables([old.filter(pa.array(keep, pa.bool_())), new])
        _atomic_parquet(path, lambda f: pq.write_table(new, f, compression=PARQUET_COMPRESSION))

    def load_prompt_tokens(self, sha256: str) -> np.ndarray:
        """The input lengths of trace ``sha256``, in request order, from requests.parquet."""
        path = self.requests
        try:
            table = pq.read_table(
                path,
                columns=["request", "prompt_tokens"],
                filters=[("trace_sha256", "==", sha256)],
            ).sort_by("request")
        except (OSError, pa.ArrowException) as err:
            raise StoreError(f"{path}: unreadable ({err})") from None
        return table.column("prompt_tokens").to_numpy()

    def write_part(self, table: pa.Table) -> Path:
        """Write one finished batch (a table of :data:`PART_SCHEMA`) atomically."""
        self._part_seq += 1
        # names sort in write order: the latest version of a point wins on consolidation
        name = f"part-{time.time_ns():020d}-{self._run_tag}-{self._part_seq:06d}.arrow"
        path = self.parts / name
        with atomic_file(path) as f, pa.ipc.new_file(f, PART_SCHEMA) as writer:
            writer.write_table(table)
        return path

    def consolidate(self) -> tuple[int, set[str]]:
        """Fold the part files into ``results.parquet`` and ``per_request.parquet`` (atomically,
        sorted by point_id), then delete them. A point in several parts keeps its latest version,
        which also replaces its rows in the previous files. Returns the rows of
        ``results.parquet`` and the keys of the points folded in."""
        parts = self.part_files()
        if not parts:
            if self.results.exists():
                return pq.ParquetFile(self.results).metadata.num_rows, set()
            empty = RESULT_SCHEMA.empty_table().replace_schema_metadata(_results_metadata())
            _atomic_parquet(self.results, lambda f: pq.write_table(empty, f))
            return 0, set()
        tables = [_read_part(p) for p in parts]
        winner: dict[str, tuple[int, int]] = {}  # key -> (part, row); parts are in write order
        for pi, table in enumerate(tables):
            for row, key in enumerate(table.column("point_key").to_pylist()):
                winner[key] = (pi, row)
        rows_by_part: list[list[int]] = [[] for _ in tables]
        for pi, row in winner.values():
            rows_by_part[pi].append(row)
        chosen = [
            t if len(rows) == t.num_rows else t.take(pa.array(sorted(rows), pa.int64()))
            for t, rows in zip(tables, rows_by_part, strict=True)
            if rows
        ]
        new_results = pa.concat_tables([_conform(t, RESULT_SCHEMA) for t in chosen])
        old = _read_parquet(self.results) if self.results.exists() else None
        if old is not None:
            old = _conform(old, RESULT_SCHEMA)
            superseded = pa.array(list(winner), pa.string())
            keep = pc.invert(pc.is_in(old.column("point_key"), value_set=superseded))
            merged = pa.concat_tables([old.filter(keep), new_results])
        else:
            merged = new_results
        # one contiguous chunk: the bytes depend on the rows only (see _row_groups)
        merged = (
            merged.sort_by("point_id").combine_chunks().replace_schema_metadata(_results_metadata())
        )

        replaced_ids = new_results.column("point_id").to_numpy()
        with_hits = [_rows_with_hits(t) for t in chosen]
        with_hits = [t for t in with_hits if t.num_rows]
        if with_hits or self._has_rows_of(replaced_ids):
            self._write_per_request(with_hits, replaced_ids)
        _atomic_parquet(
            self.results,
            lambda f: pq.write_table(merged, f, compression=PARQUET_COMPRESSION),
        )
        for p in parts:
            with contextlib.suppress(OSError):
                p.unlink()
        with contextlib.suppress(OSError):
            self.parts.rmdir()  # only when empty
        return merged.num_rows, set(winner)

    def _has_rows_of(self, point_ids: np.ndarray) -> bool:
        """Whether the current per_request.parquet has rows of any of ``point_ids``."""
        if not len(point_ids) or not self.per_request.exists():
            return False
        ids = _read_parquet(self.per_request, columns=["point_id"]).column("point_id").to_numpy()
        return bool(np.isin(point_ids, ids).any())

    def _write_per_request(self, tables: list[pa.Table], replaced_ids: np.ndarray) -> None:
        """Merge the old per-request rows (minus the replaced points) with the rows of the new
        points (``tables``: part rows with hit tokens), in point_id order, a row group at a
        time (memory stays bounded)."""
        old = _OldPerRequest(self.per_request, exclude=replaced_ids)
        segments = _segments(tables, old.point_ids())
        prompts: dict[str, np.ndarray] = {}

        def prompt_tokens(sha: str) -> np.ndarray:
            if sha not in prompts:
                prompts[sha] = self.load_prompt_tokens(sha)
            return prompts[sha]

        def write(f: Any) -> None:
            with pq.ParquetWriter(
                f,
                PER_REQUEST_SCHEMA,
                compression=PARQUET_COMPRESSION,
                # point_id, prompt_tokens and hit_tokens repeat (a few distinct values per row
                # group: dictionaries pay); request counts 0, 1, 2, ... (deltas pay). Measured on
                # the 1,008-point grid (12M rows): 1.8x faster to write and 2.5x to read than
                # plain request and hit_tokens, and half the size (23 MB against 42 MB).
                use_dictionary=["point_id", "prompt_tokens", "hit_tokens"],
                column_encoding={"request": "DELTA_BINARY_PACKED"},
                write_statistics=["point_id"],  # for filters on point_id; nothing else is
            ) as w:
                chunks = _merge_sorted(old, segments, prompt_tokens)
                for group in _row_groups(chunks, PER_REQUEST_ROW_GROUP):
                    w.write_table(group, row_group_size=group.num_rows)

        _atomic_parquet(self.per_request, write)

    def rows_in_results(self) -> int:
        """Rows of the current ``results.parquet`` (0 when missing or unreadable)."""
        try:
            return int(pq.ParquetFile(self.results).metadata.num_rows)
        except (OSError, pa.ArrowException):
            return 0

    def write_manifest(self, manifest: dict[str, Any]) -> None:
        """Write ``manifest.json`` atomically; when that fails for want of space (the new file
        needs blocks of its own), overwrite the old one in place, which reuses its blocks."""
        text = json.dumps(manifest, indent=2, default=str) + "\n"
        try:
            atomic_write_text(self.manifest, text)
        except OSError as err:
            if err.errno != errno.ENOSPC or not self.manifest.is_file():
                raise
            with open(self.manifest, "r+b") as f:
                f.write(text.encode())
                f.truncate()
                f.flush()
                os.fsync(f.fileno())

    def read_manifest(self) -> dict[str, Any] | None:
        try:
            doc = json.loads(self.manifest.read_text())
        except (OSError, ValueError):
            return None
        return doc if isinstance(doc, dict) else None


def _read_parquet(path: Path, columns: Sequence[str] | None = None) -> pa.Table:
    try:
        return pq.read_table(path, columns=list(columns) if columns else None)
    except (OSError, pa.ArrowException) as err:
        raise StoreError(f"{path}: unreadable ({err})") from None


def _read_part(path: Path) -> pa.Table:
    try:
        with pa.memory_map(str(path)) as source:
            return pa.ipc.open_file(source).read_all()
    except (OSError, pa.ArrowException) as err:
        raise StoreError(f"{path}: unreadable part file ({err}); delete it to recompute") from None


def _conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table`` with ``schema``'s columns in order (a column it lacks is all null)."""
    cols = []
    for f in schema:
        if f.name in table.column_names:
            cols.append(table.column(f.name).cast(f.type))
        else:
            cols.append(pa.nulls(table.num_rows, f.type))
    return pa.Table.from_arrays(cols, schema=schema)


def _rows_with_hits(table: pa.Table) -> pa.Table:
    column = table.column("hit_tokens")
    if column.null_count == 0:
        return table
    return table.filter(column.is_valid())


@dataclass
class _Segment:
    """New points whose per-request rows are contiguous: consecutive rows of one part, one
    trace, with no old point between their ids."""

    first_id: int
    table: pa.Table  # part rows (point_id, trace_sha256, hit_tokens)

    def rows(self, prompt_tokens: Callable[[str], np.ndarray]) -> pa.Table:
        ids = self.table.column("point_id").to_numpy()
        hits = self.table.column("hit_tokens").combine_chunks()
        lengths = pc.list_value_length(hits).to_numpy()
        sha = self.table.column("trace_sha256")[0].as_py()
        prompt = prompt_tokens(sha)
        if not (lengths == len(prompt)).all():
            raise StoreError(f"prompt tokens of trace {sha[:12]} do not match the part files")
        k, n = len(ids), len(prompt)
        return pa.Table.from_arrays(
            [
                pa.array(np.repeat(ids, n)),
                pa.array(np.tile(np.arange(n, dtype=np.int32), k)),
                pa.array(np.tile(prompt, k)),
                hits.flatten(),
                *(
                    _flat_or_null(self.table, part_list_name(c), n)
                    for c in PER_REQUEST_COST_COLUMNS
                ),
            ],
            schema=PER_REQUEST_SCHEMA,
        )


def _flat_or_null(table: pa.Table, name: str, n: int) -> pa.Array:
    """The per-request values of list column ``name`` (``n`` per row), nulls where a row has
    none (a part written before the column existed, or a point without a model)."""
    if name not in table.column_names:
        return pa.nulls(table.num_rows * n, pa.float64())
    column = table.column(name).combine_chunks()
    if column.null_count == 0:
        return column.flatten()
    if column.null_count == len(column):
        return pa.nulls(len(column) * n, pa.float64())
    pieces = [
        column[i].values if column[i].is_valid else pa.nulls(n, pa.float64())
        for i in range(len(column))
    ]
    return pa.concat_arrays(pieces)


def _segments(tables: list[pa.Table], old_ids: np.ndarray) -> list[_Segment]:
    """The new points' rows cut into :class:`_Segment` s, sorted by first point id.

    The parts' rows are pooled and sorted first: a part's ids need not be consecutive (an LRU
    curve batch holds every LRU point of a trace), so cutting each part on its own could give
    overlapping segments and rows out of point_id order."""
    if not tables:
        return []
    table = pa.concat_tables(
        [
            t.select(
                ["point_id", "trace_sha256", *(c for c in PART_LIST_COLUMNS if c in t.column_names)]
            )
            for t in tables
        ]
    ).sort_by("point_id")
    ids = table.column("point_id").to_numpy()
    shas = table.column("trace_sha256").to_numpy(zero_copy_only=False)
    slot = np.searchsorted(old_ids, ids)  # which gap between old ids each point falls in
    cut = np.flatnonzero((slot[1:] != slot[:-1]) | (shas[1:] != shas[:-1])) + 1
    bounds = [0, *cut.tolist(), len(ids)]
    return [_Segment(int(ids[a]), table.slice(a, b - a)) for a, b in itertools.pairwise(bounds)]


class _OldPerRequest:
    """The previous ``per_request.parquet`` (sorted by point_id), read one row group at a time,
    without the points in ``exclude``."""

    def __init__(self, path: Path, exclude: np.ndarray) -> None:
        self.file: pq.ParquetFile | None = None
        self.exclude = exclude
        if path.exists():
            try:
                self.file = pq.ParquetFile(path)
            except (OSError, pa.ArrowException) as err:
                raise StoreError(f"{path}: unreadable ({err})") from None

    def point_ids(self) -> np.ndarray:
        """Sorted distinct point ids kept from the old file."""
        if self.file is None:
            return np.zeros(0, np.int64)
        ids = np.unique(self.file.read(columns=["point_id"]).column("point_id").to_numpy())
        return ids[~np.isin(ids, self.exclude)] if len(self.exclude) else ids

    def row_groups(self) -> Iterator[tuple[np.ndarray, pa.Table]]:
        """(point_id column, table) per row group, excluded points removed."""
        if self.file is None:
            return
        for i in range(self.file.num_row_groups):
            table = _conform(self.file.read_row_group(i), PER_REQUEST_SCHEMA)
            ids = table.column("point_id").to_numpy()
            if len(self.exclude):
                keep = ~np.isin(ids, self.exclude)
                if not keep.all():
                    table = table.filter(pa.array(keep))
                    ids = ids[keep]
            if table.num_rows:
                yield ids, table


def _row_groups(chunks: Iterator[pa.Table], size: int) -> Iterator[pa.Table]:
    """``chunks`` re-cut into tables of exactly ``size`` rows (the last one shorter), each in one
    contiguous chunk. The file's bytes then depend on its rows only, not on how they arrived
    (old row groups, new parts, an interrupted run resumed): the same rows, the same file."""
    buffer: list[pa.Table] = []
    n_buffered = 0
    for chunk in chunks:
        buffer.append(chunk)
        n_buffered += chunk.num_rows
        while n_buffered >= size:
            table = pa.concat_tables(buffer)
            yield table.slice(0, size).combine_chunks()
            rest = table.slice(size)
            buffer, n_buffered = ([rest] if rest.num_rows else []), rest.num_rows
    if n_buffered:
        yield pa.concat_tables(buffer).combine_chunks()


def _merge_sorted(
    old: _OldPerRequest,
    segments: list[_Segment],
    prompt_tokens: Callable[[str], np.ndarray],
) -> Iterator[pa.Table]:
    """Old rows and new segments' rows, in point_id order (ids are disjoint, and no old id
    falls inside a segment)."""
    j = 0
    for ids, table in old.row_groups():
        start = 0
        while start < len(ids):
            while j < len(segments) and segments[j].first_id < ids[start]:
                yield segments[j].rows(prompt_tokens)
                j += 1
            if j < len(segments):
                stop = int(np.searchsorted(ids, segments[j].first_id, side="left"))
            else:
                stop = len(ids)
            stop = max(stop, start + 1)
            yield table.slice(start, stop - start)
            start = stop
    while j < len(segments):
        yield segments[j].rows(prompt_tokens)
        j += 1
