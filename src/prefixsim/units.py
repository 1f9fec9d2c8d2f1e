"""Sizes in human units, parsed to exact integers of bytes.

``parse_size(key, "64GiB")`` is ``64 * 2**30``. Binary units (``KiB``, ``MiB``, ``GiB``,
``TiB``, ``PiB``, ``EiB``: powers of 1024) and decimal units (``kB``/``KB``, ``MB``, ``GB``,
``TB``, ``PB``, ``EB``: powers of 1000) are both accepted; a bare number, or ``B``, is bytes.
The number may have a decimal point (``1.5TiB``) as long as the size is a whole number of
bytes; it is parsed as an exact fraction, never a float, so ``0.1GB`` is exactly 100,000,000.

Refused, with a one-line :class:`~prefixsim.ParameterError` naming the key: a negative size, a
unit in bits (``64Gb`` is gigabits: the ``B`` must be upper case), an unknown unit, a size that
is not a whole number of bytes, and one past ``MAX_BYTES`` (int64, the Parquet column type).
"""

from __future__ import annotations

import re
from fractions import Fraction

from .errors import ParameterError, shown

_MAX_INT_DIGITS = 19
"""Significant digits before the point of any size up to :data:`MAX_BYTES` (19 digits)."""
_MAX_FRACTION_DIGITS = 60
"""Significant digits after the point of a whole number of bytes: ``d / 10**m`` (``d`` not a
multiple of 10) times a unit ``10**k`` (k <= 18) or ``2**k`` (k <= 60) is an integer only if
``m <= k``, so a fraction longer than 60 digits is never a whole number of bytes."""

MAX_BYTES = 2**63 - 1
"""Largest size accepted: sizes are stored as int64."""

UNITS: dict[str, int] = {
    "B": 1,
    "kB": 10**3,
    "KB": 10**3,
    "MB": 10**6,
    "GB": 10**9,
    "TB": 10**12,
    "PB": 10**15,
    "EB": 10**18,
    "KiB": 2**10,
    "MiB": 2**20,
    "GiB": 2**30,
    "TiB": 2**40,
    "PiB": 2**50,
    "EiB": 2**60,
}
"""Unit -> bytes. Decimal units are powers of 1000, binary (``*iB``) powers of 1024."""

_SIZE = re.compile(r"^\s*([+-]?)(\d+(?:\.\d*)?|\.\d+)\s*([A-Za-z]*)\s*$")
_ALLOWED = "a size such as 64GiB, 1TiB, 500GB or a number of bytes (units: B, kB, MB, GB, TB, "
_ALLOWED += "PB, EB, KiB, MiB, GiB, TiB, PiB, EiB)"


def _suggest(unit: str) -> str:
    """What a mistyped unit probably meant."""
    low = unit.lower()
    if unit.endswith("b") and low.rstrip("b").rstrip("i") in {"k", "m", "g", "t", "p", "e"}:
        stem = unit[:-1]
        dec = stem[0].upper() + "B" if stem[0] != "k" else "kB"
        binary = stem[0].upper() + "iB"
        return f"{unit} is in bits: bytes are {dec} (decimal) or {binary} (binary), upper-case B"
    for name in UNITS:
        if name.lower() == low:
            return f"unknown unit {shown(unit)}: did you mean {name}?"
    return f"unknown unit {shown(unit)}"


def _exact_number(key: str, value: str, digits: str) -> Fraction:
    """``digits`` (``123``, ``1.5``, ``.25``) as an exact fraction, refusing before any
    conversion a number too long to be a size (``int()`` of more than 4,300 digits is an error,
    and a long one costs quadratic time)."""
    whole, _, fraction = digits.partition(".")
    whole, fraction = whole.lstrip("0"), fraction.rstrip("0")
    if len(whole) > _MAX_INT_DIGITS:
        raise ParameterError(key, value, f"too large (at most {MAX_BYTES} bytes, int64)")
    if len(fraction) > _MAX_FRACTION_DIGITS:
        raise ParameterError(key, value, "not a whole number of bytes")
    return Fraction(f"{whole or 0}.{fraction or 0}")


def parse_size(key: str, value: str | int) -> int:
    """``value`` (``"64GiB"``, ``"1.5TB"``, ``1048576``) as an exact number of bytes.

    ``key`` names the setting in the error message (``cache_size``, ``--cache-size``).
    """
    if isinstance(value, bool):
        raise ParameterError(key, value, f"expected {_ALLOWED}")
    if isinstance(value, int):
        number, unit, sign = Fraction(abs(value)), "B", "-" if value < 0 else ""
    elif isinstance(value, str):
        m = _SIZE.match(value)
        if m is None:
            raise ParameterError(key, value, f"expected {_ALLOWED}")
        sign, digits, unit = m.group(1), m.group(2), m.group(3) or "B"
        number = _exact_number(key, value, digits)
    else:
        raise ParameterError(key, value, f"expected {_ALLOWED}")
    if unit not in UNITS:
        hint = _suggest(unit)
        raise ParameterError(key, value, hint if "bits" in hint else f"{hint}; expected {_ALLOWED}")
    if sign == "-" and number != 0:
        raise ParameterError(key, value, "a size cannot be negative")
    size = number * UNITS[unit]
    if size.denominator != 1:
        raise ParameterError(key, value, "not a whole number of bytes")
    if size > MAX_BYTES:
        raise ParameterError(key, value, f"too large (at most {MAX_BYTES} bytes, int64)")
    return int(size)


def format_size(n_bytes: int) -> str:
    """A short binary-unit label for axes and logs: ``64 GiB``, ``1.5 TiB``, ``160 MiB``."""
    if n_bytes < 0:
        raise ValueError(f"negative size {n_bytes}")
    for name in ("EiB", "PiB", "TiB", "GiB", "MiB", "KiB"):
        unit = UNITS[name]
        if n_bytes >= unit:
            text = f"{n_bytes / unit:.3g}"
            return f"{text} {name}"
    return f"{n_bytes} B"
