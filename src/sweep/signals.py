"""Signals and logging around a sweep: SIGTERM stops it like Ctrl-C, the final manifest write
is not cut short, and the ``sweep`` logger also writes to the run directory's ``sweep.log``."""

from __future__ import annotations

import contextlib
import logging
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

log = logging.getLogger("sweep")


@contextlib.contextmanager
def _held_signals() -> Iterator[list[int]]:
    """SIGINT and SIGTERM noted, not raised, while the block runs: yields the list of those
    that arrived. (Python handlers, not a blocked mask: any thread may take a signal; off the
    main thread, where no handler can be set, nothing is held.)"""
    import threading

    received: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield received
        return

    def note(signum: int, frame: Any) -> None:
        received.append(signum)

    previous = {s: signal.signal(s, note) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield received
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


@contextlib.contextmanager
def signals_deferred() -> Iterator[None]:
    """Ignore SIGINT and SIGTERM (noted, not raised) during a short write that must finish: the
    sweep is stopping already, and a half-done final step would leave the directory claiming a
    state it is not in."""
    with _held_signals() as received:
        try:
            yield
        finally:
            if received:
                log.warning("a stop signal arrived while the manifest was written; it is written")


@contextlib.contextmanager
def interrupt_after() -> Iterator[None]:
    """Hold back SIGINT and SIGTERM during a short step that must not be cut in the middle
    (an import cut short leaves a half-initialised module that fails at its next import, the
    final merge's), then stop as they would have: KeyboardInterrupt at the end of the step."""
    with _held_signals() as received:
        yield
    if received:
        raise KeyboardInterrupt


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
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
def file_log(path: Path) -> Iterator[None]:
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
