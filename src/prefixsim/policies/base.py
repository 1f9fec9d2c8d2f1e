"""What every eviction policy provides, and the registry that finds it by name.

A policy is three small pieces, each with one job:

* a frozen ``Params`` dataclass (subclass of :class:`PolicyParams`) that validates itself;
* a plain-Python *reference* (subclass of :class:`ReferencePolicy`) that mirrors the
  specification's pseudocode so a reader can check it line by line; it works on any hashable
  block hash;
* a compiled *kernel* (numba ``@njit(cache=True, nogil=True)``) that replays a whole trace over
  dense block ids ``0..n_blocks-1`` with per-block state in flat arrays. ``nogil``: a kernel
  touches no Python object, so it releases the GIL and the sweep runs replays in parallel on
  threads of one process (no worker processes to start).

Both are driven by :func:`prefixsim.replay.replay`, which owns the longest-prefix rule, so a new
policy plugs in by calling :func:`register` and never touches the replay.

Kernel contract::

    kernel(block_ids, offsets, input_lengths, n_blocks, block_size, counters,
           *kernel_args, *kernel_state)
        -> (hit_tokens: int64[n_requests], final_cache_blocks: int)

(call it with ``*spec.kernel_inputs(params, n_blocks)`` after the first six arguments). For
every request ``r`` (blocks ``block_ids[offsets[r]:offsets[r+1]]``) the kernel first counts the
leading blocks resident *at arrival* (stopping at the first non-resident one), stores
``min(k * block_size, input_lengths[r])``, and only then accesses every block of the request in
order. ``counters`` (int64, zeroed, one slot per name in ``counter_names``) is filled in place.

``kernel_state`` (optional) is the kernel's working memory, fresh arrays allocated by numpy in
Python for every call: numpy asks the operating system for transparent huge pages on large
arrays (numba's allocator does not), and :func:`zeroed_state` faults the pages in before the
kernel's loop rather than during it; both count once the per-block state of a trace of
millions of requests is a gigabyte. A kernel that allocates its state itself has no
``kernel_state``.
"""

from __future__ import annotations

import operator
from abc import ABC, abstractmethod
from collections.abc import Callable, Hashable, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any, ClassVar

import numpy as np

from .._exact import INT64_MAX
from .._memory import check_fits
from ..errors import ParameterError

COMMON_COUNTERS: tuple[str, ...] = ("block_hits", "evictions")
"""Counters every policy reports: accesses that found the block resident, and resident blocks
removed to make room (a block that only moves between a policy's internal queues is not
evicted)."""


def check_int(name: str, value: object, minimum: int, maximum: int | None = None) -> int:
    """``value`` as an ``int`` in ``[minimum, maximum]``; bools and non-integral floats rejected."""
    bound = f">= {minimum}" if maximum is None else f"in [{minimum}, {maximum}]"
    if isinstance(value, bool):
        raise ParameterError(name, value, f"expected an integer {bound}, not a boolean")
    try:
        as_int = operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        raise ParameterError(name, value, f"expected an integer {bound}") from None
    if as_int < minimum or (maximum is not None and as_int > maximum):
        raise ParameterError(name, value, f"expected an integer {bound}")
    return int(as_int)


def _check_capacity(capacity: object) -> tuple[int]:
    value = check_int("capacity", capacity, 1)
    if value > INT64_MAX:  # the kernels' integers are int64
        raise ParameterError("capacity", capacity, "past int64: at most 2**63 - 1 blocks")
    return (value,)


def _check_capacities(capacities: Sequence[Any]) -> list[int] | None:
    """:func:`_check_capacity` over many values at once, by C-level passes, for the common
    case where every value is a plain ``int`` in ``[1, 2**63 - 1]`` (each passes unchanged);
    None otherwise (then check them one by one)."""
    if not capacities or set(map(type, capacities)) != {int}:
        return None
    if min(capacities) < 1 or max(capacities) > INT64_MAX:
        return None
    return list(capacities)


Check = tuple[tuple[str, ...], Callable[..., tuple[Any, ...]]]
"""One validation rule of a :class:`PolicyParams`: the fields it reads, and a pure function of
their values that returns them normalised (in the same order) or raises ParameterError."""

BULK_CHECKS: dict[Callable[..., tuple[Any, ...]], Callable[[Sequence[Any]], list[Any] | None]] = {
    _check_capacity: _check_capacities
}
"""Rules reading one field that have a many-values form: ``bulk(values)`` returns what the rule
returns for each value (unpacked), or None when it cannot tell (then the rule runs per value)."""


