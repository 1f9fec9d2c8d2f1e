"""Run a sweep from a :class:`~sweep.config.SweepConfig`: validate, plan, skip what the run
directory already holds, execute, write. The command line (:mod:`sweep.__main__`) is a thin
layer over :func:`run_sweep`, which tests and notebooks can call directly."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import signal
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

import prefixsim
from prefixsim import ParameterError, Trace
from prefixsim.formats import TraceOptions

from . import manifest as env
from .config import POLICY_PARAM_KEYS, Backend, ExecutorConfig, SweepConfig
from .grid import Point, assign_points, plan_grid, unused_parameters
from .run import (
    Batch,
    Outcome,
    clear_local_traces,
    dask_client,
    effective_workers,
    execute,
    plan_batches,
    release_loky_workers,
    warm_up,
)
from .store import COUNTER_COLUMNS, LOG_FILE, PART_SCHEMA, RunDir, atomic_write_text

log = logging.getLogger("sweep")

EXIT_OK, EXIT_FAILED_POINTS, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


@dataclass
class Failure:
    point_id: int
    point: str
    """The point's parameters, ``trace=... policy=... capacity=...``."""
    error: str


@dataclass
class SweepSummary:
    out_dir: Path
    planned: int
    """Points of this grid."""
    skipped: int
    """Points of this grid already in the run directory (not recomputed)."""
    computed: int
    failures: list[Failure] = field(default_factory=list)
    interrupted: bool = False
    rows: int = 0
    """Rows of results.parquet (every point computed in the run directory so far)."""
    seconds: float = 0.0

    @property
    def exit_code(self) -> int:
        if self.interrupted:
            return EXIT_INTERRUPTED
        return EXIT_FAILED_POINTS if self.failures else EXIT_OK

    @property
    def results_path(self) -> Path:
        return self.out_dir / "results.parquet"


def validate_executor(ex: ExecutorConfig) -> None:
    if isinstance(ex.n_jobs, bool) or ex.n_jobs == 0:
        raise ParameterError(
            "executor.n_jobs", ex.n_jobs, "expected -1 (all cores), -k (all but k-1) or >= 1"
        )
    if ex.batch_size is not None and ex.batch_size < 1:
        raise ParameterError("executor.batch_size", ex.batch_size, "expected null (auto) or >= 1")
    if ex.n_workers is not None and ex.n_workers < 1:
        raise ParameterError("executor.n_workers", ex.n_workers, "expected null or >= 1")
    if ex.threads_per_worker < 1:
        raise ParameterError("executor.threads_per_worker", ex.threads_per_worker, "expected >= 1")


def load_traces(
    names: Sequence[str],
    block_sizes: Sequence[int] = (512,),
    options: TraceOptions | None = None,
) -> tuple[dict[Any, str], dict[str, Trace]]:
    """Load each distinct trace once, or once per block size for the formats whose blocks
    depend on it (token and chat traces, which are hashed at each block size).

    Returns (trace as typed -> sha256, or (trace, block_size) -> sha256 for the per-block-size
    ones; sha256 -> Trace). A per-block-size trace's sha256 identifies its content, options and
    block size, so each block size is its own entry.
    """
    shas: dict[Any, str] = {}
    traces: dict[str, Trace] = {}
    sizes = list(dict.fromkeys(block_sizes)) or [512]

    def add(key: Any, trace: Trace) -> None:
        shas[key] = trace.sha256
        if trace.sha256 in traces:
            log.warning(
                "trace %s has the same content as %s: its points are run once",
                trace.name,
                traces[trace.sha256].name,
            )
        else:
            traces[trace.sha256] = trace

    for name in dict.fromkeys(names):
        trace = prefixsim.load_trace(name, block_size=sizes[0], options=options)
        if trace.block_size is None:
            add(name, trace)
            continue
        add((name, sizes[0]), trace)
        for block_size in sizes[1:]:
            add(
                (name, block_size),
                prefixsim.load_trace(name, block_size=block_size, options=options),
            )
    return shas, traces


def _resolve(value: str) -> str:
    """``value`` with its interpolations resolved (Hydra's ``${now:...}`` included)."""
    from omegaconf import OmegaConf

    if not OmegaConf.has_resolver("now"):
        OmegaConf.register_new_resolver(
            "now", lambda pattern: datetime.now().strftime(pattern), use_cache=True
        )
    return str(OmegaConf.create({"value": value}).value)


