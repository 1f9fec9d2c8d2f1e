"""Cache hierarchies: a GPU cache backed by DRAM and SSD tiers, replayed exactly.

Semantics: ``docs/tiers.md``. A hierarchy is a list of tiers, fastest first, each a
registered policy with its own capacity and parameters; the prefix scan runs over the union of
the tiers and credits each leading block to the fastest tier holding it; then every block is
accessed in ``exclusive`` (victim cache) or ``inclusive`` (write-through) mode.

>>> from prefixsim import load_trace
>>> from prefixsim.tiers import make_tier, replay_tiers
>>> result = replay_tiers(
...     load_trace("conversation"),
...     [make_tier("LRU", 2048, name="hbm"), make_tier("S3FIFO", 16384, name="dram")],
... )  # doctest: +SKIP
>>> result.total_tier_hit_tokens  # doctest: +SKIP
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..engine import tiers as tiers_driver
from ..errors import ParameterError
from ..first_use import noted
from ..policies import get_policy
from ..policies.base import check_int, check_state_fits
from ..replay import MAX_BLOCK_SIZE, Engine, _as_trace, check_engine
from ..semantics import Semantics, require_spec
from ..trace import Trace, check_block_size_matches
from .model import (
    COUNTER_NAMES,
    MEDIA,
    MODES,
    Hierarchy,
    Tier,
    TieredResult,
    block_tokens,
    check_tiers,
    make_tier,
)
from .reference import reference_replay

__all__ = [
    "COUNTER_NAMES",
    "MEDIA",
    "MODES",
    "Hierarchy",
    "Tier",
    "TieredResult",
    "block_tokens",
    "check_hierarchy",
    "check_tiers",
    "make_tier",
    "replay_hierarchy",
    "replay_tiers",
]


@noted  # a line on stderr while the kernels compile (first use only)
def replay_tiers(
    trace_or_path: Trace | str | os.PathLike[str],
    tiers: Sequence[Tier | Mapping[str, Any]],
    mode: str = "exclusive",
    block_size: int = 512,
    *,
    engine: Engine = "kernel",
    semantics: Semantics | str | None = None,
) -> TieredResult:
    """Replay a trace through a hierarchy of tiers, fastest first, under the specification's
    semantics (``semantics`` other than ``"spec"`` is refused: an engine's rules for a
    hierarchy are not defined yet).

    ``tiers`` are :class:`Tier` objects (:func:`make_tier`) or mappings of the same keys
    (``{"policy": "LRU", "capacity": 2048, "name": "hbm"}``). ``engine="kernel"`` runs the
    compiled hierarchy driver (:mod:`prefixsim.engine.tiers`) over the tiers' policies' steps;
    ``"reference"`` the plain-Python reference driver (:mod:`prefixsim.tiers.reference`). Both
    take every policy, in the positions :func:`check_tiers` allows.
    """
    checked = check_tiers(tiers, mode)
    trace = _as_trace(trace_or_path)
    block_size = check_hierarchy(trace, checked, block_size, engine=engine, semantics=semantics)
    start = time.perf_counter()
    if engine == "kernel":
        hit_tokens, tier_hit_tokens, tcnt, final = tiers_driver.run(
            [(get_policy(t.policy).compiled_steps(), t.params) for t in checked],
            mode == "exclusive",
            trace.block_ids,
            trace.offsets,
            trace.input_lengths,
            trace.n_blocks,
            block_size,
        )
        counters = [dict(zip(COUNTER_NAMES, row, strict=True)) for row in tcnt.tolist()]
    else:
        hit_tokens, tier_hit_tokens, counters, final = reference_replay(
            trace, checked, mode, block_size
        )
    seconds = time.perf_counter() - start
    return TieredResult(
        tiers=checked,
        mode=mode,
        block_size=block_size,
        trace_name=trace.name,
        trace_sha256=trace.sha256,
        hit_tokens=np.asarray(hit_tokens, np.int64),
        tier_hit_tokens=tier_hit_tokens,
        prompt_tokens=trace.input_lengths,
        tier_counters=tuple(counters),
        final_tier_blocks=tuple(final),
        block_accesses=trace.n_accesses,
        engine=engine,
        seconds=seconds,
    )


def check_hierarchy(
    trace: Trace,
    tiers: Sequence[Tier],
    block_size: int,
    *,
    engine: Engine = "kernel",
    semantics: Semantics | str | None = None,
) -> int:
    """Every refusal :func:`replay_tiers` makes for checked ``tiers`` (:func:`check_tiers`)
    before it replays, allocating nothing (it calls this; so does
    :func:`prefixsim.scenario.check_scenario`): the semantics, the block size and the trace's,
    the engine, and each tier's compiled steps and state for this trace. Returns the block
    size, checked."""
    require_spec(semantics, "a hierarchy of tiers")
    block_size = check_int("block_size", block_size, 1, MAX_BLOCK_SIZE)
    check_engine(engine)
    check_block_size_matches(trace, block_size)
    if engine == "kernel":
        for i, tier in enumerate(tiers):
            try:
                check_state_fits(tier.params, trace.n_blocks, trace.n_accesses)
                get_policy(tier.policy).compiled_steps(tier.params)
            except ParameterError as err:  # under the tier's key
                raise ParameterError(f"tiers[{i}].{err.name}", err.value, err.allowed) from None
    return block_size


def replay_hierarchy(
    trace: Trace,
    hierarchy: Hierarchy,
    block_size: int,
    *,
    engine: Engine = "kernel",
    semantics: Semantics | str | None = None,
) -> TieredResult:
    """:func:`replay_tiers` with an already validated :class:`Hierarchy` (a sweep point)."""
    return replay_tiers(
        trace, hierarchy.tiers, hierarchy.mode, block_size, engine=engine, semantics=semantics
    )
