"""The load model of a cluster (``docs/cluster.md``): prefill time and FCFS queues.

:class:`LoadModel` turns a model profile, a hardware profile, the cache tier and the decode
time per output token into the few float constants the per-request formulas need
(:func:`prefixsim.cost.prefill_constants`). The prefill time is the cost model's own,
:func:`prefixsim.cost.prefill_seconds` (``prefill_cost``'s formula for one request, as a compiled
scalar function, the latent-attention up-projection included), so that the reference (its
``py_func``), the kernels and the cost model run the same operations in the same order and
agree to the bit; ``tests/test_cluster.py`` holds it equal to ``prefill_cost``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numba import njit

from .. import cost
from .._exact import INT64_MAX
from ..cost import prefill_constants, prefill_seconds
from ..engine.build import compiled
from ..errors import ParameterError
from ..hardware import HardwareProfile, load_hardware
from ..models import ModelProfile, load_model
from ..policies.base import ix

MAX_PROMPT_TOKENS = 2**31
"""Above this, ``n * (n + 1)`` no longer fits int64 (the same bound as ``prefill_flops``)."""


MAX_DECODE = 1e9
"""Largest ``decode_seconds_per_token``: ``output_length * decode_seconds_per_token`` and the
queues' sums of it stay finite for any int64 ``output_length`` (``1e308`` passed planning and
made the service times ``Infinity``)."""


@dataclass(frozen=True)
class LoadModel:
    """What the load model needs: the model, the GPU, where the cache is kept, and the decode
    time per output token (0: prefill only)."""

    model: ModelProfile
    hardware: HardwareProfile
    cache_tier: str = "hbm"
    decode_seconds_per_token: float = 0.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "model", load_model(self.model, key="model"))
        object.__setattr__(self, "hardware", load_hardware(self.hardware))
        self.hardware.tier_bandwidth(self.cache_tier)  # an unknown tier names cache_tier
        d = self.decode_seconds_per_token
        if isinstance(d, bool) or not isinstance(d, int | float) or not 0 <= d <= MAX_DECODE:
            raise ParameterError(
                "decode_seconds_per_token", d, f"expected seconds in [0, {MAX_DECODE:g}]"
            )
        object.__setattr__(self, "decode_seconds_per_token", float(d))

    def constants(self, block_size: int) -> tuple[int, float, float, float, float, int, float]:
        """The trailing arguments of :func:`~prefixsim.cost.prefill_seconds` for
        ``block_size`` (:func:`~prefixsim.cost.prefill_constants`)."""
        return prefill_constants(self.model, self.hardware, self.cache_tier, block_size)

    def check_trace(self, input_lengths: np.ndarray, block_size: int) -> None:
        """Refuse prompts whose int64 intermediates could overflow (never a wrong number)."""
        if len(input_lengths) == 0:
            return
        n = int(input_lengths.max())
        if n > MAX_PROMPT_TOKENS:
            raise ParameterError("input_length", n, f"expected at most {MAX_PROMPT_TOKENS}")
        blocks = -(-n // block_size)
        if blocks * self.model.kv_bytes_per_block(block_size) > INT64_MAX:
            raise ParameterError("input_length", n, "its reused bytes pass int64")

    def to_dict(self) -> dict[str, object]:
        return {
            "model": self.model.name,
            "hardware": self.hardware.name,
            "cache_tier": self.cache_tier,
            "decode_seconds_per_token": self.decode_seconds_per_token,
        }


@njit(inline="always")
def serve_fcfs(r, i, t, p, out_len, decode_s, free, delay, prefill, service):
    """Request ``r``, arriving at ``t`` with prefill time ``p`` and ``out_len`` output tokens,
    queued first come first served on instance ``i``: its delay, prefill and service seconds,
    and the moment ``i`` is free again. The one FCFS rule of the static routers' queue (below)
    and the load-aware routers' driver (``cluster.driver``, whose disk-cache stamp names this
    file)."""
    begin_at = free[ix(i)] if free[ix(i)] > t else t
    delay[ix(r)] = begin_at - t
    prefill[ix(r)] = p
    service[ix(r)] = p + float(out_len) * decode_s
    free[ix(i)] = begin_at + service[ix(r)]


def _fcfs_template(stamp: str) -> Any:
    def fcfs_queue(arrival, instance, prompt, hits, out_len, decode_s, consts, free, delay,
                   prefill, service):  # fmt: skip
        stamp  # noqa: B018 (the disk cache's key, see prefixsim.engine.build)
        # Unsigned subscripts (``a[ix(i)]``, :data:`~prefixsim.policies.base.ix`): request
        # numbers and instance numbers (a router's choice, ``0 .. n_instances-1``) are never
        # negative.
        bs, two_p, coeff, reuse, eff, kvb, bw = consts
        for r in range(arrival.shape[0]):
            i = instance[ix(r)]
            t = arrival[ix(r)]
            p = prefill_seconds(prompt[ix(r)], hits[ix(r)], bs, two_p, coeff, reuse, eff, kvb, bw)
            serve_fcfs(r, i, t, p, out_len[ix(r)], decode_s, free, delay, prefill, service)

    return fcfs_queue


def fcfs_kernel(
    arrival: np.ndarray,
    instance: np.ndarray,
    prompt: np.ndarray,
    hits: np.ndarray,
    out_len: np.ndarray,
    n_instances: int,
    decode_s: float,
    consts: tuple[Any, ...],
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Queueing delay and prefill time per request, and each instance's ``free`` moment, for
    requests served first come first served in trace order on their instance.

    Compiled by :func:`prefixsim.engine.build.compiled`, as the drivers are, so that its disk
    cache is keyed by cost.py too: numba checks only the compiled function's own file, and an
    edit of :func:`~prefixsim.cost.prefill_seconds` alone would otherwise leave a stale queue."""
    n_requests = arrival.shape[0]
    free = np.full(n_instances, -np.inf)  # idle until given work (timestamps may be < 0)
    delay = np.empty(n_requests, np.float64)
    prefill = np.empty(n_requests, np.float64)
    service = np.empty(n_requests, np.float64)
    queue = compiled(_fcfs_template, ("fcfs",), dict, lambda: [cost.__file__])
    queue(arrival, instance, prompt, hits, out_len, decode_s, consts, free, delay, prefill, service)
    return delay, prefill, service


