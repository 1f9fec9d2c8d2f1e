"""What every eviction policy provides, and the registry that finds it by name.

A policy is small pieces, each with one job, in its one file (``docs/policies.md`` walks through
writing one):

* a frozen ``Params`` dataclass (subclass of :class:`PolicyParams`) that validates itself;
* a plain-Python *reference* (subclass of :class:`ReferencePolicy`) that mirrors the
  specification's pseudocode so a reader can check it line by line; it works on any hashable
  block hash;
* its compiled *steps* (:class:`prefixsim.engine.steps.Steps`: is resident, hit, admit returning
  its victim, remove, and the request hooks), over a state of flat arrays indexed by dense ids.
  The compositions' drivers (one cache, a hierarchy of tiers, a cluster behind a router) own
  the replay's rules and inline the steps, so a registered policy runs in every composition;
* optionally a *fast kernel*: a hand-fused replay of the whole trace through one cache, used in
  place of the single-cache driver because it measured faster, and held equal to it per
  request by the tests.

The references are driven the same way by the reference drivers (:mod:`prefixsim.replay`,
:mod:`prefixsim.tiers.reference`, :mod:`prefixsim.cluster.reference`), through the reference's
own steps (:meth:`ReferencePolicy.hit`, :meth:`~ReferencePolicy.admit`, ...).

Fast-kernel contract: ``fast_kernel`` is a *template*, as the drivers are
(:mod:`prefixsim.engine.build`): ``fast_kernel(stamp)`` returns the kernel's Python function,
which names ``stamp`` (the disk cache's key) and calls the hit rule's functions by their generic
names (``scan_limit``, ``hit_tokens``, ``release_from``: :mod:`prefixsim.engine.rules`);
:func:`prefixsim.engine.single.fast_kernel` compiles it once per rule with them bound::

    kernel(block_ids, offsets, input_lengths, rule, counters, hit_tokens,
           *kernel_args, *kernel_state) -> final_cache_blocks: int

(call it with ``*spec.kernel_inputs(params, n_blocks)`` after the first six arguments). For
every request ``r`` (blocks ``block_ids[offsets[r]:offsets[r+1]]``) the kernel first counts the
leading blocks resident *at arrival* (stopping at the first non-resident one, and after
``scan_limit(rule, n, input_lengths[r])`` blocks), stores ``hit_tokens(rule, k,
input_lengths[r])`` in ``hit_tokens[r]`` (int64), only then accesses every block of the request
in order, and then removes ``block_ids[release_from(rule, ...):offsets[r+1]]``, those still
resident (an engine's temporary blocks; none under the specification's rule). ``counters``
(int64, zeroed, one slot per name in ``counter_names``) is filled in place. The kernel
allocates nothing (it is compiled without numba's runtime, as the drivers are): ``kernel_state``
(optional) is its working memory, fresh arrays allocated by numpy in Python for every call
(:func:`zeroed_state`).
"""

from __future__ import annotations

import operator
from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Hashable, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any, ClassVar

import numpy as np

from .._exact import INT64_MAX
from .._memory import check_fits
from .._registry import check_new, look_up
from ..engine.steps import Steps
from ..engine.steps import ix as ix  # every kernel and step indexes with it
from ..engine.steps import zeroed_state as zeroed_state
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


class _Demoted:
    def __repr__(self) -> str:
        return "DEMOTED"


DEMOTED: Any = _Demoted()
"""``pred`` of a block a faster tier evicted into this one (not an access of the request)."""


