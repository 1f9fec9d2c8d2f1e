"""The hierarchy driver: a trace through tiers of caches, fastest first, each any policy.

Invariants (``docs/tiers.md``): tier ``t``'s state is exactly its policy's single-cache state
(``states[t]``, one cache over block ids); a block is resident in the hierarchy if it is
resident in some tier, and is *found in* the fastest tier holding it. For each request in trace
order (its ids laid out by the rule: under the engines' rule, its cached blocks then its
temporary ones, :func:`prefixsim.semantics.engine_layout`):

1. the prefix scan at arrival over the union of the tiers, up to the rule's limit
   (``scan_limit``): leading block ``j`` found in tier ``t`` adds ``block_tokens(rule, j,
   length)`` to ``tier_hit_tokens[t, r]``; the request's hit tokens are the rule's
   ``hit_tokens`` of the run (they sum to the per-tier tokens);
2. ``begin`` on every tier, fastest first;
3. every block in order, hit or miss, ``pred`` the request's previous block:
   * exclusive: found in tier 0, ``hit`` there; found in tier ``t > 0``, ``remove`` from ``t``
     (a promotion out), then, as for a block found nowhere, ``admit`` to tier 0; every victim
     of tier ``u`` is ``admit``-ted to tier ``u + 1`` with ``pred`` :data:`DEMOTED` (one victim
     per admission at most, so the cascade is one pass down), dropped from the last tier;
   * inclusive: found in tier ``t``, ``hit`` there only; then ``admit`` to every faster tier
     ``0 .. t - 1`` (to every tier when found nowhere), whose victims just lose that copy;
   * a temporary block (``is_temporary``: the engines' partial block, never cached) is admitted
     to tier 0 only and never demoted: a victim that is one leaves the hierarchy;
4. ``end`` on every tier, fastest first;
5. the request's temporary blocks still in tier 0 (``ids[release_from(...):end]``) are removed
   from it (``released``): the engines free them when the request ends.

The driver counts, per tier, ``tcnt[t] = (hits, admissions, demotions_in, evictions,
promotions_out)``; every admission makes its block resident and every victim and removal takes
one out, so a tier's final occupancy is ``admissions - evictions - removals`` (removals are the
exclusive mode's promotions out, and tier 0's released temporary blocks). Tier ``t``'s steps are
reached through functions generated for the hierarchy (:func:`_dispatch`: a chain of compares on
the tier number, each branch the tier's own step), and each tier's step appears once in the
driver, so it is inlined once.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .build import compiled, inline_all, inlined
from .rules import (
    RULES,
    SpecRule,
    block_tokens,
    hit_tokens,
    is_temporary,
    release_from,
    scan_limit,
)
from .steps import DEMOTED, NO_PRED, Space, Steps, ix

HITS, ADMISSIONS, DEMOTIONS_IN, EVICTIONS, PROMOTIONS_OUT = range(5)


def _unbound(*args: Any) -> Any:
    raise NotImplementedError("a step runs only inside a compiled driver")


# The hierarchy's generic names, bound per hierarchy to the functions of _dispatch (their
# arguments are there): ``holder(states, h)`` is the fastest tier in which ``h`` is resident, or
# the number of tiers; ``top_remove(states, h)`` takes ``h`` out of tier 0 (a released temporary
# block); the others call tier ``t``'s step, or every tier's.
holder = tier_hit = tier_admit = tier_remove = top_remove = every_begin = every_end = _unbound


def _dispatch(tiers: Sequence[Steps]) -> dict[str, Any]:
    """The functions of a hierarchy of ``len(tiers)`` tiers, unrolled over its tiers: each tier
    ``t`` calls its own steps (``is_resident_t`` ...) on ``states[t]``. A dispatch on the tier
    number tests every tier but the one it reaches by elimination."""
    n = len(tiers)

    def chain(call: str, tiers_: range) -> list[str]:
        if not tiers_:
            return ["    return"]
        lines = [f"    if t == {t}:\n        return {call.format(t=t)}" for t in tiers_[:-1]]
        return [*lines, f"    return {call.format(t=tiers_[-1])}"]

    source = [
        "def holder(states, h):",
        *(f"    if is_resident_{t}(states[{t}], 0, h):\n        return {t}" for t in range(n)),
        f"    return {n}",
        "def tier_hit(states, t, h, pred):",
        *chain("hit_{t}(states[{t}], 0, h, pred)", range(n)),
        "def tier_admit(states, t, h, pred):",
        *chain("admit_{t}(states[{t}], 0, h, pred)", range(n)),
        "def tier_remove(states, t, h):",  # never tier 0: a removal is a promotion out of t > 0
        *chain("remove_{t}(states[{t}], 0, h)", range(1, n)),
        "def top_remove(states, h):",  # tier 0's: a temporary block released
        "    remove_0(states[0], 0, h)",
        "def every_begin(states, ids, start, end_):",
        *(f"    begin_{t}(states[{t}], 0, ids, start, end_)" for t in range(n)),
        "def every_end(states):",
        *(f"    end_{t}(states[{t}], 0)" for t in range(n)),
    ]
    scope: dict[str, Any] = {}
    for t, steps in enumerate(tiers):
        scope.update({f"{name}_{t}": fn for name, fn in inline_all(steps.functions()).items()})
    exec("\n".join(source), scope)  # the hierarchy's tiers, unrolled
    names = (
        "holder", "tier_hit", "tier_admit", "tier_remove", "top_remove", "every_begin",
        "every_end",
    )  # fmt: skip
    return {name: inlined(scope[name]) for name in names}


def _template(stamp: str) -> Any:
    def tiers_driver(
        block_ids, offsets, input_lengths, rule, exclusive, states, out, tier_out, tcnt, released
    ):
        stamp  # noqa: B018 (the disk cache's key, see prefixsim.engine.build)
        n_tiers = len(states)
        for r in range(input_lengths.shape[0]):
            start = offsets[ix(r)]
            end_ = offsets[ix(r + 1)]
            length = input_lengths[ix(r)]
            # The prefix scan at arrival over the union; block j to the fastest tier holding it.
            stop = start + scan_limit(rule, end_ - start, length)
            k = start
            while k < stop:
                t = holder(states, block_ids[ix(k)])
                if t == n_tiers:
                    break
                tier_out[ix(t), ix(r)] += block_tokens(rule, k - start, length)
                k += 1
            out[ix(r)] = hit_tokens(rule, k - start, length)
            every_begin(states, block_ids, start, end_)
            pred = NO_PRED
            for i in range(start, end_):
                h = block_ids[ix(i)]
                t = holder(states, h)
                if t < n_tiers:
                    tcnt[ix(t), HITS] += 1
                    if t == 0 or not exclusive:
                        tier_hit(states, t, h, pred)  # slower copies untouched (inclusive)
                    if t > 0:
                        tcnt[ix(t), PROMOTIONS_OUT] += 1
                        if exclusive:
                            tier_remove(states, t, h)  # no ghost entry; not an eviction
                # Admissions: exclusive, h to tier 0 and each victim one tier down (dropped
                # from the last); inclusive, h to every tier faster than the one it was found
                # in (to every tier on a miss), whose victims only lose that copy.
                n_admit = (0 if t == 0 else n_tiers) if exclusive else t
                if not exclusive and is_temporary(rule, h):
                    n_admit = 1  # tier 0 only: a block without a hash is never written below
                u = 0
                x = h
                p = pred
                while u < n_admit:
                    tcnt[ix(u), ADMISSIONS] += 1
                    if exclusive and u > 0:
                        tcnt[ix(u), DEMOTIONS_IN] += 1
                    v = tier_admit(states, u, x, p)
                    if v >= 0:
                        tcnt[ix(u), EVICTIONS] += 1
                        if exclusive and is_temporary(rule, v):
                            break  # never demoted: it leaves the hierarchy
                    elif exclusive:
                        break
                    if exclusive:
                        x = v
                        p = DEMOTED
                    u += 1
                pred = h
            every_end(states)
            # The temporary blocks leave tier 0 (the only tier that can hold them).
            for j in range(release_from(rule, block_ids, start, end_), end_):
                h = block_ids[ix(j)]
                if holder(states, h) == 0:
                    top_remove(states, h)
                    released[0] += 1

    return tiers_driver


def driver(tiers: Sequence[Steps], rule: type = SpecRule) -> Any:
    """The compiled driver of a hierarchy of ``tiers`` (their steps, fastest first)."""

    def names() -> dict[str, Any]:
        return {**_dispatch(tiers), **inline_all(RULES[rule].functions())}

    def files() -> set[str]:  # asked on first use only (compiled)
        return set().union(*(steps.source_files() for steps in tiers))

    return compiled(_template, (*(s.state for s in tiers), rule), names, files)


def run(
    tiers: Sequence[tuple[Steps, Any]],
    exclusive: bool,
    block_ids: np.ndarray,
    offsets: np.ndarray,
    input_lengths: np.ndarray,
    n_blocks: int,
    rule: Any,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[int]]:
    """One hierarchy replay under ``rule`` (a :class:`~prefixsim.engine.rules.SpecRule` or
    :class:`~prefixsim.engine.rules.EngineRule` value, over ids ``0 .. n_blocks - 1``): hit
    tokens per request, per tier ``[tier, request]``, the tier counters ``[tier, counter]`` and
    each tier's final occupancy. ``tiers`` are (steps, params) pairs, fastest first."""
    space = Space(n_blocks, 1, block_ids)
    states = tuple(steps.make_state(params, space) for steps, params in tiers)
    n_requests = input_lengths.shape[0]
    out = np.empty(n_requests, np.int64)
    tier_out = np.zeros((len(tiers), n_requests), np.int64)
    tcnt = np.zeros((len(tiers), 5), np.int64)
    released = np.zeros(1, np.int64)
    driver([steps for steps, _ in tiers], type(rule))(
        block_ids,
        offsets,
        input_lengths,
        rule,
        exclusive,
        states,
        out,
        tier_out,
        tcnt,
        released,
    )
    removals = tcnt[:, PROMOTIONS_OUT].copy() if exclusive else np.zeros(len(tiers), np.int64)
    removals[0] += released[0]  # temporary blocks, freed from tier 0 when their request ended
    occupancy = tcnt[:, ADMISSIONS] - tcnt[:, EVICTIONS] - removals
    return out, tier_out, tcnt, [int(x) for x in occupancy]
