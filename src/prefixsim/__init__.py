"""prefixsim: exact block-level KV-cache prefix-caching simulation.

>>> from prefixsim import load_trace, replay
>>> result = replay(load_trace("conversation"), policy="S3FIFO", capacity=4096)
>>> result.overall_hit_rate  # doctest: +SKIP

The package imports lazily (PEP 562): ``import prefixsim`` or ``import prefixsim.profiles`` (as
Hydra does to find the bundled profiles) costs milliseconds, and numba and the kernels load on
the first use of a name that needs them, e.g. ``prefixsim.replay``.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING, Any

from .errors import ParameterError, PrefixSimError, TraceError

if TYPE_CHECKING:
    from .cluster import ClusterResult, replay_cluster
    from .cost_bounds import capacity_blocks
    from .cost_formulas import prefill_flops
    from .cost_table import PrefillCost, prefill_cost
    from .hardware import HardwareProfile, hardware_names, load_hardware
    from .lru_curve import Ceiling, LRUCurve, ceiling, lru_curve
    from .models import ModelProfile, load_model, model_names
    from .policies import PolicyParams, get_policy, policy_names, register
    from .replay import ReplayResult, make_params, replay, replay_params
    from .scenario import Cluster, Scenario, check_scenario, run_scenario
    from .semantics import Semantics
    from .tiers import TieredResult, replay_tiers
    from .trace import BUNDLED_TRACES, Trace, load_trace, oddities
    from .units import format_size, parse_size

_LAZY: dict[str, str] = {
    "BUNDLED_TRACES": ".trace",
    "Ceiling": ".lru_curve",
    "Cluster": ".scenario",
    "ClusterResult": ".cluster",
    "HardwareProfile": ".hardware",
    "LRUCurve": ".lru_curve",
    "ModelProfile": ".models",
    "PolicyParams": ".policies",
    "PrefillCost": ".cost_table",
    "ReplayResult": ".replay",
    "Scenario": ".scenario",
    "Semantics": ".semantics",
    "TieredResult": ".tiers",
    "Trace": ".trace",
    "capacity_blocks": ".cost_bounds",
    "ceiling": ".lru_curve",
    "format_size": ".units",
    "get_policy": ".policies",
    "hardware_names": ".hardware",
    "load_hardware": ".hardware",
    "load_model": ".models",
    "load_trace": ".trace",
    "lru_curve": ".lru_curve",
    "make_params": ".replay",
    "model_names": ".models",
    "oddities": ".trace",
    "parse_size": ".units",
    "policy_names": ".policies",
    "prefill_cost": ".cost_table",
    "prefill_flops": ".cost_formulas",
    "register": ".policies",
    "replay": ".replay",
    "replay_cluster": ".cluster",
    "replay_params": ".replay",
    "replay_tiers": ".tiers",
    "run_scenario": ".scenario",
    "check_scenario": ".scenario",
}
"""Public name -> the submodule that defines it (imported on first use)."""


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value  # later look-ups are plain attribute reads
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])


class _Package(types.ModuleType):
    """``replay`` is both a submodule and the function it defines. Importing the submodule sets
    the package attribute to the module; the package keeps the function there instead, as it
    did when it imported everything eagerly (``prefixsim.replay(...)`` works whatever was
    imported first)."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _LAZY and isinstance(value, types.ModuleType) and hasattr(value, name):
            value = getattr(value, name)
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


__all__ = [
    "BUNDLED_TRACES",
    "Ceiling",
    "Cluster",
    "ClusterResult",
    "HardwareProfile",
    "LRUCurve",
    "ModelProfile",
    "ParameterError",
    "PolicyParams",
    "PrefillCost",
    "PrefixSimError",
    "ReplayResult",
    "Scenario",
    "Semantics",
    "TieredResult",
    "Trace",
    "TraceError",
    "capacity_blocks",
    "ceiling",
    "check_scenario",
    "format_size",
    "get_policy",
    "hardware_names",
    "load_hardware",
    "load_model",
    "load_trace",
    "lru_curve",
    "make_params",
    "model_names",
    "oddities",
    "parse_size",
    "policy_names",
    "prefill_cost",
    "prefill_flops",
    "register",
    "replay",
    "replay_cluster",
    "replay_params",
    "replay_tiers",
    "run_scenario",
]
__version__ = "0.1.0"
