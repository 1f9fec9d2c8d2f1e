"""The replay's rules, written once for every policy and composition.

The *hit rule* turns a request's longest resident prefix into hit tokens. It is a value the
drivers take (``rule``) and a :class:`Rule`, the functions a driver is compiled with for the
rule's class (:data:`RULES`); ``docs/semantics.md``'s is :class:`SpecRule`:

* ``scan_limit(rule, n, length)``: how many of a request's ``n`` leading blocks may count as
  hits (the specification: all of them);
* ``hit_tokens(rule, k, length)``: the hit tokens of ``k`` leading hits,
  ``min(k * block_size, length)``;
* ``block_tokens(rule, j, length)``: the tokens of leading block ``j`` alone (a hierarchy
  credits each to the tier that held it); over ``j < k`` they sum to ``hit_tokens``.

* ``release_from(rule, ids, start, end)``: where the request's *temporary* blocks begin in
  ``ids[start:end]`` (blocks it held while it ran and that leave the cache when it ends;
  ``end``: none);
* ``is_temporary(rule, h)``: whether id ``h`` is a temporary block (a hierarchy keeps one in its
  top tier only: it is never demoted or written to a slower tier).
* ``temp_from(rule, ids, start, end)``: where its temporary blocks begin, whether or not they
  leave the cache (a request-level policy places them by its own rule).

Another semantics (an engine's own hit rule) is another rule class in :data:`RULES`; every
driver then runs it for every policy, unchanged. The engines' (``docs/semantics.md``, "The
engines' semantics") is :class:`EngineRule`: the request's ids are laid out by
:func:`prefixsim.semantics.engine_layout` (its cached blocks, then its temporary ones, e.g.
vLLM's partial last block, with ids of their own), the scan is capped at ``(L - 1) //
block_size`` blocks, hit tokens are whole blocks, and :func:`replay_request` removes the
temporary blocks when the request ends (unless vLLM frees them to the back of its queue). The
hierarchy driver (:mod:`prefixsim.engine.tiers`) and the load-aware cluster driver run
:class:`SpecRule` only (the engines' rules for them are not defined; their entry points refuse
the engine modes).

:func:`replay_request` is the single cache's request, shared by the single-cache and cluster
drivers. It is a template too: each composition compiles its own copy, its step names bound
(:mod:`prefixsim.engine.build`). A request-level policy's ``request`` step
(:mod:`prefixsim.engine.steps`) takes its place for that policy (:func:`bound_names`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, NamedTuple

from .build import compiled, inline_all, inlined, rebind
from .steps import NO_PRED, Steps, admit, begin, end, hit, is_resident, ix, make_room, remove


class SpecRule(NamedTuple):
    """The specification's rule (``docs/semantics.md``): every leading resident block counts,
    and the hit tokens are clamped to the prompt, ``min(k * block_size, input_length)``."""

    block_size: int


class EngineRule(NamedTuple):
    """The engines' rule (vLLM v1, SGLang) over a request laid out by
    :func:`prefixsim.semantics.engine_layout`: at most ``(L - 1) // block_size`` leading blocks
    count (at least one prompt token is computed) and each counts ``block_size`` tokens (only
    full blocks are cached); ids ``>= temp_base`` are temporary blocks, which come last in a
    request and leave the cache when it ends if ``free_front``.

    The scan needs no other limit: the layout gives a request its cached blocks first (its full
    prompt blocks, then its output blocks), and its output and temporary blocks have ids no
    other request has, so none is resident at its arrival and the scan stops before them."""

    block_size: int
    temp_base: int
    """The first temporary id (the ids past the trace's blocks and the output blocks)."""
    free_front: bool
    """The temporary blocks leave the cache when their request ends (vLLM's front of the free
    queue, SGLang); False: they stay, as blocks no request will hit (vLLM before PR #42656)."""
    block_shift: int = -1
    """``log2(block_size)`` when ``block_size`` is a power of two (:meth:`of`), else -1: the
    scan's cap is then a shift, not a division (a division per request, on the path to the
    scan's first load, measured 8-9% of a driver's replay of the bundled trace)."""

    @classmethod
    def of(cls, block_size: int, temp_base: int, free_front: bool) -> EngineRule:
        """The rule with :attr:`block_shift` filled in."""
        pow2 = block_size > 0 and block_size & (block_size - 1) == 0
        return cls(block_size, temp_base, free_front, block_size.bit_length() - 1 if pow2 else -1)


@dataclass(frozen=True)
class Rule:
    """A hit rule's functions (see the module docstring)."""

    scan_limit: Callable[..., Any]
    hit_tokens: Callable[..., Any]
    block_tokens: Callable[..., Any]
    release_from: Callable[..., Any]
    is_temporary: Callable[..., Any]
    temp_from: Callable[..., Any]

    def functions(self) -> dict[str, Callable[..., Any]]:
        return {
            "scan_limit": self.scan_limit,
            "hit_tokens": self.hit_tokens,
            "block_tokens": self.block_tokens,
            "release_from": self.release_from,
            "is_temporary": self.is_temporary,
            "temp_from": self.temp_from,
        }


def _spec_scan_limit(rule, n, length):
    return n


def _spec_hit_tokens(rule, k, length):
    return min(k * rule.block_size, length)


def _spec_block_tokens(rule, j, length):
    # The part of [j * block_size, (j + 1) * block_size) below the prompt's length: the clamp
    # falls on the last block, and a block past the prompt counts 0.
    lo = j * rule.block_size
    hi = min(lo + rule.block_size, length)
    return hi - lo if hi > lo else 0


def _spec_release_from(rule, ids, start, end_):
    return end_  # the specification holds no block but the request's cached ones


def _spec_is_temporary(rule, h):
    return False


def _spec_temp_from(rule, ids, start, end_):
    return end_


def _engine_scan_limit(rule, n, length):
    # vLLM's max_cache_hit_length = L - 1, SGLang's fill_ids[:L - 1], in whole blocks
    if length <= 0:
        return 0
    if rule.block_shift >= 0:
        return min(n, (length - 1) >> rule.block_shift)
    return min(n, (length - 1) // rule.block_size)


def _engine_hit_tokens(rule, k, length):
    return k * rule.block_size


def _engine_block_tokens(rule, j, length):
    return rule.block_size  # the scan's limit keeps every counted block whole


def _engine_release_from(rule, ids, start, end_):
    if not rule.free_front:
        return end_
    j = end_
    while j > start and ids[ix(j - 1)] >= rule.temp_base:
        j -= 1
    return j


def _engine_is_temporary(rule, h):
    return h >= rule.temp_base


def _engine_temp_from(rule, ids, start, end_):
    j = end_
    while j > start and ids[ix(j - 1)] >= rule.temp_base:
        j -= 1
    return j


RULES: dict[type, Rule] = {
    SpecRule: Rule(
        _spec_scan_limit,
        _spec_hit_tokens,
        _spec_block_tokens,
        _spec_release_from,
        _spec_is_temporary,
        _spec_temp_from,
    ),
    EngineRule: Rule(
        _engine_scan_limit,
        _engine_hit_tokens,
        _engine_block_tokens,
        _engine_release_from,
        _engine_is_temporary,
        _engine_temp_from,
    ),
}
"""The hit rules the drivers run, by the class of their value."""


# The rule's generic names (bound per composition, as the steps are).


def scan_limit(rule: Any, n: int, length: int) -> int:
    raise NotImplementedError("a rule runs only inside a compiled driver")


def hit_tokens(rule: Any, k: int, length: int) -> int:
    raise NotImplementedError("a rule runs only inside a compiled driver")


def block_tokens(rule: Any, j: int, length: int) -> int:
    raise NotImplementedError("a rule runs only inside a compiled driver")


def release_from(rule: Any, ids: Any, start: int, end_: int) -> int:
    raise NotImplementedError("a rule runs only inside a compiled driver")


def is_temporary(rule: Any, h: int) -> bool:
    raise NotImplementedError("a rule runs only inside a compiled driver")


def temp_from(rule: Any, ids: Any, start: int, end_: int) -> int:
    raise NotImplementedError("a rule runs only inside a compiled driver")


def replay_request(s, q, ids, start, end_, length, rule):
    """One request on cache ``q``: ``(hit_tokens, block_hits, evictions, removed)``.

    Order of the steps: ``begin``; then, for ``h`` in ``ids[start:end_]`` in order, ``hit`` if
    resident, else ``admit`` (its victim, if any, counted as an eviction), ``pred`` the previous
    id; then ``end``; then ``remove`` for each of the request's temporary blocks
    (``ids[release_from(...):end_]``, in order) still resident (``removed`` counts them; the
    request's own later admissions may have evicted some). The temporary blocks' admissions,
    ``end`` and their removal are the policy's ``make_room`` (:func:`admit_and_free` those
    steps, or the policy's equal form). The prefix scan at arrival is fused
    with the accesses of its blocks: a hit changes no id's residency (true of every step here),
    so while every block so far was a hit, "resident now" is "resident at arrival", and the
    first miss (or the rule's limit) ends the prefix. A temporary block is admitted like any
    block (evicting the policy's victim from a full cache) and is never a hit (its id is its
    request's own)."""
    begin(s, q, ids, start, end_)
    cut = release_from(rule, ids, start, end_)  # the temporary blocks freed at the end
    stop = start + scan_limit(rule, cut - start, length)  # (never resident at arrival)
    i = start
    pred = NO_PRED
    while i < stop:
        h = ids[ix(i)]
        if not is_resident(s, q, h):
            break
        hit(s, q, h, pred)
        pred = h
        i += 1
    hits = i - start
    tokens = hit_tokens(rule, hits, length)
    evictions = 0
    for j in range(i, cut):
        h = ids[ix(j)]
        if is_resident(s, q, h):
            hits += 1
            hit(s, q, h, pred)
        elif admit(s, q, h, pred) >= 0:
            evictions += 1
        pred = h
    removed = 0
    if cut < end_:
        e, removed = make_room(s, q, ids, cut, end_, pred)
        evictions += e
    else:
        end(s, q)
    return tokens, hits, evictions, removed


def admit_and_free(s, q, ids, start, end_, pred):
    """The default ``make_room``: the temporary blocks ``ids[start:end_]`` admitted in order
    (fresh ids, so never resident before), ``end``, then those still resident removed (the
    request's own later admissions may have evicted some); ``(evictions, removed)``."""
    evictions = 0
    for j in range(start, end_):
        h = ids[ix(j)]
        if admit(s, q, h, pred) >= 0:
            evictions += 1
        pred = h
    end(s, q)
    removed = 0
    for j in range(start, end_):
        h = ids[ix(j)]
        if is_resident(s, q, h):
            remove(s, q, h)
            removed += 1
    return evictions, removed


def bound_names(steps: Steps, rule: type) -> dict[str, Any]:
    """What a one-policy driver's template is compiled with: the policy's steps, the rule's
    functions, and :func:`replay_request` (a request-level policy's ``request`` step in its
    place) bound to both."""
    names = inline_all({**steps.functions(), **RULES[rule].functions()})
    own = steps.make_room
    names["make_room"] = inlined(own if own is not None else rebind(admit_and_free, names))
    request = getattr(steps.request, "py_func", steps.request) or replay_request
    names["replay_request"] = inlined(rebind(request, names))
    return names


def one_policy_driver(
    template: Callable[[str], Callable[..., Any]],
    steps: Steps,
    rule: type,
    files: Iterable[str] = (),
) -> Any:
    """``template`` (a driver of one policy's caches: the single cache, the cluster) compiled
    for ``steps`` and ``rule`` (:func:`bound_names`), a numba dispatcher; ``files``: the
    template's callees outside the engine and the policies (their edits recompile it)."""
    return compiled(
        template,
        (steps.state, rule),
        lambda: bound_names(steps, rule),
        lambda: [*steps.source_files(), *files],
    )
