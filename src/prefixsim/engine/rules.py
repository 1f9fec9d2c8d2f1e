"""The replay's rules, written once for every policy and composition.

The *hit rule* turns a request's longest resident prefix into hit tokens. It is a value the
drivers take (``rule``) and a :class:`Rule`, the three functions a driver is compiled with for
the rule's class (:data:`RULES`); ``docs/semantics.md``'s is :class:`SpecRule`:

* ``scan_limit(rule, n, length)``: how many of a request's ``n`` leading blocks may count as
  hits (the specification: all of them);
* ``hit_tokens(rule, k, length)``: the hit tokens of ``k`` leading hits,
  ``min(k * block_size, length)``;
* ``block_tokens(rule, j, length)``: the tokens of leading block ``j`` alone (a hierarchy
  credits each to the tier that held it); over ``j < k`` they sum to ``hit_tokens``.

Another semantics (an engine's own hit rule) is another rule class in :data:`RULES`; every
driver then runs it for every policy, unchanged. A rule that also holds blocks of its own during
a request (vLLM's partial last block, admitted through the policy and removed when the request
ends) adds them in :func:`replay_request` and in the hierarchy driver's request loop
(:mod:`prefixsim.engine.tiers`): the two places a request's accesses are made.

:func:`replay_request` is the single cache's request, shared by the single-cache and cluster
drivers. It is a template too: each composition compiles its own copy, its step names bound
(:mod:`prefixsim.engine.build`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

from .build import compiled, inline_all, inlined, rebind
from .steps import NO_PRED, Steps, admit, begin, end, hit, is_resident, ix


class SpecRule(NamedTuple):
    """The specification's rule (``docs/semantics.md``): every leading resident block counts,
    and the hit tokens are clamped to the prompt, ``min(k * block_size, input_length)``."""

    block_size: int


@dataclass(frozen=True)
class Rule:
    """A hit rule's functions (see the module docstring)."""

    scan_limit: Callable[..., Any]
    hit_tokens: Callable[..., Any]
    block_tokens: Callable[..., Any]

    def functions(self) -> dict[str, Callable[..., Any]]:
        return {
            "scan_limit": self.scan_limit,
            "hit_tokens": self.hit_tokens,
            "block_tokens": self.block_tokens,
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


RULES: dict[type, Rule] = {
    SpecRule: Rule(_spec_scan_limit, _spec_hit_tokens, _spec_block_tokens),
}
"""The hit rules the drivers run, by the class of their value."""


# The rule's generic names (bound per composition, as the steps are).


def scan_limit(rule: Any, n: int, length: int) -> int:
    raise NotImplementedError("a rule runs only inside a compiled driver")


def hit_tokens(rule: Any, k: int, length: int) -> int:
    raise NotImplementedError("a rule runs only inside a compiled driver")


def block_tokens(rule: Any, j: int, length: int) -> int:
    raise NotImplementedError("a rule runs only inside a compiled driver")


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


def bound_names(steps: Steps, rule: type) -> dict[str, Any]:
    """What a one-policy driver's template is compiled with: the policy's steps, the rule's
    functions, and :func:`replay_request` bound to both."""
    names = inline_all({**steps.functions(), **RULES[rule].functions()})
    names["replay_request"] = inlined(rebind(replay_request, names))
    return names


def one_policy_driver(
    template: Callable[[str], Callable[..., Any]], steps: Steps, rule: type
) -> Any:
    """``template`` (a driver of one policy's caches: the single cache, the cluster) compiled
    for ``steps`` and ``rule`` (:func:`bound_names`), a numba dispatcher."""
    return compiled(
        template, (steps.state, rule), lambda: bound_names(steps, rule), steps.source_files()
    )
