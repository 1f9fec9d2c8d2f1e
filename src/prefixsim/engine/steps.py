"""The step interface: what a policy gives every composition, compiled.

A policy's compiled form is a *state* and its *steps*, registered together as a :class:`Steps`:

* the state is a ``NamedTuple`` class of the policy's own (one class per policy): arrays indexed
  by a cache-local *id* (a dense block id; in a cluster, a dense (instance, block) pair id), a
  ``sc`` array of per-cache scalars (queue heads, sizes, a clock), constants from its
  parameters, and ``cnt``, int64 ``[n_caches, len(counter_names)]``: its counters (the drivers
  fill ``block_hits`` and ``evictions``, columns 0 and 1; the steps count the policy's own, from
  column 2). One state holds ``n_caches`` independent caches over disjoint ids (a cluster's
  instances); ``q`` names the cache. It is made, in Python, by ``make_state(params, space)``;
* the steps are plain Python functions over it, compiled inside each driver (numba resolves the
  generic functions below to the registered step of the state's class when it types a driver,
  and inlines it):

  ============================== ============================================================
  ``is_resident(s, q, h)``        whether id ``h`` would be served from cache ``q`` now
  ``hit(s, q, h, pred)``          the access rule of a resident ``h``
  ``admit(s, q, h, pred)``        the miss path of a non-resident ``h``: afterwards ``h`` is
                                  resident; returns the one resident id it evicted, or -1
  ``remove(s, q, h)``             take resident ``h`` out, leaving no trace (no ghost entry,
                                  not an eviction): the block moved to a faster tier. Optional
  ``begin(s, q, ids, start, end)`` a request starts on cache ``q``: its ids are
                                  ``ids[start:end]``, in order. Optional
  ``end(s, q)``                   the request's accesses are done. Optional
  ============================== ============================================================

  ``pred`` is the id the request accessed just before ``h`` in this cache, :data:`NO_PRED` for
  its first block, or :data:`DEMOTED` for a block a faster tier evicted into this one (not an
  access of the request; only ``admit`` sees it). Every policy here evicts at most one block
  per admission (one insertion into a cache that was within its capacity), which is why
  ``admit`` returns one id: a demotion cascade is then a loop down the tiers.

Each step is a small function over arrays; the drivers are compiled with ``_nrt=False``
(:mod:`prefixsim.engine.build`), so passing the state's arrays to them costs no reference
counting, and ``inline="always"`` leaves no call at all: the compiled driver is the loop a
hand-written kernel would be (``docs/performance.md``, "Policies as steps").
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from numba.core.errors import TypingError
from numba.extending import overload

NO_PRED = -1
"""``pred`` of a request's first block."""
DEMOTED = -2
"""``pred`` of a block admitted because a faster tier evicted it (not the request's access)."""

ix = np.uintp
"""``a[ix(i)]`` in a kernel: index with ``i`` cast to unsigned. With a signed index numba applies
Python's negative-index rule (``i + len(a)`` when ``i < 0``), three more instructions in the
address of every load and store, on the critical path of the chains of dependent loads a replay
is made of (block id, then its state, then a queue's victim, then the victim's state); with an
unsigned index it is a plain load. That measured 1.2-1.35x on the S3FIFO and LRU kernels
(docs/performance.md, "The kernel stretch"). Only for indices a kernel's invariants keep
non-negative (a negative one would index far out of bounds instead of from the end), and only in
the subscript: numba types ``int64 op uint64`` as float64, so the cast value must not flow
into arithmetic."""


_PAGE_BYTES = 4096


