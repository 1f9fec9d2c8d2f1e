"""Executors: where the batches of a plan run (in this process, on joblib's loky or threading
backends, or as Dask futures), and what a broken executor is called in one line.

:func:`execute` hands each batch to :func:`sweep.run.run_batch` and calls back in this process
as batches finish; the worker side and the plan live in :mod:`sweep.run`.
"""

from __future__ import annotations

import itertools
import logging
import warnings
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import prefixsim
from prefixsim import Trace

from .config import Backend, ExecutorConfig
from .run import Batch, Outcome, Plan, run_batch

log = logging.getLogger("sweep")


def effective_workers(ex: ExecutorConfig, client: Any = None) -> int:
    if ex.backend == Backend.dask and client is not None:
        total = sum(client.nthreads().values()) or 1
        return total if ex.n_jobs < 0 else min(ex.n_jobs, total)
    import joblib

    if ex.n_jobs < 0:
        return max(1, joblib.cpu_count() + 1 + ex.n_jobs)
    return max(1, ex.n_jobs)


@contextmanager
def dask_client(ex: ExecutorConfig) -> Iterator[Any]:
    """A ``distributed.Client`` at ``ex.address``, or on a local cluster started (and stopped)
    here."""
    try:
        from distributed import Client, LocalCluster
    except ImportError:
        from .inputs import DASK_MISSING

        raise prefixsim.PrefixSimError(DASK_MISSING) from None
    with ExitStack() as stack:
        # CRITICAL: a lost worker is one line of the sweep's, not a dozen of the scheduler's
        stack.enter_context(_quiet("distributed", logging.CRITICAL))
        if ex.address:
            try:
                client = stack.enter_context(
                    Client(ex.address, set_as_default=False, timeout=ex.connect_timeout)
                )
            except (OSError, TimeoutError, ValueError) as err:
                raise prefixsim.PrefixSimError(
                    f"executor.address={ex.address!r}: no Dask scheduler answered within "
                    f"{ex.connect_timeout:g} s ({type(err).__name__}); start it, check the "
                    "address, or raise executor.connect_timeout"
                ) from None
        else:
            n_workers = ex.n_workers or (ex.n_jobs if ex.n_jobs > 0 else None)
            cluster = stack.enter_context(
                LocalCluster(
                    n_workers=n_workers,
                    threads_per_worker=ex.threads_per_worker,
                    processes=ex.processes,
                    dashboard_address=None,
                )
            )
            client = stack.enter_context(Client(cluster, set_as_default=False))
        yield client


def describe_failure(err: BaseException) -> str:
    """One line for an executor that broke down mid-sweep, naming the likely cause."""
    import re

    name = type(err).__name__
    try:
        message = str(err)
    except Exception:  # some exceptions cannot describe themselves
        message = ""
    text = (message.strip().splitlines() or [""])[0]
    if name == "TerminatedWorkerError":
        codes = re.search(r"exit codes of the workers are \{([^}]*)\}", message)
        how = f" (exit {codes.group(1)})" if codes else ""
        return (
            f"a worker process was killed{how}, most likely by the system for want of memory; "
            "use fewer workers (executor.n_jobs) or more memory"
        )
    if name == "KilledWorker":
        return (
            "Dask lost the workers running a task (killed, out of memory, or their machine went "
            f"away): {text}"
        )
    module = type(err).__module__ or ""
    if module.startswith(("distributed", "tornado")) or name in ("CancelledError", "TimeoutError"):
        return f"the Dask cluster went away mid-sweep ({name}: {text})"
    return f"the executor failed ({name}: {text})"


def release_loky_workers() -> None:
    """Stop loky's reusable worker processes now. Left alone, they idle until the interpreter
    exits, which then waits about a second for them to shut down; killing idle workers is
    instant. (A later sweep in the same process starts new ones.)"""
    try:
        from joblib.externals.loky import reusable_executor
    except ImportError:  # pragma: no cover - joblib always vendors loky
        return
    executor = getattr(reusable_executor, "_executor", None)
    if executor is not None:
        executor.shutdown(wait=True, kill_workers=True)


