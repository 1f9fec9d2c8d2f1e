"""A point of the sweep as planning makes it: a :class:`prefixsim.Scenario` (one cache, a
hierarchy or a cluster, with its block size and semantics), its trace and its cost identity
(``cache_bytes``; the model and hardware are the sweep's), before and after it has an id."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import prefixsim
from prefixsim import PolicyParams, Scenario
from prefixsim.semantics import Semantics

from .cluster import ClusterSpec
from .semantics import SPEC
from .semantics import describe as describe_semantics


class PlanError(prefixsim.PrefixSimError):
    """A grid that cannot be run (one line for the user)."""


class _Scenario:
    """A point's :class:`prefixsim.Scenario`: what the engine replays (built when asked)."""

    params: PolicyParams
    block_size: int
    cluster: ClusterSpec | None
    semantics: Semantics

    @property
    def scenario(self) -> Scenario:
        return Scenario(self.params, self.block_size, self.cluster, self.semantics)

    @property
    def policy(self) -> str:
        return self.params.policy


@dataclass(frozen=True)
class GridPoint(_Scenario):
    """A point before its trace is loaded (the trace is referred to as typed)."""

    trace: str
    params: PolicyParams
    block_size: int
    cache_bytes: int | None = None
    """The cache in bytes (with a model: the ``cache_size`` given, or capacity times the bytes
    per block); None without a model."""
    cluster: ClusterSpec | None = None
    """Instances behind a router (``sweep.cluster``); None for a single-cache point."""
    semantics: Semantics = SPEC
    """The replay's hit rule (``sweep.semantics``)."""

    def describe(self) -> str:
        """``trace=conversation policy=S3FIFO capacity=1024 ...`` (for messages)."""
        items = {"trace": self.trace, "block_size": self.block_size, **self.params.to_dict()}
        items.update(describe_semantics(self.semantics))
        if self.cache_bytes is not None:
            items["cache_bytes"] = self.cache_bytes
        if self.cluster is not None:
            items.update(self.cluster.describe())
        return " ".join(f"{k}={v}" for k, v in items.items())


@dataclass(frozen=True)
class Point(_Scenario):
    """A point of the sweep, with its identity in the run directory."""

    point_id: int
    key: str
    trace: str
    """The trace as typed (bundled name or path), as loaded into :class:`prefixsim.Trace`."""
    trace_sha256: str
    params: PolicyParams
    block_size: int
    cache_bytes: int | None = None
    """See :attr:`GridPoint.cache_bytes`."""
    cluster: ClusterSpec | None = None
    """See :attr:`GridPoint.cluster`."""
    semantics: Semantics = SPEC
    """See :attr:`GridPoint.semantics`."""

    def param(self, name: str) -> Any:
        """Value of a policy parameter, or None when the policy does not have it."""
        return getattr(self.params, name, None)

    def describe(self) -> str:
        items = {
            "point_id": self.point_id,
            "trace": self.trace,
            "block_size": self.block_size,
            **self.params.to_dict(),
            **describe_semantics(self.semantics),
        }
        if self.cluster is not None:
            items.update(self.cluster.describe())
        return " ".join(f"{k}={v}" for k, v in items.items())
