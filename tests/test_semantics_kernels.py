"""The engine modes on the single cache's fast path: the policies' fast kernels under the
engines' rule, and the trace's layout kept for a sweep.

The fast kernels (LRU, S3FIFO, S3FIFO_LCS) are compiled per hit rule from one template
(``prefixsim.engine.single.fast_kernel``): under ``EngineRule`` they cap the scan, count whole
blocks and take the request's temporary blocks out of their queues (S3FIFO's rings, LCS's rings)
when it ends. Held equal per request to the driver over the policy's steps and to the plain
reference (``prefixsim.mode_replay.reference_replay``), on the engine-shaped traces of
tests/engine_traces.py and on conversations with ``hash_ids`` shorter than the prompt (several
temporary blocks per request, which push each other through a small S).
"""

from __future__ import annotations

import dataclasses
import functools
import gc
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import make_trace
from engine_traces import mode_point
from prefixsim import ParameterError, Semantics, make_params, replay
from prefixsim.engine import single
from prefixsim.engine.rules import EngineRule
from prefixsim.engine.steps import Space, Steps, declared_state, extend_state
from prefixsim.mode_replay import (
    _one_slot_small_queue,
    _with_capacity,
    reference_replay,
    replay_arrays,
)
from prefixsim.policies import get_policy, policy_names
from prefixsim.semantics import engine_layout

FAST = ["LRU", "S3FIFO", "S3FIFO_LCS"]
HELD = [*FAST, "LRU_LEAF", "S3FIFO_LEAF", "LRU_TAIL_FIRST"]
"""The fast kernels, and the policies whose removal of a temporary block restores a leaf."""


def check_fast_kernel(point: Any) -> None:
    """Per request, the fast kernel under ``EngineRule`` (what the modes run) equals the driver
    over the policy's steps on the same layout, and both the semantics' reference; a refusal
    of the reference is the compiled path's too."""
    trace, bs, params, sem = point
    try:
        want = reference_replay(trace, params, bs, sem)
    except ParameterError as refusal:  # e.g. the usable capacity leaves S3FIFO's S empty
        with pytest.raises(ParameterError) as compiled:
            replay_arrays(trace, params, bs, sem, "kernel")
        assert str(compiled.value) == str(refusal)
        return
    hits, final, counters, ran = replay_arrays(trace, params, bs, sem, "kernel")
    assert (hits.tolist(), final, counters) == (want[0].tolist(), want[1], want[2])
    if _one_slot_small_queue(params, sem):  # the reference's (the steps refuse it)
        assert ran == "reference"
        return
    assert ran == "kernel"
    spec = get_policy(params.policy)
    layout = engine_layout(trace, sem, bs)
    usable = _with_capacity(params, sem.usable_capacity(params.capacity))
    rule = EngineRule(bs, layout.temp_base, sem.free_front)
    laid = (layout.ids, layout.offsets, trace.input_lengths, layout.n_ids, bs)
    fast = single.run(spec, usable, *laid, rule=rule)
    driven = single.run(spec, usable, *laid, rule=rule, fast=False)
    np.testing.assert_array_equal(fast[0], driven[0])
    assert fast[1:] == driven[1:]
    assert fast[0].tolist() == want[0].tolist()


@settings(max_examples=400, deadline=None)
@given(point=mode_point(FAST))
def test_fast_kernels_under_the_engine_rules(point: Any) -> None:
    check_fast_kernel(point)


