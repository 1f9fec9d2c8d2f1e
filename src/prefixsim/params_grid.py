"""Validated parameters for a whole grid of points, each rule run once per distinct input.

``make_params_grid(policy, capacities, combos)`` is, by definition, the reference

    [make_params(policy, c, **combo) (or the ParameterError it raises)
     for c in capacities for combo in combos]

(capacity-major), computed without constructing and validating every point from scratch. A
:class:`~prefixsim.policies.base.PolicyParams` declares its validation as ``checks``: ordered
rules, each a pure function of the fields it names (see there). Construction runs them in
order; here each rule is memoised on its (typed) input values, so a rule reading only
``small_ratio`` runs once per distinct ratio, the capacity rule once per distinct capacity, and
only rules that read several grid keys (S3FIFO's two non-empty queues) run per point. A point
whose every rule passed is built with :meth:`PolicyParams.unchecked` from the normalised values,
which are exactly the values construction would have stored.

Invariants that make the memo exact:

* a rule's result depends only on its inputs, and inputs are keyed with their types
  (``1``, ``1.0`` and ``True`` are different inputs, as they are to the rules);
* a rule sees the values as normalised by the rules before it, exactly as in construction;
* the first rule that fails is the point's error, as in construction;
* a Params class that validates outside ``checks`` (a ``__post_init__`` of its own) is
  constructed point by point (:func:`prefixsim.make_params`), so nothing is skipped.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence
from typing import Any

from .errors import ParameterError
from .policies import PolicyParams, get_policy
from .policies.base import BULK_CHECKS, Check, check_state_fits
from .replay import known_params, make_params

GridEntry = PolicyParams | ParameterError


def make_params_grid(
    policy: str,
    capacities: Sequence[Any],
    combos: Sequence[Mapping[str, Any]] = ({},),
) -> list[GridEntry]:
    """For every capacity (outer) and every combination of the other parameters (inner), the
    validated parameters, or the :class:`ParameterError` that :func:`prefixsim.make_params`
    raises for that point. An unknown policy raises at once."""
    spec = get_policy(policy)
    cls = spec.params_type
    stages = _stages(cls)
    if stages is None:
        return [_one(policy, c, combo) for c in capacities for combo in combos]
    alone, of_capacity, of_point = stages
    names = cls.field_names()
    fields = cls.__dataclass_fields__
    # Each combination once: make_params's rule for keys, the defaults of the fields it does
    # not give, then the rules that do not read capacity (memoised across combinations).
    memo: dict[tuple[Any, ...], tuple[Any, ...] | ParameterError] = {}
    ready: list[dict[str, Any] | None] = []  # None: the combination fails on its own
    for combo in combos:
        try:
            known = known_params(policy, combo)
        except ParameterError:
            ready.append(None)
            continue
        values = {n: known[n] if n in known else _default(fields[n]) for n in names[1:]}
        ready.append(values if all(_run(c, values, memo) for c in alone) else None)
    # The rules that read capacity alone (before any that reads more): once per capacity.
    own_of = _normalised_capacities(capacities, of_capacity)
    # The rules that read capacity and more run per point, in order (no memo: the inputs of
    # such a rule differ from point to point).
    per_point = [(reads, operator.itemgetter(*reads), rule) for reads, rule in of_point]
    unchecked = cls.unchecked
    # One column per combination (a tight loop over the capacities), interleaved at the end.
    out: list[GridEntry] = [None] * (len(capacities) * len(combos))  # type: ignore[list-item]
    for j, (combo, given) in enumerate(zip(combos, ready, strict=True)):
        column: list[GridEntry] = []
        for capacity, own in zip(capacities, own_of, strict=True):
            if given is None or own is None:
                column.append(_one(policy, capacity, combo))  # an invalid point: its own error
                continue
            point = {"capacity": own, **given}  # field order: capacity comes first
            try:
                for reads, get, rule in per_point:
                    args = get(point)
                    result = rule(*args) if len(reads) > 1 else rule(args)
                    point.update(zip(reads, result, strict=True))
            except ParameterError:
                column.append(_one(policy, capacity, combo))
                continue
            column.append(unchecked(point))
        _check_memory(policy, capacities, combo, column)
        out[j :: len(combos)] = column
    return out


def _check_memory(
    policy: str, capacities: Sequence[Any], combo: Mapping[str, Any], column: list[GridEntry]
) -> None:
    """Construction's last rule, :func:`~prefixsim.policies.base.check_state_fits` (the
    state of the capacity must fit in memory), over one column: a policy's ``state_bytes`` does
    not decrease with the capacity, so when the column's largest capacity fits, every point
    does (one call per column, not per point); otherwise each point is checked."""
    valid = [p for p in column if isinstance(p, PolicyParams)]
    if not valid:
        return
    try:
        check_state_fits(max(valid, key=lambda p: p.capacity))
        return
    except ParameterError:
        pass
    for i, p in enumerate(column):
        if isinstance(p, PolicyParams):
            try:
                check_state_fits(p)
            except ParameterError:
                column[i] = _one(policy, capacities[i], combo)


def _normalised_capacities(capacities: Sequence[Any], checks: Sequence[Check]) -> list[Any]:
    """Each capacity after ``checks`` (rules reading capacity alone), None where one fails;
    the rules run once per distinct typed capacity."""
    if len(checks) == 1 and (bulk := BULK_CHECKS.get(checks[0][1])) is not None:
        done = bulk(capacities)
        if done is not None:
            return done
    seen: dict[tuple[Any, type], Any] = {}
    out: list[Any] = []
    for capacity in capacities:
        key = (capacity, type(capacity))
        value = seen.get(key, _MISSING)
        if value is _MISSING:
            value = capacity
            try:
                for _, rule in checks:
                    (value,) = rule(value)
            except ParameterError:
                value = None
            seen[key] = value
        out.append(value)
    return out


_MISSING = object()


Stages = tuple[tuple[Check, ...], tuple[Check, ...], tuple[Check, ...]]


def _stages(cls: type[PolicyParams]) -> Stages | None:
    """``cls.checks`` split into the rules that do not read capacity, those that read capacity
    alone and come before any rule reading capacity with something else, and the rest (run per
    point, in order). None when running them by stage could change what a rule sees: a class
    that validates outside ``checks``, or a per-point rule that normalises a field a later
    capacity-free rule reads."""
    if cls.__post_init__ is not PolicyParams.__post_init__:
        return None
    checks = cls.checks
    alone = tuple(c for c in checks if "capacity" not in c[0])
    reading = [c for c in checks if "capacity" in c[0]]
    n_first = 0
    while n_first < len(reading) and reading[n_first][0] == ("capacity",):
        n_first += 1
    of_capacity, of_point = tuple(reading[:n_first]), tuple(reading[n_first:])
    for i, (reads, _) in enumerate(checks):
        if "capacity" in reads:
            later_alone = [r for r, _ in checks[i + 1 :] if "capacity" not in r]
            if any(set(reads) & set(r) for r in later_alone):
                return None
    return alone, of_capacity, of_point


def _run(
    check: Check,
    values: dict[str, Any],
    memo: dict[tuple[Any, ...], tuple[Any, ...] | ParameterError],
) -> bool:
    """Apply one rule to ``values`` in place (normalising the fields it reads); False when it
    fails. The rule runs once per distinct typed input (``1``, ``1.0`` and ``True`` are
    different inputs)."""
    reads, rule = check
    args = tuple([values[n] for n in reads])
    key = (rule, *args, *map(type, args))
    result = memo.get(key)
    if result is None:
        try:
            result = rule(*args)
        except ParameterError as err:
            result = err
        memo[key] = result
    if isinstance(result, ParameterError):
        return False
    for name, value in zip(reads, result, strict=True):
        values[name] = value
    return True


def _default(f: Any) -> Any:
    import dataclasses

    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    raise TypeError(f"field {f.name} has no default")


def _one(policy: str, capacity: Any, combo: Mapping[str, Any]) -> GridEntry:
    try:
        return make_params(policy, capacity, **combo)
    except ParameterError as err:
        return err
