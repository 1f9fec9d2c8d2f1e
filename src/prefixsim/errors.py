"""User-facing errors.

Both derive from :class:`PrefixSimError` so the CLIs can print any user error on one line and
exit 2 without a traceback, while bugs still surface as tracebacks.

A message quotes the user's value through :func:`shown`, which bounds its length whatever the
value is (a 5,000-digit integer, a megabyte string, the list a YAML alias bomb expands to), so
an error is one short line and formatting it can neither fail (Python refuses ``str()`` of an
integer of more than 4,300 digits) nor take time and memory in proportion to the value.
"""

from __future__ import annotations

import math
import reprlib
from typing import Any

SHOWN_CHARS = 80
"""At most this many characters of a quoted value (then ``...`` and its size)."""


def _digits(value: int) -> int:
    """Decimal digits of ``abs(value)``, exactly, without ``str()`` (refused past 4,300)."""
    v = abs(value)
    d = max(1, int((v.bit_length() - 1) * math.log10(2)) + 1)
    while 10**d <= v:
        d += 1
    while d > 1 and 10 ** (d - 1) > v:
        d -= 1
    return d


class _Shown(reprlib.Repr):
    """``repr`` with bounded strings, containers, nesting and integers."""

    def __init__(self) -> None:
        super().__init__()
        self.maxstring = SHOWN_CHARS
        self.maxother = SHOWN_CHARS
        self.maxlevel = 2
        self.maxlist = self.maxtuple = self.maxset = self.maxdict = 6

    def repr_int(self, x: int, level: int) -> str:
        if x.bit_length() <= 128:
            return repr(x)
        return f"<an integer of {_digits(x)} digits>"

    def repr_str(self, x: str, level: int) -> str:
        if len(x) <= SHOWN_CHARS:
            return repr(x)
        return repr(x[:SHOWN_CHARS]) + f"... ({len(x)} characters)"


_SHOWN = _Shown()


def shown(value: Any) -> str:
    """``repr(value)`` bounded in length (see the module docstring): what every error message
    quoting a user's value uses."""
    try:
        text = _SHOWN.repr(value)
    except Exception:  # a user object whose __repr__ fails: still one line
        text = f"<{type(value).__name__}>"
    return text if len(text) <= 4 * SHOWN_CHARS else text[: 4 * SHOWN_CHARS] + "..."


def shown_text(text: str, limit: int = 4 * SHOWN_CHARS) -> str:
    """A user's text (a parameter's name with its file, a unit, a path), unquoted, cut in the
    middle to at most about ``limit`` characters (its start and its end, where a key is, stay)."""
    text = str(text)
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}...({len(text) - 2 * half} characters)...{text[-half:]}"


ERROR_LINE_CHARS = 1000
"""At most about this many characters of an error line's message: the last bound, at the edge,
for a message that quotes a user's text no site bounded (a path of 100,000 characters)."""


def error_line(prog: str, message: object) -> str:
    """``PROG: error: MESSAGE``, one line (newlines folded) of bounded length: how every command
    line prints a user error."""
    text = " ".join(str(message).split())
    return f"{prog}: error: {shown_text(text, ERROR_LINE_CHARS)}"


class PrefixSimError(Exception):
    """An error caused by the user's input (trace file or parameters), not by a bug."""


class TraceError(PrefixSimError, ValueError):
    """A trace file that cannot be replayed: names the file, the line and the field.

    ``str(err)`` is a single line: ``"{path}:{line}: {field}: {message}"`` (line and field are
    omitted when they do not apply, e.g. a truncated gzip stream or an empty file).
    """

    def __init__(
        self, path: str, message: str, *, line: int | None = None, field: str | None = None
    ) -> None:
        self.path = str(path)
        self.line = line
        self.field = field
        self.message = message
        path_shown = shown_text(self.path)  # a 100K-character path: bounded
        where = path_shown if line is None else f"{path_shown}:{line}"
        what = message if field is None else f"{field}: {message}"
        super().__init__(f"{where}: {what}")


class ParameterError(PrefixSimError, ValueError):
    """An invalid policy or replay parameter: names the parameter, the value, what is allowed.
    The value is quoted by :func:`shown` (bounded in length)."""

    def __init__(self, name: str, value: object, allowed: str) -> None:
        self.name = name
        self.value = value
        self.allowed = allowed
        super().__init__(f"invalid {shown_text(name)}={shown(value)}: {allowed}")
