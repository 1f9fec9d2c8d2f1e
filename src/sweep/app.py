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
from .cluster import RESULT_FIELDS as CLUSTER_FIELDS
from .config import POLICY_PARAM_KEYS, Backend, ExecutorConfig, SweepConfig
from .costing import PER_REQUEST_COST_COLUMNS, RESULT_COST_COLUMNS, CostSetup, cost_setup
from .grid import Point, assign_points, plan_grid, unused_parameters
from .run import (
    Batch,
    Outcome,
    clear_local_traces,
    dask_client,
    describe_failure,
    effective_workers,
    execute,
    plan_batches,
    release_loky_workers,
    warm_up,
)
from .store import (
    COUNTER_COLUMNS,
    LOG_FILE,
    PART_LIST_COLUMNS,
    PART_SCHEMA,
    RunDir,
    StoreError,
    atomic_write_text,
    describe_os_error,
    part_list_name,
)
from .tiers import hierarchy_cost_inputs, tier_columns

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
    error: str | None = None
    """Why the sweep stopped early (a killed worker, a lost Dask cluster), if it did."""
    seconds: float = 0.0

    @property
    def exit_code(self) -> int:
        if self.interrupted:
            return EXIT_INTERRUPTED
        return EXIT_FAILED_POINTS if self.failures or self.error else EXIT_OK

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
    if not ex.connect_timeout > 0:
        raise ParameterError("executor.connect_timeout", ex.connect_timeout, "expected seconds > 0")


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


