"""Every value the engine refuses at run time is refused at planning, with the same message.

The planner validates each point's parameters with the engine's constructors
(:func:`prefixsim.make_params`, routers, hierarchies), but the engine also checks when a replay
starts: which policy its tier kernel runs in which position, which policies run behind a
router, the block size against its bound, integers that must fit the kernels' machine types,
memory it is about to allocate; and a point's row must fit the result columns. A grid that
passes planning and fails there leaves a run directory with a ``failed`` manifest and advice to
rerun that fails the same way. So, once the traces are loaded and before the run directory is
made, :func:`check_with_engine` does with the points exactly what a worker and the writer do
(:func:`sweep.outcome.replay_items`, then :func:`sweep.parts.part_table`) on the first request of
their trace: each refusal the engine makes before or in its loop is raised here, whatever the
engine's code, now or after it changes, with the engine's own message under the key the user
typed.

Cost: a one-request replay is tens of microseconds, too much for each of 100,000 capacities.
The points are grouped by everything but their capacity (policy parameters, block size,
cluster, kind of trace), and each group is checked at its smallest and largest capacity and two
between (four, so that LRU points go through one LRU curve, as in a worker): the checks that
depend on the capacity bound it from above or below (memory, integer ranges), and each point's
own rules on it (S3FIFO's queue sizes) ran already in :func:`prefixsim.make_params`.
Refusals that depend on the other requests (a total past int64) are the trace loader's and the
replay's.
"""

from __future__ import annotations

import dataclasses
import operator
import re
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from prefixsim import ParameterError, PolicyParams, PrefixSimError, Trace
from prefixsim.semantics import check_fits
from prefixsim.tiers import Hierarchy

from .costing import CostSetup
from .outcome import CURVE_MIN_POINTS, Item, Outcome, head, replay_items
from .points import GridPoint, PlanError, Point


def _trace_kind(trace: Trace) -> tuple[Any, ...]:
    """What of a trace a check depends on besides its requests: its arrays' types, its block
    size and whether it names sessions (traces of one kind are checked once)."""
    arrays = tuple(
        (f.name, a.dtype.str, a.ndim)
        for f in dataclasses.fields(trace)
        if isinstance(a := getattr(trace, f.name), np.ndarray)
    )
    return (arrays, trace.block_size, trace.session_ids is None)


_OTHERS: dict[type, Callable[[Any], Any] | None] = {}


def _others(cls: type) -> Callable[[Any], Any] | None:
    """A getter of a parameters class's fields but ``capacity``; None for a class that renders
    itself (a hierarchy: its tiers each have a capacity), whose points are checked each."""
    if cls not in _OTHERS:
        getter = None
        if issubclass(cls, PolicyParams) and cls.to_dict is PolicyParams.to_dict:
            names = [n for n in cls.field_names() if n != "capacity"]
            getter = operator.attrgetter(*names) if names else lambda p: ()
        _OTHERS[cls] = getter
    return _OTHERS[cls]


