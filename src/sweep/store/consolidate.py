"""Folding the part files into ``results.parquet`` and ``per_request.parquet``.

At the end of a run (also an interrupted one) and at the start of the next, the parts are
merged with the previous files, atomically and sorted by point_id, then deleted. A point in
several parts keeps its latest version, which also replaces its rows in the previous files.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from .files import PARQUET_COMPRESSION, atomic_parquet, conform, read_parquet, read_part
from .per_request import has_rows_of, write_per_request
from .schemas import RESULT_SCHEMA, results_metadata


def consolidate(
    parts: list[Path],
    results: Path,
    per_request: Path,
    requests: Path,
    row_group: int,
    per_request_written: bool = False,
) -> tuple[int, set[str]]:
    """Fold ``parts`` (in write order) into ``results`` and ``per_request`` (prompt tokens from
    ``requests``; row groups of ``row_group`` rows), then delete them. Returns the rows of
    ``results.parquet`` and the keys of the points folded in. ``per_request_written``: the
    parts' per-request rows are in ``per_request`` already (streamed as they finished)."""
    if not parts:
        if results.exists():
            return pq.ParquetFile(results).metadata.num_rows, set()
        empty = RESULT_SCHEMA.empty_table().replace_schema_metadata(results_metadata())
        atomic_parquet(results, lambda f: pq.write_table(empty, f))
        return 0, set()
    tables = [read_part(p) for p in parts]
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
    new_results = pa.concat_tables([conform(t, RESULT_SCHEMA) for t in chosen])
    merged = _merged_results(results, new_results)

    if not per_request_written:
        replaced_ids = new_results.column("point_id").to_numpy()
        with_hits = [_rows_with_hits(t) for t in chosen]
        with_hits = [t for t in with_hits if t.num_rows]
        if with_hits or has_rows_of(per_request, replaced_ids):
            write_per_request(per_request, requests, with_hits, replaced_ids, row_group)
    atomic_parquet(results, lambda f: pq.write_table(merged, f, compression=PARQUET_COMPRESSION))
    for p in parts:
        with contextlib.suppress(OSError):
            p.unlink()
    with contextlib.suppress(OSError):
        parts[0].parent.rmdir()  # only when empty
    return merged.num_rows, set(winner)


def _merged_results(results: Path, new_results: pa.Table) -> pa.Table:
    """The rows of ``results`` not superseded by ``new_results``, plus those, sorted by
    point_id in one contiguous chunk: the bytes depend on the rows only."""
    old = read_parquet(results) if results.exists() else None
    if old is not None:
        old = conform(old, RESULT_SCHEMA)
        superseded = new_results.column("point_key").combine_chunks()
        import pyarrow.compute as pc  # here: 0.04 s of import the sweep's start need not wait for

        keep = pc.invert(pc.is_in(old.column("point_key"), value_set=superseded))
        merged = pa.concat_tables([old.filter(keep), new_results])
    else:
        merged = new_results
    return merged.sort_by("point_id").combine_chunks().replace_schema_metadata(results_metadata())


def _rows_with_hits(table: pa.Table) -> pa.Table:
    column = table.column("hit_tokens")
    if column.null_count == 0:
        return table
    return table.filter(column.is_valid())
