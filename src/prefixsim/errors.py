"""User-facing errors.

Both derive from :class:`PrefixSimError` so the CLIs can print any user error on one line and
exit 2 without a traceback, while bugs still surface as tracebacks.
"""

from __future__ import annotations


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
        where = self.path if line is None else f"{self.path}:{line}"
        what = message if field is None else f"{field}: {message}"
        super().__init__(f"{where}: {what}")


class ParameterError(PrefixSimError, ValueError):
    """An invalid policy or replay parameter: names the parameter, the value, what is allowed."""

    def __init__(self, name: str, value: object, allowed: str) -> None:
        self.name = name
        self.value = value
        self.allowed = allowed
        super().__init__(f"invalid {name}={value!r}: {allowed}")
