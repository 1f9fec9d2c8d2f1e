"""Run a sweep from a :class:`~sweep.config.SweepConfig`: validate, plan, skip what the run
directory already holds, execute, write. The command line (:mod:`sweep.__main__`) is a thin
layer over :func:`run_sweep`, which tests and notebooks can call directly."""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import time
from collections.abc import Callable, Sequence
from typing import Any

import prefixsim
from prefixsim import Trace
from prefixsim.first_use import noting

from . import lifecycle
from .backends import (
    dask_client,
    describe_failure,
    effective_workers,
    execute,
    release_loky_workers,
)
from .config import Backend, SweepConfig
from .engine_checks import check_with_engine
from .expand import cost_setup
from .grid import assign_points, check_tier_own_keys, plan_grid, unused_parameters
from .inputs import checked_config, load_traces
from .parts import part_table
from .record import RunState, manifest_doc, now, start_manifest, writes_to
from .run import Batch, Outcome, clear_local_traces, plan_batches, warm_up
from .signals import file_log, interrupt_after, signals_deferred, sigterm_as_interrupt
from .store import RunDir, StoreError, atomic_write_text, describe_os_error
from .store.schemas import results_metadata
from .summary import Failure, SweepSummary, draw_figures_logged, progress_bar

log = logging.getLogger("sweep")


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
    with noting():  # a line on stderr while numba compiles the kernels (first use only)
        return _run_sweep(cfg, command, overrides, config_yaml, release_workers)