@st.composite
def held_point(draw: st.DrawFn, policies: Sequence[str] = HELD) -> tuple[Any, int, Any, Semantics]:
    """Requests of few hashes and longer prompts (up to three temporary blocks each, blocks of
    2), a small cache: temporary blocks that enter S3FIFO_LCS's M before its first eviction
    and get blocks behind them, push each other through S, free the tail of LRU's list, and
    make their request's last block a leaf again (LRU_LEAF's leaf list, S3FIFO_LEAF)."""
    requests = []
    for _ in range(draw(st.integers(1, 40))):  # long enough for the evictions to show it
        hashes = draw(st.lists(st.integers(0, 6), max_size=3))
        requests.append((draw(st.integers(0, 2 * (len(hashes) + 3))), hashes))
    sem = draw(st.sampled_from([Semantics("sglang"), Semantics("vllm")]))
    capacity = 6 + (sem.name == "vllm") + draw(st.integers(0, 3))
    policy = draw(st.sampled_from(policies))
    kw: dict[str, Any] = {"small_ratio": draw(st.sampled_from([0.25, 0.34, 0.5]))}
    if policy == "S3FIFO_LCS":
        kw["ghost_ratio"] = draw(st.sampled_from([0.0, 0.9]))
        kw["move_to_main_threshold"] = draw(st.integers(1, 2))
    elif policy not in ("S3FIFO", "S3FIFO_LEAF"):
        kw = {}
    return make_trace(requests), 2, make_params(policy, capacity, **kw), sem


@settings(max_examples=300, deadline=None)
@given(point=held_point())
def test_modes_free_held_blocks(point: Any) -> None:
    check_fast_kernel(point)


OWN_ROOM = ["LRU", "FIFO", "LRU_TAIL_FIRST"]
"""The policies with a ``make_room`` step of their own."""


@functools.cache  # one state class, so one driver compiled, per policy
def _admit_and_free(steps: Steps) -> Steps:
    """``steps`` with the default ``make_room`` (a state class of its own: its own driver)."""
    state = extend_state(steps.state, f"{steps.state.__name__}AdmitAndFree")
    return dataclasses.replace(steps, state=state, make_state=declared_state(state), make_room=None)


def test_own_make_room_policies_are_checked() -> None:
    own = [n for n in policy_names() if getattr(get_policy(n).steps, "make_room", None)]
    assert sorted(own) == sorted(OWN_ROOM)


@settings(max_examples=150, deadline=None)
@given(point=held_point(OWN_ROOM))
def test_own_make_room_equals_admit_and_free(point: Any) -> None:
    """A policy's own ``make_room`` (its temporary blocks' room made without linking them) and
    the default (admitted, ``end``, removed) give the same hits per request, counters, removals
    and order (the final residents, and the replay that follows each request)."""
    trace, bs, params, sem = point
    layout = engine_layout(trace, sem, bs)
    usable = _with_capacity(params, sem.usable_capacity(params.capacity))
    rule = EngineRule.of(bs, layout.temp_base, sem.free_front)
    runs = []
    for steps in (get_policy(params.policy).compiled_steps(), None):
        steps = steps or _admit_and_free(get_policy(params.policy).compiled_steps())
        s = steps.make_state(usable, Space(layout.n_ids, 1, layout.ids))
        hits = np.empty(trace.n_requests, np.int64)
        args = (layout.ids, layout.offsets, trace.input_lengths, rule, s, hits)
        removed = single.driver(steps, EngineRule)(*args)
        # the residents, each with its next in the list (the order; 1: the tail)
        runs.append((hits.tolist(), s.cnt.tolist(), removed, s.link[1::2].tolist()))
    assert runs[0] == runs[1]


def test_a_freed_partial_block_frees_its_slot_in_s() -> None:
    """S3FIFO with S of 2 slots (capacity 10, small_ratio 0.2), SGLang's rule, blocks of 4:

    * R1 (9 tokens, a b c): a and b enter S; its partial block t1 pushes S's head a (freq 0)
      to the ghost: S = [b, t1]; t1 is freed when R1 ends: S = [b], one slot free;
    * R2 (5 tokens, a x): a is only in the ghost (0 hit tokens), re-admitted to M; its partial
      block t2 takes S's free slot, so b stays: S = [b, t2], then [b];
    * R3 (5 tokens, b y): b is resident: one block, 4 tokens.

    A kernel that kept S full after the free (its ring not rewound) would push b out for t2,
    and R3 would hit nothing."""
    trace = make_trace([(9, ["a", "b", "c"]), (5, ["a", "x"]), (5, ["b", "y"])])
    result = replay(trace, "S3FIFO", 10, 4, small_ratio=0.2, semantics="sglang")
    assert result.engine == "kernel"
    assert result.hit_tokens.tolist() == [0, 0, 4]
    # b in S, a in M; the three partial blocks left the cache
    assert result.final_cache_blocks == 2
    assert result.counters["ghost_hits"] == 1 and result.counters["evictions"] == 1


