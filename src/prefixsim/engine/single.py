"""The single-cache driver: a trace through one cache of any policy, compiled.

Invariants (``docs/semantics.md``): requests are replayed in trace order, each by
:func:`prefixsim.engine.rules.replay_request` on cache 0 (the prefix scan at arrival, hit
tokens by the rule, then every block accessed in order: ``begin``, ``hit`` or ``admit`` per
block, ``end``). Every admission makes its block resident and evicts at most one, so the final
number of resident blocks is ``misses - evictions - removed`` (``removed``: the temporary blocks
an engine's rule takes out when their request ends, :class:`~prefixsim.engine.rules.EngineRule`;
none under the specification's). A request-level policy's ``request`` step takes the request's
place (:mod:`prefixsim.engine.steps`): it reports its block hits, the blocks it evicted (several
per request, whole nodes) and as ``removed`` the accesses that left no resident block, so the
count holds for it too; the driver counts ``block_hits`` and
``evictions`` into the state's ``cnt[0, 0:2]``, the steps count the policy's own counters.

A policy may also bring a hand-fused kernel of its single-cache replay (its ``fast_kernel``,
e.g. S3FIFO's rings, which cannot remove a block from the middle of a queue); it is held equal
to this driver per request (``tests/test_engine.py``) and used in its place.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .rules import SpecRule, one_policy_driver, replay_request
from .steps import Space, Steps, ix


def _template(stamp: str) -> Any:
    def single_driver(block_ids, offsets, input_lengths, rule, s, hit_tokens):
        stamp  # noqa: B018 (the disk cache's key, see prefixsim.engine.build)
        hits = 0
        evictions = 0
        removed = 0
        for r in range(input_lengths.shape[0]):
            tokens, h, e, m = replay_request(
                s, 0, block_ids, offsets[ix(r)], offsets[ix(r + 1)], input_lengths[ix(r)], rule
            )
            hit_tokens[ix(r)] = tokens
            hits += h
            evictions += e
            removed += m
        s.cnt[0, 0] += hits
        s.cnt[0, 1] += evictions
        return removed

    return single_driver


def driver(steps: Steps, rule: type = SpecRule) -> Any:
    """The compiled single-cache driver of ``steps`` (a numba dispatcher)."""
    return one_policy_driver(_template, steps, rule)


def run(
    spec: Any,
    params: Any,
    block_ids: np.ndarray,
    offsets: np.ndarray,
    input_lengths: np.ndarray,
    n_blocks: int,
    block_size: int,
    *,
    fast: bool = True,
    rule: Any = None,
) -> tuple[np.ndarray, int, dict[str, int]]:
    """``spec``'s single-cache replay (a :class:`~prefixsim.policies.PolicySpec`): hit tokens per
    request, final resident blocks, counters. Its fast kernel if it has one (and ``fast``),
    else the driver over its steps. ``rule``: the hit rule's value (default
    ``SpecRule(block_size)``); another rule runs the driver (a fast kernel is the spec's
    replay), over ids ``0 .. n_blocks - 1`` laid out for it (``block_ids`` and ``offsets``)."""
    names = spec.counter_names
    if rule is None:
        rule = SpecRule(block_size)
    elif not isinstance(rule, SpecRule):
        fast = False
    if fast and spec.fast_kernel is not None:
        cnt = np.zeros(len(names), np.int64)
        inputs = spec.kernel_inputs(params, n_blocks)
        hit_tokens, final = spec.fast_kernel(
            block_ids, offsets, input_lengths, n_blocks, block_size, cnt, *inputs
        )
        return hit_tokens, int(final), dict(zip(names, cnt.tolist(), strict=True))
    steps = spec.compiled_steps()
    s = steps.make_state(params, Space(n_blocks, 1, block_ids))
    hit_tokens = np.empty(input_lengths.shape[0], np.int64)
    removed = driver(steps, type(rule))(block_ids, offsets, input_lengths, rule, s, hit_tokens)
    counts = s.cnt[0].tolist()
    misses = int(offsets[-1] - offsets[0]) - counts[0]
    return hit_tokens, misses - counts[1] - removed, dict(zip(names, counts, strict=True))