@dataclass(frozen=True)
class PolicyParams:
    """Parameters of one policy. Subclasses add fields; construction validates everything.

    Validation is declared, not coded in ``__post_init__``: ``checks`` lists the rules in the
    order construction runs them, each naming the fields it reads, so the first rule that fails
    is the error. A rule sees the values as normalised by the rules before it. Because each rule
    is a pure function of the fields it names, :func:`prefixsim.params_grid.make_params_grid`
    can run it once per distinct combination of those values instead of once per point. A
    subclass that validates anything outside ``checks`` (its own ``__post_init__``) still works
    everywhere; the grid then constructs its points one by one."""

    policy: ClassVar[str]
    checks: ClassVar[tuple[Check, ...]] = ((("capacity",), _check_capacity),)
    capacity: int
    """Cache size in blocks (resident blocks; ghost metadata does not count)."""

    def __post_init__(self) -> None:
        for names, check in self.checks:
            normalised = check(*(getattr(self, n) for n in names))
            for name, value in zip(names, normalised, strict=True):
                object.__setattr__(self, name, value)
        check_state_fits(self)

    @classmethod
    def unchecked(cls, values: dict[str, Any]) -> PolicyParams:
        """An instance holding ``values`` (every field in field order, already normalised by
        ``checks``) without running the checks again: for :func:`make_params_grid`, which ran
        them. The instance takes ``values`` as its own ``__dict__`` (no copy): the caller must
        not use the dict afterwards."""
        params = cls.__new__(cls)
        object.__setattr__(params, "__dict__", values)
        return params

    def to_dict(self) -> dict[str, Any]:
        """``{"policy": name, "capacity": ..., <policy parameters>...}``."""
        return {"policy": self.policy, **asdict(self)}

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))


class ReferencePolicy(ABC):
    """Plain-Python reference of a policy, written for reading, not for speed.

    ``counters`` holds one entry per name in ``counter_names`` and is updated by ``access``.

    Tier steps (``docs/tiers.md``): a hierarchy of caches (:mod:`prefixsim.tiers`) drives each
    tier with :meth:`hit`, :meth:`admit` (which returns the blocks the policy evicted, in
    eviction order) and :meth:`remove`. A policy that calls :meth:`evicted` for every resident
    block it evicts sets ``reports_victims`` and can be the first tier of a hierarchy; one
    that also implements :meth:`remove` sets ``removable`` and can be in any position. None of
    this changes single-cache behaviour: :meth:`evicted` only counts the eviction unless a tier
    is collecting victims.
    """

    counter_names: ClassVar[tuple[str, ...]] = COMMON_COUNTERS
    reports_victims: ClassVar[bool] = False
    """Every eviction goes through :meth:`evicted` (the policy can feed a lower tier)."""
    removable: ClassVar[bool] = False
    """:meth:`remove` is implemented (the policy can be a lower tier)."""

    def __init__(self, params: PolicyParams) -> None:
        self.params = params
        self.counters: dict[str, int] = dict.fromkeys(self.counter_names, 0)
        self._victims: list[Hashable] | None = None  # collecting, only inside admit()

    def evicted(self, h: Hashable) -> None:
        """Record that resident block ``h`` was evicted (policies call it at every eviction)."""
        self.counters["evictions"] += 1
        if self._victims is not None:
            self._victims.append(h)

    def hit(self, h: Hashable) -> None:
        """Tier step: the access rule for a block that is resident here."""
        assert self.is_resident(h)
        self.access(h)

    def admit(self, h: Hashable) -> list[Hashable]:
        """Tier step: the policy's miss path for a block that is not resident here (S3FIFO:
        small queue, or main queue on a hit of its own ghost); returns the resident blocks it
        evicted, in eviction order."""
        assert not self.is_resident(h)
        self._victims = []
        try:
            self.access(h)
            return self._victims
        finally:
            self._victims = None

    def remove(self, h: Hashable) -> None:
        """Tier step: take resident block ``h`` out, leaving no trace (no ghost entry, not an
        eviction): the block moved to a faster tier."""
        raise NotImplementedError(f"{type(self).__name__} has no removal")

    @abstractmethod
    def is_resident(self, h: Hashable) -> bool:
        """Whether block ``h`` would be served from the cache right now."""

    @abstractmethod
    def access(self, h: Hashable) -> None:
        """Apply the policy's access rule to block ``h`` (hit or miss)."""

    @abstractmethod
    def resident_count(self) -> int:
        """Number of resident blocks (the final cache size at the end of a replay)."""

    def prepare(self, block_ids: Sequence[Hashable], offsets: Sequence[int]) -> None:
        """Called once before a replay with the whole flat access stream and request offsets.

        Online policies ignore it; offline ones (an oracle that knows future accesses) use it.
        """
        return None  # an optional hook: a no-op unless a policy needs it

    def access_request(self, hash_ids: Sequence[Hashable]) -> None:
        """Access a request's blocks in order, after its prefix scan.

        Policies that care how a request's blocks relate to each other (prefix-aware ones)
        override this; the default is the specification's per-block access loop.
        """
        for h in hash_ids:
            self.access(h)


