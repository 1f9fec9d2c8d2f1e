"""The replay's rules, written once for every policy and composition.

The *hit rule* turns a request's longest resident prefix into hit tokens. It is a value of the
drivers (a ``rule`` argument, like a policy's state, resolved at compile time by its class):
``docs/semantics.md``'s rule is :class:`SpecRule`:

* ``scan_limit(rule, n, length)``: how many of a request's ``n`` leading blocks may count as
  hits (the specification: all of them);
* ``hit_tokens(rule, k, length)``: the hit tokens of ``k`` leading hits,
  ``min(k * block_size, length)``;
* ``block_tokens(rule, j, length)``: the tokens of leading block ``j`` alone (a hierarchy
  credits each to the tier that held it); over ``j < k`` they sum to ``hit_tokens``.

Another semantics (an engine's own hit rule) is another rule class registered with
:func:`register_rule`; every driver then runs it for every policy, unchanged. A rule that also
holds blocks of its own during a request (vLLM's partial last block, admitted through the policy
and removed when the request ends) adds them in :func:`replay_request` and in the tier
driver's request loop, the two places a request's accesses are made.

:func:`replay_request` is the single cache's request, shared by the single-cache and cluster
drivers: the prefix scan at arrival, then every block accessed in order, hit or miss.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from numba import njit
from numba.extending import overload

from .steps import NO_PRED, admit, begin, end, hit, is_resident, ix


class SpecRule(NamedTuple):
    """The specification's rule (``docs/semantics.md``): every leading resident block counts,
    and the hit tokens are clamped to the prompt, ``min(k * block_size, input_length)``."""

    block_size: int


_RULES: dict[type, dict[str, Callable[..., Any]]] = {}


def register_rule(
    rule: type,
    scan_limit: Callable[..., Any],
    hit_tokens: Callable[..., Any],
    block_tokens: Callable[..., Any],
) -> None:
    _RULES[rule] = {
        "scan_limit": scan_limit,
        "hit_tokens": hit_tokens,
        "block_tokens": block_tokens,
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


register_rule(SpecRule, _spec_scan_limit, _spec_hit_tokens, _spec_block_tokens)


def scan_limit(rule: Any, n: int, length: int) -> int:
    raise NotImplementedError("a rule runs only inside a compiled driver")


def hit_tokens(rule: Any, k: int, length: int) -> int:
    raise NotImplementedError("a rule runs only inside a compiled driver")


def block_tokens(rule: Any, j: int, length: int) -> int:
    raise NotImplementedError("a rule runs only inside a compiled driver")


def _rule(rule_type: Any, name: str) -> Callable[..., Any] | None:
    fns = _RULES.get(getattr(rule_type, "instance_class", type(None)))
    return None if fns is None else fns[name]


@overload(scan_limit, inline="always")
def _scan_limit(rule, n, length):
    return _rule(rule, "scan_limit")


@overload(hit_tokens, inline="always")
def _hit_tokens(rule, k, length):
    return _rule(rule, "hit_tokens")


@overload(block_tokens, inline="always")
def _block_tokens(rule, j, length):
    return _rule(rule, "block_tokens")


@njit(inline="always")
def prefix_length(s, q, ids, start, end_, limit):
    """The number of leading ``ids[start:end_]`` resident in cache ``q`` (at most ``limit``),
    read-only: a router's look at an instance."""
    k = start
    stop = min(end_, start + limit)
    while k < stop and is_resident(s, q, ids[ix(k)]):
        k += 1
    return k - start


@njit(inline="always")
def replay_request(s, q, ids, start, end_, length, rule):
    """One request on cache ``q``: ``(hit_tokens, block_hits, evictions)``.

    Order of the steps: ``begin``; then, for ``h`` in ``ids[start:end_]`` in order, ``hit`` if
    resident, else ``admit`` (its victim, if any, counted as an eviction), ``pred`` the previous
    id; then ``end``. The prefix scan at arrival is fused with the accesses of its blocks: a hit
    changes no id's residency (true of every step here), so while every block so far was a hit,
    "resident now" is "resident at arrival", and the first miss (or the rule's limit) ends the
    prefix."""
    begin(s, q, ids, start, end_)
    stop = start + scan_limit(rule, end_ - start, length)
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
    for j in range(i, end_):
        h = ids[ix(j)]
        if is_resident(s, q, h):
            hits += 1
            hit(s, q, h, pred)
        elif admit(s, q, h, pred) >= 0:
            evictions += 1
        pred = h
    end(s, q)
    return tokens, hits, evictions