def test_lcs_frees_a_temporary_block_from_the_middle_of_m() -> None:
    """S3FIFO_LCS (capacity 5, small queue int(5 * 0.4) = 2, no ghost, threshold 2), SGLang's
    rule, blocks of 2. Before its first eviction LCS puts a new block in M once S is full:

    * R1 (4 tokens, a b): S = [a, b]; R2, R3 (2 tokens, a): a hits twice (freq 2), no hit
      token (the scan may hit (2 - 1) // 2 = 0 blocks); R4 (2 tokens, c): c to M, S full;
    * R5 (6 tokens, d): one hash for three blocks: d and two temporary blocks t1, t2. d and
      t1 go to M (no eviction yet): M = [c, d, t1], the cache full; t2 evicts: S's head a
      (freq 2) moves to M's tail, M = [c, d, t1, a], then b (freq 0) is evicted; t2 to S. When
      R5 ends t1 leaves from the middle of M: M = [c, d, a]; t2 leaves S;
    * R6 (7 tokens, c d a y): c, d and a are resident: 3 blocks, 6 tokens.

    Every step is libCacheSim's (``prefixsim.policies.s3fifo_lcs``)."""
    requests = [
        (4, ["a", "b"]),
        (2, ["a"]),
        (2, ["a"]),
        (2, ["c"]),
        (6, ["d"]),
        (7, ["c", "d", "a", "y"]),
    ]
    trace = make_trace(requests)
    kw: dict[str, Any] = {"small_ratio": 0.4, "ghost_ratio": 0.0}
    result = replay(trace, "S3FIFO_LCS", 5, 2, semantics="sglang", **kw)
    want = reference_replay(trace, make_params("S3FIFO_LCS", 5, **kw), 2, "sglang")
    assert result.engine == "kernel"
    assert result.hit_tokens.tolist() == want[0].tolist() == [0, 0, 0, 0, 0, 6]
    assert result.final_cache_blocks == want[1] == 3  # c, d, a
    assert result.counters == want[2]
    assert (result.counters["promotions"], result.counters["evictions"]) == (1, 1)


def test_layout_kept_per_trace_block_size_and_outputs() -> None:
    """``engine_layout`` lays a trace out once per block size and output rule (both engines
    and both free orders share it), read-only, at most two per trace, and forgets a trace's
    layouts with the trace."""
    trace = make_trace([(5, ["a", "b"]), (4, ["a"])], outputs=[6, 0])
    first = engine_layout(trace, Semantics("vllm"), 2)
    assert engine_layout(trace, Semantics("sglang"), 2) is first
    assert engine_layout(trace, Semantics("vllm", unhashed_free="back"), 2) is first
    assert not first.ids.flags.writeable and not first.offsets.flags.writeable
    with pytest.raises(ValueError, match="read-only"):
        first.ids[0] = 7
    outputs = engine_layout(trace, Semantics("vllm", cache_output_blocks=True), 2)
    assert outputs is not first and len(outputs.ids) > len(first.ids)
    other = engine_layout(trace, Semantics("vllm"), 1)
    assert other is not first and engine_layout(trace, Semantics("vllm"), 1) is other
    # (2, False) was the oldest of three: laid out again, equal
    again = engine_layout(trace, Semantics("vllm"), 2)
    assert again is not first
    np.testing.assert_array_equal(again.ids, first.ids)
    np.testing.assert_array_equal(again.offsets, first.offsets)
    # the same trace's results, with its layout kept or not
    kept = replay(trace, "LRU", 4, 2, semantics="vllm")
    fresh = replay(make_trace([(5, ["a", "b"]), (4, ["a"])], outputs=[6, 0]), "LRU", 4, 2,
                   semantics="vllm")  # fmt: skip
    assert kept.hit_tokens.tolist() == fresh.hit_tokens.tolist()
    from prefixsim import semantics

    n = len(semantics._LAYOUTS)
    del trace, kept
    gc.collect()
    assert len(semantics._LAYOUTS) < n
