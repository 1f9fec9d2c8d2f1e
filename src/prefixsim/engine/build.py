"""Compiling a driver for the policies of one composition.

A driver is written once, as a *template*: a function ``template(stamp)`` that returns the
driver's Python function, which calls the generic steps of :mod:`prefixsim.engine.steps`.
:func:`compiled` compiles it with numba for the states it is given (one dispatcher per
template and tuple of policy states, made once per process):

* ``_nrt=False``: a driver allocates nothing (its caller passes every array), so numba's
  runtime is not needed, and without it the arrays handed to the inlined steps carry no
  reference counts (with them, the first tier kernel ran 15-20x slower, see docs/tiers.md);
* ``nogil=True``: a driver touches no Python object, so the sweep runs replays on threads;
* numba's pedantic SSA check warns (``NumbaIRAssumptionWarning``, "an internal pedantic check")
  on some shapes of inlined steps, e.g. a step with an ``or`` called in a ``while ... and``
  condition; the code it compiles is right (the tests hold every driver equal to the
  references), so the warning is silenced while a driver compiles, and only then;
* ``cache=True``, keyed by ``stamp``: numba's disk cache checks only the file of the function
  it compiles, not the files of what it inlined. The stamp is a hash of the driver's file, the
  engine's files and the files of the policies' steps, held in the driver's closure, which
  numba hashes into its cache key: editing a policy's steps recompiles every driver that
  inlines them, and the drivers of different policies (one template each) sit side by side in
  one cache index.
"""

from __future__ import annotations

import hashlib
import inspect
import threading
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from numba import njit
from numba.core.errors import NumbaIRAssumptionWarning
from numba.core.registry import CPUDispatcher

from .steps import Steps

_ENGINE_FILES = tuple(sorted(str(p) for p in Path(__file__).parent.glob("*.py")))
_BUILT: dict[tuple[Any, ...], Any] = {}
_LOCK = threading.Lock()


class _Driver(CPUDispatcher):
    """A dispatcher that compiles without numba's pedantic SSA warning (see above)."""

    def _compile_for_args(self, *args: Any, **kws: Any) -> Any:
        # numba calls this (from its C dispatcher) only when no compiled version matches
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", NumbaIRAssumptionWarning)
            return super()._compile_for_args(*args, **kws)  # type: ignore[misc]


def _stamp(files: Sequence[str]) -> str:
    digest = hashlib.sha256()
    for name in sorted(set(files)):
        digest.update(name.encode())
        digest.update(Path(name).read_bytes())
    return digest.hexdigest()


def compiled(template: Callable[[str], Callable[..., Any]], steps: Sequence[Steps]) -> Any:
    """The numba dispatcher of ``template`` for ``steps`` (a policy's, or a hierarchy's tiers',
    fastest first), made on first use."""
    key = (template, *(s.state for s in steps))
    with _LOCK:
        dispatcher = _BUILT.get(key)
        if dispatcher is None:
            files = [inspect.getsourcefile(template) or "", *_ENGINE_FILES]
            for s in steps:
                files.extend(s.source_files())
            fn = template(_stamp([f for f in files if f]))
            dispatcher = njit(cache=True, nogil=True, _nrt=False)(fn)  # type: ignore[call-overload]
            dispatcher.__class__ = _Driver
            _BUILT[key] = dispatcher
    return dispatcher
