"""A replay's cost, vectorised over its requests: the per-request arrays and their exact totals.

:func:`prefill_cost` (one cache) and :func:`prefill_cost_tiers` (a hierarchy) give a
:class:`PrefillCost`: FLOPs, FLOPs saved and reused bytes per request (and per tier), with
hardware the ``est_`` seconds, and :meth:`PrefillCost.totals` from exact integer sums;
:func:`cost_report` is the cost keys of a replay's report (``python -m prefixsim --model``).
The formulas are :mod:`prefixsim.cost`'s, per request in :mod:`prefixsim.cost_formulas`, their
plain-Python references in :mod:`prefixsim.cost_reference`. The public names are re-exported
by :mod:`prefixsim.cost`, where users import them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ._exact import INT64_MAX, exact_sum
from .cost_bounds import _reuse_past_int64
from .cost_formulas import (
    _EXACT_PAIRS,
    _attention_coefficient,
    _check_tokens,
    break_even_bandwidth,
    prefill_flops,
    prefill_flops_saved,
    tier_reused_blocks,
)
from .errors import ParameterError
from .hardware import HardwareProfile
from .models import ModelProfile


@dataclass(frozen=True, eq=False)
class PrefillCost:
    """Per-request prefill work (and, with hardware, estimated time) of one replay.

    Arrays are per request in trace order; the ``est_`` ones are None without hardware.
    """

    prefill_flops: np.ndarray
    """float64: FLOPs with no cache, ``flops(n, 0)``."""
    prefill_flops_saved: np.ndarray
    """float64: ``flops(n, 0) - flops(n, h)``."""
    reused_bytes: np.ndarray
    """int64: ``ceil(h / block_size) * kv_bytes_per_block``."""
    kv_bytes_per_block: int
    total_flops: int
    """Exact sum of ``flops(n, 0)`` over requests (a Python int: it can pass int64)."""
    total_flops_saved: int
    """Exact sum of ``flops(n, 0) - flops(n, h)`` over requests."""
    total_reused_bytes: int
    """Exact sum of :attr:`reused_bytes`."""
    est_prefill_seconds_no_cache: np.ndarray | None = None
    est_prefill_seconds: np.ndarray | None = None
    """Compute of the uncached part plus transfer of the reused blocks."""
    est_ttft_saved_seconds: np.ndarray | None = None
    est_break_even_bandwidth: float | None = None
    """Bytes/s below which loading a prompt's first block costs more than recomputing it."""
    effective_flops: float | None = None
    bandwidth: float | None = None
    """The tier's bandwidth (bytes/s) of a single cache; None for several tiers."""
    tier_reused_bytes: np.ndarray | None = None
    """int64 ``[tier, request]``: ``ceil(h[t] / block_size) * kv_bytes_per_block``; sums over
    tiers to :attr:`reused_bytes`."""
    tier_total_reused_bytes: tuple[int, ...] = ()
    """Exact sum over requests of each tier's reused bytes."""
    tier_bandwidths: tuple[float, ...] | None = None
    """Bytes/s from each tier's medium to the GPU (with hardware)."""

    def totals(self) -> dict[str, float | int | None]:
        """Sums over requests: FLOPs from the exact integer totals (one rounding to float64),
        bytes exact, and the est_ seconds from the same exact totals (the estimates are linear
        in FLOPs and bytes, so their sums need no float summation)."""
        out: dict[str, float | int | None] = {
            "prefill_flops": float(self.total_flops),
            "prefill_flops_saved": float(self.total_flops_saved),
            "reused_bytes": self.total_reused_bytes,
            "est_prefill_seconds_no_cache": None,
            "est_prefill_seconds": None,
            "est_ttft_saved_seconds": None,
            "est_break_even_bandwidth": self.est_break_even_bandwidth,
        }
        if self.effective_flops is not None and self.tier_bandwidths is not None:
            # one transfer term per tier, in tier order (one tier: total / bandwidth, as ever)
            transfer = 0.0
            for total, bandwidth in zip(
                self.tier_total_reused_bytes, self.tier_bandwidths, strict=True
            ):
                transfer += total / bandwidth
            done = self.total_flops - self.total_flops_saved
            out["est_prefill_seconds_no_cache"] = self.total_flops / self.effective_flops
            out["est_prefill_seconds"] = done / self.effective_flops + transfer
            out["est_ttft_saved_seconds"] = self.total_flops_saved / self.effective_flops - transfer
        return out