def _now() -> str:
    return datetime.now(timezone.utc).astimezone().isoformat(timespec="seconds")


def _part_table(points: dict[int, Point], outcomes: Sequence[Outcome]) -> pa.Table:
    """A part file's table from a batch's successful outcomes."""
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
    cols.update(
        n_requests=[o.n_requests for o in outcomes],
        total_prompt_tokens=[o.total_prompt_tokens for o in outcomes],
        total_hit_tokens=[o.total_hit_tokens for o in outcomes],
        overall_hit_rate=[o.overall_hit_rate for o in outcomes],
        final_cache_blocks=[o.final_cache_blocks for o in outcomes],
    )
    for c in COUNTER_COLUMNS:
        cols[c] = [(o.counters or {}).get(c) for o in outcomes]
    cols["replay_seconds"] = [o.seconds for o in outcomes]
    cols["point_key"] = [p.key for p in pts]
    arrays = [pa.array(cols[f.name], f.type) for f in PART_SCHEMA if f.name != "hit_tokens"]
    hits = [o.hit_tokens for o in outcomes if o.hit_tokens is not None]
    list_type = PART_SCHEMA.field("hit_tokens").type
    if hits and len(hits) == len(outcomes):
        offsets = np.zeros(len(hits) + 1, np.int64)
        np.cumsum([len(h) for h in hits], out=offsets[1:])
        values = np.concatenate(hits)
        arrays.append(
            pa.LargeListArray.from_arrays(pa.array(offsets), pa.array(values, pa.int64()))
        )
    else:
        arrays.append(pa.nulls(len(outcomes), list_type))
    return pa.Table.from_arrays(arrays, schema=PART_SCHEMA)


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM stops the sweep like Ctrl-C (finished batches are kept)."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def _file_log(path: Path) -> Iterator[None]:
    """Also log the ``sweep`` logger to ``path`` (appending) while the sweep writes there."""
    handler = logging.FileHandler(path, mode="a", encoding="utf-8")
    handler.setFormatter(logging.Formatter("[%(asctime)s][%(levelname)s] %(message)s"))
    handler.setLevel(logging.INFO)
    previous_level = log.level
    if log.getEffectiveLevel() > logging.INFO:
        log.setLevel(logging.INFO)
    log.addHandler(handler)
    try:
        yield
    finally:
        log.removeHandler(handler)
        log.setLevel(previous_level)
        handler.close()


def _progress(total: int, enabled: bool) -> Any:
    from tqdm import tqdm

    return tqdm(
        total=total,
        desc="sweep",
        unit="pt",
        delay=1.0,
        disable=None if enabled else True,
        file=sys.stderr,
        dynamic_ncols=True,
        smoothing=0.1,
    )


def run_sweep(
    cfg: SweepConfig,
    *,
    command: Sequence[str] | None = None,
    overrides: Sequence[str] | None = None,
    config_yaml: str | None = None,
    release_workers: bool = False,
) -> SweepSummary:
    """Run the sweep ``cfg`` into ``cfg.out_dir``.

    Everything that can be wrong with the configuration (an engine parameter of any point, an
    executor setting, an unreadable trace, a run directory in use) raises a
    :class:`prefixsim.PrefixSimError` before the first replay. A point that fails while running
    is reported in the summary (and the manifest), the others are written. Ctrl-C or SIGTERM
    stop the sweep: finished batches are kept, and the same command resumes it.

    ``command``, ``overrides`` and ``config_yaml`` are recorded in the run directory;
    ``release_workers`` stops loky's worker processes once the replays are done (a one-shot
    process exits faster; a notebook running several sweeps keeps them for the next one).
    """
    t_start = time.perf_counter()
    started_at = _now()
    timings: dict[str, float] = {}

    # 1. validate everything before any work
    validate_executor(cfg.executor)
    if cfg.executor.address and cfg.executor.backend != Backend.dask:
        log.warning(
            "executor.address is for executor=dask; ignored with %s", cfg.executor.backend.value
        )
    if not str(cfg.out_dir).strip():
        raise ParameterError("out_dir", cfg.out_dir, "expected a directory path")
    if "${" in cfg.out_dir:  # e.g. the default, when called from Python rather than Hydra
        cfg = dataclasses.replace(cfg, out_dir=_resolve(cfg.out_dir))
    grid = plan_grid(cfg)
    for key in unused_parameters(cfg):
        log.warning("%s does not apply to %s: its values are ignored", key, ", ".join(cfg.policy))
    timings["plan_seconds"] = time.perf_counter() - t_start
    t = time.perf_counter()
    shas, traces = load_traces(cfg.trace, cfg.block_size, cfg.trace_options())
    timings["load_traces_seconds"] = time.perf_counter() - t

    run_dir = RunDir(cfg.out_dir)
    run_dir.lock()
    try:
        with _file_log(run_dir.log), _sigterm_as_interrupt():
            return _run_locked(
                cfg,
                run_dir,
                grid_points=grid,
                shas=shas,
                traces=traces,
                command=command,
                overrides=overrides,
                config_yaml=config_yaml,
                release_workers=release_workers,
                started_at=started_at,
                t_start=t_start,
                timings=timings,
            )
    finally:
        run_dir.unlock()
        clear_local_traces()