def _samples(group: list[GridPoint]) -> list[GridPoint]:
    """The points of a group checked: smallest, largest capacity and two between."""
    if len(group) <= CURVE_MIN_POINTS:
        return group
    ordered = sorted(group, key=lambda gp: gp.params.capacity)
    last = len(ordered) - 1
    picks = sorted({0, last // 3, (2 * last) // 3, last})
    return [ordered[i] for i in picks]


def check_with_engine(
    grid: Sequence[GridPoint],
    shas: dict[Any, str],
    traces: dict[str, Trace],
    setup: CostSetup | None = None,
) -> None:
    """Run the engine's own checks of ``grid`` (:mod:`sweep.engine_checks`); raise
    :class:`PlanError` with the engine's message for the first point it refuses, in grid
    order. ``setup``: the cost columns' model (their computation is checked too, and each
    trace at each block size by :func:`prefixsim.cost.check_cost`, as the CLI does: bytes its
    requests could reuse past int64 are refused here, not after the replay)."""
    if setup is not None:
        from prefixsim.cost import check_cost

        checked: set[tuple[str, int]] = set()
        for gp in grid:
            sha = shas.get((gp.trace, gp.block_size)) or shas[gp.trace]
            if (sha, gp.block_size) not in checked:
                checked.add((sha, gp.block_size))
                check_cost(setup.model, gp.block_size, trace=traces[sha])
    groups: dict[tuple[Any, ...], list[GridPoint]] = {}
    kinds: dict[str, tuple[Any, ...]] = {}
    for gp in grid:
        sha = shas.get((gp.trace, gp.block_size)) or shas[gp.trace]
        kind = kinds.get(sha)
        if kind is None:
            kind = kinds[sha] = _trace_kind(traces[sha])
        others = _others(type(gp.params))
        rest = others(gp.params) if others is not None else id(gp)
        key = (kind, type(gp.params), rest, gp.block_size, gp.cluster, gp.semantics)
        groups.setdefault(key, []).append(gp)
    by_kind: dict[tuple[Any, ...], list[GridPoint]] = {}
    for key, group in groups.items():
        by_kind.setdefault(key[0], []).extend(_samples(group))
    order = {id(gp): i for i, gp in enumerate(grid)}
    refused: list[tuple[GridPoint, str]] = []
    for kind, points in by_kind.items():
        sha = next(s for s, k in kinds.items() if k == kind)
        refused.extend(_check_points(points, sha, traces[sha], setup))
    if refused:
        gp, message = min(refused, key=lambda r: order[id(r[0])])
        raise PlanError(f"{message} (the first point refused: {gp.describe()})")


def _check_points(
    points: list[GridPoint], sha: str, trace: Trace, setup: CostSetup | None
) -> list[tuple[GridPoint, str]]:
    """The refused points of ``points`` (one kind of trace, ``trace`` one of them) and why."""
    from .parts import part_table

    # Each point's scenario, built here, is validated by the engine's constructor (the block
    # size's bound...); then replayed as a worker would, on the first request.
    items: list[Item] = []
    built: list[ParameterError | None] = []
    for i, gp in enumerate(points):
        try:
            items.append((i, gp.scenario))
            built.append(None)
        except ParameterError as err:
            built.append(err)
    first = head(trace)
    done = iter(replay_items(first, items, True))
    results: list[Outcome | Exception] = [next(done) if e is None else e for e in built]
    for i, gp in enumerate(points):  # the whole trace: a request no engine could schedule
        if not isinstance(results[i], Exception):
            try:
                params = gp.params  # a hierarchy's requests must fit its top tier (the device)
                top = params.tiers[0].params if isinstance(params, Hierarchy) else params
                check_fits(gp.semantics, trace, top.capacity, gp.block_size)
            except ParameterError as err:
                results[i] = err
    refused = [
        (points[i], _message(points[i], r))
        for i, r in enumerate(results)
        if isinstance(r, Exception)
    ]
    fine = [(i, r) for i, r in enumerate(results) if not isinstance(r, Exception)]
    if not fine:
        return refused
    as_points = {
        i: Point(
            i, "", gp.trace, sha, gp.params, gp.block_size, gp.cache_bytes, gp.cluster, gp.semantics
        )
        for i, gp in enumerate(points)
    }
    try:  # what the writer does with each row (int64 columns, the cost columns)
        part_table(as_points, [o for _, o in fine], setup, {sha: first}, True)
    except Exception:
        for i, outcome in fine:  # which point: one at a time (the error path only)
            try:
                part_table({i: as_points[i]}, [outcome], setup, {sha: first}, True)
            except Exception as err:
                refused.append((points[i], _row_message(points[i], err)))
    return refused


INT64 = (-(2**63), 2**63 - 1)


def _row_message(gp: GridPoint, err: Exception) -> str:
    """A point whose row cannot be written: the parameter past int64 if that is why."""
    values = {**gp.params.to_dict(), **(gp.cluster.describe() if gp.cluster else {})}
    for key, value in values.items():
        if isinstance(value, int) and not INT64[0] <= value <= INT64[1]:
            return str(
                ParameterError(key, value, "past int64, the type of its column in results.parquet")
            )
    first = (str(err).strip().splitlines() or [""])[0]
    return f"its row cannot be written to results.parquet ({type(err).__name__}: {first})"


def _message(gp: GridPoint, err: Exception) -> str:
    """The engine's message for the sweep's user: its parameter under the key they typed
    (``tiers[0].policy`` is ``tiers.hbm.policy``), without advice on an argument the sweep
    does not have (``engine='reference'``)."""
    if isinstance(err, ParameterError):
        name = user_key(err.name, gp.params)
        allowed = re.sub(r";?\s*use engine='reference'", "", err.allowed).rstrip("; ")
        return str(ParameterError(name, err.value, allowed))
    if isinstance(err, PrefixSimError):
        return str(err)
    first = (str(err).strip().splitlines() or [""])[0]
    return f"the engine cannot run this point ({type(err).__name__}: {first})"


def user_key(name: str, params: Any) -> str:
    """The sweep's key for an engine parameter name: a hierarchy's ``tiers[i].KEY`` is
    ``tiers.LEVEL.KEY`` (its tiers are named by their level); other names are the sweep's."""
    match = re.fullmatch(r"tiers\[(\d+)\]((?:\.\w+)*)", name)
    if match is None or not isinstance(params, Hierarchy):
        return name
    i = int(match[1])
    level = params.tiers[i].name if i < len(params.tiers) else match[1]
    return f"tiers.{level}{match[2]}"
