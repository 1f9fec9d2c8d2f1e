"""Routers: which instance of a cluster a request goes to (``docs/cluster.md``).

A router is three small pieces, like a policy (:mod:`prefixsim.policies.base`):

* a frozen ``Params`` dataclass (subclass of :class:`RouterParams`) that validates itself;
* a plain-Python *reference* (:class:`ReferenceRouter`) whose ``choose`` reads like the
  definition, looking at the cluster through a :class:`ClusterView` (hit tokens and load of each
  instance at arrival);
* for a router that looks at neither the caches nor the load, a vectorised ``assign`` that
  routes the whole trace at once (the fast path then replays each instance's sub-trace with the
  single-cache kernel); a router that looks at them has a ``kernel_code`` for the cluster kernel.

Ties go to the lowest instance index everywhere.
"""

from __future__ import annotations

import bisect
import operator
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass, fields
from typing import Any, ClassVar, Protocol

import numpy as np
from numba import njit

from .._registry import check_new, look_up
from ..errors import ParameterError
from ..policies.base import check_int, ix
from ..trace import Trace

MASK64 = 2**64 - 1
GOLDEN = 0x9E3779B97F4A7C15
"""SplitMix64's increment (2**64 / golden ratio)."""
_M1 = 0xBF58476D1CE4E5B9
_M2 = 0x94D049BB133111EB


def mix64(x: int) -> int:
    """The SplitMix64 finaliser on an unsigned 64-bit integer (``x`` taken modulo 2**64)."""
    z = x & MASK64
    z = ((z ^ (z >> 30)) * _M1) & MASK64
    z = ((z ^ (z >> 27)) * _M2) & MASK64
    return z ^ (z >> 31)


def mix64_array(x: np.ndarray) -> np.ndarray:
    """:func:`mix64` of a uint64 array (numpy's uint64 arithmetic wraps modulo 2**64)."""
    z = x.astype(np.uint64)
    with np.errstate(over="ignore"):
        z = (z ^ (z >> np.uint64(30))) * np.uint64(_M1)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(_M2)
    return z ^ (z >> np.uint64(31))


class ClusterView(Protocol):
    """What a reference router may look at when a request arrives."""

    @property
    def instances(self) -> int: ...

    def hit_tokens(self, instance: int) -> int:
        """The request's hit tokens on ``instance`` as its cache is now."""
        ...

    def load(self, instance: int) -> float:
        """Queued work (seconds) ahead of the request on ``instance``."""
        ...

    def prefill_seconds(self, hit_tokens: int) -> float:
        """Estimated prefill time of the request with ``hit_tokens`` reused."""
        ...


@dataclass(frozen=True)
class RouterParams:
    """Parameters of one router. Subclasses add fields; construction validates them."""

    router: ClassVar[str]
    state_key: ClassVar[str] = "instances"
    """The key an error names when :meth:`state_bytes` cannot fit."""

    def to_dict(self) -> dict[str, Any]:
        return {"router": self.router, **asdict(self)}

    def state_bytes(self, instances: int) -> int:
        """Bytes the router allocates for ``instances`` instances (beyond per-request arrays),
        checked against the machine's memory before a replay; 0 unless a router overrides it."""
        return 0

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))


class ReferenceRouter(ABC):
    """Plain-Python router: ``choose`` is called once per request, in trace order."""

    def __init__(self, params: RouterParams, instances: int, trace: Trace) -> None:
        self.params = params
        self.instances = instances
        self.trace = trace

    @abstractmethod
    def choose(self, r: int, view: ClusterView) -> int:
        """The instance request ``r`` goes to."""


@dataclass(frozen=True)
class RouterSpec:
    name: str
    params_type: type[RouterParams]
    reference: type[ReferenceRouter]
    needs_load: bool
    """Whether the router looks at the load (then a model and hardware profile are required)."""
    assign: Any = None
    """``assign(params, instances, trace) -> int32[n_requests]`` for a router that looks at
    neither the caches nor the load; None for the others."""
    kernel_code: int = -1
    """The router's code in the cluster kernel (``assign`` is None)."""