def _run_locked(
    cfg: SweepConfig,
    run_dir: RunDir,
    *,
    grid_points: Sequence[Any],
    shas: dict[str, str],
    traces: dict[str, Trace],
    command: Sequence[str] | None,
    overrides: Sequence[str] | None,
    config_yaml: str | None,
    release_workers: bool,
    started_at: str,
    t_start: float,
    timings: dict[str, float],
) -> SweepSummary:
    ex = cfg.executor
    existing = run_dir.load_existing()
    points, registry = assign_points(grid_points, shas, existing.registry)
    run_dir.save_registry(registry)
    run_dir.save_trace_tables(list(traces.values()), sorted(set(cfg.block_size)))
    todo = [
        p
        for p in points
        if p.key not in existing.done
        or (cfg.save_per_request and p.key not in existing.with_per_request)
    ]
    summary = SweepSummary(
        out_dir=run_dir.path,
        planned=len(points),
        skipped=len(points) - len(todo),
        computed=0,
    )
    if config_yaml is None:
        from omegaconf import OmegaConf

        config_yaml = OmegaConf.to_yaml(OmegaConf.structured(cfg))
    atomic_write_text(run_dir.config, config_yaml)

    previous = run_dir.read_manifest() or {}
    history: list[dict[str, Any]] = list(previous.get("runs", []))
    for record in history:
        if record.get("status") == "running":  # we hold the lock: that run was killed
            record["status"] = "killed"
    executor_info: dict[str, Any] = {"backend": ex.backend.value, "n_jobs": ex.n_jobs}
    trace_info = [
        {
            "name": t.name,
            "sha256": sha,
            "n_requests": t.n_requests,
            "n_accesses": t.n_accesses,
            "n_blocks": t.n_blocks,
            "total_prompt_tokens": t.total_prompt_tokens,
            "block_size": t.block_size,  # null: blocks independent of the block size
        }
        for sha, t in traces.items()
    ]
    environment = {"versions": env.versions(), "git": env.git_info(), "host": env.host()}

    def manifest(status: str) -> dict[str, Any]:
        record = {
            "started_at": started_at,
            "finished_at": _now() if status != "running" else None,
            "status": status,
            "overrides": list(overrides) if overrides is not None else None,
            "planned": summary.planned,
            "skipped": summary.skipped,
            "computed": summary.computed,
            "failed": len(summary.failures),
        }
        return {
            "schema_version": 1,
            "status": status,
            "out_dir": str(run_dir.path.resolve()),
            "started_at": started_at,
            "finished_at": record["finished_at"],
            "command": list(command) if command is not None else None,
            "overrides": record["overrides"],
            "points": {
                "planned": summary.planned,
                "already_done": summary.skipped,
                "computed": summary.computed,
                "failed": len(summary.failures),
                "rows_in_results": summary.rows,
            },
            "failures": [f.__dict__ for f in summary.failures],
            "traces": trace_info,
            "executor": executor_info,
            "timings": {k: round(v, 6) for k, v in timings.items()},
            **environment,
            "files": {
                "config": "config.yaml",
                "results": "results.parquet",
                "per_request": "per_request.parquet" if cfg.save_per_request else None,
                "log": LOG_FILE,
            },
            "runs": [*history, record],
        }

    run_dir.write_manifest(manifest("running"))
    log.info(
        "%d points in the grid; %d already in %s; %d to compute",
        summary.planned,
        summary.skipped,
        run_dir.path,
        len(todo),
    )

    replay_seconds = 0.0
    by_id = {p.point_id: p for p in todo}
    t_execute = math.nan

    def on_batch(batch: Batch, outcomes: list[Outcome]) -> None:
        nonlocal replay_seconds
        if "first_result_seconds" not in timings:
            first = time.perf_counter() - t_execute
            timings["first_result_seconds"] = first
            # start-up of the workers, roughly: the wait for the first batch beyond its replays
            timings["worker_start_seconds"] = max(0.0, first - sum(o.seconds for o in outcomes))
        ok = [o for o in outcomes if o.error is None]
        for o in outcomes:
            if o.error is not None:
                failure = Failure(o.point_id, by_id[o.point_id].describe(), o.error)
                summary.failures.append(failure)
                log.error("point failed: %s: %s", failure.point, failure.error)
        if ok:
            run_dir.write_part(_part_table(by_id, ok))
            summary.computed += len(ok)
        replay_seconds += sum(o.seconds for o in ok)
        bar.update(len(outcomes))

    bar = _progress(len(todo), cfg.progress)
    try:
        if todo:
            with contextlib.ExitStack() as stack:
                client = None
                if ex.backend == Backend.dask:
                    t = time.perf_counter()
                    client = stack.enter_context(dask_client(ex))
                    timings["cluster_start_seconds"] = time.perf_counter() - t
                workers = effective_workers(ex, client)
                t_warm = time.perf_counter()
                cost = warm_up(traces, todo)
                timings["warm_up_seconds"] = time.perf_counter() - t_warm
                plan = plan_batches(todo, traces, ex, workers, cost)
                executor_info.update(
                    workers=plan.workers,
                    in_process=plan.in_process,
                    batches=len(plan.batches),
                    batch_size=plan.batch_size,
                    address=ex.address if ex.backend == Backend.dask else None,
                )
                where = "in this process" if plan.in_process else f"on {ex.backend.value}"
                log.info(
                    "running %d points %s with %d worker(s) in %d batch(es)",
                    len(todo),
                    where,
                    plan.workers,
                    len(plan.batches),
                )
                from tqdm.contrib.logging import logging_redirect_tqdm

                with logging_redirect_tqdm():
                    t_execute = time.perf_counter()
                    try:
                        execute(plan, traces, ex, cfg.save_per_request, on_batch, client=client)
                    finally:
                        if release_workers and ex.backend == Backend.loky and not plan.in_process:
                            release_loky_workers()
    except KeyboardInterrupt:
        summary.interrupted = True
    finally:
        bar.close()
        if not math.isnan(t_execute):
            timings["execute_seconds"] = time.perf_counter() - t_execute
        timings["replay_seconds"] = replay_seconds

    t = time.perf_counter()
    summary.rows, folded = run_dir.consolidate()
    # what was really written (an interrupt may land between a part write and its count)
    summary.computed = len(folded & {p.key for p in todo})
    if summary.interrupted:
        log.warning(
            "interrupted: %d points finished and kept; run the same command again to compute "
            "the %d missing",
            summary.computed,
            len(todo) - summary.computed,
        )
    timings["write_seconds"] = time.perf_counter() - t
    summary.seconds = time.perf_counter() - t_start
    timings["total_seconds"] = summary.seconds
    status = "interrupted" if summary.interrupted else "failed" if summary.failures else "complete"
    run_dir.write_manifest(manifest(status))

    per_request = f" and {run_dir.per_request}" if run_dir.per_request.exists() else ""
    log.info(
        "results: %s%s (%d rows; this grid: %d computed now, %d already there, %d failed) in "
        "%.2f s",
        run_dir.results,
        per_request,
        summary.rows,
        summary.computed,
        summary.skipped,
        len(summary.failures),
        summary.seconds,
    )
    if summary.failures:
        log.error(
            "%d point(s) failed (listed above and in %s); the others are written; run again to "
            "retry them",
            len(summary.failures),
            run_dir.manifest,
        )
    if cfg.plot and summary.rows and not summary.interrupted:
        _draw_figures(run_dir)
    return summary


def _draw_figures(run_dir: RunDir) -> None:
    """The run's figures; a plotting problem is logged, never lost results or a failed sweep."""
    from .plot import draw_figures

    t = time.perf_counter()
    try:
        report = draw_figures(run_dir.path)
    except Exception as err:  # the numbers are written; say what went wrong and how to retry
        log.error(
            "figures failed (%s: %s); the results are complete; retry: python -m sweep.plot %s",
            type(err).__name__,
            err,
            run_dir.path,
        )
        return
    log.info(
        "figures: %d in %s (%.1f s)",
        len(report.drawn),
        run_dir.path / "figures",
        time.perf_counter() - t,
    )
