"""The run directory: Parquet schemas, atomic writes, resume and the manifest.

Layout of a run directory::

    config.yaml             the resolved configuration of the latest run
    results.parquet         one row per point (RESULT_SCHEMA), sorted by point_id
    per_request.parquet     one row per point and request (per_request_schema), sorted
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
In a directory without per-request rows or parts yet, ``per_request.parquet`` is written while
the points run (in ``.sweep/`` until complete, :mod:`.stream`), the same bytes as the merge's.

The modules of this package each own one part of that: :mod:`.schemas` (file names and
columns), :mod:`.files` (atomic writes, one-line errors), :mod:`.resume` (part files and what is
already done), :mod:`.consolidate` and :mod:`.per_request` (the final Parquet files),
:mod:`.stream` (per-request rows as points finish), :mod:`.tables` (the trace tables).
:class:`RunDir` ties them to one directory.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

import prefixsim

from .consolidate import consolidate
from .files import (
    PARQUET_COMPRESSION,
    StoreError,
    atomic_file,
    atomic_write_text,
    describe_os_error,
)
from .resume import Existing, PartFiles, load_existing, save_registry
from .schemas import (
    ALWAYS_COUNTED,
    CONFIG_FILE,
    COUNTER_COLUMNS,
    LOG_FILE,
    MANIFEST_FILE,
    NULLABLE_INT_COLUMNS,
    PART_LIST_COLUMNS,
    PART_SCHEMA,
    PER_REQUEST_COST_FIELDS,
    PER_REQUEST_FILE,
    PER_REQUEST_SCHEMA,
    REQUESTS_FILE,
    REQUESTS_SCHEMA,
    RESULT_SCHEMA,
    RESULTS_FILE,
    STATE_DIR,
    TIMING_COLUMNS,
    TRACES_FILE,
    TRACES_SCHEMA,
    part_list_name,
    per_request_schema,
)
from .stream import PerRequestStream
from .tables import load_prompt_tokens, save_trace_tables

__all__ = [
    "ALWAYS_COUNTED",
    "CONFIG_FILE",
    "COUNTER_COLUMNS",
    "LOG_FILE",
    "MANIFEST_FILE",
    "NULLABLE_INT_COLUMNS",
    "PARQUET_COMPRESSION",
    "PART_LIST_COLUMNS",
    "PART_SCHEMA",
    "PER_REQUEST_COST_FIELDS",
    "PER_REQUEST_FILE",
    "PER_REQUEST_ROW_GROUP",
    "PER_REQUEST_SCHEMA",
    "REQUESTS_FILE",
    "REQUESTS_SCHEMA",
    "RESULTS_FILE",
    "RESULT_SCHEMA",
    "STATE_DIR",
    "TIMING_COLUMNS",
    "TRACES_FILE",
    "TRACES_SCHEMA",
    "Existing",
    "RunDir",
    "StoreError",
    "atomic_file",
    "atomic_write_text",
    "describe_os_error",
    "part_list_name",
    "per_request_schema",
]

PER_REQUEST_ROW_GROUP = 1 << 20
"""Rows per row group of ``per_request.parquet`` (read at each consolidation)."""


class RunDir:
    """A run directory (see the module docstring for its layout). Creating one touches no
    file: :meth:`lock` creates the directory."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(os.path.abspath(path))
        self.state = self.path / STATE_DIR
        self.parts = self.state / "parts"
        self._lock_file: IO[Any] | None = None
        self._part_files = PartFiles(self.parts)
        self._stream: PerRequestStream | None = None

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
        self.discard_stream()
        if self._lock_file is not None:
            self._lock_file.close()
            self._lock_file = None

    # reading what is there
    def part_files(self) -> list[Path]:
        return self._part_files.paths()

    def load_existing(self) -> Existing:
        return load_existing(self.registry_file, self.results, self.per_request, self.part_files())

    def load_prompt_tokens(self, sha256: str) -> np.ndarray:
        """The input lengths of trace ``sha256``, in request order, from requests.parquet."""
        return load_prompt_tokens(self.requests, sha256)

    def rows_in_results(self) -> int:
        """Rows of the current ``results.parquet`` (0 when missing or unreadable)."""
        try:
            return int(pq.ParquetFile(self.results).metadata.num_rows)
        except (OSError, pa.ArrowException):
            return 0

    def read_manifest(self) -> dict[str, Any] | None:
        try:
            doc = json.loads(self.manifest.read_text())
        except (OSError, ValueError):
            return None
        return doc if isinstance(doc, dict) else None

    # writing
    def save_registry(self, registry: dict[str, int]) -> None:
        save_registry(self.registry_file, registry)

    def save_trace_tables(
        self, traces: Sequence[prefixsim.Trace], block_sizes: Sequence[int]
    ) -> None:
        """Write ``traces.parquet`` and ``requests.parquet`` (see :mod:`.tables`)."""
        save_trace_tables(self.traces, self.requests, traces, block_sizes)

    def write_part(self, table: pa.Table) -> Path:
        """Write one finished batch (a table of :data:`PART_SCHEMA`) atomically."""
        return self._part_files.write(table)

    def can_stream_per_request(self) -> bool:
        """Whether ``per_request.parquet`` can be written as the points finish: no per-request
        rows and no part files here yet (see :mod:`.stream`)."""
        return not self.per_request.exists() and not self.part_files()

    def start_per_request_stream(self, point_ids: Sequence[int], with_cost: bool) -> None:
        """Write the per-request rows of ``point_ids`` as they finish (:meth:`stream_part`);
        :meth:`consolidate` then moves the file into place. Only when
        :meth:`can_stream_per_request`."""
        self.discard_stream()
        self._stream = PerRequestStream.open(
            self.per_request,
            self.requests,
            point_ids,
            with_cost,
            PER_REQUEST_ROW_GROUP,
            folder=self.state,
        )

    def stream_part(self, table: pa.Table | None, failed: Sequence[int] = ()) -> None:
        """A finished batch's part rows (already in a part file) and failed point ids, for the
        per-request stream, if one was started."""
        if self._stream is not None:
            self._stream.add(table, failed)

    def discard_stream(self) -> None:
        if self._stream is not None:
            self._stream.discard()
            self._stream = None

    def consolidate(self) -> tuple[int, set[str]]:
        """Fold the part files into ``results.parquet`` and ``per_request.parquet`` (atomically,
        sorted by point_id), then delete them (see :mod:`.consolidate`); a complete
        per-request stream is the new ``per_request.parquet``. Returns the rows of
        ``results.parquet`` and the keys of the points folded in."""
        streamed = self._stream is not None and self._stream.complete
        if self._stream is not None and streamed:
            self._stream.commit()
            self._stream = None
        self.discard_stream()  # an incomplete one: the merge writes the file
        parts = self.part_files()
        row_group = PER_REQUEST_ROW_GROUP
        return consolidate(
            parts, self.results, self.per_request, self.requests, row_group, streamed
        )

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
