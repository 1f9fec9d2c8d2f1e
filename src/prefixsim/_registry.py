"""What the policy and the router registries share: one name per spec, checked against its
params class, and one error for a name that is not registered (naming the key)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, TypeVar

from .errors import ParameterError

S = TypeVar("S")


def check_new(registry: dict[str, Any], spec: Any, kind: str) -> None:
    """Refuse ``spec`` (a programming error, hence ValueError) when its name is taken or its
    params class (attribute ``kind``: ``policy`` or ``router``) names another."""
    if spec.name in registry:
        raise ValueError(f"{kind} {spec.name!r} is already registered")
    if getattr(spec.params_type, kind) != spec.name:
        raise ValueError(f"{spec.params_type.__name__}.{kind} must be {spec.name!r}")


def look_up(registry: dict[str, S], name: object, kind: str, names: Iterable[str]) -> S:
    """The spec registered as ``name``; else a :class:`ParameterError` on key ``kind`` that
    lists ``names`` (a user's typo, hence exit status 2)."""
    try:
        return registry[name]  # type: ignore[index]
    except (KeyError, TypeError):
        raise ParameterError(kind, name, f"expected one of {', '.join(names)}") from None
