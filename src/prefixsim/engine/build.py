"""Compiling a driver for the policies of one composition.

A driver is written once, as a *template*: a function ``template(stamp)`` returning the driver's
Python function, which calls the generic step names of :mod:`prefixsim.engine.steps` (and
functions of the rule, :mod:`prefixsim.engine.rules`). :func:`compiled` makes, once per process
and composition (a policy; a hierarchy's policies), a copy of that function whose global names
are bound to the composition's steps (:func:`rebind`), each compiled ``inline="always"``, and
compiles it with numba:

* numba inlines the steps into the driver before typing it: the compiled driver is the loop a
  hand-written kernel would be, with no call per step;
* ``_nrt=False``: a driver allocates nothing (its caller passes every array), so numba's
  runtime is not needed, and without it the arrays handed to the steps carry no reference
  counts (with them, the first tier kernel ran 15-20x slower, see docs/tiers.md);
* ``nogil=True``: a driver touches no Python object, so the sweep runs replays on threads;
* numba's pedantic SSA check warns (``NumbaIRAssumptionWarning``, "an internal pedantic check")
  on some shapes of inlined code, e.g. a step with an ``or`` called in a ``while ... and``
  condition; the code it compiles is right (the tests hold every driver equal to the
  references), so the warning is silenced while a driver compiles, and only then;
* ``cache=True``, keyed by ``stamp``: numba's disk cache checks only the file of the function it
  compiles, not the files of what it inlined. The stamp is a hash of the engine's files, the
  package's policies, the files of the composition's steps and the composition's names (its
  policies' states, its rule), held in the driver's closure,
  which numba hashes into its cache key: editing a policy recompiles every driver that may
  inline it. Each composition has its own cache index (its driver's qualified name names it).
"""

from __future__ import annotations

import hashlib
import threading
import types
import warnings
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from numba import njit
from numba.core.errors import NumbaIRAssumptionWarning
from numba.core.registry import CPUDispatcher

_PACKAGE = Path(__file__).resolve().parent.parent
_ALWAYS = tuple(sorted({*_PACKAGE.glob("engine/*.py"), *_PACKAGE.glob("policies/*.py")}))
_BUILT: dict[tuple[Any, ...], Any] = {}
_INLINED: dict[Any, Any] = {}
_LOCK = threading.RLock()


class _Driver(CPUDispatcher):
    """A dispatcher that compiles without numba's pedantic SSA warning (see above)."""

    def _compile_for_args(self, *args: Any, **kws: Any) -> Any:
        # numba calls this (from its C dispatcher) only when no compiled version matches
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", NumbaIRAssumptionWarning)
            return super()._compile_for_args(*args, **kws)  # type: ignore[misc]


def rebind(fn: Callable[..., Any], names: dict[str, Any]) -> Callable[..., Any]:
    """A copy of ``fn`` whose global ``names`` are the given objects (its code unchanged)."""
    scope = dict(fn.__globals__)
    scope.update(names)
    copy = types.FunctionType(
        fn.__code__,
        scope,
        fn.__name__,
        fn.__defaults__,
        fn.__closure__,
    )
    copy.__qualname__ = fn.__qualname__
    copy.__module__ = fn.__module__
    copy.__doc__ = fn.__doc__
    return copy


def inlined(fn: Callable[..., Any]) -> Any:
    """``fn`` compiled ``inline="always"`` (once per function object; a numba function is
    compiled again from its Python function, so that it is inlined whatever its options)."""
    fn = getattr(fn, "py_func", fn)
    with _LOCK:
        dispatcher = _INLINED.get(fn)
        if dispatcher is None:
            dispatcher = njit(inline="always")(fn)
            _INLINED[fn] = dispatcher
    return dispatcher


def inline_all(functions: dict[str, Callable[..., Any]]) -> dict[str, Any]:
    return {name: inlined(fn) for name, fn in functions.items()}


def _name(obj: Any) -> str:
    return f"{getattr(obj, '__module__', '')}.{getattr(obj, '__qualname__', repr(obj))}"


def _stamp(key: tuple[Any, ...], files: Iterable[Path]) -> str:
    digest = hashlib.sha256(" ".join(map(_name, key)).encode())
    for path in sorted(set(files)):
        digest.update(str(path).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def compiled(
    template: Callable[[str], Callable[..., Any]],
    key: tuple[Any, ...],
    names: Callable[[], dict[str, Any]],
    files: Callable[[], Iterable[str]] = tuple,
) -> Any:
    """The numba dispatcher of ``template`` for one composition (``key``), made on first use
    with its global ``names()`` bound; ``files()``: the composition's own source files (asked
    on first use only: finding a function's file costs about 0.1 ms, a sixth of a replay of
    the bundled trace)."""
    with _LOCK:
        dispatcher = _BUILT.get((template, *key))
        if dispatcher is None:
            stamp = _stamp(key, [*_ALWAYS, *(Path(f).resolve() for f in files())])
            fn = rebind(template(stamp), names())
            # numba names a function's cache index after its qualified name: one index per
            # composition, so that an index never holds a state class from a module another
            # process cannot import (a researcher's policy): numba unpickles the whole index.
            parts = ".".join(getattr(k, "__name__", str(k)) for k in key)
            # The name is also what prefixsim.first_use's compile notice says: the driver, then
            # the composition (``single_driver.FIFOState.SpecRule``).
            fn.__qualname__ = f"{fn.__name__}.{parts}"
            dispatcher = njit(cache=True, nogil=True, _nrt=False)(fn)  # type: ignore[call-overload]
            dispatcher.__class__ = _Driver
            _BUILT[(template, *key)] = dispatcher
    return dispatcher
