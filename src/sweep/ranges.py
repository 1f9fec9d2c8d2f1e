"""Large ``range()`` sweeps without a quadratic parse: a compact interpolation.

Hydra's override parser is quadratic in the length of a list (its visitor fetches the i-th
element of the parse tree by scanning from the start), and OmegaConf builds one node per
element: ``capacity=[1,...,100000]`` took minutes before any replay. So the argv pre-pass
(:mod:`sweep.argv`) hands Hydra a ``range()`` of at least :data:`COMPACT_MIN` values on a
numeric grid key as one interpolation, ``capacity=${sweep_range:1,100001,1}``, which
``--cfg job`` prints as such, and :func:`sweep.config.to_sweep_config` expands it itself into
the plain dataclass, never into OmegaConf nodes. The values are exactly those of the typed
``range()`` (floats step in decimal, as in :func:`sweep.argv.rewrite_override`). The resolver
is registered too, so ``--cfg job --resolve`` and OmegaConf itself give the same list.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal
from typing import Any

RESOLVER = "sweep_range"
COMPACT_MIN = 1000
"""Ranges with fewer values are expanded into a list, as typed (readable in ``--cfg job``)."""
INT_KEYS = ("capacity", "block_size", "max_freq", "ghost_freq")
FLOAT_KEYS = ("small_ratio",)
_PATTERN = re.compile(r"\$\{" + RESOLVER + r":([^{}$]*)\}")
_NUMBER = re.compile(r"-?\d+(\.\d*)?([eE][-+]?\d+)?")

MAX_GRID_POINTS = 10_000_000
"""The most points a grid may have (and so values a ``range()`` may give): planning holds
about :data:`BYTES_PER_POINT` per point, so ten million points are about 10 GB before the first
replay. Beyond it the values are refused before any list is built, with the memory they would
need (``range(1,3000000000)`` was a MemoryError's traceback)."""
BYTES_PER_POINT = 1024
"""Memory of one planned point, rounded up (about 730 bytes at the peak of planning 100,000
S3FIFO capacities, measured with tracemalloc; rows and results come on top)."""


class RangeError(ValueError):
    """A ``range()`` whose values cannot be listed (a bound not finite, a step of 0, more
    values than a grid may have): the message is one line, without the key."""


def too_many(what: str, count: int, noun: str = "values") -> str | None:
    """The reason ``count`` values (or points) of ``what`` are refused, or None."""
    if count <= MAX_GRID_POINTS:
        return None
    need = count * BYTES_PER_POINT
    shown = f"{count:,}" if count < 10**15 else f"{count:.3g}"
    for unit, size in (("PiB", 2**50), ("TiB", 2**40), ("GiB", 2**30)):
        if need >= size:
            amount = need / size
            memory = f"{amount:,.0f} {unit}" if amount < 10**6 else f"{amount:.3g} {unit}"
            break
    else:
        memory = f"{need / 2**30:.1f} GiB"
    return (
        f"{what} has {shown} {noun}; a grid holds at most {MAX_GRID_POINTS:,} points (about "
        f"{BYTES_PER_POINT} bytes each while planning: these would need about {memory})"
    )


def count(start: Any, stop: Any, step: Any = 1) -> int:
    """How many values ``range(start, stop, step)`` has in Hydra's sense, without listing
    them. Raises :class:`RangeError` for a bound or step that is not a finite number, a step
    of 0, or more than :data:`MAX_GRID_POINTS` values."""
    numbers = (start, stop, step)
    for name, x in zip(("start", "stop", "step"), numbers, strict=True):
        if isinstance(x, bool) or not isinstance(x, (int, float)):
            raise RangeError(f"range() needs numbers; its {name} is {x!r}")
        if isinstance(x, float) and not math.isfinite(x):
            raise RangeError(f"range() needs finite numbers; its {name} is {x}")
    if step == 0:
        raise RangeError("range() needs a step other than 0")
    if all(isinstance(x, int) for x in numbers):
        n = max(0, -((start - stop) // step))  # ceil((stop - start) / step), exact
    else:
        a, b, s = (Decimal(repr(float(x))) for x in numbers)
        n = max(0, math.ceil((b - a) / s))  # as FloatRange: start + i * step before stop
    reason = too_many("the range", n)
    if reason is not None:
        raise RangeError(reason)
    return n


def expand(start: Any, stop: Any, step: Any = 1) -> list[int] | list[float]:
    """The values of ``range(start, stop, step)`` in Hydra's sense; with a float, stepped in
    decimal from the numbers as written (0.05 + 0.1 is 0.15 here, not 0.15000000000000002).
    Raises :class:`RangeError` (:func:`count`) before building the list."""
    count(start, stop, step)
    if all(isinstance(x, int) and not isinstance(x, bool) for x in (start, stop, step)):
        return list(range(start, stop, step))
    from hydra.core.override_parser.types import FloatRange

    exact = FloatRange(*(Decimal(repr(float(x))) for x in (start, stop, step)))
    return [float(v) for v in exact]


def compact(key: str, start: Any, stop: Any, step: Any) -> str | None:
    """``${sweep_range:START,STOP,STEP}`` for a long range on a numeric grid key, else None
    (short ranges, and ranges Hydra would reject for the key's type, stay lists)."""
    numbers = (start, stop, step)
    is_int = all(isinstance(x, int) and not isinstance(x, bool) for x in numbers)
    if not (key in FLOAT_KEYS or (key in INT_KEYS and is_int)):
        return None
    if count(start, stop, step) < COMPACT_MIN:  # RangeError for a range that cannot be listed
        return None
    text = ",".join(str(x) if isinstance(x, int) else repr(float(x)) for x in numbers)
    return "${" + RESOLVER + ":" + text + "}"


def parse(text: Any) -> list[int] | list[float] | None:
    """The values of a compact range interpolation, or None if ``text`` is not one."""
    if not isinstance(text, str):
        return None
    m = _PATTERN.fullmatch(text.strip())
    if m is None:
        return None
    args = [a.strip() for a in m.group(1).split(",")]
    if not 2 <= len(args) <= 3 or not all(_NUMBER.fullmatch(a) for a in args):
        return None
    numbers = [int(a) if re.fullmatch(r"-?\d+", a) else float(a) for a in args]
    return expand(*numbers)


def compact_keys(cfg: Any, keys: tuple[str, ...]) -> dict[str, str]:
    """Grid keys of a ``DictConfig`` holding a compact range: key -> interpolation text."""
    from omegaconf import OmegaConf

    out = {}
    for key in keys:
        if key in cfg and OmegaConf.is_interpolation(cfg, key):
            text = cfg._get_node(key)._value()
            if parse(text) is not None:
                out[key] = str(text)
    return out


def register_resolver() -> None:
    from omegaconf import OmegaConf

    if not OmegaConf.has_resolver(RESOLVER):
        OmegaConf.register_new_resolver(RESOLVER, expand)


def to_yaml(cfg: Any, keys: tuple[str, ...]) -> str:
    """``OmegaConf.to_yaml(cfg, resolve=True)``, but compact ranges stay as written."""
    from omegaconf import OmegaConf

    found = compact_keys(cfg, keys)
    if not found:
        return OmegaConf.to_yaml(cfg, resolve=True)
    container = OmegaConf.to_container(cfg, resolve=False)
    assert isinstance(container, dict)
    for key, text in found.items():
        container[key] = "\\" + text  # escaped: resolving keeps the text
    return OmegaConf.to_yaml(OmegaConf.create(container), resolve=True)


def compact_list(key: str, values: Any) -> str | None:
    """The compact interpolation of a long list of plain ints in arithmetic progression (what
    a typed ``range()`` expands to), else None: :func:`structured_yaml` writes it instead of
    one YAML line per value."""
    if key not in INT_KEYS or not isinstance(values, list) or len(values) < COMPACT_MIN:
        return None
    if set(map(type, values)) != {int}:
        return None
    start, step = values[0], values[1] - values[0]
    if step == 0:
        return None
    stop = values[-1] + step
    if values != list(range(start, stop, step)):
        return None
    return "${" + RESOLVER + f":{start},{stop},{step}" + "}"


def structured_yaml(cfg: Any, keys: tuple[str, ...]) -> str:
    """``OmegaConf.to_yaml(OmegaConf.structured(cfg))`` of a dataclass config, with long
    ranges of ``keys`` written compactly (OmegaConf builds a node per list element: a minute
    for 100,000 capacities)."""
    import dataclasses

    from omegaconf import OmegaConf

    found = {k: c for k in keys if (c := compact_list(k, getattr(cfg, k, None))) is not None}
    if not found:
        return OmegaConf.to_yaml(OmegaConf.structured(cfg))
    short = dataclasses.replace(cfg, **{key: [0] for key in found})
    container = OmegaConf.to_container(OmegaConf.structured(short), resolve=False)
    assert isinstance(container, dict)
    container.update(found)  # written as is: nothing is resolved here, as in to_yaml(cfg)
    return OmegaConf.to_yaml(OmegaConf.create(container))