def _exact_sum(a: np.ndarray, name: str, limit: int | None = INT64_MAX) -> int:
    """Exact sum of an int64 array (:func:`prefixsim._exact.exact_sum`: no wrap-around); past
    ``limit`` it is a :class:`ParameterError` naming ``name``."""
    total = exact_sum(a)
    if limit is not None and total > limit:
        raise ParameterError(name, total, "total past int64; use a smaller trace")
    return total


def _exact_pair_sum(a: np.ndarray, name: str) -> int:
    """Exact ``sum(a * (a + 1))`` of non-negative int64 values (a Python int): numpy for the
    values up to ``2**31``, Python integers for the longer ones."""
    big = a > _EXACT_PAIRS
    if not big.any():
        return _exact_sum(a * (a + 1), name, None)
    small = np.where(big, 0, a)
    return _exact_sum(small * (small + 1), name, None) + sum(x * (x + 1) for x in a[big].tolist())


def prefill_cost(
    model: ModelProfile,
    prompt_tokens: np.ndarray,
    hit_tokens: np.ndarray,
    block_size: int,
    hardware: HardwareProfile | None = None,
    tier: str = "hbm",
) -> PrefillCost:
    """Per-request prefill FLOPs, FLOPs saved and reused bytes, and with ``hardware`` the
    estimated prefill time with and without the cache kept in ``tier`` (vectorised): the
    one-tier case of :func:`prefill_cost_tiers`."""
    if hardware is not None:
        hardware.tier_bandwidth(tier)  # an unknown tier names cache_tier
    h = np.asarray(hit_tokens, dtype=np.int64)
    if h.shape != np.shape(prompt_tokens):  # the error names hit_tokens, not the tiers
        _check_tokens(np.asarray(prompt_tokens, dtype=np.int64), h)
    return prefill_cost_tiers(model, prompt_tokens, h.reshape(1, -1), block_size, hardware, [tier])


def _tier_bandwidths(hardware: HardwareProfile, media: Sequence[str | None]) -> list[float]:
    """Bytes/s of each tier's medium; a tier without one, or one the hardware lacks, is a
    :class:`ParameterError` naming ``tiers[t].medium``."""
    out = []
    for t, medium in enumerate(media):
        if medium is None:
            raise ParameterError(
                f"tiers[{t}].medium",
                None,
                "needed for the est_ transfer time (hbm, dram_pcie, rdma or nvme)",
            )
        try:
            out.append(hardware.tier_bandwidth(medium))
        except ParameterError as err:
            raise ParameterError(f"tiers[{t}].medium", medium, err.allowed) from None
    return out