@contextmanager
def _children_immune_to_ctrl_c() -> Iterator[None]:
    """Start worker processes with SIGINT ignored: an ignored signal stays ignored in a child,
    through exec (a handler or a blocked mask does not). Ctrl-C reaches the whole process
    group, and a worker still importing would print a KeyboardInterrupt traceback; the sweep's
    own process handles Ctrl-C and stops the workers (by SIGTERM, which they keep). The window
    is the start of the workers (about 0.1 s): a Ctrl-C inside it is lost, press it again."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


@contextmanager
def _quiet(name: str, level: int = logging.WARNING) -> Iterator[None]:
    """Keep a chatty library's INFO messages (cluster start and stop) out of the sweep's log."""
    logger = logging.getLogger(name)
    previous = logger.level
    if logger.getEffectiveLevel() < level:
        logger.setLevel(level)
    try:
        yield
    finally:
        logger.setLevel(previous)


def _execute_on_dask(
    plan: Plan,
    traces: dict[str, Trace],
    per_request: bool,
    on_batch: Callable[[Batch, list[Outcome]], None],
    client: Any,
    on_started: Callable[[], None],
) -> None:
    """The batches as Dask futures, at most ``plan.workers`` in flight, the traces scattered
    once. Not through joblib's Dask backend: when a worker dies under a task, the scheduler
    fails the task (``KilledWorker``) but joblib's generator never hears of it and waits
    forever; a future raises the error, and the sweep reports it."""
    from distributed import as_completed

    scattered = {sha: client.scatter(t, broadcast=True) for sha, t in traces.items()}
    pending = iter(plan.batches)
    batch_of: dict[Any, Batch] = {}

    def submit(batch: Batch) -> Any:
        future = client.submit(
            run_batch, scattered[batch.trace_sha256], batch.items(), per_request, pure=False
        )
        batch_of[future] = batch
        return future

    first = [submit(b) for b in itertools.islice(pending, plan.workers)]
    running = as_completed(first, loop=client.loop)  # not the default client: this one
    try:
        on_started()
        for future in running:
            outcomes = future.result()  # raises what killed the task (KilledWorker, ...)
            on_batch(batch_of.pop(future), outcomes)
            following = next(pending, None)
            if following is not None:
                running.add(submit(following))
    finally:
        client.cancel(list(batch_of))


def execute(
    plan: Plan,
    traces: dict[str, Trace],
    ex: ExecutorConfig,
    per_request: bool,
    on_batch: Callable[[Batch, list[Outcome]], None],
    client: Any = None,
    on_started: Callable[[], None] = lambda: None,
) -> None:
    """Run every batch of ``plan``; ``on_batch`` is called in this process as each finishes (in
    completion order), ``on_started`` once, in this thread, after the first batches are handed
    to the workers (in process: before the first) and before any ``on_batch``. What either
    raises, and KeyboardInterrupt, propagates after the workers are stopped."""
    if plan.in_process:
        on_started()
        for batch in plan.batches:
            on_batch(batch, run_batch(traces[batch.trace_sha256], batch.items(), per_request))
        return
    if ex.backend == Backend.dask and client is not None:
        _execute_on_dask(plan, traces, per_request, on_batch, client, on_started)
        return
    import joblib

    calls = (
        joblib.delayed(run_batch)(traces[b.trace_sha256], b.items(), per_request)
        for b in plan.batches
    )
    # Outcomes come back with their point ids; map them back to batches as they finish.
    by_first_id = {b.points[0].point_id: b for b in plan.batches}
    with ExitStack() as stack:
        # Large trace arrays reach loky workers memory-mapped, copy-on-write ("c"): writable
        # for numba, shared by all workers, never copied (see _local_trace). (Dask does not get
        # here: its batches are futures, _execute_on_dask.)
        stack.enter_context(
            joblib.parallel_config(backend=ex.backend.value, n_jobs=plan.workers, mmap_mode="c")
        )
        # On an interrupt joblib warns about the tasks it cancels; the sweep says it better.
        stack.enter_context(warnings.catch_warnings())
        warnings.filterwarnings(
            "ignore",
            message=r".*(executed\s+but not used|have been\s+cancelled)",
            category=UserWarning,
        )
        parallel = joblib.Parallel(return_as="generator_unordered", batch_size=1)
        with _children_immune_to_ctrl_c():
            results = parallel(calls)  # starts the workers and dispatches the first batches
        try:
            on_started()
            for outcomes in results:
                on_batch(by_first_id[outcomes[0].point_id], outcomes)
        finally:
            results.close()
