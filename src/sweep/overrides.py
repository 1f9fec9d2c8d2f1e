"""Command-line overrides checked against the structured configuration before Hydra sees them.

Hydra rejects a key the schema lacks or a value of the wrong type, but in seven lines, with
exit status 1, advice that is wrong for a typo (``To append to your config use
+smallratio=0.2``) and OmegaConf's internals (``reference_type=Optional[List[int]]``); a
``tiers.hbm.capacity=...`` without a hierarchy is an assertion's traceback; ``chain=2``
becomes true. Here every override is checked against :class:`sweep.config.SweepConfig`, walked
by its type hints (so every key of every node, ``tiers.hbm.capacity`` and
``hardware.peak_flops.bf16`` included, with no list of keys kept by hand):

- a key the schema lacks is one line naming the closest key (``smallratio: not a key of the
  sweep configuration; did you mean small_ratio?``);
- a value is validated by OmegaConf itself against the field's type (the rule Hydra applies),
  and a wrong one is one line naming the expected type (``capacity=abc: 'abc' is not an
  integer; capacity takes integers``); a boolean takes ``true`` or ``false`` only;
- ``GROUP=null`` for a config group of the defaults list (``hardware=null``) is Hydra's
  deletion, ``~GROUP`` (Hydra itself fails on it with a traceback).

Config groups that are not keys (``+experiment=NAME``) and ``hydra.*`` are left to Hydra, as
are interpolations (``${...}``: resolved, and checked, when the sweep converts the
configuration, :func:`sweep.config.to_sweep_config`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import enum
import functools
import re
import types
import typing
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from .config import MISSING, SweepConfig
from .messages import short as _short
from .messages import unknown_key

DEFAULTS_GROUPS: tuple[str, ...] = ("executor", "model", "hardware", "tiers")
"""Config groups of ``conf/config.yaml``'s defaults list: ``GROUP=null`` deletes the choice."""