def _part_table(
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


@contextlib.contextmanager
def _writes_to(run_dir: RunDir) -> Iterator[None]:
    """A failed write before any replay (out of space, read-only) is a one-line StoreError."""
    try:
        yield
    except OSError as err:
        raise StoreError(f"out_dir={str(run_dir.path)!r}: {describe_os_error(err)}") from None


def _log_traceback(run_dir: RunDir, err: BaseException) -> None:
    """The full traceback of an executor failure, for sweep.log only (the terminal gets one
    line)."""
    import traceback

    with contextlib.suppress(OSError), run_dir.log.open("a", encoding="utf-8") as f:
        f.write("".join(traceback.format_exception(err)))


class _WriteFailed(Exception):
    """A part file could not be written (``error``): the sweep stops, keeping what it wrote."""

    def __init__(self, error: OSError) -> None:
        super().__init__(str(error))
        self.error = error


@contextlib.contextmanager
def _signals_deferred() -> Iterator[None]:
    """Ignore SIGINT and SIGTERM (noted, not raised) during a short write that must finish: the
    sweep is stopping already, and a half-done final step would leave the directory claiming a
    state it is not in. (Python handlers, not a blocked mask: any thread may take a signal.)"""
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []

    def note(signum: int, frame: Any) -> None:
        received.append(signum)

    previous = {s: signal.signal(s, note) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        if received:
            log.warning("a stop signal arrived while the manifest was written; it is written")


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
    stop the sweep: finished batches are kept, and the same command resumes it. A worker or a
    Dask cluster lost mid-sweep ends it with ``summary.error`` set (exit code 1), finished
    points written; a write that fails (a full disk) raises :class:`~sweep.store.StoreError`
    once the finished batches are kept and the manifest says ``failed``.

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
    setup = cost_setup(cfg)
    existing = run_dir.load_existing()
    points, registry = assign_points(
        grid_points, shas, existing.registry, None if setup is None else setup.identity()
    )
    with _writes_to(run_dir):
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
        from . import ranges
        from .config import GRID_KEYS

        config_yaml = ranges.structured_yaml(cfg, GRID_KEYS)
    with _writes_to(run_dir):
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

    with _writes_to(run_dir):
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
    written: set[str] = set()  # keys of the points in part files written by this run
    write_error: OSError | None = None
    setup_error: prefixsim.PrefixSimError | None = None  # e.g. no Dask scheduler answered
    executor_error: str | None = None  # a killed worker, a lost Dask cluster
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
            try:
                run_dir.write_part(_part_table(by_id, ok, setup, traces, cfg.save_per_request))
            except OSError as err:  # out of space, read-only...: no later batch can be kept
                raise _WriteFailed(err) from err
            written.update(by_id[o.point_id].key for o in ok)
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
                        # the cost columns need every point's hit tokens, saved or not
                        keep_hits = cfg.save_per_request or setup is not None
                        execute(plan, traces, ex, keep_hits, on_batch, client=client)
                    finally:
                        if release_workers and ex.backend == Backend.loky and not plan.in_process:
                            release_loky_workers()
    except KeyboardInterrupt:
        summary.interrupted = True
    except _WriteFailed as err:
        write_error = err.error
    except prefixsim.PrefixSimError as err:
        setup_error = err
    except Exception as err:  # the executor broke; what finished is kept and written below
        executor_error = describe_failure(err)
        _log_traceback(run_dir, err)
    finally:
        bar.close()
        if not math.isnan(t_execute):
            timings["execute_seconds"] = time.perf_counter() - t_execute
        timings["replay_seconds"] = replay_seconds

    t = time.perf_counter()
    try:
        summary.rows, folded = run_dir.consolidate()
        # what was really written (an interrupt may land between a part write and its count)
        summary.computed = len(folded & {p.key for p in todo})
    except (KeyboardInterrupt, OSError) as err:
        # The part files stay: the next run into this directory folds them in.
        if isinstance(err, KeyboardInterrupt):
            summary.interrupted = True
        elif write_error is None:
            write_error = err
        summary.computed = len(written)
        summary.rows = run_dir.rows_in_results()
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
    if summary.interrupted:
        status = "interrupted"
    elif summary.failures or write_error or setup_error or executor_error:
        status = "failed"
    else:
        status = "complete"
    error = (
        None
        if write_error is None
        else f"out_dir={str(run_dir.path)!r}: " + (describe_os_error(write_error))
    )
    summary.error = error or (str(setup_error) if setup_error else None) or executor_error
    # A second Ctrl-C or a TERM waits until the manifest is written: it never stays "running".
    with _signals_deferred():
        try:
            run_dir.write_manifest({**manifest(status), "error": summary.error})
        except OSError as err:
            write_error = write_error or err
            error = error or f"out_dir={str(run_dir.path)!r}: {describe_os_error(err)}"
            log.error("manifest.json could not be written: %s", describe_os_error(err))
    if error is not None:
        raise StoreError(
            f"{error}; {summary.computed} point(s) finished and kept, {len(todo)} planned; make "
            "room or choose another out_dir, then run the same command again to finish"
        )
    if setup_error is not None:
        raise setup_error
    if executor_error is not None:
        log.error(
            "%s; %d point(s) finished and kept in %s, %d missing; run the same command again "
            "to compute them",
            executor_error,
            summary.computed,
            run_dir.results,
            len(todo) - summary.computed,
        )
        return summary

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
    if cfg.plot.enabled and summary.rows and not summary.interrupted:
        _draw_figures(run_dir, cfg.plot.formats, cfg.plot.capacity_axis)
    return summary


def _draw_figures(run_dir: RunDir, formats: list[str], capacity_axis: str) -> None:
    """The run's figures; a plotting problem is logged, never lost results or a failed sweep."""
    from .figures import draw_figures

    t = time.perf_counter()
    try:
        report = draw_figures(run_dir.path, formats=formats, capacity_axis=capacity_axis)
    except Exception as err:  # the numbers are written; say what went wrong and how to retry
        log.error(
            "figures failed (%s: %s); the results are complete; retry: python -m sweep.plot %s",
            type(err).__name__,
            err,
            run_dir.path,
        )
        return
    log.info(
        "figures: %d in %s (%.1f s)%s",
        len(report.drawn),
        run_dir.path / "figures",
        time.perf_counter() - t,
        f"; {len(report.unchanged)} unchanged (same results)" if report.unchanged else "",
    )
