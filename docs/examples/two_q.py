"""2Q (Johnson & Shasha, VLDB'94, "2Q: A Low Overhead High Performance Buffer Management
Replacement Algorithm"), as a policy of prefixsim in one file: the example of docs/policies.md.

Variant: the paper's *full* 2Q, one block = one page. Three queues, each from its oldest to its
newest entry: ``A1in`` (resident, blocks seen once: FIFO), ``Am`` (resident, blocks seen again:
LRU) and ``A1out`` (a ghost: hashes of blocks paged out of ``A1in``, not resident). ``Kin =
round(capacity * kin_ratio)`` bounds ``A1in`` when the cache is full, ``Kout = round(capacity *
kout_ratio)`` bounds ``A1out``; the paper's tuning is 25% and 50%. ::

    access(x):
        if x in Am:      move x to the newest end of Am
        elif x in A1in:  nothing                      # a correlated reference
        elif x in A1out: remove x from A1out; reclaim(); append x to Am
        else:            reclaim(); append x to A1in

    reclaim():                                        # make room for one block
        if |A1in| + |Am| < capacity: return           # a free slot
        if |A1in| > Kin:
            page out the oldest y of A1in; append y to A1out
            if |A1out| > Kout: drop the oldest of A1out
        else:
            page out the oldest of Am (it does not go to A1out)

The paper leaves open whether a block found in ``A1out`` leaves it before ``reclaim``; here it
does (it is about to be resident). Removal (a lower tier of a hierarchy): the block leaves
``A1in`` or ``Am``, with no ghost entry.

Counters: ``block_hits``, ``evictions`` (pages out of ``A1in`` or ``Am``), ``ghost_hits``
(accesses that found the block in ``A1out``).

To use it, import this file (``import two_q``, with ``docs/examples`` on ``sys.path``): that
registers ``TWO_Q`` in every composition, ``replay(trace, "TWO_Q", 4096, kin_ratio=0.25)``.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass
from typing import ClassVar, NamedTuple

import numpy as np
from numba import njit

from prefixsim import ParameterError
from prefixsim.engine.lists import link_bytes, links, per_cache, pop_head, push, to_tail, unlink
from prefixsim.engine.steps import Steps, counters, ix, param, per_id
from prefixsim.policies import COMMON_COUNTERS, PolicyParams, ReferencePolicy, register

# --- parameters -----------------------------------------------------------------------------


def _check_queues(capacity: int, kin_ratio: object, kout_ratio: object) -> tuple[int, float, float]:
    for name, ratio in (("kin_ratio", kin_ratio), ("kout_ratio", kout_ratio)):
        if isinstance(ratio, bool) or not isinstance(ratio, int | float) or not 0 <= ratio <= 1:
            raise ParameterError(name, ratio, "expected a number in [0, 1]")
    if not 1 <= round(capacity * kin_ratio) <= capacity - 1:  # type: ignore[operator]
        raise ParameterError("kin_ratio", kin_ratio, f"A1in needs 1 to {capacity - 1} blocks")
    return capacity, float(kin_ratio), float(kout_ratio)  # type: ignore[arg-type]


@dataclass(frozen=True)
class TwoQParams(PolicyParams):
    policy: ClassVar[str] = "TWO_Q"
    kin_ratio: float = 0.25
    """Share of ``capacity`` that bounds A1in once the cache is full (``Kin``)."""
    kout_ratio: float = 0.5
    """Share of ``capacity`` that bounds the ghost A1out (``Kout``)."""

    checks = (*PolicyParams.checks, (("capacity", "kin_ratio", "kout_ratio"), _check_queues))

    @property
    def kin(self) -> int:
        return round(self.capacity * self.kin_ratio)

    @property
    def kout(self) -> int:
        return round(self.capacity * self.kout_ratio)


# --- the reference: the pseudocode above, line by line ---------------------------------------


class TwoQReference(ReferencePolicy):
    """Each queue an ``OrderedDict`` from its oldest entry (first) to its newest (last)."""

    counter_names = (*COMMON_COUNTERS, "ghost_hits")
    removable = True

    def __init__(self, params: TwoQParams) -> None:
        super().__init__(params)
        self.capacity, self.kin, self.kout = params.capacity, params.kin, params.kout
        self.a1in: OrderedDict[Hashable, None] = OrderedDict()
        self.am: OrderedDict[Hashable, None] = OrderedDict()
        self.a1out: OrderedDict[Hashable, None] = OrderedDict()

    def is_resident(self, h: Hashable) -> bool:
        return h in self.a1in or h in self.am  # A1out is a ghost

    def resident_count(self) -> int:
        return len(self.a1in) + len(self.am)

    def access(self, h: Hashable) -> None:
        if h in self.am:
            self.counters["block_hits"] += 1
            self.am.move_to_end(h)
        elif h in self.a1in:
            self.counters["block_hits"] += 1  # a correlated reference: nothing moves
        elif h in self.a1out:
            self.counters["ghost_hits"] += 1
            del self.a1out[h]
            self.reclaim()
            self.am[h] = None
        else:
            self.reclaim()
            self.a1in[h] = None

    def reclaim(self) -> None:
        if len(self.a1in) + len(self.am) < self.capacity:
            return
        if len(self.a1in) > self.kin:
            y, _ = self.a1in.popitem(last=False)
            self.a1out[y] = None
            if len(self.a1out) > self.kout:
                self.a1out.popitem(last=False)
        else:
            y, _ = self.am.popitem(last=False)
        self.evicted(y)

    def remove(self, h: Hashable) -> None:
        del (self.a1in if h in self.a1in else self.am)[h]


# --- the steps: the same rules over arrays, for every composition ----------------------------
# One list per queue (prefixsim.engine.lists); an id is in at most one. Per id ``where[h]``
# (0: none, 1: A1in, 2: Am, 3: A1out); per cache ``sc[9q:9q+9]`` = the ends of A1in, Am, A1out,
# then their lengths. ``sc`` list L's ends are at 9q + 2(L - 1), its length at 9q + 5 + L.

_NONE, _IN, _AM, _OUT = 0, 1, 2, 3


class TwoQState(NamedTuple):
    """Each field with how it is made for the caches a driver runs."""

    link: np.ndarray = links()  # the three queues, one list per id
    where: np.ndarray = per_id(np.int8)  # per id: none, A1in, Am or A1out
    sc: np.ndarray = per_cache(-1, -1, -1, -1, -1, -1, 0, 0, 0)  # the queues' ends, lengths
    cnt: np.ndarray = counters(TwoQReference)  # per cache: one column per counter name
    capacity: int = param("capacity")
    kin: int = param("kin")
    kout: int = param("kout")


def two_q_is_resident(s, q, h):  # type: ignore[no-untyped-def]
    w = s.where[ix(h)]
    return (w == _IN) | (w == _AM)


def two_q_hit(s, q, h, pred):  # type: ignore[no-untyped-def]
    if s.where[ix(h)] == _AM:
        to_tail(s.link, s.sc, 9 * q + 2, h)  # A1in: a correlated reference, nothing moves


@njit(inline="always")  # a helper a step calls is a numba function (prefixsim.engine.steps)
def _enter(s, q, h, queue):  # type: ignore[no-untyped-def]
    push(s.link, s.sc, 9 * q + 2 * (queue - 1), h)
    s.sc[ix(9 * q + 5 + queue)] += 1
    s.where[ix(h)] = queue


@njit(inline="always")
def _leave_oldest(s, q, queue):  # type: ignore[no-untyped-def]
    h = pop_head(s.link, s.sc, 9 * q + 2 * (queue - 1))
    s.sc[ix(9 * q + 5 + queue)] -= 1
    s.where[ix(h)] = _NONE
    return h


def two_q_admit(s, q, h, pred):  # type: ignore[no-untyped-def]
    e = 9 * q
    queue = _IN
    if s.where[ix(h)] == _OUT:  # a ghost hit: h leaves A1out for Am
        s.cnt[ix(q), 2] += 1
        unlink(s.link, s.sc, e + 4, h)
        s.sc[ix(e + 5 + _OUT)] -= 1
        queue = _AM
    victim = -1
    if s.sc[ix(e + 5 + _IN)] + s.sc[ix(e + 5 + _AM)] >= s.capacity:  # reclaim
        if s.sc[ix(e + 5 + _IN)] > s.kin:
            victim = _leave_oldest(s, q, _IN)
            _enter(s, q, victim, _OUT)
            if s.sc[ix(e + 5 + _OUT)] > s.kout:
                _leave_oldest(s, q, _OUT)
        else:
            victim = _leave_oldest(s, q, _AM)
    _enter(s, q, h, queue)
    return victim


def two_q_remove(s, q, h):  # type: ignore[no-untyped-def]
    queue = s.where[ix(h)]
    unlink(s.link, s.sc, 9 * q + 2 * (queue - 1), h)
    s.sc[ix(9 * q + 5 + queue)] -= 1
    s.where[ix(h)] = _NONE


STEPS = Steps(
    TwoQState, is_resident=two_q_is_resident, hit=two_q_hit, admit=two_q_admit, remove=two_q_remove
)

# --- register: every composition now runs it ------------------------------------------------


def _state_bytes(p: TwoQParams, n_blocks: int, n_accesses: int) -> int:
    """What :class:`TwoQState` allocates for one cache: ``link`` and ``where`` per block, nothing
    per capacity slot (a capacity whose state cannot fit in memory is refused with it)."""
    return link_bytes(n_blocks) + n_blocks


SPEC = register(TwoQParams, TwoQReference, STEPS, state_bytes=_state_bytes)
