"""Doubly linked lists over ids, for the policies' steps (every queue of every policy here).

One list layout, the *link pairs* of the LRU kernel: for id ``h`` in a flat integer array
``link``,

    link[2h]     = prev                  (meaningful only while h is in a list)
    link[2h + 1] = next + 2 if h is in a list (1: h is its list's tail), 0 if it is in none

so a zeroed array means "every list empty", membership is one load (:func:`linked`), and a
block's two links share one 8-byte pair (one cache line per block touched). An id is in at most
one list of a given ``link`` array (a policy with a second list per block, such as LRU_LEAF's
leaves, has a second array). A list's ends are two slots of a policy's per-cache scalars:
``ends[e]`` its head (oldest), ``ends[e + 1]`` its tail (newest), -1 when empty.

Every subscript is ``a[ix(i)]`` (:data:`prefixsim.engine.steps.ix`): ids and slots are
non-negative, and an end of a list (-1) is tested before it is used as an index, or the list is
known not to be empty there.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit

from .steps import ix, made, zeroed_state


@njit(inline="always")
def linked(link, h):
    """Whether ``h`` is in a list of ``link``."""
    return link[ix(2 * h + 1)] != 0


@njit(inline="always")
def push(link, ends, e, h):
    """Append ``h`` (in no list) at the tail of list ``e``."""
    tail = ends[ix(e + 1)]
    link[ix(2 * h)] = tail
    link[ix(2 * h + 1)] = 1
    if tail >= 0:
        link[ix(2 * tail + 1)] = h + 2
    else:
        ends[ix(e)] = h
    ends[ix(e + 1)] = h


@njit(inline="always")
def unlink(link, ends, e, h):
    """Take ``h`` out of list ``e`` (it is in it)."""
    p = link[ix(2 * h)]
    nx = link[ix(2 * h + 1)]
    if p >= 0:
        link[ix(2 * p + 1)] = nx
    else:
        ends[ix(e)] = nx - 2
    if nx >= 2:
        link[ix(2 * (nx - 2))] = p
    else:
        ends[ix(e + 1)] = p
    link[ix(2 * h + 1)] = 0


@njit(inline="always")
def pop_head(link, ends, e):
    """Take the head (oldest) of non-empty list ``e`` out and return it."""
    h = ends[ix(e)]
    head = link[ix(2 * h + 1)] - 2
    link[ix(2 * h + 1)] = 0
    ends[ix(e)] = head
    if head >= 0:
        link[ix(2 * head)] = -1
    else:
        ends[ix(e + 1)] = -1
    return h


@njit(inline="always")
def push_bounded(link, ends, e, size, cap, h):
    """Append ``h`` (in no list) at the tail of list ``e``, a FIFO of at most ``cap`` ids whose
    length is ``ends[size]``: when full, its head leaves first and is returned; else it grows
    (-1 returned)."""
    head = -1
    if ends[ix(size)] >= cap:
        head = pop_head(link, ends, e)
    else:
        ends[ix(size)] += 1
    push(link, ends, e, h)
    return head


@njit(inline="always")
def take(link, ends, e, size, h):
    """Take ``h`` out of list ``e`` (it is in it), whose length is ``ends[size]``."""
    unlink(link, ends, e, h)
    ends[ix(size)] -= 1


@njit(inline="always")
def room_at_head(link, ends, e, capacity, n):
    """A ``make_room`` step (:mod:`prefixsim.engine.steps`) for a list whose size is
    ``ends[e + 2]`` and whose admission evicts its head from a full cache: the head leaves for
    each of the ``n`` temporary blocks past the capacity, which take no place in the list (each
    would be removed with nothing between). A request holds at most ``capacity`` blocks
    (:func:`prefixsim.semantics.check_fits`), so no head is one of them."""
    evictions = 0
    while ends[ix(e + 2)] + n > capacity:
        pop_head(link, ends, e)
        ends[ix(e + 2)] -= 1
        evictions += 1
    return evictions, n


@njit(inline="always")
def to_tail(link, ends, e, h):
    """Move ``h`` (in list ``e``) to its tail."""
    tail = ends[ix(e + 1)]
    if h == tail:
        return
    # h is not the tail, so a block follows it (nx - 2 >= 0) and tail >= 0
    nx = link[ix(2 * h + 1)]
    p = link[ix(2 * h)]
    if p >= 0:
        link[ix(2 * p + 1)] = nx
    else:
        ends[ix(e)] = nx - 2
    link[ix(2 * (nx - 2))] = p
    link[ix(2 * h)] = tail
    link[ix(2 * h + 1)] = 1
    link[ix(2 * tail + 1)] = h + 2
    ends[ix(e + 1)] = h


@njit(inline="always")
def insert_before(link, ends, e, h, at):
    """Insert ``h`` (in no list) just before ``at`` (in list ``e``), toward the head."""
    p = link[ix(2 * at)]
    link[ix(2 * h)] = p
    link[ix(2 * h + 1)] = at + 2
    link[ix(2 * at)] = h
    if p >= 0:
        link[ix(2 * p + 1)] = h + 2
    else:
        ends[ix(e)] = h


@njit(inline="always")
def push_front(link, ends, e, h):
    """Insert ``h`` (in no list) at the head of list ``e``."""
    head = ends[ix(e)]
    if head < 0:
        push(link, ends, e, h)
    else:
        insert_before(link, ends, e, h, head)


@njit(inline="always")
def after(link, h):
    """The id after ``h`` (toward the tail), -1 if ``h`` is the tail."""
    return link[ix(2 * h + 1)] - 2


def link_array(n_ids: int) -> np.ndarray:
    """A zeroed ``link`` for ids ``0 .. n_ids - 1`` (every list empty): int32 while every
    ``id + 2`` fits, int64 beyond. Pages are faulted in first
    (:func:`prefixsim.engine.steps.zeroed_state`)."""
    dtype = np.int32 if n_ids + 2 <= np.iinfo(np.int32).max else np.int64
    return zeroed_state(2 * n_ids, dtype)


def link_bytes(n_ids: int) -> int:
    """The bytes of :func:`link_array` ``(n_ids)`` (a policy's ``state_bytes`` counts them)."""
    return 2 * n_ids * (4 if n_ids + 2 <= np.iinfo(np.int32).max else 8)


def scalars(n_caches: int, *initial: int) -> np.ndarray:
    """Per-cache scalars, ``len(initial)`` slots per cache (cache ``q``'s first at
    ``q * len(initial)``), each set to its initial value (list ends: -1, sizes: 0)."""
    return np.tile(np.array(initial, np.int64), n_caches)


def links() -> Any:
    """A declared state's ``link`` field (:mod:`prefixsim.engine.steps`): :func:`link_array`
    over the space's ids."""
    return made(lambda params, space: link_array(space.n_ids))


def per_cache(*initial: int) -> Any:
    """A declared state's per-cache scalars (``sc``): :func:`scalars` with these initial
    values, for each of the space's caches."""
    return made(lambda params, space: scalars(space.n_caches, *initial))
