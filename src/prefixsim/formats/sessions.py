"""The optional ``session_id`` of a request line (Mooncake, token and chat traces).

A session id is a JSON string or integer (any size); absent or ``null`` means the request has
none. The trace keeps them as :attr:`prefixsim.trace.Trace.session_ids`: int64, numbered densely
``0, 1, ...`` in order of first appearance, -1 for a request without one, and None when no
request has one. A string and an integer are different sessions (``"7"`` is not ``7``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import TraceError

SESSION_KEY = b'"session_id"'
"""Files containing these bytes skip the pyarrow paths (a string-or-integer column): Mooncake
files take the compiled strict parser (:mod:`.mooncake_stream`), then the exact one; token and
chat files the exact line-by-line parsers."""


def check_session_id(obj: dict[str, Any], display: str, line: int) -> tuple[str, Any] | None:
    """The request's session as a key that tells strings from integers, or None."""
    from .jsonl import _describe

    if "session_id" in getattr(obj, "duplicates", frozenset()):
        raise TraceError(
            display, "key given more than once; expected it once", line=line, field="session_id"
        )
    value = obj.get("session_id")
    if value is None:
        return None
    if type(value) is int:
        return ("i", value)
    if type(value) is str:
        return ("s", value)
    raise TraceError(
        display,
        f"expected a string or an integer (the request's session), got {_describe(value)}",
        line=line,
        field="session_id",
    )


def dense_session_ids(sessions: list[tuple[str, Any] | None]) -> np.ndarray | None:
    """Dense int64 ids in order of first appearance (-1: none), or None when all are None."""
    dense: dict[tuple[str, Any], int] = {}
    out = np.full(len(sessions), -1, np.int64)
    for r, key in enumerate(sessions):
        if key is not None:
            out[r] = dense.setdefault(key, len(dense))
    return out if dense else None
