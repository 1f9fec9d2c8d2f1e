"""Command-line pre-pass: grid sweeps in Hydra's own grammar, without ``--multirun``.

Users type ``python -m sweep capacity=1024,2048,4096 policy=S3FIFO,LRU``. In Hydra's run mode
a sweep value is an error ("Ambiguous value ... add --multirun"), and ``--multirun`` would launch
one Hydra job per point (about 60 ms each, more than a replay). Every grid key is a list in the
structured config instead, and this pre-pass rewrites each grid override into list form before
Hydra reads ``sys.argv``:

=====================================  =======================================
typed                                  handed to Hydra
=====================================  =======================================
``capacity=1024``                      ``capacity=[1024]``
``capacity=1024,2048``                 ``capacity=[1024,2048]``
``capacity=choice(1024,2048)``         ``capacity=[1024,2048]``
``'capacity=range(1024,4097,1024)'``   ``capacity=[1024,2048,3072,4096]``
``capacity=[1024,2048]``               unchanged
``trace=conversation,'my trace.gz'``   ``trace=[conversation,'my trace.gz']``
``'capacity=range(1,100001)'``         ``capacity=${sweep_range:1,100001,1}``
``plot=false``                         ``plot.enabled=false`` (``plot`` is a node)
=====================================  =======================================

A ``range()`` of 1,000 values or more becomes one interpolation (:mod:`sweep.ranges`): Hydra's
parser is quadratic in a list's length.

Nothing is parsed by hand: the arguments are split by Hydra's own argument parser, each
override is parsed by Hydra's ``OverridesParser``, and values are re-serialized with the
override's own sweep iterators (which keep quoting and escapes). Anything that does not parse
is left as typed, so Hydra reports the error exactly as it would have. Flags such as ``--help``,
``--cfg job`` and ``--info`` pass through untouched; ``--multirun``/``-m`` is dropped (the sweep
already runs every point, in parallel, in one process).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from . import overrides, ranges
from .config import GRID_KEYS, TIER_GRID_KEYS
from .overrides import OverrideError

MULTIRUN_FLAGS = ("--multirun", "-m")


class ArgvError(Exception):
    """An override the sweep cannot run (one line, for the user)."""


@dataclass
class Rewrite:
    argv: list[str]
    """Arguments for Hydra (without the program name)."""
    notes: list[str] = field(default_factory=list)
    """Messages for the user (e.g. ``--multirun`` dropped)."""
    typed: dict[str, str] = field(default_factory=dict)
    """Each rewritten override -> the override as typed (for messages about it)."""


def _hydra_args_parser() -> argparse.ArgumentParser:
    from hydra._internal.utils import get_args_parser

    return get_args_parser()


def _value_options(parser: argparse.ArgumentParser) -> set[str]:
    """Option strings that consume the next argument as their value (``--cfg job``)."""
    out: set[str] = set()
    for action in parser._actions:
        if action.option_strings and action.nargs != 0:
            out.update(action.option_strings)
    return out


def _positional_indices(argv: Sequence[str], parser: argparse.ArgumentParser) -> list[int] | None:
    """Indices of the override arguments in ``argv``, as Hydra's parser sees them; None when the
    arguments do not parse (Hydra will then report the problem itself)."""
    try:
        with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
            args = parser.parse_args(list(argv))
    except SystemExit:
        return None
    overrides: list[str] = list(args.overrides or [])
    value_opts = _value_options(parser)
    indices: list[int] = []
    skip_next = False
    for i, token in enumerate(argv):
        if skip_next:
            skip_next = False
            continue
        if token.startswith("-") and not token.startswith("--") and len(token) > 1:
            # short option; with a value it is either attached (-cjob) or the next token
            if token in value_opts:
                skip_next = True
            continue
        if token.startswith("--"):
            if "=" not in token and token in value_opts:
                skip_next = True
            continue
        indices.append(i)
    if [argv[i] for i in indices] != overrides:
        return None  # an unusual layout (e.g. --info with its optional value): leave it alone
    return indices


def rewrite_override(text: str, groups: Sequence[str] | None = None) -> str:
    """One override in the form Hydra's run mode accepts (grid keys as lists), its key and value
    checked against the schema (:mod:`sweep.overrides`; ``groups``: the config groups, whose
    choices are left to Hydra, :func:`sweep.overrides.config_groups`; None: those of
    ``conf/``).

    Raises :class:`ArgvError` for an override Hydra's grammar does not parse, a key the schema
    lacks, a value of the wrong type, or a sweep that the sweep cannot run (a sweep over a key
    that is not a grid key, an ``interval()``, a ``range()`` of step 0)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    try:
        override = OverridesParser.create().parse_override(text)
    except HydraException as err:
        raise ArgvError(_parse_error(text, err)) from None
    except ValueError as err:  # Hydra's int() of a digit run past Python's limit (4300 digits)
        raise ArgvError(_long_number_error(text, err)) from None
    if groups is None:
        groups = overrides.config_groups(())
    try:
        replaced = _checked_key(override, groups)
        if replaced is not None:
            return replaced
        rewritten = _rewrite(override, text)
        _check_value(rewritten, text, groups)
    except OverrideError as err:
        raise ArgvError(str(err)) from None
    return rewritten


