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
e.g. S3FIFO's rings); it is held equal to this driver per request (``tests/test_engine.py``)
and used in its place, under every rule. It is a template as the drivers are: its loop calls
the rule's functions by their generic names (``scan_limit``, ``hit_tokens``, ``release_from``,
:mod:`prefixsim.engine.rules`), and :func:`fast_kernel` compiles it once per rule with them
bound and inlined, so a rule is written once for the drivers and the fast kernels alike.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import numpy as np

from .build import compiled, inline_all
from .rules import RULES, SpecRule, one_policy_driver, replay_request
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


def fast_kernel(template: Callable[[str], Callable[..., Any]], rule: type = SpecRule) -> Any:
    """A policy's fast kernel (``PolicySpec.fast_kernel``, a template of the replay's loop
    over the generic rule names) compiled for ``rule``: the rule's functions bound and inlined,
    as in the drivers (a numba dispatcher, kept on disk like theirs)."""
    kernel = _FAST.get((template, rule))
    if kernel is None:
        files = lambda: [inspect.getsourcefile(template) or ""]  # noqa: E731
        kernel = compiled(template, (rule,), lambda: inline_all(RULES[rule].functions()), files)
        _FAST[(template, rule)] = kernel
    return kernel


_FAST: dict[tuple[Any, type], Any] = {}


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
    output_lengths: np.ndarray | None = None,
) -> tuple[np.ndarray, int, dict[str, int]]:
    """``spec``'s single-cache replay (a :class:`~prefixsim.policies.PolicySpec`): hit tokens per
    request, final resident blocks, counters. Its fast kernel if it has one (and ``fast``),
    else the driver over its steps, either compiled for ``rule``, the hit rule's value
    (default ``SpecRule(block_size)``), over ids ``0 .. n_blocks - 1`` (for another rule,
    ``block_ids`` and ``offsets`` are laid out for it: the engines' by
    :func:`prefixsim.semantics.engine_layout`). ``output_lengths``: the requests' output
    lengths when their decode steps' pages are kept (:attr:`Space.output_lengths`, for a
    request-level policy's steps; the per-block ones never read it)."""
    names = spec.counter_names
    if rule is None:
        rule = SpecRule(block_size)
    hit_tokens = np.empty(input_lengths.shape[0], np.int64)
    if fast and spec.fast_kernel is not None:
        cnt = np.zeros(len(names), np.int64)
        inputs = spec.kernel_inputs(params, n_blocks)
        kernel = fast_kernel(spec.fast_kernel, type(rule))
        final = kernel(block_ids, offsets, input_lengths, rule, cnt, hit_tokens, *inputs)
        return hit_tokens, int(final), dict(zip(names, cnt.tolist(), strict=True))
    steps = spec.compiled_steps()
    assert output_lengths is None or len(output_lengths) == len(input_lengths)
    s = steps.make_state(params, Space(n_blocks, 1, block_ids, output_lengths))
    removed = driver(steps, type(rule))(block_ids, offsets, input_lengths, rule, s, hit_tokens)
    counts = s.cnt[0].tolist()
    misses = int(offsets[-1] - offsets[0]) - counts[0]
    return hit_tokens, misses - counts[1] - removed, dict(zip(names, counts, strict=True))