@njit(cache=True)
def split_subtraces(block_ids, offsets, instance, n_instances, n_blocks):
    """Each instance's sub-trace, for the single-cache kernels: its requests (``rows``, in
    trace order), their blocks renumbered ``0 .. n_local-1`` in order of first appearance in
    the sub-trace (a bijection, so no hit changes; and each kernel allocates state for the
    sub-trace's blocks only, not the whole trace's), and their offsets. Instance ``i`` owns
    ``rows[req_start[i]:req_start[i+1]]``, ``blocks[acc_start[i]:acc_start[i+1]]`` and
    ``offsets[req_start[i]+i : req_start[i+1]+i+1]``."""
    # Unsigned subscripts (``a[ix(i)]``): request, instance, block and access numbers and the
    # prefix sums of counts are never negative.
    n_requests = instance.shape[0]
    req_start = np.zeros(n_instances + 1, np.int64)
    acc_start = np.zeros(n_instances + 1, np.int64)
    for r in range(n_requests):
        req_start[ix(instance[ix(r)] + 1)] += 1
        acc_start[ix(instance[ix(r)] + 1)] += offsets[ix(r + 1)] - offsets[ix(r)]
    for i in range(n_instances):
        req_start[ix(i + 1)] += req_start[ix(i)]
        acc_start[ix(i + 1)] += acc_start[ix(i)]
    rows = np.empty(n_requests, np.int64)
    fill = req_start[:-1].copy()
    for r in range(n_requests):
        q = instance[ix(r)]
        rows[ix(fill[ix(q)])] = r
        fill[ix(q)] += 1
    blocks = np.empty(block_ids.shape[0], np.int32)
    sub_offsets = np.empty(n_requests + n_instances, np.int64)
    n_local = np.zeros(n_instances, np.int64)
    # stamp[b] = (i + 1) * 2**32 + local id of b in instance i, for the last instance i that
    # met b (0: none yet): one array, so one cache miss per access, and zeros cost nothing.
    stamp = np.zeros(n_blocks, np.int64)
    for i in range(n_instances):
        pos = acc_start[ix(i)]
        base = pos
        count = 0
        mine = np.int64(i + 1) << 32
        sub_offsets[ix(req_start[ix(i)] + i)] = 0
        for j in range(req_start[ix(i)], req_start[ix(i + 1)]):
            r = rows[ix(j)]
            for k in range(offsets[ix(r)], offsets[ix(r + 1)]):
                b = block_ids[ix(k)]
                s = stamp[ix(b)]
                if s >> 32 != i + 1:
                    s = mine + count
                    stamp[ix(b)] = s
                    count += 1
                blocks[ix(pos)] = s & 0xFFFFFFFF
                pos += 1
            sub_offsets[ix(j + i + 1)] = pos - base
        n_local[ix(i)] = count
    return rows, blocks, sub_offsets, req_start, acc_start, n_local