def _rewrite(override: Any, text: str) -> str:
    from hydra.core.override_parser.types import ValueType
    from hydra.errors import HydraException

    key = override.key_or_group
    if key == "plot" and override.package is None and not override.is_sweep_override():
        # ``plot=false`` (documented before ``plot`` became a node) is ``plot.enabled=false``
        value = override.value() if override.value_type == ValueType.ELEMENT else None
        if isinstance(value, bool):
            return f"plot.enabled={str(value).lower()}"
        return text
    is_grid = (key in GRID_KEYS or key in TIER_GRID_KEYS) and override.package is None
    if not is_grid:
        if override.is_sweep_override():
            grid = ", ".join(GRID_KEYS)
            raise ArgvError(
                f"'{text}': only the grid keys take several values ({grid}); "
                f"choose one value for '{key}'"
            )
        return text
    if override.is_delete() or override.value_type is None:
        return text
    if override.value_type == ValueType.ELEMENT:
        value = override.value()
        if value is None or isinstance(value, (list, dict)):
            # already a list (or a mapping, which Hydra rejects with the key name), or null:
            # capacity=null clears an experiment's capacities for cache_size
            return text
        return f"{override.get_key_element()}=[{override.get_value_element_as_str()}]"
    if override.value_type == ValueType.INTERVAL_SWEEP:
        raise ArgvError(
            f"'{text}': interval() is a continuous range for optimizing sweepers; "
            f"list the values, or use range(start, stop, step)"
        )
    if override.value_type == ValueType.GLOB_CHOICE_SWEEP:
        raise ArgvError(f"'{text}': glob() selects config group options, not values of '{key}'")
    if override.value_type == ValueType.RANGE_SWEEP:
        from hydra.core.override_parser.types import RangeSweep

        sweep = override.value()
        if isinstance(sweep, RangeSweep):
            try:  # counted before any value is listed (a step of 1e-300, a billion values)
                ranges.count(sweep.start, sweep.stop, sweep.step)
            except ranges.RangeError as err:
                raise ArgvError(f"'{overrides._short(text, 120)}': {err}") from None
        if isinstance(sweep, RangeSweep) and not sweep.shuffle:
            compact = ranges.compact(key, sweep.start, sweep.stop, sweep.step)
            if compact is not None:
                return f"{override.get_key_element()}={compact}"
    try:
        values = ",".join(_sweep_strings(override))
    except (ValueError, HydraException) as err:
        raise ArgvError(f"'{text}': {err}") from None
    return f"{override.get_key_element()}=[{values}]"


def long_number_reason(text: str) -> str | None:
    """Why a number in ``text`` cannot be read: a run of digits longer than Python converts
    to an integer (``sys.get_int_max_str_digits()``, 4300 by default); None if there is none.
    Every number the sweep takes fits in 64 bits (a seed is taken modulo 2**64: give it so)."""
    import sys

    limit = sys.get_int_max_str_digits()
    digits = max((len(run) for run in re.findall(r"\d+", text)), default=0)
    if not limit or digits <= limit:
        return None
    return (
        f"a number of {digits:,} digits, longer than Python reads ({limit:,}); every number "
        "the sweep takes fits in 64 bits"
    )


def _long_number_error(text: str, err: ValueError) -> str:
    reason = long_number_reason(text)
    key, sep, _ = text.partition("=")
    if reason is None:  # another ValueError of Hydra's parser: its message, in one line
        first = next((line for line in str(err).splitlines() if line.strip()), "ValueError")
        return f"'{overrides._short(text, 120)}': {first.strip()}"
    key = key.lstrip("+~")
    if key == "seed":
        hint = " (a seed is taken modulo 2**64: give it so)"
    else:
        hint = f"; quote a value that is text: {overrides._short(key, 60)}='...'" if sep else ""
    return f"'{overrides._short(text, 120)}': {reason}{hint}"