def _run_sweep(
    cfg: SweepConfig,
    command: Sequence[str] | None,
    overrides: Sequence[str] | None,
    config_yaml: str | None,
    release_workers: bool,
) -> SweepSummary:
    t_start = time.perf_counter()
    started_at = now()
    timings: dict[str, float] = {}

    # validate everything before any work
    cfg = checked_config(cfg)
    grid = plan_grid(cfg)
    check_tier_own_keys(cfg, overrides)  # a key typed equal to its default, too
    for key in unused_parameters(cfg):
        log.warning("%s does not apply to %s: its values are ignored", key, ", ".join(cfg.policy))
    timings["plan_seconds"] = time.perf_counter() - t_start
    t = time.perf_counter()
    shas, traces = load_traces(cfg.trace, cfg.block_size, cfg.trace_options())
    timings["load_traces_seconds"] = time.perf_counter() - t
    t = time.perf_counter()
    check_with_engine(grid, shas, traces, cost_setup(cfg))  # before the run directory
    timings["engine_check_seconds"] = time.perf_counter() - t

    run_dir = RunDir(cfg.out_dir)
    claim = lifecycle.Claim.before(run_dir.path)
    run_dir.lock()
    summary: SweepSummary | None = None
    interrupted = True  # until the run says otherwise: an interrupt may escape any step
    try:
        with file_log(run_dir.log), sigterm_as_interrupt():
            summary = _run_locked(
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
            interrupted = summary.interrupted
            return summary
    except KeyboardInterrupt:
        raise lifecycle.SweepInterrupted from None  # said by lifecycle.leave, below
    except BaseException:
        interrupted = False
        raise
    finally:
        run_dir.unlock()
        clear_local_traces()
        with signals_deferred():
            lifecycle.leave(run_dir, claim, interrupted, summary, command)


def _run_locked(
    cfg: SweepConfig,
    run_dir: RunDir,
    *,
    grid_points: Sequence[Any],
    shas: dict[Any, str],
    traces: dict[str, Trace],
    command: Sequence[str] | None,
    overrides: Sequence[str] | None,
    config_yaml: str | None,
    release_workers: bool,
    started_at: str,
    t_start: float,
    timings: dict[str, float],
) -> SweepSummary:
    """The sweep in its locked run directory, as a pipeline: plan the points against what the
    directory holds, start the manifest, execute (writing the inputs as the first replays
    run), merge the part files, finish the manifest, then report and draw the figures."""
    run = RunState(
        cfg, run_dir, traces, started_at, t_start, timings, command, overrides, release_workers
    )
    run.config_yaml = config_yaml
    _plan_points(run, grid_points, shas)
    start_manifest(run)
    _execute_todo(run)
    _merge_parts(run)
    _finish(run)
    return _report(run)


def _plan_points(run: RunState, grid_points: Sequence[Any], shas: dict[Any, str]) -> None:
    """Number the grid's points against the directory's registry and choose those to compute.
    Reads the run directory's results, per-request rows and parts; sets ``run.setup``,
    ``run.todo``, ``run.summary``; writes ``.sweep/points.json``."""
    run.setup = cost_setup(run.cfg)
    existing = run.run_dir.load_existing()
    identity = None if run.setup is None else run.setup.identity()
    points, registry = assign_points(grid_points, shas, existing.registry, identity)
    with writes_to(run.run_dir):
        run.run_dir.save_registry(registry)
    run.todo = [
        p
        for p in points
        if p.key not in existing.done
        or (run.cfg.save_per_request and p.key not in existing.with_per_request)
    ]
    # no per-request rows or parts here yet: this run's rows can be written as they finish
    run.stream_per_request = run.cfg.save_per_request and run.run_dir.can_stream_per_request()
    run.summary = SweepSummary(
        out_dir=run.run_dir.path,
        planned=len(points),
        skipped=len(points) - len(run.todo),
        computed=0,
    )


def _write_inputs(run: RunState) -> None:
    """Write what the figures and a later run read: ``traces.parquet``, ``requests.parquet``
    (for ``run.traces`` at the grid's block sizes) and ``config.yaml`` (``run.config_yaml``, or
    the structured configuration when not given); sets ``inputs_seconds``. Raises OSError."""
    cfg, run_dir = run.cfg, run.run_dir
    t = time.perf_counter()
    run_dir.save_trace_tables(list(run.traces.values()), sorted(set(cfg.block_size)))
    config_yaml = run.config_yaml
    if config_yaml is None:
        from . import ranges
        from .config import GRID_KEYS

        config_yaml = ranges.structured_yaml(cfg, GRID_KEYS)
    atomic_write_text(run_dir.config, config_yaml)
    run.inputs_written = True
    run.timings["inputs_seconds"] = time.perf_counter() - t


def _while_replaying(run: RunState) -> None:
    """The first batches are replaying (or, in process, about to): write the inputs and open the
    per-request stream now rather than before them. They cost this thread about 0.15-0.4 s of
    Python holding the GIL (most of it pyarrow's first conversion, which imports pandas) that
    the replays' own threads need not wait for; the first batch's rows need requests.parquet
    and the stream, and this runs before any batch is handed back. A failed write stops the
    sweep like a failed part (:class:`_WriteFailed`)."""
    with interrupt_after():  # Ctrl-C is likely now: not in the middle of pandas' import
        try:
            _write_inputs(run)
        except OSError as err:
            raise _WriteFailed(err) from err
        if run.stream_per_request:
            _start_stream(run)
        results_metadata()  # for the final merge: computed now, not after the last replay


def _started(run: RunState, bar: Any) -> None:
    """The first batches are replaying: write the inputs (:func:`_while_replaying`), then
    start the progress bar's clock. Its estimate of the time left is the points' rate since
    this moment: the warm-up (a first compile), the workers' start and the inputs, counted
    before, made the first estimate 7 to 35 times too long."""
    _while_replaying(run)
    bar.reset(total=len(run.todo))


def _write_inputs_late(run: RunState) -> None:
    """Write the inputs if :func:`_while_replaying` did not (nothing to replay, or the sweep
    stopped before its first batch): an interrupted run's directory has them too."""
    if run.inputs_written or run.write_error is not None:
        return
    try:
        with interrupt_after():  # not cut in the middle of an import the merge needs
            _write_inputs(run)
    except OSError as err:
        run.write_error = err
    except KeyboardInterrupt:
        run.summary.interrupted = True


def _execute_todo(run: RunState) -> None:
    """Replay ``run.todo``, writing a part file per finished batch (:func:`_on_batch`). Ctrl-C,
    a failed write, a setup error or a broken executor end it, recorded in ``run`` (what
    finished is kept); sets the execute, replay and worker timings."""
    bar = progress_bar(len(run.todo), run.cfg.progress)
    try:
        if run.todo:
            on_batch = functools.partial(_on_batch, run, bar)
            _execute_plan(run, on_batch, functools.partial(_started, run, bar))
    except KeyboardInterrupt:
        run.summary.interrupted = True
    except _WriteFailed as err:
        run.write_error = err.error
    except prefixsim.PrefixSimError as err:
        run.setup_error = err
    except Exception as err:  # the executor broke; what finished is kept and written below
        run.executor_error = describe_failure(err)
        _log_traceback(run.run_dir, err)
    finally:
        bar.close()
        if not math.isnan(run.t_execute):
            run.timings["execute_seconds"] = time.perf_counter() - run.t_execute
        run.timings["replay_seconds"] = run.replay_seconds
    _write_inputs_late(run)


def _execute_plan(
    run: RunState, on_batch: Callable[[Batch, list[Outcome]], None], on_started: Callable[[], None]
) -> None:
    """Start the executor (a Dask client if asked), warm the kernels up, plan the batches and
    run them, calling ``on_started`` once the first are running and ``on_batch`` as each
    finishes. Sets ``run.executor_info``."""
    ex, timings = run.cfg.executor, run.timings
    with contextlib.ExitStack() as stack:
        client = None
        if ex.backend == Backend.dask:
            t = time.perf_counter()
            client = stack.enter_context(dask_client(ex))
            timings["cluster_start_seconds"] = time.perf_counter() - t
        workers = effective_workers(ex, client)
        t_warm = time.perf_counter()
        cost = warm_up(run.traces, run.todo)
        timings["warm_up_seconds"] = time.perf_counter() - t_warm
        plan = plan_batches(run.todo, run.traces, ex, workers, cost)
        run.executor_info.update(
            workers=plan.workers,
            in_process=plan.in_process,
            batches=len(plan.batches),
            batch_size=plan.batch_size,
            address=ex.address if ex.backend == Backend.dask else None,
        )
        where = "in this process" if plan.in_process else f"on {ex.backend.value}"
        log.info(
            "running %d points %s with %d worker(s) in %d batch(es)",
            len(run.todo),
            where,
            plan.workers,
            len(plan.batches),
        )
        from tqdm.contrib.logging import logging_redirect_tqdm

        with logging_redirect_tqdm():
            run.t_execute = time.perf_counter()
            try:
                # the cost columns need every point's hit tokens, saved or not
                keep_hits = run.cfg.save_per_request or run.setup is not None
                execute(
                    plan, run.traces, ex, keep_hits, on_batch, client=client, on_started=on_started
                )
            finally:
                if run.release_workers and ex.backend == Backend.loky and not plan.in_process:
                    release_loky_workers()


def _start_stream(run: RunState) -> None:
    """Write per_request.parquet as the points finish (``sweep.store.stream``); when its
    temporary file cannot be created, the final merge writes the file as before."""
    try:
        ids = [p.point_id for p in run.todo]
        run.run_dir.start_per_request_stream(ids, with_cost=run.setup is not None)
    except OSError as err:
        log.debug("per-request rows left to the final merge: %s", describe_os_error(err))


def _on_batch(run: RunState, bar: Any, batch: Batch, outcomes: list[Outcome]) -> None:
    """A finished batch: its failures go to the summary, its successes to a part file (a
    failed write raises :class:`_WriteFailed`: no later batch can be kept)."""
    timings = run.timings
    if "first_result_seconds" not in timings:
        first = time.perf_counter() - run.t_execute
        timings["first_result_seconds"] = first
        # start-up of the workers, roughly: the wait for the first batch beyond its replays
        # and the inputs, which this thread writes first (_while_replaying)
        waited = first - timings.get("inputs_seconds", 0.0) - sum(o.seconds for o in outcomes)
        timings["worker_start_seconds"] = max(0.0, waited)
    by_id = {p.point_id: p for p in batch.points}
    ok = [o for o in outcomes if o.error is None]
    failed = [o.point_id for o in outcomes if o.error is not None]
    for o in outcomes:
        if o.error is not None:
            failure = Failure(o.point_id, by_id[o.point_id].describe(), o.error)
            run.summary.failures.append(failure)
            log.error("point failed: %s: %s", failure.point, failure.error)
    table = None
    if ok:
        table = part_table(by_id, ok, run.setup, run.traces, run.cfg.save_per_request)
        try:
            run.run_dir.write_part(table)
        except OSError as err:  # out of space, read-only...: no later batch can be kept
            raise _WriteFailed(err) from err
        run.written.update(by_id[o.point_id].key for o in ok)
        run.summary.computed += len(ok)
    run.run_dir.stream_part(table, failed)  # kept in a part file first: the record to resume
    run.replay_seconds += sum(o.seconds for o in ok)
    bar.update(len(outcomes))


def _merge_parts(run: RunState) -> None:
    """Fold the part files into ``results.parquet`` and ``per_request.parquet``. An interrupt
    or a failed write leaves the parts for the next run; either way the summary counts what
    was really written. Sets ``write_seconds`` and ``total_seconds``."""
    summary = run.summary
    t = time.perf_counter()
    try:
        summary.rows, folded = run.run_dir.consolidate()
        # what was really written (an interrupt may land between a part write and its count)
        summary.computed = len(folded & {p.key for p in run.todo})
    except (KeyboardInterrupt, OSError) as err:
        # The part files stay: the next run into this directory folds them in.
        if isinstance(err, KeyboardInterrupt):
            summary.interrupted = True
        elif run.write_error is None:
            run.write_error = err
        summary.computed = len(run.written)
        summary.rows = run.run_dir.rows_in_results()
    run.timings["write_seconds"] = time.perf_counter() - t
    summary.seconds = time.perf_counter() - run.t_start
    run.timings["total_seconds"] = summary.seconds


def _again(run: RunState) -> str:
    """The command that resumes ``run`` (into its folder, not a new dated one)."""
    return lifecycle.resume_command(run.command, run.run_dir.path)


def _finish(run: RunState) -> None:
    """Write the final ``manifest.json`` (``interrupted``, ``failed`` or ``complete``; a stop
    signal waits until it is written), set ``summary.error``; raise the write error (one-line
    :class:`StoreError`) or the setup error, if any."""
    summary, run_dir = run.summary, run.run_dir
    if summary.interrupted:
        status = "interrupted"
    elif summary.failures or run.write_error or run.setup_error or run.executor_error:
        status = "failed"
    else:
        status = "complete"
    if run.write_error is not None:
        run.error = f"out_dir={str(run_dir.path)!r}: " + describe_os_error(run.write_error)
    setup = str(run.setup_error) if run.setup_error else None
    summary.error = run.error or setup or run.executor_error
    # A second Ctrl-C or a TERM waits until the manifest is written: it never stays "running".
    with signals_deferred():
        try:
            run_dir.write_manifest({**manifest_doc(run, status), "error": summary.error})
        except OSError as err:
            run.write_error = run.write_error or err
            run.error = run.error or f"out_dir={str(run_dir.path)!r}: {describe_os_error(err)}"
            log.error("manifest.json could not be written: %s", describe_os_error(err))
    if run.error is not None:
        raise StoreError(
            f"{run.error}; {summary.computed} point(s) finished and kept, {len(run.todo)} "
            f"planned; make room or choose another out_dir, then to finish: {_again(run)}"
        )
    if run.setup_error is not None:
        raise run.setup_error


def _report(run: RunState) -> SweepSummary:
    """Log the outcome (results, failures, a broken executor) and draw the figures of a
    complete run; returns the summary."""
    summary, run_dir = run.summary, run.run_dir
    if run.executor_error is not None:
        log.error(
            "%s; %d point(s) finished and kept in %s, %d missing; to compute them: %s",
            run.executor_error,
            summary.computed,
            run_dir.results,
            len(run.todo) - summary.computed,
            _again(run),
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
            "%d point(s) failed (listed above and in %s); the others are written; to retry "
            "them: %s",
            len(summary.failures),
            run_dir.manifest,
            _again(run),
        )
    plot = run.cfg.plot
    if plot.enabled and summary.rows and not summary.interrupted:
        draw_figures_logged(run_dir.path, plot.formats, plot.capacity_axis)
    return summary