def prefill_cost_tiers(
    model: ModelProfile,
    prompt_tokens: np.ndarray,
    tier_hit_tokens: np.ndarray,
    block_size: int,
    hardware: HardwareProfile | None = None,
    media: Sequence[str | None] = (),
) -> PrefillCost:
    """:func:`prefill_cost` of a hierarchy (vectorised): ``tier_hit_tokens`` is int64
    ``[tier, request]`` (``TieredResult.tier_hit_tokens``), ``media`` each tier's medium
    (fastest first; needed with ``hardware`` only). FLOPs come from the hit tokens summed over
    tiers; each tier's reused blocks are charged at its medium's bandwidth."""
    n = np.asarray(prompt_tokens, dtype=np.int64)
    per_tier = np.asarray(tier_hit_tokens, dtype=np.int64)
    if per_tier.ndim != 2 or per_tier.shape[1] != n.shape[0] or per_tier.shape[0] < 1:
        raise ParameterError(
            "tier_hit_tokens",
            f"shape {per_tier.shape}",
            f"expected [tier, request] with {n.shape[0]} requests and at least one tier",
        )
    if hardware is not None and len(media) != per_tier.shape[0]:
        raise ParameterError("media", list(media), f"expected one per tier ({per_tier.shape[0]})")
    one = per_tier.shape[0] == 1  # a single cache: no sums over tiers (prefill_cost's speed)
    if not one:
        for t in range(per_tier.shape[0]):
            _check_tokens(n, per_tier[t])  # each tier within [0, n]: the sum cannot wrap
    h = per_tier[0] if one else per_tier.sum(axis=0)  # checked against n by prefill_flops
    per_block = model.kv_bytes_per_block(block_size)
    full = prefill_flops(model, n)
    done = prefill_flops(model, n, h)
    saved = prefill_flops_saved(model, n, h)  # from h, not full - done (they cancel)
    blocks = tier_reused_blocks(per_tier, block_size)
    # the tiers' blocks of a request sum to ceil(h / block_size) <= ceil(n / block_size)
    total_blocks = blocks[0] if one else blocks.sum(axis=0)
    if len(n) and int(total_blocks.max()) > INT64_MAX // per_block:
        r = int(np.argmax(total_blocks))
        raise _reuse_past_int64(model, block_size, f"prompt_tokens[{r}]", int(n[r]))
    tier_reused = blocks * np.int64(per_block)
    reused = tier_reused[0] if one else total_blocks * np.int64(per_block)
    total_reused = exact_sum(reused)
    if total_reused > INT64_MAX:
        raise _reuse_past_int64(model, block_size, "prompt_tokens", f"{len(n)} requests")
    # exact totals: flops(n, 0) - flops(n, h) = 2 P h + c (h (h + 1)), summed in integers
    coeff = _attention_coefficient(model)
    total_full = 2 * model.active_params * _exact_sum(n, "prompt_tokens", None) + coeff * (
        _exact_pair_sum(n, "prompt_tokens")
    )
    total_saved = 2 * model.active_params * _exact_sum(h, "hit_tokens", None) + coeff * (
        _exact_pair_sum(h, "hit_tokens")
    )
    if model.reuse_flops_per_token():  # the reused tokens' up-projection is not saved
        reused_of_computed = np.where(h < n, h, 0)
        total_saved -= model.reuse_flops_per_token() * _exact_sum(
            reused_of_computed, "hit_tokens", None
        )
    common = {
        "prefill_flops": full,
        "prefill_flops_saved": saved,
        "reused_bytes": reused,
        "kv_bytes_per_block": per_block,
        "total_flops": total_full,
        "total_flops_saved": total_saved,
        "total_reused_bytes": total_reused,
        "tier_reused_bytes": tier_reused,
        "tier_total_reused_bytes": (
            (total_reused,) if one else tuple(_exact_sum(r, "reused_bytes") for r in tier_reused)
        ),
    }
    if hardware is None:
        return PrefillCost(**common)
    eff = hardware.effective_flops
    bandwidths = _tier_bandwidths(hardware, media)
    no_cache = full / eff
    with_cache = done / eff
    transfer = np.zeros(len(n), dtype=np.float64)
    for row, bandwidth in zip(tier_reused, bandwidths, strict=True):
        load = row.astype(np.float64) / bandwidth
        with_cache = with_cache + load  # tier order, as totals()
        transfer = transfer + load
    return PrefillCost(
        **common,
        est_prefill_seconds_no_cache=no_cache,
        est_prefill_seconds=with_cache,
        # the saved compute less the transfer, as totals(): no_cache - with_cache would be the
        # difference of two near-equal times of a long prompt
        est_ttft_saved_seconds=saved / eff - transfer,
        est_break_even_bandwidth=break_even_bandwidth(model, hardware, block_size),
        effective_flops=eff,
        bandwidth=bandwidths[0] if len(bandwidths) == 1 else None,
        tier_bandwidths=tuple(bandwidths),
    )


def cost_report(
    model: ModelProfile,
    prompt_tokens: np.ndarray,
    hit_tokens: np.ndarray,
    block_size: int,
    capacity: int,
    *,
    cache_bytes: int | None = None,
    hardware: HardwareProfile | None = None,
    tier: str = "hbm",
) -> tuple[dict[str, object], PrefillCost]:
    """The cost keys of a replay's report (``python -m prefixsim --model``): the model's bytes,
    the cache in bytes (``cache_bytes``, else ``capacity * kv_bytes_per_block``) and the totals
    of :class:`PrefillCost`; and the per-request cost itself."""
    cost = prefill_cost(model, prompt_tokens, hit_tokens, block_size, hardware, tier)
    report: dict[str, object] = {
        "model": model.name,
        "kv_dtype": model.kv_dtype,
        "kv_bytes_per_block": cost.kv_bytes_per_block,
        "cache_bytes": capacity * cost.kv_bytes_per_block if cache_bytes is None else cache_bytes,
    }
    totals = cost.totals()
    if hardware is None:
        totals = {k: v for k, v in totals.items() if not k.startswith("est_")}
    else:
        report.update(hardware=hardware.name, cache_tier=tier)
    report.update(totals)
    return report, cost