def _parse_error(text: str, err: Exception) -> str:
    """One line for an override Hydra's grammar does not parse; a hint to quote a value with
    characters outside ASCII, which the grammar takes only inside quotes."""
    odd = [c for c in text if not c.isascii()]
    key, sep, value = text.partition("=")
    text, key, value = (overrides._short(t, 120) for t in (text, key, value))  # 100K characters
    if odd and sep:
        return (
            f"'{text}': Hydra's grammar takes characters such as {odd[0]!r} only inside quotes; "
            f"quote the value: {key}='{value}' (in the shell: \"{key}='{value}'\")"
        )
    first = next((line for line in str(err).splitlines() if line.strip()), type(err).__name__)
    return (
        f"'{text}': Hydra cannot parse this override ({overrides._short(first.strip(), 120)}); see "
        "https://hydra.cc/docs/1.2/advanced/override_grammar/basic"
    )


def _checked_key(override: Any, groups: Sequence[str]) -> str | None:
    """Check the override's key against the schema (:func:`sweep.overrides.field_type`: a key
    it lacks raises, naming the closest); returns the override's replacement when it has one
    (``hardware=null`` is Hydra's ``~hardware``), else None."""
    from hydra.core.override_parser.types import ValueType

    key = override.key_or_group
    if override.package is not None or "[" in key or override.is_delete():
        return None
    if key.startswith("hydra.") and not override.is_force_add():
        # Hydra's own keys: checked against its schema (HydraConf), the closest named, not
        # Hydra's advice to add a key its struct then refuses (hydra.verbos=true)
        overrides.field_type(key)
        return None
    if overrides.is_group(key, groups):
        is_null = override.value_type == ValueType.ELEMENT and override.value() is None
        if is_null and key in overrides.DEFAULTS_GROUPS and not override.is_add():
            return f"~{key}"  # Hydra's own "no choice" (GROUP=null is a traceback there)
        return None
    if overrides.ANY_GROUP in groups and "." not in key:
        # perhaps a group of a search path we do not read (--config-path): Hydra decides
        with contextlib.suppress(OverrideError):
            overrides.field_type(key)
        return None
    overrides.field_type(key, groups)
    return None


def _check_value(rewritten: str, typed: str, groups: Sequence[str]) -> None:
    """The value of an override as Hydra will get it (grid keys in list form) against its
    key's type (:func:`sweep.overrides.check_value`)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.core.override_parser.types import ValueType
    from hydra.errors import HydraException

    try:
        override = OverridesParser.create().parse_override(rewritten)
    except HydraException:
        return  # cannot happen: Hydra's own serialization
    key = override.key_or_group
    if override.value_type != ValueType.ELEMENT or override.is_delete():
        return
    if override.package is not None or "[" in key:
        return
    if overrides.is_group(key, groups):
        return
    try:
        tp = overrides.field_type(key, groups)
    except OverrideError:
        return  # a key of a search path we do not read (see _checked_key)
    overrides.check_value(key, tp, override.value(), typed)


def _sweep_strings(override: Any) -> list[str]:
    """The values of a choice or range sweep, serialized by Hydra. A float ``range()`` is
    stepped in decimal from the numbers as typed (Hydra's ``FloatRange`` over the exact binary
    values would give ``range(0.05,0.3,0.05)`` the value 0.15000000000000002, not 0.15)."""
    from hydra.core.override_parser.types import FloatRange, RangeSweep, Transformer

    sweep = override.value()
    if isinstance(sweep, RangeSweep) and isinstance(sweep.range(), FloatRange):
        assert sweep.start is not None and sweep.stop is not None
        exact = FloatRange(
            *(Decimal(repr(float(x))) for x in (sweep.start, sweep.stop, sweep.step))
        )
        values = list(exact)
        if sweep.shuffle:
            random.shuffle(values)
        return [Transformer.str(v) for v in values]
    return list(override.sweep_string_iterator())


def rewrite_overrides(typed: Sequence[str]) -> list[str]:
    """:func:`rewrite_override` over a list (for Hydra's compose API and the tests)."""
    return [rewrite_override(o) for o in typed]


def rewrite_argv(argv: Sequence[str]) -> Rewrite:
    """Rewrite the command-line arguments (without the program name) for Hydra's run mode."""
    notes: list[str] = []
    kept: list[str] = []
    for token in argv:
        if token in MULTIRUN_FLAGS:
            notes.append(
                f"{token} is not needed: the sweep runs every point of the grid in one run; "
                "ignoring it"
            )
            continue
        kept.append(token)
    indices = _positional_indices(kept, _hydra_args_parser())
    if indices is None:
        return Rewrite(kept, notes)
    groups = overrides.config_groups(kept)
    out = list(kept)
    typed: dict[str, str] = {}
    for i in indices:
        out[i] = rewrite_override(kept[i], groups)
        typed.setdefault(out[i], kept[i])
    return Rewrite(out, notes, typed)
