"""``per_request.parquet``: the previous file's rows merged with the new points' rows, in
point_id order, one row group at a time (memory stays bounded), cut into row groups of a fixed
size so that the file's bytes depend on its rows only (an interrupted run resumed writes the
same file as an uninterrupted one)."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..costing import PER_REQUEST_COST_COLUMNS
from .files import PARQUET_COMPRESSION, StoreError, atomic_parquet, conform, read_parquet
from .schemas import PART_LIST_COLUMNS, PER_REQUEST_COST_FIELDS, part_list_name, per_request_schema
from .tables import load_prompt_tokens

PER_REQUEST_WRITE_OPTIONS: dict[str, Any] = dict(
    compression=PARQUET_COMPRESSION,
    # point_id, prompt_tokens and hit_tokens repeat (a few distinct values per row group:
    # dictionaries pay); request counts 0, 1, 2, ... (deltas pay). Measured on the 1,008-point
    # grid (12M rows): 1.8x faster to write and 2.5x to read than plain request and
    # hit_tokens, and half the size (23 MB against 42 MB).
    use_dictionary=["point_id", "prompt_tokens", "hit_tokens"],
    column_encoding={"request": "DELTA_BINARY_PACKED"},
    write_statistics=["point_id"],  # for filters on point_id; nothing else is
)
"""How ``per_request.parquet`` is encoded (pyarrow.parquet.ParquetWriter options)."""


def has_rows_of(path: Path, point_ids: np.ndarray) -> bool:
    """Whether the per_request.parquet at ``path`` has rows of any of ``point_ids``."""
    if not len(point_ids) or not path.exists():
        return False
    ids = read_parquet(path, columns=["point_id"]).column("point_id").to_numpy()
    return bool(np.isin(point_ids, ids).any())


def write_per_request(
    path: Path,
    requests: Path,
    tables: list[pa.Table],
    replaced_ids: np.ndarray,
    row_group: int,
) -> None:
    """Merge the old per-request rows at ``path`` (minus the points ``replaced_ids``) with the
    rows of the new points (``tables``: part rows with hit tokens; prompt tokens from
    ``requests``), in point_id order, in row groups of ``row_group`` rows. The cost columns
    are written when the old file has them or a new point has a model."""
    old = _OldPerRequest(path, exclude=replaced_ids)
    schema = per_request_schema(old.has_cost() or any(map(has_cost, tables)))
    segments = cut_segments(tables, old.point_ids())
    prompt_tokens = PromptTokens(requests)

    def write(f: Any) -> None:
        with pq.ParquetWriter(f, schema, **PER_REQUEST_WRITE_OPTIONS) as w:
            chunks = _merge_sorted(old.row_groups(schema), segments, prompt_tokens, schema)
            for group in _row_groups(chunks, row_group):
                w.write_table(group, row_group_size=group.num_rows)

    atomic_parquet(path, write)


class PromptTokens:
    """sha256 -> the trace's prompt tokens from requests.parquet (``path``), each read once."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._cache: dict[str, np.ndarray] = {}

    def __call__(self, sha256: str) -> np.ndarray:
        if sha256 not in self._cache:
            self._cache[sha256] = load_prompt_tokens(self.path, sha256)
        return self._cache[sha256]


def has_cost(table: pa.Table) -> bool:
    """Whether any row of part rows ``table`` has per-request cost values (a model)."""
    names = (part_list_name(c) for c in PER_REQUEST_COST_COLUMNS)
    return any(
        n in table.column_names and table.column(n).null_count < table.num_rows for n in names
    )