class ReferencePolicy(ABC):
    """Plain-Python reference of a policy, written for reading, not for speed.

    ``counters`` holds one entry per name in ``counter_names`` and is updated by ``access``;
    ``capacity`` is the parameters' (the blocks the cache may hold).

    Steps (``docs/policies.md``): the reference drivers run a request on a cache as
    :meth:`begin_request`, then for each of its blocks in order :meth:`hit` (resident) or
    :meth:`admit` (not resident; returns the resident blocks it evicted, in eviction order),
    then :meth:`end_request` (:meth:`access_request`); a hierarchy also calls :meth:`remove`
    when a block moves to a faster tier. ``pred``, passed to :meth:`hit` and :meth:`admit`, is
    the block the request accessed just before in this cache (None for its first block), or
    :data:`DEMOTED` for a block a faster tier evicted into this one. A per-block policy only
    writes :meth:`access` (hit and miss alike) and, if it has one, :meth:`remove`; a
    prefix-aware one writes its steps and defines :meth:`access` as a one-block request.
    Every eviction goes through :meth:`evicted`, which counts it (and hands it to :meth:`admit`).
    """

    counter_names: ClassVar[tuple[str, ...]] = COMMON_COUNTERS
    removable: ClassVar[bool] = False
    """:meth:`remove` is implemented (the policy can be an exclusive lower tier)."""

    def __init__(self, params: PolicyParams) -> None:
        self.params = params
        self.capacity = params.capacity
        self.counters: dict[str, int] = dict.fromkeys(self.counter_names, 0)
        self._victims: list[Hashable] | None = None  # collecting, only inside admit()

    def evicted(self, h: Hashable) -> None:
        """Record that resident block ``h`` was evicted (policies call it at every eviction)."""
        self.counters["evictions"] += 1
        if self._victims is not None:
            self._victims.append(h)

    def begin_request(self, hash_ids: Sequence[Hashable]) -> None:
        """Step: a request starts on this cache (its blocks, in order)."""
        return None  # a hook: a no-op unless the policy looks at whole requests

    def end_request(self) -> None:
        """Step: the request's accesses are done."""
        return None  # a hook, as begin_request

    def hit(self, h: Hashable, pred: Hashable | None = None) -> None:
        """Step: the access rule for a block that is resident here."""
        assert self.is_resident(h)
        self.access(h)

    def admit(self, h: Hashable, pred: Hashable | None = None) -> list[Hashable]:
        """Step: the policy's miss path for a block that is not resident here (S3FIFO:
        small queue, or main queue on a hit of its own ghost); returns the resident blocks it
        evicted, in eviction order."""
        assert not self.is_resident(h)
        self._victims = []
        try:
            self._miss(h, pred)
            return self._victims
        finally:
            self._victims = None

    def _miss(self, h: Hashable, pred: Hashable | None) -> None:
        """The miss path itself (:meth:`admit` collects what it evicts)."""
        self.access(h)

    def remove(self, h: Hashable) -> None:
        """Tier step: take resident block ``h`` out, leaving no trace (no ghost entry, not an
        eviction): the block moved to a faster tier."""
        raise NotImplementedError(f"{type(self).__name__} has no removal")

    def residents(self) -> Collection[Hashable]:
        """The resident blocks, for a reference that keeps them as the keys of one container
        (then :meth:`is_resident` and :meth:`resident_count` follow from it); a reference whose
        resident blocks are spread over several writes those two instead."""
        raise NotImplementedError(f"{type(self).__name__} defines no residents()")

    def is_resident(self, h: Hashable) -> bool:
        """Whether block ``h`` would be served from the cache right now."""
        return h in self.residents()

    @abstractmethod
    def access(self, h: Hashable) -> None:
        """Apply the policy's access rule to block ``h`` (hit or miss)."""

    def resident_count(self) -> int:
        """Number of resident blocks (the final cache size at the end of a replay)."""
        return len(self.residents())

    def prepare(self, block_ids: Sequence[Hashable], offsets: Sequence[int]) -> None:
        """Called once before a replay with the whole flat access stream and request offsets.

        Online policies ignore it; offline ones (an oracle that knows future accesses) use it.
        """
        return None  # an optional hook: a no-op unless a policy needs it

    def access_request(self, hash_ids: Sequence[Hashable]) -> None:
        """Access a request's blocks in order, after its prefix scan: the steps in the order
        every driver calls them."""
        self.begin_request(hash_ids)
        pred = None
        for h in hash_ids:
            if self.is_resident(h):
                self.hit(h, pred)
            else:
                self.admit(h, pred)
            pred = h
        self.end_request()


