"""Eviction policies, registered by name. Importing this package registers the built-ins."""

from . import lru, s3fifo
from .base import (
    COMMON_COUNTERS,
    PolicyParams,
    PolicySpec,
    ReferencePolicy,
    get_policy,
    policy_names,
    register,
)
from .lru import LRUParams
from .s3fifo import S3FIFOParams

__all__ = [
    "COMMON_COUNTERS",
    "LRUParams",
    "PolicyParams",
    "PolicySpec",
    "ReferencePolicy",
    "S3FIFOParams",
    "get_policy",
    "lru",
    "policy_names",
    "register",
    "s3fifo",
]
