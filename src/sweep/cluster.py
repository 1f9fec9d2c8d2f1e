"""Cluster points of the sweep (issue 14): ``instances`` and ``router`` as grid keys.

Everything the sweep needs to declare and run :func:`prefixsim.replay_cluster` points lives
here; ``grid``, ``run``, ``app`` and ``store`` only call it. A grid that gives neither
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
import itertools
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa

import prefixsim
from prefixsim import PolicyParams, Trace

from .config import ROUTER_PARAM_KEYS
from .costing import as_profile
from .values import unique

if TYPE_CHECKING:
    from prefixsim.cluster import ClusterResult, LoadModel, RouterParams
    from prefixsim.semantics import Semantics

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
class ClusterSpec:
    """A point's cluster: how many instances, the router, and the load model (or None)."""

    instances: int
    router: RouterParams
    load: LoadModel | None

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


def load_model_of(cfg: Any) -> LoadModel:
    """The load model of a sweep configuration with cluster points: its ``model`` and
    ``hardware``, or :data:`DEFAULT_LOAD_MODEL` / :data:`DEFAULT_LOAD_HARDWARE` for the one it
    does not give (logged; the ``load_model`` / ``load_hardware`` columns say which ran)."""
    model = as_profile("model", getattr(cfg, "model", None))
    hardware = as_profile("hardware", getattr(cfg, "hardware", None))
    if model is None:
        log.info("cluster points: no model given; the load model uses %s", DEFAULT_LOAD_MODEL)
        model = DEFAULT_LOAD_MODEL
    if hardware is None:
        log.info("cluster points: no hardware given; the load model uses %s", DEFAULT_LOAD_HARDWARE)
        hardware = DEFAULT_LOAD_HARDWARE
    from prefixsim.cluster import LoadModel

    return LoadModel(
        model,
        hardware,
        getattr(cfg, "cache_tier", "hbm"),
        getattr(cfg, "decode_seconds_per_token", 0.0),
    )


def cluster_specs(cfg: Any) -> list[ClusterSpec | None]:
    """The clusters of a grid: ``[None]`` (single-cache points) when the configuration gives
    neither ``instances`` nor ``router``. Raises :class:`ParameterError` for a bad value."""
    instances = getattr(cfg, "instances", None)
    routers = getattr(cfg, "router", None)
    if instances is None and routers is None:
        return [None]
    from prefixsim.cluster import get_router, make_router

    names = unique(routers if routers is not None else ["round_robin"])
    specs_by_name = {name: get_router(name) for name in names}  # an unknown name fails first
    load = load_model_of(cfg)
    specs: list[ClusterSpec | None] = []
    for name, spec in specs_by_name.items():
        own = [k for k in ROUTER_PARAM_KEYS if k in spec.params_type.field_names()]
        values = [unique(getattr(cfg, k)) for k in own]
        for combo in itertools.product(*values):
            router = make_router(name, **dict(zip(own, combo, strict=True)))
            for n in unique(instances if instances is not None else [1]):
                prefixsim.policies.base.check_int("instances", n, 1, 4096)
                specs.append(ClusterSpec(int(n), router, load))
    return specs


def run_point(
    trace: Trace,
    params: PolicyParams,
    block_size: int,
    spec: ClusterSpec,
    semantics: Semantics | None = None,
) -> ClusterResult:
    from prefixsim.cluster import replay_cluster_params

    return replay_cluster_params(
        trace, params, block_size, spec.instances, spec.router, spec.load, semantics=semantics
    )


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
