"""What a sweep holds while it runs, and what it records: :class:`RunState`, the state the
steps of :func:`sweep.app.run_sweep` read and write, and ``manifest.json``
(:func:`manifest_doc`), written when the run starts (:func:`start_manifest`) and ends."""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import prefixsim
from prefixsim import Trace

from . import manifest as env
from .config import SweepConfig
from .costing import CostSetup
from .grid import Point
from .store import LOG_FILE, RunDir, StoreError, describe_os_error
from .summary import SweepSummary

log = logging.getLogger("sweep")


def now() -> str:
    return datetime.now(timezone.utc).astimezone().isoformat(timespec="seconds")


@contextlib.contextmanager
def writes_to(run_dir: RunDir) -> Iterator[None]:
    """A failed write before any replay (out of space, read-only) is a one-line StoreError."""
    try:
        yield
    except OSError as err:
        raise StoreError(f"out_dir={str(run_dir.path)!r}: {describe_os_error(err)}") from None


@dataclass
class RunState:
    """One sweep from the lock on its run directory to its summary: what the steps of
    :func:`sweep.app._run_locked` read and write, in order."""

    cfg: SweepConfig
    run_dir: RunDir
    traces: dict[str, Trace]
    """sha256 -> Trace, every trace of the grid."""
    started_at: str
    t_start: float
    timings: dict[str, float]
    """The manifest's timing keys, filled as the steps run."""
    command: Sequence[str] | None
    overrides: Sequence[str] | None
    release_workers: bool
    setup: CostSetup | None = None
    config_yaml: str | None = None
    """``config.yaml`` as given (None: the structured configuration)."""
    inputs_written: bool = False
    """traces.parquet, requests.parquet and config.yaml written (``sweep.app._write_inputs``)."""
    todo: list[Point] = field(default_factory=list)
    """The points this run computes (not yet in the run directory)."""
    stream_per_request: bool = False
    """Write per_request.parquet as the points finish (``sweep.store.stream``)."""
    summary: SweepSummary = field(init=False)
    history: list[dict[str, Any]] = field(default_factory=list)
    """The manifest's earlier runs."""
    executor_info: dict[str, Any] = field(default_factory=dict)
    trace_info: list[dict[str, Any]] = field(default_factory=list)
    environment: dict[str, Any] = field(default_factory=dict)
    # set by _execute_todo
    written: set[str] = field(default_factory=set)
    """Keys of the points in part files written by this run."""
    replay_seconds: float = 0.0
    t_execute: float = math.nan
    write_error: OSError | None = None
    setup_error: prefixsim.PrefixSimError | None = None
    """E.g. no Dask scheduler answered."""
    executor_error: str | None = None
    """A killed worker, a lost Dask cluster."""
    error: str | None = None
    """The one-line write error (out_dir=...: cannot write ...), set by _finish."""


def start_manifest(run: RunState) -> None:
    """Write ``manifest.json`` with status ``running`` (an earlier run still ``running`` was
    killed: we hold the lock). Sets the manifest's history, executor, traces and environment."""
    previous = run.run_dir.read_manifest() or {}
    run.history = list(previous.get("runs", []))
    for record in run.history:
        if record.get("status") == "running":
            record["status"] = "killed"
    ex = run.cfg.executor
    run.executor_info = {"backend": ex.backend.value, "n_jobs": ex.n_jobs}
    run.trace_info = [
        {
            "name": t.name,
            "sha256": sha,
            "n_requests": t.n_requests,
            "n_accesses": t.n_accesses,
            "n_blocks": t.n_blocks,
            "total_prompt_tokens": t.total_prompt_tokens,
            "block_size": t.block_size,  # null: blocks independent of the block size
        }
        for sha, t in run.traces.items()
    ]
    run.environment = {"versions": env.versions(), "git": env.git_info(), "host": env.host()}
    with writes_to(run.run_dir):
        run.run_dir.write_manifest(manifest_doc(run, "running"))
    log.info(
        "%d points in the grid; %d already in %s; %d to compute",
        run.summary.planned,
        run.summary.skipped,
        run.run_dir.path,
        len(run.todo),
    )


def manifest_doc(run: RunState, status: str) -> dict[str, Any]:
    """The ``manifest.json`` document of ``run`` with ``status``."""
    summary = run.summary
    record = {
        "started_at": run.started_at,
        "finished_at": now() if status != "running" else None,
        "status": status,
        "overrides": list(run.overrides) if run.overrides is not None else None,
        "planned": summary.planned,
        "skipped": summary.skipped,
        "computed": summary.computed,
        "failed": len(summary.failures),
    }
    return {
        "schema_version": 1,
        "status": status,
        "out_dir": str(run.run_dir.path.resolve()),
        "started_at": run.started_at,
        "finished_at": record["finished_at"],
        "command": list(run.command) if run.command is not None else None,
        "overrides": record["overrides"],
        "points": {
            "planned": summary.planned,
            "already_done": summary.skipped,
            "computed": summary.computed,
            "failed": len(summary.failures),
            "rows_in_results": summary.rows,
        },
        "failures": [f.__dict__ for f in summary.failures],
        "traces": run.trace_info,
        "executor": run.executor_info,
        "timings": {k: round(v, 6) for k, v in run.timings.items()},
        **run.environment,
        "files": {
            "config": "config.yaml",
            "results": "results.parquet",
            "per_request": "per_request.parquet" if run.cfg.save_per_request else None,
            "log": LOG_FILE,
        },
        "runs": [*run.history, record],
    }