Kernel = Callable[..., tuple[np.ndarray, int]]

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


DEFAULT_BYTES_PER_BLOCK = 64
DEFAULT_BYTES_PER_SLOT = 32
DEFAULT_BYTES_PER_ACCESS = 16
"""The working memory assumed of a policy whose spec gives no ``state_bytes``: more per
distinct block, per capacity slot and per access than any built-in kernel uses (at most 34,
16 and 8 bytes), so a new policy is refused too early rather than too late."""


def default_state_bytes(params: Any, n_blocks: int, n_accesses: int) -> int:
    return (
        DEFAULT_BYTES_PER_BLOCK * n_blocks
        + DEFAULT_BYTES_PER_SLOT * params.capacity
        + DEFAULT_BYTES_PER_ACCESS * n_accesses
    )


@dataclass(frozen=True)
class PolicySpec:
    """Everything the replay needs to know about one policy."""

    name: str
    params_type: type[PolicyParams]
    reference: type[ReferencePolicy]
    kernel: Kernel
    kernel_args: Callable[[Any], tuple[Any, ...]]
    """Extra positional arguments of the kernel, derived from a validated params object."""
    kernel_state: Callable[[Any, int], tuple[np.ndarray, ...]] | None = None
    """``kernel_state(params, n_blocks)``: fresh working arrays for one kernel call, passed after
    ``kernel_args`` (see the module docstring); None when the kernel allocates its own."""
    state_bytes: Callable[[Any, int, int], int] | None = None
    """``state_bytes(params, n_blocks, n_accesses)``: an upper bound of the bytes one kernel call
    allocates (its ``kernel_state`` and its own arrays, not the trace's) for a trace of
    ``n_blocks`` distinct blocks and ``n_accesses`` block accesses; ``(params, 0, 0)`` is what
    the capacity alone costs. It must not decrease when the capacity grows (a grid checks a
    column's largest capacity first). None: :func:`default_state_bytes`, which assumes more
    than any built-in kernel uses. Whoever changes a kernel's allocations updates it: a
    capacity whose state cannot fit in memory is refused with it before anything is
    allocated (:func:`check_state_fits`)."""

    def kernel_inputs(self, params: Any, n_blocks: int) -> tuple[Any, ...]:
        """The kernel's arguments after the first six: ``kernel_args`` then a fresh
        ``kernel_state`` for a trace of ``n_blocks`` distinct blocks."""
        if self.kernel_state is None:
            return self.kernel_args(params)
        return (*self.kernel_args(params), *self.kernel_state(params, n_blocks))

    @property
    def counter_names(self) -> tuple[str, ...]:
        return self.reference.counter_names

    def working_bytes(self, params: Any, n_blocks: int = 0, n_accesses: int = 0) -> int:
        """:attr:`state_bytes` (or its default) for this trace size."""
        state_bytes = self.state_bytes or default_state_bytes
        return int(state_bytes(params, n_blocks, n_accesses))


_REGISTRY: dict[str, PolicySpec] = {}


def register(spec: PolicySpec) -> PolicySpec:
    if spec.name in _REGISTRY:
        raise ValueError(f"policy {spec.name!r} is already registered")
    if spec.params_type.policy != spec.name:
        raise ValueError(f"{spec.params_type.__name__}.policy must be {spec.name!r}")
    _REGISTRY[spec.name] = spec
    return spec


def check_state_fits(
    params: PolicyParams, n_blocks: int = 0, n_accesses: int = 0, copies: int = 1
) -> None:
    """Refuse ``params`` (naming ``capacity``) when ``copies`` kernel states for a trace of
    ``n_blocks`` distinct blocks and ``n_accesses`` accesses cannot fit in this machine's memory
    (:mod:`prefixsim._memory`). Construction runs it with an empty trace, so a capacity whose
    state alone cannot fit is refused wherever parameters are made (the CLI, the API, the
    sweep's planning); :func:`prefixsim.replay.replay_params` runs it with the trace."""
    spec = _REGISTRY.get(params.policy)
    if spec is None:  # a Params class of a policy not registered (yet)
        return
    needed = copies * spec.working_bytes(params, n_blocks, n_accesses)
    trace = f" and a trace of {n_blocks} distinct blocks" if n_blocks else ""
    check_fits(
        "capacity",
        params.capacity,
        needed,
        f"{params.policy}'s state for {params.capacity} blocks{trace}"
        + (f", {copies} times," if copies > 1 else ""),
    )


def policy_names() -> tuple[str, ...]:
    return tuple(sorted(_REGISTRY))


def get_policy(name: object) -> PolicySpec:
    try:
        return _REGISTRY[name]  # type: ignore[index]
    except (KeyError, TypeError):
        allowed = f"expected one of {', '.join(policy_names())}"
        raise ParameterError("policy", name, allowed) from None
