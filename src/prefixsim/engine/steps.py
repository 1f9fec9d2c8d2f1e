"""The step interface: what a policy gives every composition, compiled.

A policy's compiled form is a *state* and its *steps*, registered together as a :class:`Steps`:

* the state is a ``NamedTuple`` of the policy's own: arrays indexed by a cache-local *id* (a
  dense block id; in a cluster, a dense (instance, block) pair id), a ``sc`` array of per-cache
  scalars (queue heads, sizes, a clock), constants from its parameters, and ``cnt``, int64
  ``[n_caches, len(counter_names)]``: its counters (the drivers fill ``block_hits`` and
  ``evictions``, columns 0 and 1; the steps count the policy's own, from column 2). One state
  holds ``n_caches`` independent caches over disjoint ids (a cluster's instances); ``q`` names
  the cache. It is made, in Python, by ``make_state(params, space)``;
* the steps are plain Python functions over it, which the drivers call by the generic names
  below (a driver is compiled once per policy, or per hierarchy of policies, with these names
  bound to the policy's steps and inlined, :mod:`prefixsim.engine.build`):

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
  ``request(s, q, ids, start,``   a *request-level* policy's whole request, in place of the
  ``end, length, rule)``          drivers' per-block one (SGLang's radix cache, ``RADIX``):
                                  see below. Optional; such a policy gives no ``hit`` and
                                  no ``admit``
  ============================== ============================================================

  ``pred`` is the id the request accessed just before ``h`` in this cache, :data:`NO_PRED` for
  its first block, or :data:`DEMOTED` for a block a faster tier evicted into this one (not an
  access of the request; only ``admit`` sees it). Every policy here evicts at most one block
  per admission (one insertion into a cache that was within its capacity), which is why
  ``admit`` returns one id: a demotion cascade is then a loop down the tiers.

A request-level policy serves a whole request at once: it matches the request's prefix in its
own structure, evicts for the request before inserting it (several blocks, in whole units of
its own), and caches what it chooses. Its ``request`` step replaces
:func:`prefixsim.engine.rules.replay_request` in the drivers that run one cache per request
(the single cache, the cluster), with the same arguments and results (the rule's functions
are bound for it by the same generic names); it reports ``removed`` as the request's accesses
that leave no resident block behind, so that the drivers' count of the final residents,
``misses - evictions - removed``, holds for it too. A hierarchy, whose cascade admits one block
at a time, refuses such a policy.

A step may be a plain function or a numba one (a step that another policy's steps call, e.g.
S3FIFO_LEAF calling S3FIFO's removal, must be a numba one). Helpers a step calls must be numba
functions: ``@njit(inline="always")`` for the small ones on
a hot path (numba inlines them before typing), plain ``@njit`` for the others (LLVM inlines
the small ones among those; fewer inlined copies compile faster).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

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


# The generic names the drivers call. Outside a compiled driver they are only names.


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


def request(s: Any, q: int, ids: Any, start: int, end: int, length: int, rule: Any) -> Any:
    raise NotImplementedError("a step runs only inside a compiled driver")


def _no_begin(s, q, ids, start, end):
    return None


def _no_end(s, q):
    return None


def _no_hit(s, q, h, pred):
    # Never reached: a request-level policy's drivers call its request step instead.
    return None


def _no_admit(s, q, h, pred):
    return -1  # as _no_hit


def _no_remove(s, q, h):
    # Never reached: a hierarchy that would remove from this policy is refused before it runs
    # (prefixsim.tiers.check_tiers), but a driver compiled for it still names a removal.
    return None


STEP_NAMES = ("is_resident", "hit", "admit", "remove", "begin", "end", "request")
_ARITY = {name: len(inspect.signature(globals()[name]).parameters) for name in STEP_NAMES}


@dataclass(frozen=True)
class Steps:
    """A policy's compiled form (see the module docstring)."""

    state: type
    """The policy's state, a ``NamedTuple`` class."""
    make_state: Callable[[Any, Space], Any]
    is_resident: Callable[..., Any]
    hit: Callable[..., Any] | None
    """None only for a request-level policy (``request``), as ``admit``."""
    admit: Callable[..., Any] | None
    remove: Callable[..., Any] | None = None
    begin: Callable[..., Any] | None = None
    end: Callable[..., Any] | None = None
    request: Callable[..., Any] | None = None
    """A request-level policy's request (see the module docstring), or None."""
    files: tuple[str, ...] = ()
    """More source files the steps depend on, beyond the files that define them and the
    package's policies (numba's disk cache of the drivers is keyed by all of them)."""

    def __post_init__(self) -> None:
        if not hasattr(self.state, "_fields"):
            raise TypeError(f"{self.state.__name__}: a policy's state must be a NamedTuple")
        for name in STEP_NAMES:
            fn = getattr(self, name)
            fn = getattr(fn, "py_func", fn)
            if fn is not None and len(inspect.signature(fn).parameters) != _ARITY[name]:
                params = ", ".join(inspect.signature(globals()[name]).parameters)
                raise TypeError(f"{fn.__qualname__}: a {name} step takes ({params})")
        if self.request is None and (self.hit is None or self.admit is None):
            raise TypeError(f"{self.state.__name__}: hit and admit steps, or a request step")

    @property
    def per_block(self) -> bool:
        """The policy is served block by block (``hit``, ``admit``), not request by request:
        what a hierarchy's cascade needs."""
        return self.request is None

    @property
    def removable(self) -> bool:
        return self.remove is not None

    def functions(self) -> dict[str, Callable[..., Any]]:
        """The generic names bound to this policy's steps (no-ops for the absent hooks)."""
        return {
            "is_resident": self.is_resident,
            "hit": self.hit or _no_hit,
            "admit": self.admit or _no_admit,
            "remove": self.remove or _no_remove,
            "begin": self.begin or _no_begin,
            "end": self.end or _no_end,
        }

    def source_files(self) -> set[str]:
        """The files the steps are defined in, and ``files``."""
        fns = [getattr(self, name) for name in STEP_NAMES]
        found = {inspect.getsourcefile(getattr(f, "py_func", f)) or "" for f in fns if f}
        return (found | set(self.files)) - {""}


def counter_array(n_caches: int, counter_names: tuple[str, ...]) -> np.ndarray:
    """A state's ``cnt``: zeroed, one row per cache, one column per counter name."""
    return np.zeros((n_caches, len(counter_names)), np.int64)
