"""prefixsim: exact block-level KV-cache prefix-caching simulation.

>>> from prefixsim import load_trace, replay
>>> result = replay(load_trace("conversation"), policy="S3FIFO", capacity=4096)
>>> result.overall_hit_rate  # doctest: +SKIP
"""

from .cluster import ClusterResult, replay_cluster
from .cost import PrefillCost, capacity_blocks, prefill_cost, prefill_flops
from .errors import ParameterError, PrefixSimError, TraceError
from .hardware import HardwareProfile, hardware_names, load_hardware
from .lru_curve import Ceiling, LRUCurve, ceiling, lru_curve
from .models import ModelProfile, load_model, model_names
from .policies import PolicyParams, get_policy, policy_names, register
from .replay import ReplayResult, make_params, replay, replay_params
from .tiers import TieredResult, replay_tiers
from .trace import BUNDLED_TRACES, Trace, load_trace, oddities
from .units import format_size, parse_size

__all__ = [
    "BUNDLED_TRACES",
    "Ceiling",
    "ClusterResult",
    "HardwareProfile",
    "LRUCurve",
    "ModelProfile",
    "ParameterError",
    "PolicyParams",
    "PrefillCost",
    "PrefixSimError",
    "ReplayResult",
    "TieredResult",
    "Trace",
    "TraceError",
    "capacity_blocks",
    "ceiling",
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
]
__version__ = "0.1.0"
