"""``per_request.parquet`` written while the points run, instead of all at the end.

In a run directory with no per-request rows and no part files yet (a new one: the common case)
every row of the file comes from this run, in point_id order. So once every point up to some id
has finished, its rows can be written: :class:`PerRequestStream` takes each finished batch's
part rows (after its part file is written, which stays the record for resuming) and writes the
rows it can, while the later points are still replaying, rather than leaving the whole file
for the final merge. The rows, the row groups and the writer options are those of
:func:`~sweep.store.per_request.write_per_request`, so the file has the same bytes either way
(``tests/test_sweep_files.py`` compares an uninterrupted run, which streams, with an
interrupted and resumed one, which merges).

Anything unexpected (a point id it was not told of, a point with cost columns when none were
expected, a failed write) abandons the stream; so does an interrupt. The temporary file is then
removed and the merge at the end writes ``per_request.parquet`` from the part files as before.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from .files import PendingFile
from .per_request import (
    PER_REQUEST_WRITE_OPTIONS,
    PromptTokens,
    RowGroupBuilder,
    RowGroupCutter,
    cut_segments,
    has_cost,
    segment_columns,
)
from .schemas import per_request_schema

log = logging.getLogger("sweep")


class PerRequestStream:
    """Rows of ``point_ids`` (this run's points) written through ``writer`` into the temporary
    ``file`` in point_id order as the points finish; prompt tokens from ``requests``; row
    groups of ``row_group`` rows; the cost columns when ``with_cost``. :meth:`open` creates the
    file; the constructor only takes what it is given."""

    def __init__(
        self,
        file: PendingFile,
        writer: pq.ParquetWriter,
        requests: Path,
        point_ids: Iterable[int],
        with_cost: bool,
        row_group: int,
    ) -> None:
        self._expected = np.unique(np.fromiter(point_ids, np.int64))
        self._next = 0  # the first expected id not written yet
        self._written = 0  # points whose rows were written
        # finished, not written: id -> (its batch's part rows, its row there), or None when
        # it has no per-request rows (failed, or hit tokens not kept)
        self._rows: dict[int, tuple[pa.Table, int] | None] = {}
        self._with_cost = with_cost
        self._schema = per_request_schema(with_cost)
        self._prompt_tokens = PromptTokens(requests)
        self._cutter = RowGroupCutter(row_group)  # rows with cost columns
        self._builder = RowGroupBuilder(row_group)  # rows without
        self._file: PendingFile | None = file
        self._writer = writer

    @classmethod
    def open(
        cls,
        path: Path,
        requests: Path,
        point_ids: Iterable[int],
        with_cost: bool,
        row_group: int,
        folder: Path,
    ) -> PerRequestStream:
        """A stream whose temporary file (for ``path``) is opened in ``folder``, the run
        directory's ``.sweep``: a killed run leaves no temporary file beside the results, and
        the next run removes it."""
        file = PendingFile.create(path, folder=folder)
        try:
            schema = per_request_schema(with_cost)
            writer = pq.ParquetWriter(file.file, schema, **PER_REQUEST_WRITE_OPTIONS)
        except BaseException:
            file.discard()
            raise
        return cls(file, writer, requests, point_ids, with_cost, row_group)

    @property
    def active(self) -> bool:
        return self._file is not None

    @property
    def complete(self) -> bool:
        """Every expected point written (or finished without rows), and some had rows: the
        merge writes no file for points without rows either."""
        return self.active and self._next == len(self._expected) and self._written > 0

    def add(self, table: pa.Table | None, failed: Iterable[int] = ()) -> None:
        """A finished batch: ``table``, part rows (a row with null hit tokens has no
        per-request rows), and the ids of its ``failed`` points (no rows either). Writes every
        row group that the points finished so far complete; abandons the stream on anything
        unexpected."""
        if not self.active:
            return
        try:
            self._take(table, failed)
            self._write_ready()
        except Exception as err:
            log.debug("per-request rows left to the final merge: %s", err)
            self.discard()

    def _take(self, table: pa.Table | None, failed: Iterable[int]) -> None:
        if table is not None and table.num_rows:
            if has_cost(table) != self._with_cost:
                raise ValueError("cost columns not as expected")
            # Only the columns the rows are built from: a part has about a hundred, and
            # selecting them again for each of a batch's points cost more than the rows did.
            table = segment_columns(table)
            ids = table.column("point_id").to_pylist()
            valid = table.column("hit_tokens").is_valid().to_pylist()
            for i, (point_id, has_rows) in enumerate(zip(ids, valid, strict=True)):
                self._expect(point_id)
                self._rows[point_id] = (table, i) if has_rows else None
        for point_id in failed:
            self._expect(point_id)
            self._rows[point_id] = None

    def _expect(self, point_id: int) -> None:
        k = int(np.searchsorted(self._expected, point_id))
        if k < self._next or k == len(self._expected) or self._expected[k] != point_id:
            raise ValueError(f"point {point_id} not expected here")
        if point_id in self._rows:
            raise ValueError(f"point {point_id} finished twice")

    def _write_ready(self) -> None:
        """Write the rows of the points from the first unwritten id up to the first that has
        not finished."""
        ready: list[pa.Table] = []
        run: tuple[pa.Table, int, int] | None = None  # consecutive rows of one part: start, stop
        while self._next < len(self._expected) and int(self._expected[self._next]) in self._rows:
            row = self._rows.pop(int(self._expected[self._next]))
            self._next += 1
            if row is None:
                continue
            self._written += 1
            table, i = row
            if run is not None and run[0] is table and run[2] == i:
                run = (table, run[1], i + 1)
                continue
            if run is not None:
                ready.append(run[0].slice(run[1], run[2] - run[1]))
            run = (table, i, i + 1)
        if run is not None:
            ready.append(run[0].slice(run[1], run[2] - run[1]))
        if not ready:
            return
        for segment in cut_segments(ready, np.zeros(0, np.int64)):
            if self._with_cost:
                groups = self._cutter.push(segment.rows(self._prompt_tokens, self._schema))
            else:
                groups = self._builder.push(segment, self._prompt_tokens)
            for group in groups:
                self._writer.write_table(group, row_group_size=group.num_rows)

    def commit(self) -> None:
        """Write the last row group and move the file into place (only when complete)."""
        if not self.complete or self._file is None:
            raise RuntimeError("per-request stream committed before every point finished")
        try:
            last = self._cutter.rest() if self._with_cost else self._builder.rest()
            if last is not None:
                self._writer.write_table(last, row_group_size=last.num_rows)
            self._writer.close()
        except BaseException:
            self.discard()
            raise
        pending, self._file = self._file, None
        pending.commit()

    def discard(self) -> None:
        """Remove the temporary file (nothing happens to ``per_request.parquet``)."""
        if self._file is None:
            return
        with contextlib.suppress(Exception):
            self._writer.close()
        pending, self._file = self._file, None
        pending.discard()
