"""sweep: replay a Hydra-declared grid of prefix-caching configurations in parallel.

Command line: ``python -m sweep capacity=1024,2048,4096 policy=S3FIFO,LRU`` (see
the README). From Python::

    from sweep import SweepConfig, run_sweep
    summary = run_sweep(SweepConfig(capacity=[1024, 2048], out_dir="outputs/mine"))
    pandas.read_parquet(summary.results_path)

Names are imported lazily, so a worker process that only needs :mod:`sweep.run` does not pay
for Hydra, pyarrow or tqdm.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "SweepSummary": "app",
    "run_sweep": "app",
    "GRID_KEYS": "config",
    "Backend": "config",
    "ExecutorConfig": "config",
    "HardwareConfig": "config",
    "ModelConfig": "config",
    "SweepConfig": "config",
    "PlanError": "grid",
    "PER_REQUEST_SCHEMA": "store",
    "RESULT_SCHEMA": "store",
    "StoreError": "store",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'sweep' has no attribute {name!r}")
    return getattr(importlib.import_module(f".{module}", __name__), name)


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])