class OverrideError(Exception):
    """An override the schema refuses (one line, for the user)."""


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _strip_optional(tp: Any) -> tuple[Any, bool]:
    """``(X, True)`` for ``X | None``; ``(tp, False)`` otherwise."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0], True
    return tp, False


def field_type(path: str, groups: Iterable[str] = ()) -> Any:
    """The type of the schema's key ``path`` (``tiers.hbm.capacity`` -> ``list[int]``), or
    raise :class:`OverrideError` naming the closest key when the schema has no such key."""
    tp: Any = SweepConfig
    done: list[str] = []
    if path == "hydra" or path.startswith("hydra."):
        from hydra.conf import HydraConf

        tp, done, path = HydraConf, ["hydra"], path.removeprefix("hydra").lstrip(".")
        if not path:
            return HydraConf
    for name in path.split("."):
        inner, _ = _strip_optional(tp)
        if inner is Any:
            return Any  # a node the schema does not type (hydra.launcher: its plugin's)
        if typing.get_origin(inner) is dict:
            table = ".".join(done)
            known = _mapping_keys(table)
            if known is not None and name not in known:
                # Hydra would advise +KEY=..., which the engine then refuses
                raise OverrideError(unknown_key(f"{table}.", name, known))
            tp = typing.get_args(inner)[1]  # any key of a mapping (peak_flops.bf16)
        elif dataclasses.is_dataclass(inner):
            hints = _hints(typing.cast(type, inner))
            if name not in hints:
                prefix = "".join(f"{d}." for d in done)
                known = [f.name for f in dataclasses.fields(inner)]
                choices = known + ([] if done else [g for g in groups if g not in known])
                raise OverrideError(unknown_key(prefix, name, choices))
            tp = hints[name]
        else:
            where = ".".join(done)
            raise OverrideError(f"{path}: {where} is a value ({_describe(tp)}), not a node")
        done.append(name)
    return tp


def _mapping_keys(table: str) -> list[str] | None:
    """The keys the engine accepts in the mapping node ``table`` (``hardware.bandwidth``: the
    tiers' media; ``hardware.peak_flops``: the dtypes), or None for a mapping of any keys."""
    if table == "hardware.bandwidth":
        from prefixsim.hardware import TIERS

        return list(TIERS)
    if table == "hardware.peak_flops":
        from prefixsim.models import DTYPE_BYTES

        return list(DTYPE_BYTES)
    return None


_NAMES = {int: "an integer", float: "a number", bool: "true or false", str: "a string"}
_PLURALS = {int: "integers", float: "numbers", bool: "true or false values", str: "strings"}


def _describe(tp: Any) -> str:
    """What a value of type ``tp`` is, in words (``integers (one value or a list)``)."""
    inner, optional = _strip_optional(tp)
    tail = " or null" if optional else ""
    if typing.get_origin(inner) is list:
        (elem,) = typing.get_args(inner)
        elem, _ = _strip_optional(elem)
        what = _PLURALS.get(elem) or f"values ({_describe(elem)})"
        return f"{what} (one value, a comma list, [a,b] or range()){tail}"
    if typing.get_origin(inner) is dict:
        return f"a mapping of names to {_PLURALS.get(typing.get_args(inner)[1], 'values')}{tail}"
    if isinstance(inner, type) and issubclass(inner, enum.Enum):
        return "one of " + ", ".join(str(m.value) for m in inner) + tail
    if dataclasses.is_dataclass(inner):
        keys = ", ".join(f.name for f in dataclasses.fields(inner))
        return f"a mapping of its keys ({keys}){tail}"
    return _NAMES.get(inner, getattr(inner, "__name__", str(inner))) + tail


def _is_interpolation(value: Any) -> bool:
    return isinstance(value, str) and "${" in value


def _first_bad(tp: Any, value: Any) -> tuple[Any, Any]:
    """The element of ``value`` that makes it invalid for ``tp`` and the type it should have
    (the value and ``tp`` when it is not a list), for the message."""
    inner, _ = _strip_optional(tp)
    if typing.get_origin(inner) is list and isinstance(value, list):
        (elem,) = typing.get_args(inner)
        for v in value:
            if _problem(elem, v) is not None:
                return v, elem
    return value, tp


@functools.lru_cache(maxsize=64)
def _box(tp: Any) -> Any:
    """A structured config of one field ``v`` of type ``tp`` (OmegaConf validates with it)."""
    from omegaconf import OmegaConf

    box = dataclasses.make_dataclass("Box", [("v", tp, dataclasses.field(default=MISSING))])
    return OmegaConf.structured(box)


def _problem(tp: Any, value: Any) -> str | None:
    """Why OmegaConf refuses ``value`` for a field of type ``tp`` (None: accepted). Booleans
    take booleans only: OmegaConf turns ``2`` and ``"yes"`` into true."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    if _is_interpolation(value):
        return None
    inner, optional = _strip_optional(tp)
    if value is None:
        return None if optional else "null is not allowed"
    if inner is bool and not isinstance(value, bool):
        return "expected true or false"
    if inner in (int, float) and isinstance(value, str):
        # One rule for every non-string key: a string is refused, quoted or not, as
        # chain="true" is (OmegaConf would turn "32" into 32 and "1e3" into 1000.0), and as
        # the engine's profile loader refuses layers: "32"
        return "expected a number, not a string"
    try:
        OmegaConf.merge(_box(tp), {"v": value})
    except OmegaConfBaseException as err:
        return str(getattr(err, "msg", err)).splitlines()[0]
    except (OverflowError, ValueError, TypeError) as err:  # 10**400 for a float
        return f"{type(err).__name__}: {err}"
    if typing.get_origin(inner) is list and isinstance(value, list):
        (elem,) = typing.get_args(inner)
        if _strip_optional(elem)[0] in (bool, int, float):  # what OmegaConf accepts, not we
            return next((r for v in value if (r := _problem(elem, v)) is not None), None)
    return None


def check_value(key: str, tp: Any, value: Any, typed: str) -> None:
    """Raise :class:`OverrideError` when ``value`` (as Hydra parsed it) does not fit ``key``'s
    type ``tp`` (:func:`field_type`); ``typed`` is the override as the user typed it."""
    if _problem(tp, value) is None:
        return
    bad, expected = _first_bad(tp, value)
    typed = _short(typed, 120)
    if value is None:
        raise OverrideError(f"{typed}: {key} takes {_describe(tp)}, not null")
    if isinstance(bad, str) and _unquoted_fits(expected, bad):  # "32", "true": one rule
        raise OverrideError(
            f"{typed}: {_short(bad)!r} is a quoted string; {key} takes {_describe(tp)} "
            "(remove the quotes)"
        )
    if expected is tp:  # the value as a whole
        past = "OverflowError" in (_problem(tp, value) or "")
        raise OverrideError(f"{typed}: expected {_describe(tp)}{' (past float64)' if past else ''}")
    shown = repr(_short(bad)) if isinstance(bad, str) else _short(bad)
    what = _describe(_strip_optional(expected)[0])
    raise OverrideError(f"{typed}: {shown} is not {what}; {key} takes {_describe(tp)}")


def _unquoted_fits(tp: Any, text: str) -> bool:
    """Whether ``text`` without its quotes would be a valid ``tp`` (a number or true/false)."""
    inner, _ = _strip_optional(tp)
    if inner is bool:
        return text.strip().lower() in ("true", "false")
    try:
        float(text) if inner is float else int(text)
    except ValueError:
        return False
    return True


ANY_GROUP = "*"
"""In :func:`config_groups`' answer: a search path we do not read is given, any top-level
name may be a group."""


def config_groups(argv: Sequence[str]) -> tuple[str, ...]:
    """The config groups Hydra will know for ``argv``: those of the defaults list, the folders
    of ``conf/`` and of every ``--config-dir``, and :data:`ANY_GROUP` when a search path we do
    not read is given (``--config-path``, ``hydra.searchpath``)."""
    return _config_groups(tuple(argv))


def config_dirs(argv: Sequence[str], conf_dir: Path) -> list[Path] | None:
    """The folders Hydra searches for config groups with ``argv``: ``conf_dir`` and every
    ``--config-dir``; None when a search path we do not read is given (``--config-path``, a
    ``hydra.searchpath`` override)."""
    dirs = [conf_dir]
    args = list(argv)
    for i, token in enumerate(args):
        if token in ("--config-dir", "-cd") and i + 1 < len(args):
            dirs.append(Path(args[i + 1]))
        elif token.startswith("--config-dir="):
            dirs.append(Path(token.partition("=")[2]))
        elif token in ("--config-path", "-cp") or token.lstrip("+").startswith(
            ("--config-path=", "hydra.searchpath")
        ):
            return None
    return dirs


@functools.lru_cache(maxsize=8)
def _config_groups(argv: tuple[str, ...]) -> tuple[str, ...]:
    dirs = config_dirs(argv, Path(__file__).resolve().parent / "conf")
    groups = dict.fromkeys(DEFAULTS_GROUPS)
    if dirs is None:
        groups[ANY_GROUP] = None
        dirs = [Path(__file__).resolve().parent / "conf"]
    for d in dirs:
        with contextlib.suppress(OSError):
            groups.update(dict.fromkeys(p.name for p in sorted(d.iterdir()) if p.is_dir()))
    return tuple(g for g in groups if not g.startswith(("_", ".")))


def group_options(group: str, argv: Sequence[str]) -> list[str]:
    """The options of the config group ``group`` Hydra will know for ``argv``: the YAML files
    of ``conf/GROUP/``, of each ``--config-dir``'s ``GROUP/`` and, for ``model`` and
    ``hardware``, the bundled profiles (regular files only, as the profile loader reads)."""
    conf = Path(__file__).resolve().parent / "conf"
    dirs = config_dirs(argv, conf) or [conf]
    folders = [d / group for d in dirs]
    if group in ("model", "hardware"):
        from prefixsim.models import profile_dir

        folders.append(profile_dir(group))
    names: set[str] = set()
    for folder in folders:
        with contextlib.suppress(OSError):
            names.update(p.stem for p in folder.glob("*.yaml") if p.is_file())
    return sorted(names)


def null_node_line(typed: str, node: str, argv: Sequence[str]) -> str:
    """One line for an override that reaches into (or merges a mapping into) ``node``, a node
    that is null in the composed configuration (``tiers.hbm.capacity=3`` without ``tiers=``,
    ``model.layers=32`` without ``model=``, ``hardware=null hardware.mfu=0.5``): OmegaConf
    fails on it with an assertion's traceback."""
    typed = _short(typed, 120)
    group = node.split(".")[0]
    if node == group and group in config_groups(argv):
        known = group_options(group, argv)
        shown = f" ({group}: {', '.join(known)})" if known else ""
        return (
            f"{typed}: no {group} is chosen ({group} is null in this configuration); choose "
            f"one first, {group}=NAME{shown}"
        )
    where = f" in a file of the {group} group" if group in config_groups(argv) else ""
    return (
        f"{typed}: {node} is null in this configuration, so it has no keys to set; give "
        f"{node} whole{where} (--config-dir DIR with DIR/{group}/NAME.yaml)"
    )


def is_group(key: str, groups: Iterable[str]) -> bool:
    """``model`` (a config group), ``hydra/launcher``, ``hydra.run.dir``: left to Hydra."""
    return key in groups or "/" in key or key == "hydra" or key.startswith("hydra.")


def omegaconf_error_line(err: BaseException) -> str:
    """A Hydra or OmegaConf error as one line: its own lines (a list of options joined by
    commas) without OmegaConf's ``full_key:`` and ``object_type=`` details, Hydra's search
    path and its advice on ``HYDRA_FULL_ERROR``; for a key a node of the schema lacks, the
    closest key."""
    from . import config

    parts: list[str] = []
    details: dict[str, str] = {}
    for e in (err, err.__cause__):
        if e is None:
            continue
        for line in str(getattr(e, "msg", None) or e).splitlines():
            if line.startswith("Config search path:"):
                break
            detail = re.fullmatch(r"\s+(full_key|object_type|reference_type)[:=]\s*(.*)", line)
            if detail:
                details.setdefault(detail[1], detail[2].strip())
            elif line[:1].isspace() and line.strip() and parts:  # an option of a list
                sep = " " if parts[-1].endswith(":") else ", "
                parts[-1] += sep + line.strip()
            elif line.strip() and "HYDRA_FULL_ERROR" not in line:
                line = re.sub(r"\w+ raised while composing config:\s*", "", line.strip())
                if line and line not in parts:
                    parts.append(line)
    text = ""
    for part in parts:
        part = part.strip()
        if part:
            text += ("" if not text else " " if text.endswith((":", ".")) else "; ") + part
    text = text or type(err).__name__
    unknown = re.search(r"Key '([^']+)' not in '(\w+)'", text)
    schema = getattr(config, unknown[2], None) if unknown else None
    if unknown and dataclasses.is_dataclass(schema):
        key = unknown[1]
        full = details.get("full_key", key)
        prefix = full[: -len(key)] if full.endswith(key) else ""
        known = [f.name for f in dataclasses.fields(schema)]
        close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
        if close:
            text += f"; did you mean {prefix}{close[0]}?"
    return _short(text, 400)
