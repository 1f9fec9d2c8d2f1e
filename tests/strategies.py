"""Hypothesis strategies: multi-turn, branching conversation traces and policy parameters."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hypothesis import assume
from hypothesis import strategies as st

from prefixsim import ParameterError, make_params
from prefixsim.policies import PolicyParams

BLOCK_SIZES = (1, 2, 16, 512)


@st.composite
def conversations(
    draw: st.DrawFn, max_requests: int = 40, block_sizes: Sequence[int] = BLOCK_SIZES
) -> list[tuple[int, list[int]]]:
    """Requests as ``(input_length, hash_ids)``: sessions that extend, branch, repeat and
    restart earlier prompts, with duplicate hashes inside a request, ids shared across
    unrelated requests, huge and negative ids, and input lengths that agree or disagree with
    the number of blocks (of a size from ``block_sizes``)."""
    block_size = draw(st.sampled_from(block_sizes))
    fresh = iter(range(10**6, 10**7))
    pool = st.one_of(
        st.integers(0, 30),  # collisions across unrelated requests
        st.integers(-(2**70), 2**70),  # far outside int64
        st.builds(lambda: next(fresh)),
    )
    prompts: list[list[int]] = [[]]
    requests = []
    for _ in range(draw(st.integers(1, max_requests))):
        base = draw(st.sampled_from(prompts))
        kind = draw(st.sampled_from(["extend", "branch", "repeat", "new", "duplicate"]))
        if kind == "extend":
            ids = base + draw(st.lists(pool, min_size=1, max_size=6))
        elif kind == "branch":
            cut = draw(st.integers(0, len(base)))
            ids = base[:cut] + draw(st.lists(pool, min_size=1, max_size=4))
        elif kind == "repeat":
            ids = list(base)
        elif kind == "new":
            ids = draw(st.lists(pool, max_size=8))
        else:
            ids = [*base, draw(st.sampled_from(base))] if base else [0, 0]
        prompts.append(ids)
        full = len(ids) * block_size
        length = draw(
            st.one_of(
                st.integers(max(full - block_size + 1, 0), full),  # consistent, partial last block
                st.integers(0, full + 2 * block_size),  # hash_ids longer or shorter
            )
        )
        requests.append((length, ids))
    return requests


@st.composite
def policy_params(
    draw: st.DrawFn, policy: str | None = None, capacity: int | None = None
) -> PolicyParams:
    policy = policy or draw(st.sampled_from(["S3FIFO", "LRU"]))
    if capacity is None:
        capacity = draw(st.one_of(st.integers(1, 6), st.integers(7, 64)))
    kwargs: dict[str, Any] = {}
    if policy == "S3FIFO":
        max_freq = draw(st.integers(0, 4))
        kwargs = {
            "small_ratio": draw(st.sampled_from([0.1, 0.25, 0.34, 0.5, 0.75, 0.9])),
            "max_freq": max_freq,
            "ghost_freq": draw(st.integers(0, max_freq)),
        }
    try:
        return make_params(policy, capacity, **kwargs)
    except ParameterError:
        assume(False)
        raise


# --- hierarchies of the five policies that take every tier position -----------------------

ANY_POSITION = ("FIFO", "LFU", "LRU", "S3FIFO", "SIEVE")
"""The policies that may take every tier position, in either mode."""

TIER_SHAPES: tuple[tuple[str, ...], ...] = (
    *((p,) for p in ANY_POSITION),
    *((p, "LRU") for p in ANY_POSITION),
    *(("LRU", p) for p in ANY_POSITION if p != "LRU"),
    ("S3FIFO", "S3FIFO"),
    ("S3FIFO", "FIFO"),
    ("SIEVE", "LFU"),
    *(tuple(ANY_POSITION[(i + k) % 5] for k in range(3)) for i in range(5)),
    ("S3FIFO", "S3FIFO", "S3FIFO"),
    ("LRU", "S3FIFO", "SIEVE", "LFU"),  # (the four-tier sweeps of tests/test_audit_tiers.py)
    ("LRU", "FIFO", "SIEVE", "LFU"),
)
"""The tuples of tier policies the Hypothesis tests of the hierarchy draw from, shared by them so
that each is compiled once in a run (the driver is compiled per tuple of policies, 4-6 s each:
drawing each tier's policy freely gave 155 tuples, 67 of them compiled in one cold run, a
different set each run). They cover every policy in every position of 1 to 3 tiers (the
triples are the five rotations of ``ANY_POSITION``), each above and below LRU (the tuples that
the refusal and position tests of ``tests/test_engine.py`` compile too), the same policy in
adjacent tiers (one state class twice), and four tiers. The tiers meet only through the
cascade of demotions and promotions between adjacent tiers, over the same steps every
composition calls."""
