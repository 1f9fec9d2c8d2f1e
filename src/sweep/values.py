"""Small helpers on the values of a configuration list."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


def unique(values: Iterable[Any]) -> list[Any]:
    """``values`` without repeats, first occurrences in order (``1``, ``1.0`` and ``True``
    are different values here)."""
    values = list(values)
    if len(set(map(type, values))) <= 1:  # one type: equal values are equal markers
        return list(dict.fromkeys(values))
    first: dict[tuple[type, Any], Any] = {}
    for v in values:
        first.setdefault((type(v), v), v)
    return list(first.values())
