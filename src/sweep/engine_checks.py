"""Every value the engine refuses at run time is refused at planning, with the same message.

The planner validates each point's parameters with the engine's constructors
(:func:`prefixsim.make_params`, routers, hierarchies), but the engine also checks when a replay
starts: which policy its tier kernel runs in which position, which policies run behind a
router, the block size against its bound, the memory its state for this trace needs, an engine
semantics' requests against the capacity; and a point's row must fit the result columns. A grid
that passes planning and fails there leaves a run directory with a ``failed`` manifest and
advice to rerun that fails the same way. So, once the traces are loaded and before the run
directory is made, :func:`check_with_engine` asks the engine those questions with each point's
values, without replaying anything: :func:`prefixsim.scenario.check_scenario`, the checks each
composition's replay runs first (one validation for the CLI, the API and the sweep), then the
row's integers against the int64 columns. Each refusal is raised here with the engine's own
message under the key the user typed.

The points are grouped by everything but their capacity (trace, policy parameters, block size,
cluster, semantics), and each group is checked at its smallest and largest capacity and two
between: the checks that depend on the capacity bound it from above or below (memory, the
requests an engine semantics must fit), and each point's own rules on it (S3FIFO's queue sizes)
ran already in :func:`prefixsim.make_params`.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Sequence
from typing import Any

from prefixsim import ParameterError, PolicyParams, PrefixSimError, Trace
from prefixsim.scenario import check_scenario
from prefixsim.tiers import Hierarchy

from .costing import CostSetup
from .points import GridPoint, PlanError

SAMPLES = 4
"""Points of a group checked (all of a group this small or smaller)."""

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
    if len(group) <= SAMPLES:
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
    """Ask the engine whether it would run ``grid`` (:mod:`sweep.engine_checks`); raise
    :class:`PlanError` with the engine's message for the first point it refuses, in grid
    order. ``setup``: the cost columns' model (each trace at each block size is checked by
    :func:`prefixsim.cost.check_cost`, as the CLI does: bytes its requests could reuse past
    int64 are refused here, not after the replay)."""
    if setup is not None:
        from prefixsim.cost_bounds import check_cost

        checked: set[tuple[str, int]] = set()
        for gp in grid:
            sha = shas.get((gp.trace, gp.block_size)) or shas[gp.trace]
            if (sha, gp.block_size) not in checked:
                checked.add((sha, gp.block_size))
                check_cost(setup.model, gp.block_size, trace=traces[sha])
    groups: dict[tuple[Any, ...], list[GridPoint]] = {}
    for gp in grid:
        sha = shas.get((gp.trace, gp.block_size)) or shas[gp.trace]
        others = _others(type(gp.params))
        rest = others(gp.params) if others is not None else id(gp)
        key = (sha, type(gp.params), rest, gp.block_size, gp.cluster, gp.semantics)
        groups.setdefault(key, []).append(gp)
    order = {id(gp): i for i, gp in enumerate(grid)}
    refused: list[tuple[GridPoint, str]] = []
    for key, group in groups.items():
        trace = traces[key[0]]
        for gp in _samples(group):
            message = _refusal(gp, trace)
            if message is not None:
                refused.append((gp, message))
    if refused:
        gp, message = min(refused, key=lambda r: order[id(r[0])])
        raise PlanError(f"{message} (the first point refused: {gp.describe()})")


def _refusal(gp: GridPoint, trace: Trace) -> str | None:
    """Why the engine would refuse ``gp`` on ``trace`` (None: it would run it)."""
    try:
        check_scenario(trace, gp.scenario)  # the scenario's constructor checks too
    except Exception as err:
        return _message(gp, err)
    return _row_refusal(gp)


INT64 = (-(2**63), 2**63 - 1)


def _row_refusal(gp: GridPoint) -> str | None:
    """A point whose row cannot be written: an integer of it past int64, its column's type."""
    values = {**gp.params.to_dict(), **(gp.cluster.describe() if gp.cluster else {})}
    values["cache_bytes"] = gp.cache_bytes
    for key, value in values.items():
        if isinstance(value, int) and not INT64[0] <= value <= INT64[1]:
            return str(
                ParameterError(key, value, "past int64, the type of its column in results.parquet")
            )
    return None


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