_REGISTRY: dict[str, RouterSpec] = {}


def register_router(spec: RouterSpec) -> RouterSpec:
    check_new(_REGISTRY, spec, "router")
    if (spec.assign is None) == (spec.kernel_code < 0):
        raise ValueError(f"router {spec.name!r}: exactly one of assign and kernel_code")
    _REGISTRY[spec.name] = spec
    return spec


def router_names() -> tuple[str, ...]:
    return tuple(_REGISTRY)


def get_router(name: object) -> RouterSpec:
    return look_up(_REGISTRY, name, "router", router_names())


def make_router(router: str = "round_robin", **router_params: Any) -> RouterParams:
    """Validated parameters of ``router``. Keys it does not have are ignored when their value
    is None and rejected otherwise (a typo is not silently dropped)."""
    spec = get_router(router)
    names = spec.params_type.field_names()
    unknown = sorted(k for k, v in router_params.items() if k not in names and v is not None)
    if unknown:
        allowed = ", ".join(names) or "none"
        raise ParameterError(
            unknown[0],
            router_params[unknown[0]],
            f"not a parameter of router {router} (its parameters: {allowed})",
        )
    return spec.params_type(**{k: v for k, v in router_params.items() if k in names})


# --- round_robin ----------------------------------------------------------------------------


@dataclass(frozen=True)
class RoundRobinParams(RouterParams):
    router: ClassVar[str] = "round_robin"


class RoundRobinRouter(ReferenceRouter):
    def choose(self, r: int, view: ClusterView) -> int:
        return r % self.instances


def _assign_round_robin(params: RouterParams, instances: int, trace: Trace) -> np.ndarray:
    return (np.arange(trace.n_requests, dtype=np.int64) % instances).astype(np.int32)


# --- random ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class RandomParams(RouterParams):
    router: ClassVar[str] = "random"
    seed: int = 0
    """Start of the SplitMix64 stream: any integer, taken modulo 2**64 and kept as its
    representative in ``[-2**63, 2**63)`` (so ``-1`` and ``2**64 - 1`` are one seed, and it fits
    the sweep's int64 column)."""

    def __post_init__(self) -> None:
        if isinstance(self.seed, bool):
            raise ParameterError("seed", self.seed, "expected an integer, not a boolean")
        try:
            seed = operator.index(self.seed)
        except TypeError:
            raise ParameterError("seed", self.seed, "expected an integer") from None
        object.__setattr__(self, "seed", (seed + 2**63) % 2**64 - 2**63)


class RandomRouter(ReferenceRouter):
    def choose(self, r: int, view: ClusterView) -> int:
        seed = self.params.seed  # type: ignore[attr-defined]
        return mix64(seed + (r + 1) * GOLDEN) % self.instances


def _assign_random(params: RouterParams, instances: int, trace: Trace) -> np.ndarray:
    seed = np.uint64(params.seed & MASK64)  # type: ignore[attr-defined]
    r1 = np.arange(1, trace.n_requests + 1, dtype=np.uint64)
    with np.errstate(over="ignore"):
        x = seed + r1 * np.uint64(GOLDEN)
    return (mix64_array(x) % np.uint64(instances)).astype(np.int32)


# --- session --------------------------------------------------------------------------------


