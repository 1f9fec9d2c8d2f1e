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
from ..engine.rules import EngineRule, SpecRule
from ..errors import ParameterError
from ..first_use import noted
from ..mode_replay import _no_removal, _with_capacity
from ..policies import get_policy
from ..policies.base import check_int, check_state_fits
from ..replay import MAX_BLOCK_SIZE, Engine, _as_trace, check_engine
from ..semantics import Semantics, _layout_sizes, check_fits, engine_layout
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
    """Replay a trace through a hierarchy of tiers, fastest first.

    ``tiers`` are :class:`Tier` objects (:func:`make_tier`) or mappings of the same keys
    (``{"policy": "LRU", "capacity": 2048, "name": "hbm"}``). ``engine="kernel"`` runs the
    compiled hierarchy driver (:mod:`prefixsim.engine.tiers`) over the tiers' policies' steps;
    ``"reference"`` the plain-Python reference driver (:mod:`prefixsim.tiers.reference`). Both
    take every policy, in the positions :func:`check_tiers` allows. ``semantics``
    (``docs/semantics.md``, "In a hierarchy"): the specification's hit rule (the default), or
    an engine's on the hierarchy's combined prefix, with the null block and the temporary
    blocks in tier 0 (the device).
    """
    sem = Semantics.of(semantics)
    checked = check_tiers(tiers, mode)
    trace = _as_trace(trace_or_path)
    block_size = check_hierarchy(trace, checked, block_size, engine=engine, semantics=sem)
    run_tiers = checked
    if sem.name != "spec":
        # Tier 0 is the device: it holds every block of a running request (check_hierarchy
        # refuses a request needing more) and, under vLLM, loses block 0 to the null block.
        top = checked[0]
        usable = _with_capacity(top.params, sem.usable_capacity(top.params.capacity))
        run_tiers = (Tier(usable, top.name, top.medium), *checked[1:])
    start = time.perf_counter()
    if engine == "kernel":
        hit_tokens, tier_hit_tokens, counters, final, accesses, temporary = _compiled(
            trace, run_tiers, mode, block_size, sem
        )
    else:
        hit_tokens, tier_hit_tokens, counters, final, accesses, temporary = reference_replay(
            trace, run_tiers, mode, block_size, sem
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
        block_accesses=accesses,
        engine=engine,
        seconds=seconds,
        semantics=sem,
        temporary_blocks=temporary,
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
    :func:`prefixsim.scenario.check_scenario`): the block size and the trace's, the engine, an
    engine semantics' (a request that does not fit tier 0's capacity, tier 0's usable capacity,
    a tier 0 without removal when a request holds a temporary block it must free), and each
    tier's compiled steps and state for the ids and accesses the replay makes (under an engine
    semantics the layout's, counted, not laid out). Returns the block size, checked."""
    sem = Semantics.of(semantics)
    block_size = check_int("block_size", block_size, 1, MAX_BLOCK_SIZE)
    check_engine(engine)
    check_block_size_matches(trace, block_size)
    n_ids, n_accesses = trace.n_blocks, trace.n_accesses
    if sem.name != "spec":
        top = tiers[0]
        check_fits(sem, trace, top.params.capacity, block_size)
        _with_capacity(top.params, sem.usable_capacity(top.params.capacity))
        sizes = (trace.offsets, trace.input_lengths, trace.output_lengths, block_size)
        accesses, n_output, n_temp = _layout_sizes(sem.code, *sizes, sem.cache_output_blocks)
        n_ids, n_accesses = trace.n_blocks + int(n_output) + int(n_temp), int(accesses)
        spec = get_policy(top.policy)
        steps = spec.steps if engine == "kernel" else None
        removable = steps.removable if steps is not None else spec.reference.removable
        if n_temp and sem.free_front and not removable:
            # the compiled driver would refuse before its replay; the reference at the first
            # request that holds a temporary block (its last one is resident when it ends)
            raise _no_removal(top.policy)
    if engine == "kernel":
        for i, tier in enumerate(tiers):
            try:
                check_state_fits(tier.params, n_ids, n_accesses)
                get_policy(tier.policy).compiled_steps(tier.params)
            except ParameterError as err:  # under the tier's key
                raise ParameterError(f"tiers[{i}].{err.name}", err.value, err.allowed) from None
    return block_size


def _compiled(
    trace: Trace, tiers: Sequence[Tier], mode: str, block_size: int, semantics: Semantics
) -> tuple[np.ndarray, np.ndarray, list[dict[str, int]], list[int], int, int]:
    """The hierarchy driver under ``semantics``: the trace's own ids and the specification's
    rule, or the engine layout (:func:`~prefixsim.semantics.engine_layout`) and
    :class:`~prefixsim.engine.rules.EngineRule`. ``(hit tokens, tier hit tokens, tier
    counters, final occupancy, block accesses, temporary blocks)``."""
    steps = [(get_policy(t.policy).compiled_steps(), t.params) for t in tiers]
    if semantics.name == "spec":
        ids, offsets, n_ids = trace.block_ids, trace.offsets, trace.n_blocks
        rule: Any = SpecRule(block_size)
        temporary = 0
    else:
        layout = engine_layout(trace, semantics, block_size)  # check_hierarchy ran first
        ids, offsets, n_ids = layout.ids, layout.offsets, layout.n_ids
        rule = EngineRule.of(block_size, layout.temp_base, semantics.free_front)
        temporary = layout.n_temp
    hits, tier_hits, tcnt, final = tiers_driver.run(
        steps, mode == "exclusive", ids, offsets, trace.input_lengths, n_ids, rule
    )
    counters = [dict(zip(COUNTER_NAMES, row, strict=True)) for row in tcnt.tolist()]
    return hits, tier_hits, counters, final, len(ids), temporary


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
