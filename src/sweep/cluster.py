"""Cluster points of the sweep (issue 14): ``instances`` and ``router`` as grid keys.

This module declares a cluster point (:class:`ClusterSpec`) and its result columns; the grid
keys are expanded into clusters by :func:`sweep.expand.router_family`. A grid that gives neither
``instances`` nor ``router`` has no cluster points (and its columns are null); one that gives
either is the product of ``instances`` (default 1) and ``router`` (default ``round_robin``),
each router multiplied only by its own parameters (``overlap_weight`` for ``kv_aware``,
``seed`` for ``random``, ``vnodes`` and ``key_blocks`` for ``session``), like policy parameters.

The load model needs a model and a hardware profile (``model=...``, ``hardware=...``). A grid
with cluster points that gives no ``model`` (no ``hardware``) uses :data:`DEFAULT_LOAD_MODEL`
(:data:`DEFAULT_LOAD_HARDWARE`), logged and written in the ``load_model`` (``load_hardware``)
column, so every router runs as typed (``kv_aware`` and ``least_loaded`` included) and every
cluster point gets its est_ TTFT and load columns. The single-cache cost columns stay null
without ``model``.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from prefixsim import Cluster

from .config import ROUTER_PARAM_KEYS

if TYPE_CHECKING:
    from prefixsim.cluster import ClusterResult

# prefixsim.cluster (its kernels, routers and load model) is imported by the functions that
# use it: a sweep without cluster points does not wait 0.03 s for it before its first replay.

log = logging.getLogger("sweep")

DEFAULT_LOAD_MODEL = "llama-3.1-8b"
"""The model of the load model when a grid with cluster points gives no ``model``."""
DEFAULT_LOAD_HARDWARE = "h100"
"""Its hardware when the grid gives no ``hardware`` (the config group's default too)."""

_FLOAT = pa.float64()
RESULT_FIELDS: tuple[pa.Field, ...] = (
    pa.field("instances", pa.int64()),
    pa.field("router", pa.string()),
    pa.field("overlap_weight", _FLOAT),
    pa.field("seed", pa.int64()),
    pa.field("vnodes", pa.int64()),
    pa.field("key_blocks", pa.int64()),
    pa.field("load_model", pa.string()),
    pa.field("load_hardware", pa.string()),
    pa.field("load_cache_tier", pa.string()),
    pa.field("decode_seconds_per_token", _FLOAT),
    pa.field("est_ttft_p50_seconds", _FLOAT),
    pa.field("est_ttft_p99_seconds", _FLOAT),
    pa.field("est_queueing_delay_mean_seconds", _FLOAT),
    pa.field("busy_seconds_max", _FLOAT),
    pa.field("busy_seconds_mean", _FLOAT),
    pa.field("load_imbalance", _FLOAT),
)
"""Columns of ``results.parquet`` for cluster points (null for a single-cache point)."""


@dataclass(frozen=True)
class ClusterSpec(Cluster):
    """A point's cluster (:class:`prefixsim.Cluster`: how many instances, the router, and the
    load model or None), with its identity and its description for the sweep."""

    def to_dict(self) -> dict[str, Any]:
        """The identity of the cluster (part of the point key) and its parameter columns."""
        out: dict[str, Any] = {"instances": self.instances, **self.router.to_dict()}
        if self.load is not None:
            # The whole profiles, not their names: an edited profile is a different point.
            out["load"] = {
                "model": dataclasses.asdict(self.load.model),
                "hardware": dataclasses.asdict(self.load.hardware),
                "cache_tier": self.load.cache_tier,
                "decode_seconds_per_token": self.load.decode_seconds_per_token,
            }
        return out

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {"instances": self.instances, **self.router.to_dict()}
        if self.load is not None:
            out.update(model=self.load.model.name, hardware=self.load.hardware.name)
        return out


def result_columns(result: ClusterResult) -> dict[str, Any]:
    """A cluster point's values of :data:`RESULT_FIELDS`."""
    row = result.summary()
    load = result.load
    return {
        "instances": result.instances,
        "router": result.router.router,
        **{k: getattr(result.router, k, None) for k in ROUTER_PARAM_KEYS},
        "load_model": None if load is None else load.model.name,
        "load_hardware": None if load is None else load.hardware.name,
        "load_cache_tier": None if load is None else load.cache_tier,
        "decode_seconds_per_token": None if load is None else load.decode_seconds_per_token,
        **{
            k: row[k]
            for k in (
                "est_ttft_p50_seconds",
                "est_ttft_p99_seconds",
                "est_queueing_delay_mean_seconds",
                "busy_seconds_max",
                "busy_seconds_mean",
                "load_imbalance",
            )
        },
    }