@dataclass
class _Segment:
    """New points whose per-request rows are contiguous: consecutive rows of one part, one
    trace, with no old point between their ids."""

    first_id: int
    table: pa.Table  # part rows (point_id, trace_sha256, hit_tokens)

    def columns(
        self, prompt_tokens: Callable[[str], np.ndarray]
    ) -> tuple[np.ndarray, np.ndarray, pa.ListArray]:
        """The point ids, the trace's prompt tokens (each point has one row per request) and
        the points' hit tokens (one list per point, checked against the prompt tokens)."""
        ids = self.table.column("point_id").to_numpy()
        hits = self.table.column("hit_tokens").combine_chunks()
        import pyarrow.compute as pc  # here: 0.04 s of import the sweep's start need not wait for

        lengths = pc.list_value_length(hits).to_numpy()
        sha = self.table.column("trace_sha256")[0].as_py()
        prompt = prompt_tokens(sha)
        if not (lengths == len(prompt)).all():
            raise StoreError(f"prompt tokens of trace {sha[:12]} do not match the part files")
        return ids, prompt, hits

    def rows(self, prompt_tokens: Callable[[str], np.ndarray], schema: pa.Schema) -> pa.Table:
        """The segment's per-request rows with ``schema``'s columns."""
        ids, prompt, hits = self.columns(prompt_tokens)
        k, n = len(ids), len(prompt)
        costs = [
            _flat_or_null(self.table, part_list_name(f.name), n)
            for f in schema
            if f.name in PER_REQUEST_COST_COLUMNS
        ]
        return pa.Table.from_arrays(
            [
                pa.array(np.repeat(ids, n)),
                pa.array(np.tile(np.arange(n, dtype=np.int32), k)),
                pa.array(np.tile(prompt, k)),
                hits.flatten(),
                *costs,
            ],
            schema=schema,
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


SEGMENT_COLUMNS: tuple[str, ...] = ("point_id", "trace_sha256", *PART_LIST_COLUMNS)
"""The columns of part rows that per-request rows are built from."""


def segment_columns(table: pa.Table) -> pa.Table:
    """``table`` with only :data:`SEGMENT_COLUMNS` (those it has), in that order."""
    names = table.column_names  # a new list at every access: once per table
    if names == [c for c in SEGMENT_COLUMNS if c in names]:
        return table
    present = set(names)
    return table.select([c for c in SEGMENT_COLUMNS if c in present])


def cut_segments(tables: list[pa.Table], old_ids: np.ndarray) -> list[_Segment]:
    """The new points' rows cut into :class:`_Segment` s, sorted by first point id.

    The parts' rows are pooled and sorted first: a part's ids need not be consecutive (an LRU
    curve batch holds every LRU point of a trace), so cutting each part on its own could give
    overlapping segments and rows out of point_id order."""
    if not tables:
        return []
    # Parts of consecutive ids (most batches) pooled in the order of their first ids are
    # sorted already: the sort (a copy of every hit token) is then left out.
    tables = sorted(tables, key=lambda t: t.column("point_id")[0].as_py())
    table = pa.concat_tables([segment_columns(t) for t in tables])
    if (np.diff(table.column("point_id").to_numpy()) < 0).any():
        table = table.sort_by("point_id")
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

    def has_cost(self) -> bool:
        """Whether the old file has the cost columns."""
        names = set(self.file.schema_arrow.names) if self.file is not None else set()
        return any(f.name in names for f in PER_REQUEST_COST_FIELDS)

    def row_groups(self, schema: pa.Schema) -> Iterator[tuple[np.ndarray, pa.Table]]:
        """(point_id column, table with ``schema``) per row group, excluded points removed."""
        if self.file is None:
            return
        for i in range(self.file.num_row_groups):
            table = conform(self.file.read_row_group(i), schema)
            ids = table.column("point_id").to_numpy()
            if len(self.exclude):
                keep = ~np.isin(ids, self.exclude)
                if not keep.all():
                    table = table.filter(pa.array(keep))
                    ids = ids[keep]
            if table.num_rows:
                yield ids, table


class RowGroupCutter:
    """Tables pushed in, re-cut into tables of exactly ``size`` rows (the last one, from
    :meth:`rest`, shorter), each in one contiguous chunk. The file's bytes then depend on its
    rows only, not on how they arrived (old row groups, new parts, an interrupted run resumed,
    points written as they finish): the same rows, the same file."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._buffer: list[pa.Table] = []
        self._n = 0

    def push(self, chunk: pa.Table) -> Iterator[pa.Table]:
        """The full row groups that ``chunk`` completes."""
        self._buffer.append(chunk)
        self._n += chunk.num_rows
        while self._n >= self.size:
            table = pa.concat_tables(self._buffer)
            yield table.slice(0, self.size).combine_chunks()
            rest = table.slice(self.size)
            self._buffer, self._n = ([rest] if rest.num_rows else []), rest.num_rows

    def rest(self) -> pa.Table | None:
        """The last, shorter row group (None when the rows filled whole groups)."""
        if not self._n:
            return None
        table = pa.concat_tables(self._buffer).combine_chunks()
        self._buffer, self._n = [], 0
        return table


class RowGroupBuilder:
    """The per-request rows of segments without cost columns (:data:`PER_REQUEST_SCHEMA`)
    copied straight into row groups of exactly ``size`` rows: the tables that
    :meth:`_Segment.rows` and :class:`RowGroupCutter` make, without building each segment's
    columns (repeat, tile) and then copying them again into whole row groups. For the rows
    written as the points finish (:mod:`.stream`), which the main thread builds while the
    replays run: it halves the memory the rows go through."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._arange = np.zeros(0, np.int32)
        self._new()

    def _new(self) -> None:
        n = self.size
        self._cols = (
            np.empty(n, np.int64),  # point_id
            np.empty(n, np.int32),  # request
            np.empty(n, np.int64),  # prompt_tokens
            np.empty(n, np.int64),  # hit_tokens
        )
        self._n = 0

    def push(
        self, segment: _Segment, prompt_tokens: Callable[[str], np.ndarray]
    ) -> Iterator[pa.Table]:
        """The full row groups that ``segment``'s rows complete."""
        ids, prompt, hits = segment.columns(prompt_tokens)
        flat = hits.flatten().to_numpy()
        n = len(prompt)
        if len(self._arange) != n:
            self._arange = np.arange(n, dtype=np.int32)
        point_id, request, prompt_tokens_, hit_tokens = self._cols
        for k, pid in enumerate(ids.tolist()):
            done = 0
            while done < n:  # a point's rows may straddle two row groups
                take = min(n - done, self.size - self._n)
                a, b = self._n, self._n + take
                point_id[a:b] = pid
                request[a:b] = self._arange[done : done + take]
                prompt_tokens_[a:b] = prompt[done : done + take]
                hit_tokens[a:b] = flat[k * n + done : k * n + done + take]
                self._n, done = b, done + take
                if self._n == self.size:
                    yield self._table()
                    self._new()
                    point_id, request, prompt_tokens_, hit_tokens = self._cols

    def rest(self) -> pa.Table | None:
        """The last, shorter row group (None when the rows filled whole groups)."""
        if not self._n:
            return None
        table = self._table()
        self._new()
        return table

    def _table(self) -> pa.Table:
        arrays = [pa.array(c[: self._n]) for c in self._cols]
        return pa.Table.from_arrays(arrays, schema=per_request_schema(False))


def _row_groups(chunks: Iterator[pa.Table], size: int) -> Iterator[pa.Table]:
    """``chunks`` re-cut into row groups of ``size`` rows (:class:`RowGroupCutter`)."""
    cutter = RowGroupCutter(size)
    for chunk in chunks:
        yield from cutter.push(chunk)
    last = cutter.rest()
    if last is not None:
        yield last


def _merge_sorted(
    old: Iterator[tuple[np.ndarray, pa.Table]],
    segments: list[_Segment],
    prompt_tokens: Callable[[str], np.ndarray],
    schema: pa.Schema,
) -> Iterator[pa.Table]:
    """Old rows (``old``: the old file's row groups) and new segments' rows, in point_id order
    (ids are disjoint, and no old id falls inside a segment), with ``schema``."""
    j = 0
    for ids, table in old:
        start = 0
        while start < len(ids):
            while j < len(segments) and segments[j].first_id < ids[start]:
                yield segments[j].rows(prompt_tokens, schema)
                j += 1
            if j < len(segments):
                stop = int(np.searchsorted(ids, segments[j].first_id, side="left"))
            else:
                stop = len(ids)
            stop = max(stop, start + 1)
            yield table.slice(start, stop - start)
            start = stop
    while j < len(segments):
        yield segments[j].rows(prompt_tokens, schema)
        j += 1
