"""Eviction policies, registered by name. Importing this package registers the built-ins."""

from . import (
    arc,
    belady,
    clock,
    fifo,
    lfu,
    lru,
    lru_leaf,
    lru_tail_first,
    radix,
    s3fifo,
    s3fifo_lcs,
    s3fifo_leaf,
    sieve,
)
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

__all__ = [  # the policy modules too: importing them registers the built-in policies
    "COMMON_COUNTERS",
    "LRUParams",
    "PolicyParams",
    "PolicySpec",
    "ReferencePolicy",
    "S3FIFOParams",
    "arc",
    "belady",
    "clock",
    "fifo",
    "get_policy",
    "lfu",
    "lru",
    "lru_leaf",
    "lru_tail_first",
    "policy_names",
    "radix",
    "register",
    "s3fifo",
    "s3fifo_lcs",
    "s3fifo_leaf",
    "sieve",
]
