"""prefixsim: exact block-level KV-cache prefix-caching simulation.

>>> from prefixsim import load_trace, replay
>>> result = replay(load_trace("conversation"), policy="S3FIFO", capacity=4096)
>>> result.overall_hit_rate  # doctest: +SKIP
"""

from .errors import ParameterError, PrefixSimError, TraceError
from .lru_curve import Ceiling, LRUCurve, ceiling, lru_curve
from .policies import PolicyParams, get_policy, policy_names, register
from .replay import ReplayResult, make_params, replay, replay_params
from .tiers import TieredResult, replay_tiers
from .trace import BUNDLED_TRACES, Trace, load_trace, oddities

__all__ = [
    "BUNDLED_TRACES",
    "Ceiling",
    "LRUCurve",
    "ParameterError",
    "PolicyParams",
    "PrefixSimError",
    "ReplayResult",
    "TieredResult",
    "Trace",
    "TraceError",
    "ceiling",
    "get_policy",
    "load_trace",
    "lru_curve",
    "make_params",
    "oddities",
    "policy_names",
    "register",
    "replay",
    "replay_params",
    "replay_tiers",
]
__version__ = "0.1.0"