def zeroed_state(n: int, dtype: type[np.integer[Any]] | type[np.bool_]) -> np.ndarray:
    """``np.zeros(n, dtype)`` with every page already touched, for a kernel's per-block state.

    ``np.zeros`` maps pages lazily; a kernel that then faults them in one by one, in its own
    access order, interleaves the zeroing of each fresh page (2 MiB with transparent huge pages)
    with its random accesses and evicts its working set from the CPU caches each time. At 10M
    requests (1.1 GB of LRU state) that cost 0.7-1.2 s of a 2.0-2.8 s replay in two runs;
    touching every page first, in address order, 0.5 s at most (docs/performance.md, "Kernel
    layout")."""
    state = np.zeros(n, dtype)
    state[:: max(1, _PAGE_BYTES // state.itemsize)] = 0  # one write per page: faults them in
    return state


@dataclass(frozen=True)
class Space:
    """What a driver tells ``make_state`` about the caches it will run."""

    n_ids: int
    """Ids are ``0 .. n_ids - 1`` (per-id arrays have this length)."""
    n_caches: int
    """Independent caches in the state (``q`` in ``0 .. n_caches - 1``)."""
    stream: np.ndarray
    """The trace's block ids in access order (an offline policy's future; a bound on how often
    an id can be accessed). For one cache over block ids, exactly the ids it will see."""


@dataclass(frozen=True)
class Steps:
    """A policy's compiled form (see the module docstring)."""

    state: type
    """The policy's state, a ``NamedTuple`` class used by no other policy."""
    make_state: Callable[[Any, Space], Any]
    is_resident: Callable[..., Any]
    hit: Callable[..., Any]
    admit: Callable[..., Any]
    remove: Callable[..., Any] | None = None
    begin: Callable[..., Any] | None = None
    end: Callable[..., Any] | None = None

    @property
    def removable(self) -> bool:
        return self.remove is not None

    def source_files(self) -> set[str]:
        """The files the steps are defined in (a driver's cache key hashes them)."""
        fns = (self.is_resident, self.hit, self.admit, self.remove, self.begin, self.end)
        return {inspect.getsourcefile(f) or "" for f in fns if f is not None} - {""}


_BY_STATE: dict[type, Steps] = {}


def register_steps(steps: Steps) -> Steps:
    """Make ``steps`` the implementation of the generic functions for its state class."""
    if not hasattr(steps.state, "_fields"):
        raise TypeError(f"{steps.state.__name__}: a policy's state must be a NamedTuple class")
    if _BY_STATE.get(steps.state, steps) is not steps:
        raise ValueError(f"state {steps.state.__name__} already has steps")
    for name, generic in _GENERIC.items():
        fn = getattr(steps, name)
        if fn is not None and _params(fn) != _params(generic):
            raise TypeError(
                f"{fn.__qualname__}: a {name} step takes ({', '.join(_params(generic))}), "
                f"not ({', '.join(_params(fn))}): numba matches steps by their argument names"
            )
    _BY_STATE[steps.state] = steps
    return steps


def _params(fn: Any) -> tuple[str, ...]:
    return tuple(inspect.signature(fn).parameters)


def counter_array(n_caches: int, counter_names: tuple[str, ...]) -> np.ndarray:
    """A state's ``cnt``: zeroed, one row per cache, one column per counter name."""
    return np.zeros((n_caches, len(counter_names)), np.int64)


def _step(state_type: Any, name: str) -> Callable[..., Any] | None:
    steps = _BY_STATE.get(getattr(state_type, "instance_class", type(None)))
    if steps is None:
        return None  # not a policy state: numba reports no matching implementation
    fn = getattr(steps, name)
    if fn is None:
        raise TypingError(f"{steps.state.__name__} has no {name} step")
    return fn


def _noop_begin(s, q, ids, start, end):
    return None


def _noop_end(s, q):
    return None


# The generic functions. Called from Python they are only names; inside a compiled driver each
# is replaced by the registered step of its state argument's class.


def is_resident(s: Any, q: int, h: int) -> bool:
    raise NotImplementedError("a step runs only inside a compiled driver")


def hit(s: Any, q: int, h: int, pred: int) -> None:
    raise NotImplementedError("a step runs only inside a compiled driver")


def admit(s: Any, q: int, h: int, pred: int) -> int:
    raise NotImplementedError("a step runs only inside a compiled driver")


def remove(s: Any, q: int, h: int) -> None:
    raise NotImplementedError("a step runs only inside a compiled driver")


def begin(s: Any, q: int, ids: Any, start: int, end: int) -> None:
    raise NotImplementedError("a step runs only inside a compiled driver")


def end(s: Any, q: int) -> None:
    raise NotImplementedError("a step runs only inside a compiled driver")


_GENERIC = {
    "is_resident": is_resident,
    "hit": hit,
    "admit": admit,
    "remove": remove,
    "begin": begin,
    "end": end,
}


@overload(is_resident, inline="always")
def _is_resident(s, q, h):
    return _step(s, "is_resident")


@overload(hit, inline="always")
def _hit(s, q, h, pred):
    return _step(s, "hit")


@overload(admit, inline="always")
def _admit(s, q, h, pred):
    return _step(s, "admit")


@overload(remove, inline="always")
def _remove(s, q, h):
    return _step(s, "remove")


@overload(begin, inline="always")
def _begin(s, q, ids, start, end):
    steps = _BY_STATE.get(getattr(s, "instance_class", type(None)))
    if steps is None:
        return None
    return steps.begin or _noop_begin


@overload(end, inline="always")
def _end(s, q):
    steps = _BY_STATE.get(getattr(s, "instance_class", type(None)))
    if steps is None:
        return None
    return steps.end or _noop_end