@dataclass(frozen=True)
class SessionParams(RouterParams):
    router: ClassVar[str] = "session"
    state_key: ClassVar[str] = "vnodes"
    vnodes: int = 64
    """Points of each instance on the consistent-hashing ring."""
    key_blocks: int = 1
    """Leading blocks the session key hashes (1: the first block's hash, the issue's
    definition; more when every request starts with the same block, e.g. a system prompt)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "vnodes", check_int("vnodes", self.vnodes, 1, 2**32 - 1))
        object.__setattr__(self, "key_blocks", check_int("key_blocks", self.key_blocks, 1))

    def state_bytes(self, instances: int) -> int:
        """:func:`ring_arrays` of ``instances * vnodes`` points: at its peak about 52 bytes a
        point (the instance and vnode columns, the points, the sort order and the results)."""
        return 56 * instances * self.vnodes


def ring_points(instances: int, vnodes: int) -> list[tuple[int, int]]:
    """The ring as sorted ``(point, instance)`` pairs (a collision orders by instance)."""
    # (i + 1) * 2**32 + v >= 2**32 never equals a block id (< 2**31), and mix64 is a
    # bijection, so a ring point is never the key of a first block by construction.
    return sorted((mix64((i + 1) * 2**32 + v), i) for i in range(instances) for v in range(vnodes))


class SessionRouter(ReferenceRouter):
    def __init__(self, params: RouterParams, instances: int, trace: Trace) -> None:
        super().__init__(params, instances, trace)
        ring = ring_points(instances, params.vnodes)  # type: ignore[attr-defined]
        self.points = [p for p, _ in ring]
        self.owners = [i for _, i in ring]

    def choose(self, r: int, view: ClusterView) -> int:
        sessions = self.trace.session_ids
        blocks = self.trace.request_blocks(r)
        if sessions is not None and sessions[r] >= 0:  # the request's dense session id
            key = mix64(int(sessions[r]))
        elif len(blocks) == 0:
            return 0
        else:
            key = self._block_key(blocks)
        j = bisect.bisect_left(self.points, key)  # the first point >= key
        return self.owners[j % len(self.points)]  # past the last point: wrap to the first

    def _block_key(self, blocks: np.ndarray) -> int:
        key = mix64(int(blocks[0]))
        for b in blocks[1 : self.params.key_blocks].tolist():  # type: ignore[attr-defined]
            key = mix64(key ^ b)
        return key


def ring_arrays(instances: int, vnodes: int) -> tuple[np.ndarray, np.ndarray]:
    """:func:`ring_points` as two arrays: the sorted points (uint64) and their owners (int32)."""
    inst = np.repeat(np.arange(instances, dtype=np.uint64), vnodes)
    v = np.tile(np.arange(vnodes, dtype=np.uint64), instances)
    points = mix64_array((inst + np.uint64(1)) * np.uint64(2**32) + v)
    order = np.lexsort((inst, points))  # by point, then instance
    return points[order], inst[order].astype(np.int32)


@njit(cache=True)
def _mix64_u(z):
    """:func:`mix64` compiled; ``z`` is a uint64 and every constant is one (numba would turn
    a uint64 mixed with an int64 into a float64)."""
    z = (z ^ (z >> np.uint64(30))) * np.uint64(_M1)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(_M2)
    return z ^ (z >> np.uint64(31))


@njit(cache=True)
def session_assign_kernel(block_ids, offsets, session_ids, key_blocks, points, owners):
    """The session router over the whole trace in one compiled pass: each request's key, then
    the first ring point ``>= key`` (wrapping past the last point) through a bucket table. A request
    with a session id (``session_ids`` non-empty and its id >= 0) has the key ``mix64(id)``;
    the others hash their first ``key_blocks`` block ids, or go to instance 0 without blocks."""
    # Unsigned subscripts (``a[ix(i)]``): request, access, point and bucket numbers are never
    # negative (``j`` wraps to 0 past the last point before it indexes ``owners``).
    n_requests = offsets.shape[0] - 1
    n_points = points.shape[0]
    # A bucket table instead of a binary search per request (random keys made its branches
    # unpredictable): the top ``bits`` bits of a key name its bucket, about 4 buckets per point,
    # and first[b] is the index of the first point whose bucket is >= b (n_points if none).
    bits = 2
    while (1 << bits) < 4 * n_points and bits < 24:
        bits += 1
    shift = np.uint64(64 - bits)
    first = np.empty((1 << bits) + 1, np.int64)
    j = 0
    for b in range((1 << bits) + 1):
        while j < n_points and (points[ix(j)] >> shift) < np.uint64(b):
            j += 1
        first[ix(b)] = j
    out = np.empty(n_requests, np.int32)
    by_session = session_ids.shape[0] > 0
    for r in range(n_requests):
        start = offsets[ix(r)]
        end = offsets[ix(r + 1)]
        if by_session and session_ids[ix(r)] >= 0:
            key = _mix64_u(np.uint64(session_ids[ix(r)]))
        elif end == start:
            out[ix(r)] = 0
            continue
        else:
            key = _mix64_u(np.uint64(block_ids[ix(start)]))
            stop = min(end, start + key_blocks)
            for k in range(start + 1, stop):
                key = _mix64_u(key ^ np.uint64(block_ids[ix(k)]))
        # The first point >= key (bisect_left): from the first point of key's bucket on.
        j = first[key >> shift]  # a uint64 already
        while j < n_points and points[ix(j)] < key:
            j += 1
        out[ix(r)] = owners[ix(j if j < n_points else 0)]
    return out


def _assign_session(params: RouterParams, instances: int, trace: Trace) -> np.ndarray:
    points, owners = ring_arrays(instances, params.vnodes)  # type: ignore[attr-defined]
    sessions = np.empty(0, np.int64) if trace.session_ids is None else trace.session_ids
    key_blocks = min(params.key_blocks, 2**62)  # type: ignore[attr-defined]
    return session_assign_kernel(
        trace.block_ids, trace.offsets, sessions, key_blocks, points, owners
    )


# --- least_loaded and kv_aware --------------------------------------------------------------


@dataclass(frozen=True)
class LeastLoadedParams(RouterParams):
    router: ClassVar[str] = "least_loaded"


class LeastLoadedRouter(ReferenceRouter):
    def choose(self, r: int, view: ClusterView) -> int:
        best, best_load = 0, view.load(0)
        for i in range(1, self.instances):
            load = view.load(i)
            if load < best_load:  # strictly less: ties stay with the lower index
                best, best_load = i, load
        return best


MAX_WEIGHT = 1e9
"""Largest ``overlap_weight``: the weighted prefill time stays finite (a weight of ``1e308``
made every instance's cost ``Infinity``, a tie the lowest index always won)."""


@dataclass(frozen=True)
class KVAwareParams(RouterParams):
    router: ClassVar[str] = "kv_aware"
    overlap_weight: float = 1.0
    """Weight of the estimated prefill time of the uncached tokens against the queued work."""

    def __post_init__(self) -> None:
        w = self.overlap_weight
        if isinstance(w, bool) or not isinstance(w, int | float) or not 0 <= w <= MAX_WEIGHT:
            raise ParameterError("overlap_weight", w, f"expected a number in [0, {MAX_WEIGHT:g}]")
        object.__setattr__(self, "overlap_weight", float(w))


class KVAwareRouter(ReferenceRouter):
    def choose(self, r: int, view: ClusterView) -> int:
        w = self.params.overlap_weight  # type: ignore[attr-defined]
        best, best_cost = -1, 0.0
        for i in range(self.instances):
            cost = w * view.prefill_seconds(view.hit_tokens(i)) + view.load(i)
            if best < 0 or cost < best_cost:  # strictly less: ties stay with the lower index
                best, best_cost = i, cost
        return best


KERNEL_LEAST_LOADED = 0
KERNEL_KV_AWARE = 1

_SPECS = [
    RouterSpec("round_robin", RoundRobinParams, RoundRobinRouter, False, _assign_round_robin),
    RouterSpec("random", RandomParams, RandomRouter, False, _assign_random),
    RouterSpec("session", SessionParams, SessionRouter, False, _assign_session),
    RouterSpec(
        "least_loaded", LeastLoadedParams, LeastLoadedRouter, True, kernel_code=KERNEL_LEAST_LOADED
    ),
    RouterSpec("kv_aware", KVAwareParams, KVAwareRouter, True, kernel_code=KERNEL_KV_AWARE),
]
for _spec in _SPECS:
    register_router(_spec)
