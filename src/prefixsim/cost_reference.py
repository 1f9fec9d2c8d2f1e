"""The cost model in plain Python, one request at a time: the references the vectorised code is
tested against.

:func:`prefill_flops_reference` sums the FLOPs position by position (exact Python ints, readable
next to the formula in :mod:`prefixsim.cost`); :func:`prefill_cost_reference` and
:func:`prefill_cost_tiers_reference` are one request's :func:`prefixsim.cost_table.prefill_cost`
and :func:`~prefixsim.cost_table.prefill_cost_tiers` (exact ints, then one division). The public
names are re-exported by :mod:`prefixsim.cost`, where users import them.
"""

from __future__ import annotations

from collections.abc import Sequence

from .errors import ParameterError
from .hardware import HardwareProfile
from .models import ModelProfile


def prefill_flops_reference(model: ModelProfile, prompt_tokens: int, hit_tokens: int = 0) -> int:
    """Exact prefill FLOPs of one request with ``hit_tokens`` reused (the formula of
    :mod:`prefixsim.cost`, summed position by position, so that it stays readable next to the
    docs)."""
    n, h = int(prompt_tokens), int(hit_tokens)
    if not 0 <= h <= n:
        raise ParameterError("hit_tokens", h, f"expected 0 <= hit_tokens <= prompt_tokens ({n})")
    dense = 2 * model.active_params * (n - h)
    attention = 0
    per_pair = 2 * (model.head_dim + model.value_dim) * model.attention_heads * model.layers
    for i in range(h, n):  # computed position i attends to positions 0 .. i
        attention += per_pair * (i + 1)
    # MLA: attending to the reused positions needs their keys and values, up-projected from the
    # cached latents (only when a position is computed at all).
    reuse = model.reuse_flops_per_token() * h if h < n else 0
    return dense + attention + reuse


def prefill_cost_reference(
    model: ModelProfile,
    prompt_tokens: int,
    hit_tokens: int,
    block_size: int,
    hardware: HardwareProfile | None = None,
    tier: str = "hbm",
) -> dict[str, float | int]:
    """One request's :func:`prefill_cost`, in plain Python (exact ints, then one division)."""
    full = prefill_flops_reference(model, prompt_tokens, 0)
    done = prefill_flops_reference(model, prompt_tokens, hit_tokens)
    blocks = (hit_tokens + block_size - 1) // block_size
    out: dict[str, float | int] = {
        "prefill_flops": full,
        "prefill_flops_saved": full - done,
        "reused_bytes": blocks * model.kv_bytes_per_block(block_size),
    }
    if hardware is not None:
        eff = hardware.effective_flops
        transfer = out["reused_bytes"] / hardware.tier_bandwidth(tier)
        out["est_prefill_seconds_no_cache"] = full / eff
        out["est_prefill_seconds"] = done / eff + transfer
        # the exact saved FLOPs' time less the transfer (no difference of two long times)
        out["est_ttft_saved_seconds"] = (full - done) / eff - transfer
    return out


def prefill_cost_tiers_reference(
    model: ModelProfile,
    prompt_tokens: int,
    tier_hit_tokens: Sequence[int],
    block_size: int,
    hardware: HardwareProfile | None = None,
    media: Sequence[str | None] = (),
) -> dict[str, object]:
    """One request's :func:`prefill_cost_tiers`, in plain Python: ``tier_hit_tokens[t]`` are
    the hit tokens credited to tier ``t`` (fastest first), ``media[t]`` where its blocks live."""
    hit_tokens = sum(tier_hit_tokens)
    full = prefill_flops_reference(model, prompt_tokens, 0)
    done = prefill_flops_reference(model, prompt_tokens, hit_tokens)
    per_block = model.kv_bytes_per_block(block_size)
    # Tier t holds its full blocks (block_size tokens each) and, in at most one tier, the
    # request's partial last block: ceil counts that block once, in the tier that held it.
    partial_tiers = [t for t, tokens in enumerate(tier_hit_tokens) if tokens % block_size]
    if len(partial_tiers) > 1:
        raise ParameterError(
            "tier_hit_tokens", list(tier_hit_tokens), "a partial block in more than one tier"
        )
    tier_blocks = [(tokens + block_size - 1) // block_size for tokens in tier_hit_tokens]
    assert sum(tier_blocks) == (hit_tokens + block_size - 1) // block_size
    tier_bytes = [blocks * per_block for blocks in tier_blocks]
    out: dict[str, object] = {
        "prefill_flops": full,
        "prefill_flops_saved": full - done,
        "reused_bytes": sum(tier_bytes),
        "tier_reused_bytes": tier_bytes,
    }
    if hardware is not None:
        eff = hardware.effective_flops
        with_cache = done / eff
        transfer = 0.0
        for t, reused in enumerate(tier_bytes):  # one transfer per tier, at its medium's rate
            medium = media[t]
            if medium is None:
                raise ParameterError(f"tiers[{t}].medium", None, "needed for the est_ time")
            with_cache += reused / hardware.tier_bandwidth(medium)
            transfer += reused / hardware.tier_bandwidth(medium)
        out["est_prefill_seconds_no_cache"] = full / eff
        out["est_prefill_seconds"] = with_cache
        out["est_ttft_saved_seconds"] = (full - done) / eff - transfer
    return out
