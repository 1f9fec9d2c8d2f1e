"""The sweep's structured configuration: dataclasses registered in Hydra's ConfigStore.

Hydra composes ``conf/config.yaml`` over the ``sweep_schema`` node registered here, so a typo or
a wrong type in the YAML files or on the command line is rejected by OmegaConf before any work,
naming the key and the expected type. Every grid key is a list: the command-line pre-pass
(:mod:`sweep.argv`) turns ``capacity=1024,2048`` and ``capacity=1024`` into
``capacity=[1024,2048]`` and ``capacity=[1024]``.

:func:`to_sweep_config` converts the composed ``DictConfig`` to these plain dataclasses once, at
the edge; the planner, the runner and the store never see a ``DictConfig``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from enum import Enum
from typing import Any

MISSING: Any = "???"  # omegaconf.MISSING (a required value), without importing omegaconf here

GRID_KEYS: tuple[str, ...] = (
    "trace",
    "policy",
    "capacity",
    "cache_size",
    "block_size",
    "small_ratio",
    "max_freq",
    "ghost_freq",
)
"""Keys that take a list of values; the grid is their Cartesian product (deduplicated).
``capacity`` and ``cache_size`` are two spellings of the cache size (blocks, bytes): a grid
gives at most one of them (None: not given)."""

DEFAULT_CAPACITIES: tuple[int, ...] = (1024, 2048, 4096, 8192, 16384)
"""Capacities (blocks) of a grid that gives neither ``capacity`` nor ``cache_size``."""

# --- cluster points (issue 14; see sweep.cluster) ---
ROUTER_PARAM_KEYS: tuple[str, ...] = ("overlap_weight", "seed", "vnodes", "key_blocks")
"""Grid keys that are router parameters: a router without one is not multiplied by it."""
CLUSTER_GRID_KEYS: tuple[str, ...] = ("instances", "router", *ROUTER_PARAM_KEYS)
GRID_KEYS += CLUSTER_GRID_KEYS

SEMANTICS_GRID_KEYS: tuple[str, ...] = ("semantics", "unhashed_free", "cache_output_blocks")
"""The replay's semantics (``sweep.semantics``, ``docs/semantics.md``): each option multiplies
only the semantics that have it."""
GRID_KEYS += SEMANTICS_GRID_KEYS

POLICY_PARAM_KEYS: tuple[str, ...] = ("small_ratio", "max_freq", "ghost_freq")
"""Grid keys that are policy parameters: a policy without one of them (``PolicyParams``
``field_names()``) is not multiplied by its values, and its column is null."""

DEFAULT_OUT_DIR = "outputs/${now:%Y-%m-%d}/${now:%H-%M-%S}"

# --- tiers (a hierarchy of caches, prefixsim.tiers) ---------------------------------------------

TIER_LEVELS: tuple[str, ...] = ("hbm", "dram", "rdma", "ssd")
"""The named slots of a hierarchy (``tiers.dram.capacity=...``); ``tiers.order`` picks and
orders those in use, fastest first."""

TIER_PARAM_KEYS: tuple[str, ...] = ("policy", "capacity", *POLICY_PARAM_KEYS)
"""Grid keys of each tier: ``tiers.<level>.<key>`` takes a list, like the top-level keys."""

TIER_GRID_KEYS: tuple[str, ...] = (
    "tiers.mode",
    *(f"tiers.{level}.{key}" for level in TIER_LEVELS for key in TIER_PARAM_KEYS),
)
"""Grid keys of the ``tiers`` group, rewritten to list form by the command-line pre-pass."""


@dataclass
class TierConfig:
    """One tier of a hierarchy: its own grid of policies, capacities and parameters."""

    policy: list[str] = field(default_factory=lambda: ["LRU"])
    capacity: list[int] = field(default_factory=lambda: [1024])
    """Capacity of this tier, in blocks."""
    small_ratio: list[float] = field(default_factory=lambda: [0.1])
    max_freq: list[int] = field(default_factory=lambda: [3])
    ghost_freq: list[int] = field(default_factory=lambda: [0])
    medium: str | None = None
    """Where its blocks live: hbm, dram_pcie, rdma or nvme (for the transfer cost of its hits)."""


@dataclass
class TiersConfig:
    """A hierarchy (``tiers=hbm_dram``): ``order`` names the tiers in use, fastest first."""

    name: str = ""
    order: list[str] = field(default_factory=list)
    mode: list[str] = field(default_factory=lambda: ["exclusive"])
    """``exclusive`` (victim cache) and/or ``inclusive`` (write-through): a grid key."""
    hbm: TierConfig | None = None
    dram: TierConfig | None = None
    rdma: TierConfig | None = None
    ssd: TierConfig | None = None


class Backend(str, Enum):
    """joblib backends the sweep runs on (all give identical results)."""

    loky = "loky"
    threading = "threading"
    dask = "dask"


@dataclass
class ExecutorConfig:
    """How points are executed (``executor=threads``, ``loky`` or ``dask`` selects a preset)."""

    backend: Backend = Backend.threading
    """Threads of this process by default: the kernels release the GIL (``nogil``), so threads
    replay in parallel without the worker start-up (about a second) and copies of loky."""
    n_jobs: int = -1
    """Parallel workers; -1 = all cores (all cluster threads with Dask), 1 = in this process."""
    batch_size: int | None = None
    """Points per task; null = chosen from the grid and the trace sizes."""
    address: str | None = None
    """Dask scheduler address (``tcp://host:8786``); null starts a local cluster."""
    connect_timeout: float = 10.0
    """Seconds to wait for the Dask scheduler at ``address`` before giving up."""
    n_workers: int | None = None
    """Workers of the local Dask cluster; null = ``n_jobs`` if positive, else all cores."""
    threads_per_worker: int = 1
    """Threads per local Dask worker."""
    processes: bool = True
    """Local Dask workers are processes (true) or threads of this process (false)."""

    def __post_init__(self) -> None:
        # From Python, ``backend="dask"`` is as good as ``Backend.dask``.
        if not isinstance(self.backend, Backend):
            try:
                self.backend = Backend(self.backend)
            except ValueError:
                from prefixsim import ParameterError

                allowed = ", ".join(b.value for b in Backend)
                raise ParameterError(
                    "executor.backend", self.backend, f"expected one of {allowed}"
                ) from None


FIGURE_FORMATS: tuple[str, ...] = (
    "eps", "jpeg", "jpg", "pdf", "pgf", "png", "ps", "raw", "rgba", "svg", "svgz", "tif", "tiff",
    "webp",
)  # fmt: skip
"""File types matplotlib's Agg, PDF, PS, SVG and PGF backends write."""


CAPACITY_AXES: tuple[str, ...] = ("blocks", "bytes")


@dataclass
class PlotConfig:
    """The figures drawn at the end of a run (``python -m sweep.plot`` draws them later)."""

    enabled: bool = True
    """Draw the figures into ``out_dir/figures`` (``plot=false`` is short for
    ``plot.enabled=false``)."""
    formats: list[str] = field(default_factory=lambda: ["png"])
    """File formats, e.g. ``[png,pdf]``; PNG only by default (a PDF costs as much again)."""
    capacity_axis: str = "blocks"
    """The capacity axis of the figures against capacity: ``blocks``, or ``bytes`` (the
    ``cache_bytes`` column: needs a model)."""

    def __post_init__(self) -> None:
        if self.capacity_axis not in CAPACITY_AXES:
            from prefixsim import ParameterError

            raise ParameterError(
                "plot.capacity_axis", self.capacity_axis, f"expected {' or '.join(CAPACITY_AXES)}"
            )
        # checked before the first replay, not after the whole run (matplotlib is not imported
        # for this: FIGURE_FORMATS is its list of file types)
        bad = [f for f in self.formats if str(f).lower().lstrip(".") not in FIGURE_FORMATS]
        if bad or not self.formats:
            from prefixsim import ParameterError

            raise ParameterError(
                "plot.formats",
                bad[0] if bad else self.formats,
                f"expected one or more of {', '.join(FIGURE_FORMATS)}",
            )


@dataclass
class ModelConfig:
    """Schema of the config group ``model``: the fields of :class:`prefixsim.ModelProfile`
    (``tests/test_cost_sweep.py`` holds them equal), so a typo in a profile fails before the run;
    the engine checks the values when the sweep converts it."""

    name: str = MISSING
    layers: int = MISSING
    attention_heads: int = MISSING
    kv_heads: int = MISSING
    head_dim: int = MISSING
    hidden_size: int = MISSING
    total_params: int = MISSING
    active_params: int = MISSING
    attention: str = "gqa"
    v_head_dim: int | None = None
    kv_lora_rank: int | None = None
    qk_rope_head_dim: int | None = None
    kv_dtype: str = "bf16"
    reuse_up_projection: bool = False
    source: str = ""


@dataclass
class HardwareConfig:
    """Schema of the config group ``hardware``: the fields of :class:`prefixsim.HardwareProfile`."""

    name: str = MISSING
    peak_flops: dict[str, float] = MISSING
    bandwidth: dict[str, float] = MISSING
    mfu: float = 0.5
    compute_dtype: str = "bf16"
    n_gpus: int = 1
    source: str = ""


@dataclass
class SweepConfig:
    """A sweep: the grid, the executor and the output settings."""

    trace: list[str] = field(default_factory=lambda: ["conversation"])
    """Bundled trace names (``prefixsim.BUNDLED_TRACES``) or paths to JSONL trace files
    (Mooncake, token or chat traces; see ``trace_format``)."""
    policy: list[str] = field(default_factory=lambda: ["S3FIFO", "LRU"])
    capacity: list[int] | None = None
    """Cache capacities, in blocks; None (not given): :data:`DEFAULT_CAPACITIES`, or the
    capacities of ``cache_size``."""
    cache_size: list[str] | None = None
    """Cache sizes in bytes (``64GiB``, ``1TiB``, ``500GB``), instead of ``capacity``: whole
    blocks of ``model`` at each block size (floor). Needs ``model``."""
    block_size: list[int] = field(default_factory=lambda: [512])
    """Tokens per block."""
    small_ratio: list[float] = field(default_factory=lambda: [0.1])
    """S3FIFO: fraction of the capacity given to the small queue."""
    max_freq: list[int] = field(default_factory=lambda: [3])
    """S3FIFO: saturation value of the per-block frequency."""
    ghost_freq: list[int] = field(default_factory=lambda: [0])
    """S3FIFO: frequency of a block re-admitted from the ghost queue."""
    semantics: list[str] = field(default_factory=lambda: ["spec"])
    """The hit rule (``docs/semantics.md``): ``spec`` (the specification), ``vllm`` (vLLM
    v1's), ``sglang`` (SGLang's). Not for a hierarchy (``tiers``) or the routers that read the
    caches or the loads."""
    unhashed_free: list[str] = field(default_factory=lambda: ["front"])
    """vllm points: where a freed partial block goes in the free queue, ``front`` (today's
    releases) or ``back`` (before vLLM PR #42656)."""
    cache_output_blocks: list[bool] = field(default_factory=lambda: [False])
    """vllm and sglang points: also cache the full blocks the generated tokens fill."""
    model: ModelConfig | None = None
    """The model whose KV cache fills the blocks (config group ``model``): adds bytes, prefill
    FLOPs and (with ``hardware``) est_ time columns; None: those columns are null."""
    hardware: HardwareConfig | None = None
    """The GPU for the est_ prefill time (config group ``hardware``)."""
    cache_tier: str = "hbm"
    """Where the cached blocks are kept, for the est_ transfer time: hbm, dram_pcie, rdma or
    nvme (a bandwidth of ``hardware``)."""
    # --- cluster points (issue 14; see sweep.cluster) ---
    instances: list[int] | None = None
    """Caches behind a router (null, with ``router`` null: single-cache points only)."""
    router: list[str] | None = None
    """Routers (``prefixsim.cluster.router_names()``); null with ``instances``: round_robin."""
    overlap_weight: list[float] = field(default_factory=lambda: [1.0])
    """kv_aware: weight of the prefill time of the uncached tokens against the queued work."""
    seed: list[int] = field(default_factory=lambda: [0])
    """random: the seed of its SplitMix64 stream."""
    vnodes: list[int] = field(default_factory=lambda: [64])
    """session: points of each instance on the consistent-hashing ring."""
    key_blocks: list[int] = field(default_factory=lambda: [1])
    """session: leading blocks hashed into the session key."""
    decode_seconds_per_token: float = 0.0
    """Load model: decode time per output token added to a request's service time."""
    trace_format: str | None = None
    """How every trace is read: ``mooncake``, ``tokens``, ``chat``, or null to detect it from
    the first line (``prefixsim.formats``). Token and chat traces are hashed at each
    ``block_size`` of the grid."""
    chain: bool = False
    """Mooncake traces whose ``hash_ids`` identify block content only: re-hash along prefixes."""
    chat_template: str = "chatml"
    """Chat traces: ``chatml``, ``plain`` or a per-message template with {role} and {content}."""
    tokenizer: str = "bytes"
    """Chat traces: ``bytes`` (built in) or the path of a local ``tokenizer.json``."""
    arrival_rate: float = 1.0
    """Chat traces without timestamps: requests per second, in file order."""
    executor: ExecutorConfig = field(default_factory=ExecutorConfig)
    tiers: TiersConfig | None = None
    """A hierarchy of caches (``tiers=hbm_dram``): when set, the grid is the hierarchy's (trace,
    block_size, tiers.mode and every tier's keys) and policy, capacity and the S3FIFO keys
    above are not used."""
    out_dir: str = DEFAULT_OUT_DIR
    """Run directory; re-running into an existing one computes only the missing points."""
    save_per_request: bool = True
    """Write per_request.parquet (one row per point and request)."""
    progress: bool = True
    """Show a progress bar on grids that take more than a moment (only on a terminal)."""
    plot: PlotConfig = field(default_factory=PlotConfig)
    """The figures at the end of the run; from Python ``plot=False`` is accepted too."""

    def __post_init__(self) -> None:
        # ``SweepConfig(plot=False)`` as before the plot node existed
        if isinstance(self.plot, bool):
            self.plot = PlotConfig(enabled=self.plot)
        # From Python, a bundled profile's name (or a YAML path) is as good as its config node.
        if isinstance(self.model, str):
            from prefixsim.models import load_model

            self.model = ModelConfig(**load_model(self.model).to_dict())
        if isinstance(self.hardware, str):
            from prefixsim.hardware import load_hardware

            self.hardware = HardwareConfig(**load_hardware(self.hardware).to_dict())

    def trace_options(self) -> Any:
        """The trace-reading keys as the engine's ``prefixsim.formats.TraceOptions``."""
        from prefixsim.formats import TraceOptions

        return TraceOptions.from_keys(self)


def register_configs() -> None:
    """Register the schema in Hydra's ConfigStore (``conf/config.yaml`` extends it)."""
    from hydra.core.config_store import ConfigStore

    from . import ranges

    cs = ConfigStore.instance()
    cs.store(name="sweep_schema", node=SweepConfig)
    ranges.register_resolver()


def to_sweep_config(cfg: Any) -> SweepConfig:
    """The composed ``DictConfig`` as a plain :class:`SweepConfig` (interpolations resolved)."""
    from omegaconf import DictConfig, OmegaConf

    if isinstance(cfg, SweepConfig):
        return cfg
    if not isinstance(cfg, DictConfig):
        raise TypeError(f"expected a DictConfig or SweepConfig, got {type(cfg).__name__}")
    # ``+key=value`` adds a key even to a structured config: reject what the schema lacks.
    tiers = cfg.get("tiers")
    tier_nodes = [
        (f"tiers.{level}.", tiers.get(level), TierConfig)
        for level in TIER_LEVELS
        if isinstance(tiers, DictConfig)
    ]
    for prefix, node, schema in (
        ("", cfg, SweepConfig),
        ("executor.", cfg.get("executor"), ExecutorConfig),
        ("model.", cfg.get("model"), ModelConfig),
        ("hardware.", cfg.get("hardware"), HardwareConfig),
        ("plot.", cfg.get("plot"), PlotConfig),
        ("tiers.", tiers, TiersConfig),
        *tier_nodes,
    ):
        if not isinstance(node, DictConfig):
            continue
        known = [f.name for f in fields(schema)]
        unknown = [str(k) for k in node if k not in known]
        if unknown:
            from prefixsim import PrefixSimError

            from .messages import unknown_key

            raise PrefixSimError(unknown_key(prefix, unknown[0], known))
    from . import ranges

    # A long range() stays one interpolation (sweep.ranges): expanded here, not as nodes.
    expanded = {k: ranges.parse(t) for k, t in ranges.compact_keys(cfg, GRID_KEYS).items()}
    if expanded:
        cfg = cfg.copy()
        for key in expanded:
            cfg[key] = []
    from omegaconf.errors import OmegaConfBaseException

    try:
        if OmegaConf.get_type(cfg) is not SweepConfig:
            cfg = OmegaConf.merge(OmegaConf.structured(SweepConfig), cfg)
        obj = OmegaConf.to_object(cfg)
    except OmegaConfBaseException as err:  # an interpolation that fails, a mandatory key unset
        from prefixsim import PrefixSimError

        from .messages import describe_omegaconf_error

        raise PrefixSimError(describe_omegaconf_error(cfg, err)) from None
    assert isinstance(obj, SweepConfig)
    for key, values in expanded.items():
        setattr(obj, key, values)
    return obj
