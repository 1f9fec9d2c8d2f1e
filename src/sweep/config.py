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

GRID_KEYS: tuple[str, ...] = (
    "trace",
    "policy",
    "capacity",
    "block_size",
    "small_ratio",
    "max_freq",
    "ghost_freq",
)
"""Keys that take a list of values; the grid is their Cartesian product (deduplicated)."""

POLICY_PARAM_KEYS: tuple[str, ...] = ("small_ratio", "max_freq", "ghost_freq")
"""Grid keys that are policy parameters: a policy without one of them (``PolicyParams``
``field_names()``) is not multiplied by its values, and its column is null."""

DEFAULT_OUT_DIR = "outputs/${now:%Y-%m-%d}/${now:%H-%M-%S}"


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


@dataclass
class SweepConfig:
    """A sweep: the grid, the executor and the output settings."""

    trace: list[str] = field(default_factory=lambda: ["conversation"])
    """Bundled trace names (``prefixsim.BUNDLED_TRACES``) or paths to Mooncake JSONL files."""
    policy: list[str] = field(default_factory=lambda: ["S3FIFO", "LRU"])
    capacity: list[int] = field(default_factory=lambda: [1024, 2048, 4096, 8192, 16384])
    """Cache capacities, in blocks."""
    block_size: list[int] = field(default_factory=lambda: [512])
    """Tokens per block."""
    small_ratio: list[float] = field(default_factory=lambda: [0.1])
    """S3FIFO: fraction of the capacity given to the small queue."""
    max_freq: list[int] = field(default_factory=lambda: [3])
    """S3FIFO: saturation value of the per-block frequency."""
    ghost_freq: list[int] = field(default_factory=lambda: [0])
    """S3FIFO: frequency of a block re-admitted from the ghost queue."""
    executor: ExecutorConfig = field(default_factory=ExecutorConfig)
    out_dir: str = DEFAULT_OUT_DIR
    """Run directory; re-running into an existing one computes only the missing points."""
    save_per_request: bool = True
    """Write per_request.parquet (one row per point and request)."""
    progress: bool = True
    """Show a progress bar on grids that take more than a moment (only on a terminal)."""
    plot: bool = True
    """Draw the run's figures into ``out_dir/figures`` at the end (``python -m sweep.plot``)."""


def register_configs() -> None:
    """Register the schema in Hydra's ConfigStore (``conf/config.yaml`` extends it)."""
    from hydra.core.config_store import ConfigStore

    cs = ConfigStore.instance()
    cs.store(name="sweep_schema", node=SweepConfig)


def to_sweep_config(cfg: Any) -> SweepConfig:
    """The composed ``DictConfig`` as a plain :class:`SweepConfig` (interpolations resolved)."""
    from omegaconf import DictConfig, OmegaConf

    if isinstance(cfg, SweepConfig):
        return cfg
    if not isinstance(cfg, DictConfig):
        raise TypeError(f"expected a DictConfig or SweepConfig, got {type(cfg).__name__}")
    # ``+key=value`` adds a key even to a structured config: reject what the schema lacks.
    for prefix, node, schema in (
        ("", cfg, SweepConfig),
        ("executor.", cfg.get("executor"), ExecutorConfig),
    ):
        if not isinstance(node, DictConfig):
            continue
        known = [f.name for f in fields(schema)]
        unknown = [str(k) for k in node if k not in known]
        if unknown:
            from prefixsim import ParameterError

            raise ParameterError(
                f"{prefix}{unknown[0]}",
                node[unknown[0]],
                f"not a key of the sweep configuration (keys: {', '.join(known)})",
            )
    if OmegaConf.get_type(cfg) is not SweepConfig:
        cfg = OmegaConf.merge(OmegaConf.structured(SweepConfig), cfg)
    obj = OmegaConf.to_object(cfg)
    assert isinstance(obj, SweepConfig)
    return obj