Kernel = Callable[..., int]


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
    """Everything the compositions need to know about one policy."""

    name: str
    params_type: type[PolicyParams]
    reference: type[ReferencePolicy]
    steps: Steps | None
    """The compiled form every composition's driver runs; None: the policy has a reference
    only, and every compiled composition refuses it (:meth:`compiled_steps`)."""
    fast_kernel: Callable[[str], Kernel] | None = None
    """A hand-fused single-cache replay's template (see the module docstring), or None: the
    single-cache driver over ``steps``."""
    kernel_args: Callable[[Any], tuple[Any, ...]] | None = None
    """The fast kernel's extra positional arguments, derived from a validated params object."""
    kernel_state: Callable[[Any, int], tuple[np.ndarray, ...]] | None = None
    """``kernel_state(params, n_blocks)``: fresh working arrays for one fast-kernel call, passed
    after ``kernel_args``; None when the kernel allocates its own."""
    state_bytes: Callable[[Any, int, int], int] | None = None
    """``state_bytes(params, n_blocks, n_accesses)``: an upper bound of the bytes one replay
    allocates in any composition's one cache (the state its steps make, and the fast kernel's
    ``kernel_state`` and own arrays, whichever is larger; not the trace's) for a trace of
    ``n_blocks`` distinct blocks and ``n_accesses`` block accesses; ``(params, 0, 0)`` is what
    the capacity alone costs. It must not decrease when the capacity grows (a grid checks a
    column's largest capacity first). None: :func:`default_state_bytes`, which assumes more
    than any built-in kernel uses. Whoever changes a kernel's allocations updates it: a
    capacity whose state cannot fit in memory is refused with it before anything is
    allocated (:func:`check_state_fits`)."""
    offline: bool = False
    """The policy knows the future of the stream it will see (``prepare``): it runs where that
    stream is known before the replay (``docs/policies.md``)."""

    def kernel_inputs(self, params: Any, n_blocks: int) -> tuple[Any, ...]:
        """The fast kernel's arguments after the first six: ``kernel_args`` then a fresh
        ``kernel_state`` for a trace of ``n_blocks`` distinct blocks."""
        args = () if self.kernel_args is None else self.kernel_args(params)
        if self.kernel_state is None:
            return args
        return (*args, *self.kernel_state(params, n_blocks))

    @property
    def kernel(self) -> Any:
        """The compiled single-cache replay under the specification's rule (a numba
        dispatcher): the fast kernel, or the single-cache driver of the steps; for a policy
        without steps, a function that refuses (:meth:`compiled_steps`'s error)."""
        from ..engine.single import driver, fast_kernel

        if self.fast_kernel is not None:
            return fast_kernel(self.fast_kernel)  # the specification's rule
        if self.steps is None:
            return self._refuse
        return driver(self.steps)

    def _refuse(self, *_args: Any) -> Any:
        return self.compiled_steps()

    def compiled_steps(self, params: Any = None) -> Steps:
        """:attr:`steps`, or the one-line refusal of a policy that has none (every compiled
        composition calls it before it allocates anything); with ``params``, also the steps'
        refusal of those parameters (:attr:`Steps.refuse`)."""
        if self.steps is None:
            raise ParameterError(
                "policy",
                self.name,
                "has no compiled steps yet, so no compiled kernel runs it (one cache, a tier, "
                "a cluster: docs/policies.md, 'Refusals'); from Python, replay(..., "
                "engine='reference') or prefixsim.mode_replay.reference_replay does",
            )
        if params is not None and self.steps.refuse is not None:
            self.steps.refuse(params)
        return self.steps

    @property
    def counter_names(self) -> tuple[str, ...]:
        return self.reference.counter_names

    @property
    def removable(self) -> bool:
        """Both engines can take a block out (an exclusive hierarchy's lower tier)."""
        return self.steps is not None and self.steps.removable and self.reference.removable

    def working_bytes(self, params: Any, n_blocks: int = 0, n_accesses: int = 0) -> int:
        """:attr:`state_bytes` (or its default) for this trace size."""
        state_bytes = self.state_bytes or default_state_bytes
        return int(state_bytes(params, n_blocks, n_accesses))


_REGISTRY: dict[str, PolicySpec] = {}


def register(
    policy: PolicySpec | type[PolicyParams],
    reference: type[ReferencePolicy] | None = None,
    steps: Steps | None = None,
    **options: Any,
) -> PolicySpec:
    """Make a policy of every composition, by its name: ``register(Params, Reference, STEPS,
    **options)``, named by ``Params.policy`` (``options``: the other fields of
    :class:`PolicySpec`, ``state_bytes``, ``fast_kernel``, ...), or ``register(PolicySpec(...))``.
    Returns the policy's spec."""
    if isinstance(policy, PolicySpec):
        spec = policy
    else:
        if reference is None:
            raise TypeError(f"register({policy.__name__}, ...): the policy's reference is missing")
        spec = PolicySpec(policy.policy, policy, reference, steps, **options)
    check_new(_REGISTRY, spec, "policy")
    state = None if spec.steps is None else spec.steps.state
    for other in _REGISTRY.values():
        if state is not None and other.steps is not None and other.steps.state is state:
            raise ValueError(f"policy {spec.name!r} shares its state class with {other.name!r}")
    _REGISTRY[spec.name] = spec
    return spec


def check_state_fits(
    params: PolicyParams,
    n_blocks: int = 0,
    n_accesses: int = 0,
    copies: int = 1,
    extra: int = 0,
) -> None:
    """Refuse ``params`` (naming ``capacity``) when ``copies`` kernel states for a trace of
    ``n_blocks`` distinct blocks and ``n_accesses`` accesses cannot fit in this machine's memory
    (:mod:`prefixsim._memory`). Construction runs it with an empty trace, so a capacity whose
    state alone cannot fit is refused wherever parameters are made (the CLI, the API, the
    sweep's planning); :func:`prefixsim.replay.replay_params` runs it with the trace.
    ``extra``: bytes the composition allocates beside the states (a cluster's pair map)."""
    spec = _REGISTRY.get(params.policy)
    if spec is None:  # a Params class of a policy not registered (yet)
        return
    needed = copies * spec.working_bytes(params, n_blocks, n_accesses) + extra
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
    return look_up(_REGISTRY, name, "policy", policy_names())
