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
  ``make_room(s, q, ids, start,`` the request's temporary blocks ``ids[start:end]`` (fresh
  ``end, pred)``                  ids, its last accesses), admitted in order (``pred`` before
                                  the first), then ``end``, then those still resident
                                  removed; returns ``(evictions, removed)``. Optional: the
                                  default is those steps (:func:`prefixsim.engine.rules.
                                  admit_and_free`); a policy's own form makes the room without
                                  linking the blocks, equal to it
                                  (``tests/test_semantics_kernels.py``)
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

A state is *declared*: each field of the ``NamedTuple`` names, as its default, how it is made
(:func:`per_id`, :func:`counters`, :func:`param`, :func:`made`; :func:`prefixsim.engine.lists.links`
and :func:`~prefixsim.engine.lists.per_cache` for the lists), and ``Steps`` derives
``make_state`` from it (:func:`declared_state`). A state whose fields depend on each other
(sizes computed from the stream, a guard on the trace's size) gives ``make_state`` itself.

A request-level policy serves a whole request at once: it matches the request's prefix in its
own structure, evicts for the request before inserting it (several blocks, in whole units of
its own), and caches what it chooses. Its ``request`` step replaces
:func:`prefixsim.engine.rules.replay_request` in the drivers that run one cache per request
(the single cache, the cluster), with the same arguments and results (the rule's functions
are bound for it by the same generic names); it reports ``removed`` as the request's accesses
that leave no resident block behind, so that the drivers' count of the final residents,
``misses - evictions - removed``, holds for it too. Those drivers serve each request once, in
the trace's order, so what the arguments do not carry a state can hold per request: under
``cache_output_blocks`` they give ``make_state`` the requests' output lengths
(:attr:`Space.output_lengths`; RADIX's decode steps take their pages as they go). A
hierarchy, whose cascade admits one block at a time, refuses such a policy.

A step may be a plain function or a numba one (a step that another policy's steps call, e.g.
S3FIFO_LEAF calling S3FIFO's removal, must be a numba one). Helpers a step calls must be numba
functions: ``@njit(inline="always")`` for the small ones on
a hot path (numba inlines them before typing), plain ``@njit`` for the others (LLVM inlines
the small ones among those; fewer inlined copies compile faster).
"""

from __future__ import annotations

import collections
import inspect
import sys
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
    output_lengths: np.ndarray | None = None
    """Per request, in the order the driver serves them (the trace's), its output length when
    its decode steps' pages are kept (an engine's semantics with ``cache_output_blocks``), for a
    request-level policy whose allocation follows the decode steps (``RADIX``: SGLang allocates
    a decode step's page at the step); None: the prefill-only replay (nothing decoded)."""


@dataclass(frozen=True)
class Made:
    """How ``make_state`` makes one field of a declared state: ``make(params, space)``."""

    make: Callable[[Any, Space], Any]


# The rules below return ``Any``: each stands as a field's default in a state's declaration,
# whatever that field's type (an array, an int).


def made(make: Callable[[Any, Space], Any]) -> Any:
    """A field made by ``make(params, space)``."""
    return Made(make)


def param(name: str) -> Any:
    """A constant of the state: the policy's parameter (or property) ``name``."""
    return Made(lambda params, space: getattr(params, name))


def per_id(dtype: type[np.integer[Any]] | type[np.bool_], zeroed: bool = True) -> Any:
    """One ``dtype`` value per id: zeroed (:func:`zeroed_state`), or not initialised
    (``zeroed=False``: every value is written before it is read)."""
    if zeroed:
        return Made(lambda params, space: zeroed_state(space.n_ids, dtype))
    return Made(lambda params, space: np.empty(space.n_ids, dtype))


def counters(reference: Any) -> Any:
    """``cnt``: one row per cache, one column per counter name of ``reference`` (the
    policy's reference class), zeroed (:func:`counter_array`)."""
    return Made(lambda params, space: counter_array(space.n_caches, reference.counter_names))


def extend_state(base: type, name: str, **rules: Any) -> type:
    """A declared state named ``name`` (in the caller's module): ``base``'s fields and rules,
    those named in ``rules`` made by the new rule instead (in place), the others appended in
    order. For a policy whose steps are another's plus arrays of its own."""
    merged = {**base._field_defaults, **rules}  # type: ignore[attr-defined]
    module = sys._getframe(1).f_globals.get("__name__")
    return collections.namedtuple(name, list(merged), defaults=list(merged.values()), module=module)


def declared_state(state: type) -> Callable[[Any, Space], Any]:
    """The ``make_state`` of a declared ``state``: each field made by its rule, in field
    order; TypeError naming the fields without one."""
    rules: dict[str, Any] = getattr(state, "_field_defaults", {})
    missing = [f for f in state._fields if not isinstance(rules.get(f), Made)]  # type: ignore[attr-defined]
    if missing:
        raise TypeError(
            f"{state.__name__}: no rule for {', '.join(missing)} (declare how each field is "
            "made, e.g. per_id(np.int32), or give Steps a make_state)"
        )
    fields = tuple(rules[f].make for f in state._fields)  # type: ignore[attr-defined]

    def make_state(params: Any, space: Space) -> Any:
        return state(*(make(params, space) for make in fields))

    make_state.__qualname__ = f"{state.__qualname__}.make_state"
    return make_state


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


def make_room(s: Any, q: int, ids: Any, start: int, end: int, pred: int) -> Any:
    raise NotImplementedError("a step runs only inside a compiled driver")


def _no_begin(s, q, ids, start, end):
    return None


def _no_end(s, q):
    return None


def _no_remove(s, q, h):
    # Never reached: a hierarchy that would remove from this policy is refused before it runs
    # (prefixsim.tiers.check_tiers), but a driver compiled for it still names a removal.
    return None


STEP_NAMES = ("is_resident", "hit", "admit", "remove", "begin", "end", "request", "make_room")
_ARITY = {name: len(inspect.signature(globals()[name]).parameters) for name in STEP_NAMES}


def _required(*_args: Any) -> Any:
    raise NotImplementedError  # a placeholder: Steps refuses to be made without the step


@dataclass(frozen=True)
class Steps:
    """A policy's compiled form (see the module docstring): its state, then its steps, by
    keyword (or positionally, ``make_state`` first)."""

    state: type
    """The policy's state, a ``NamedTuple`` class."""
    make_state: Callable[[Any, Space], Any] = _required
    """Not given: the state is declared (:func:`declared_state`)."""
    is_resident: Callable[..., Any] = _required
    hit: Callable[..., Any] | None = _required
    """None only for a request-level policy (``request``), as ``admit``."""
    admit: Callable[..., Any] | None = _required
    remove: Callable[..., Any] | None = None
    begin: Callable[..., Any] | None = None
    end: Callable[..., Any] | None = None
    refuse: Callable[[Any], None] | None = None
    """``refuse(params)``: raise the :class:`~prefixsim.errors.ParameterError` of parameters the
    steps cannot run (its ``make_state`` calls it, and a check before a replay calls it alone,
    allocating nothing); None: the steps run every valid ``params``."""
    request: Callable[..., Any] | None = None
    """A request-level policy's request (see the module docstring), or None."""
    make_room: Callable[..., Any] | None = None
    """A policy's own form of the temporary blocks' steps (see the module docstring), or None:
    :func:`~prefixsim.engine.rules.admit_and_free`."""
    files: tuple[str, ...] = ()
    """More source files the steps depend on, beyond the files that define them and the
    package's policies (numba's disk cache of the drivers is keyed by all of them)."""

    def __post_init__(self) -> None:
        if not hasattr(self.state, "_fields"):
            raise TypeError(f"{self.state.__name__}: a policy's state must be a NamedTuple")
        if self.make_state is _required:
            object.__setattr__(self, "make_state", declared_state(self.state))
        for name in STEP_NAMES:
            fn = getattr(self, name)
            if fn is _required:
                raise TypeError(f"{self.state.__name__}'s steps: {name} is required")
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
        """The generic names bound to this policy's steps (no-ops for the absent hooks; a
        request-level policy's drivers call its ``request`` step, never ``hit`` or ``admit``,
        which it does not bind)."""
        names: dict[str, Callable[..., Any]] = {
            "is_resident": self.is_resident,
            "remove": self.remove or _no_remove,
            "begin": self.begin or _no_begin,
            "end": self.end or _no_end,
        }
        if self.hit is not None and self.admit is not None:
            names.update(hit=self.hit, admit=self.admit)
        return names

    def source_files(self) -> set[str]:
        """The files the steps are defined in, and ``files``."""
        fns = [getattr(self, name) for name in STEP_NAMES]
        found = {inspect.getsourcefile(getattr(f, "py_func", f)) or "" for f in fns if f}
        return (found | set(self.files)) - {""}


def counter_array(n_caches: int, counter_names: tuple[str, ...]) -> np.ndarray:
    """A state's ``cnt``: zeroed, one row per cache, one column per counter name."""
    return np.zeros((n_caches, len(counter_names)), np.int64)
