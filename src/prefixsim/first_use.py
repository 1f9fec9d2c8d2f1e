"""The first use of the compiled kernels: a notice while numba compiles.

numba compiles a kernel on its first call and caches the machine code on disk (``cache=True``:
``__pycache__`` beside the source, or ``$NUMBA_CACHE_DIR``); later processes load it in
milliseconds. The first call of a fresh install takes seconds per kernel (12.9 s for the
README's ``replay_tiers`` example, 18 s for the first ``all_policies`` sweep), silently.

* :func:`noting` (around a run: the CLI's, the sweep's) says so on stderr, once:
  one line when the first kernel starts compiling (which, and that it happens once), one when
  the block ends (what compiled and how long it took). It listens to numba's own compile
  events (``numba:compile``, raised only when a dispatcher compiles: not when it loads its
  on-disk cache), for every dispatcher defined in this package, so it needs no list of
  kernels and keeps working when they change.
* :func:`noted` wraps the Python API's entries in :func:`noting`.

The warm-up that compiles them ahead is :mod:`prefixsim.warm_up` (it imports those entries).
"""

from __future__ import annotations

import contextlib
import functools
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import IO, Any, ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")

PACKAGE = __name__.partition(".")[0]


@dataclass
class Notice:
    """What a :func:`noting` block saw: the top-level dispatchers compiled, and for how long."""

    stream: IO[str] | None = None
    compiled: list[str] = field(default_factory=list)
    seconds: float = 0.0
    said: bool = False


class _Listener:
    """numba's ``numba:compile`` events of this package's dispatchers, top level only (a
    kernel compiles the jitted functions it calls inside its own event)."""

    def __init__(self, notice: Notice) -> None:
        self.notice = notice
        self.local = threading.local()

    def _ours(self, event: Any) -> str | None:
        dispatcher = (getattr(event, "data", None) or {}).get("dispatcher")
        func = getattr(dispatcher, "py_func", None)
        module = getattr(func, "__module__", "") or ""
        if module != PACKAGE and not module.startswith(f"{PACKAGE}."):
            return None
        return getattr(func, "__qualname__", None) or repr(dispatcher)

    def on_start(self, event: Any) -> None:
        depth = getattr(self.local, "depth", 0)
        self.local.depth = depth + 1
        name = self._ours(event)
        if depth or name is None:
            return
        self.local.started = (name, time.perf_counter())
        if not self.notice.said:
            self.notice.said = True
            _say(
                self.notice,
                f"compiling {name} (and any other kernel this run needs) for its first use; "
                "numba caches them on disk, so this happens once ('python -m prefixsim "
                "warm-up' compiles them all ahead)",
            )

    def on_end(self, event: Any) -> None:
        self.local.depth = max(0, getattr(self.local, "depth", 1) - 1)
        started = getattr(self.local, "started", None)
        if self.local.depth or started is None:
            return
        self.local.started = None
        name, t0 = started
        self.notice.compiled.append(name)
        self.notice.seconds += time.perf_counter() - t0


@functools.cache
def _listener_class() -> type[_Listener]:
    from numba.core import event

    class Listener(_Listener, event.Listener):  # numba's registry takes its own type only
        pass

    return Listener


def _numba_listener(notice: Notice) -> _Listener:
    return _listener_class()(notice)


def _say(notice: Notice, text: str) -> None:
    stream = notice.stream or sys.stderr
    with contextlib.suppress(OSError, ValueError):
        print(f"{PACKAGE}: {text}", file=stream, flush=True)


_ACTIVE: list[Notice] = []
_LOCK = threading.Lock()


@contextlib.contextmanager
def noting(stream: IO[str] | None = None) -> Iterator[Notice]:
    """Within the block, say on ``stream`` (stderr) when this package's kernels compile: one
    line at the first compile, one at the end with what compiled and how long it took. Nested
    blocks say it once (the outermost speaks)."""
    from numba.core import event

    with _LOCK:
        if _ACTIVE:  # already listened to: the outer block speaks
            inner = True
        else:
            inner = False
            notice = Notice(stream)
            _ACTIVE.append(notice)
    if inner:
        yield _ACTIVE[0]
        return
    listener = _numba_listener(notice)
    event.register("numba:compile", listener)
    try:
        yield notice
    finally:
        event.unregister("numba:compile", listener)
        with _LOCK:
            _ACTIVE.clear()
        if notice.compiled:
            names = ", ".join(dict.fromkeys(notice.compiled))
            _say(notice, f"compiled {names} in {notice.seconds:.1f} s; cached for later runs")


def noted(func: Callable[P, R]) -> Callable[P, R]:
    """``func`` within :func:`noting`: the Python API's entries (``replay``, ``replay_tiers``,
    ``replay_cluster``) say when they compile, as the command lines do (the README's
    ``replay_tiers`` block was silent for 13 s on a first run). Nested calls, and calls within
    a command's own block, say it once."""

    @functools.wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        with noting():
            return func(*args, **kwargs)

    return wrapper
