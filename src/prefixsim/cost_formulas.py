"""One request's prefill work, per request and vectorised: FLOPs, FLOPs saved, reused blocks.

The formulas are :mod:`prefixsim.cost`'s (its docstring states them, ``docs/cost-model.md``
derives them): :func:`prefill_flops` (float64 per request, for any prompt of up to
``2**63 - 1`` tokens), :func:`prefill_flops_saved` (from the hit tokens alone, never as a
difference of two near-equal floats), :func:`reused_blocks` and :func:`tier_reused_blocks` (the
blocks a request loads, per tier), and a block's economics: :func:`block_recompute_flops`
(exact ints), :func:`break_even_bandwidth` and :func:`break_even_block`. The private helpers
(the attention coefficient, the token checks, ``n*(n+1) - h*(h+1)`` in float64) serve
:mod:`prefixsim.cost_table` and :func:`prefixsim.cost.prefill_constants` too. The public names
are re-exported by :mod:`prefixsim.cost`, where users import them.
"""

from __future__ import annotations

import math

import numpy as np

from .errors import ParameterError
from .hardware import HardwareProfile
from .models import ModelProfile


def _attention_coefficient(model: ModelProfile) -> int:
    """FLOPs per unit of ``n*(n+1) - h*(h+1)``: ``layers * heads * (head_dim + value_dim)``."""
    return model.layers * model.attention_heads * (model.head_dim + model.value_dim)


def _check_tokens(prompt: np.ndarray, hits: np.ndarray) -> None:
    if prompt.shape != hits.shape:
        raise ParameterError(
            "hit_tokens",
            f"shape {hits.shape}",
            f"expected the shape of prompt_tokens {prompt.shape}",
        )
    if len(prompt) and (int(hits.min()) < 0 or bool(np.any(hits > prompt))):
        bad = int(np.flatnonzero((hits < 0) | (hits > prompt))[0])
        raise ParameterError(
            f"hit_tokens[{bad}]",
            int(hits[bad]),
            f"expected 0 <= hit_tokens <= prompt_tokens ({int(prompt[bad])})",
        )


def prefill_flops(
    model: ModelProfile, prompt_tokens: np.ndarray, hit_tokens: np.ndarray | None = None
) -> np.ndarray:
    """Prefill FLOPs per request (float64) with ``hit_tokens`` reused (none if None)."""
    n = np.asarray(prompt_tokens, dtype=np.int64)
    h = np.zeros_like(n) if hit_tokens is None else np.asarray(hit_tokens, dtype=np.int64)
    _check_tokens(n, h)
    pairs = _pairs(n, h)
    dense = (n - h).astype(np.float64) * float(2 * model.active_params)
    flops = dense + pairs * float(_attention_coefficient(model))
    reuse = model.reuse_flops_per_token()
    if reuse:
        flops += np.where(h < n, h, 0).astype(np.float64) * float(reuse)
    return flops


_EXACT_PAIRS = 2**31
"""Up to this many prompt tokens, ``n*(n+1)`` is exact in int64 (the cluster's kernels compute
it so too, and agree with this module to the bit)."""


def _pairs(n: np.ndarray, h: np.ndarray) -> np.ndarray:
    """``n*(n+1) - h*(h+1)`` per request, float64, for any ``0 <= h <= n <= 2**63 - 1``.

    Exact in int64 then rounded once for ``n <= 2**31``; beyond, as ``(n - h) * (n + h + 1)``
    (the same number): ``n - h`` is exact in int64 and ``n + h + 1 <= 2**64 - 1`` in uint64, so
    each factor is rounded once and the product once more (relative error below ``4 * 2**-53``;
    with the dense term the FLOPs stay within 1e-15 of the exact count)."""
    if not len(n) or int(n.max()) <= _EXACT_PAIRS:
        return (n * (n + 1) - h * (h + 1)).astype(np.float64)
    big = n > _EXACT_PAIRS
    small = np.where(big, 0, n)
    small_h = np.where(big, 0, h)
    exact = (small * (small + 1) - small_h * (small_h + 1)).astype(np.float64)
    span = n.astype(np.uint64) + h.astype(np.uint64) + np.uint64(1)
    wide = (n - h).astype(np.float64) * span.astype(np.float64)
    return np.where(big, wide, exact)


def prefill_flops_saved(
    model: ModelProfile, prompt_tokens: np.ndarray, hit_tokens: np.ndarray
) -> np.ndarray:
    """FLOPs each request's ``hit_tokens`` save (float64): ``flops(n, 0) - flops(n, h)``,
    computed from ``h`` alone, never as that difference (two near-equal floats of a long
    prompt: 2**50 tokens with 1,024 hit cancel to 0.0). It is the closed form the totals sum::

        saved(n, h) = 2 * active_params * h + c * h * (h + 1) - (h < n) * reuse * h
                    = h * a + c * h * (h + 1),   a = 2 * active_params - (h < n) * reuse

    (``c`` the attention coefficient, ``reuse`` the up-projection of a reused token, paid only
    when something is computed: under the engines' rules always, since they recompute the
    last token). With ``a >= 0`` both terms are non-negative, so each product and their sum
    round a few times at most (relative error below 1e-15 of the saved amount itself); a
    profile whose up-projection outweighs a token's dense work (``a < 0``) is computed in
    Python integers for the requests that pay it, then rounded once."""
    n = np.asarray(prompt_tokens, dtype=np.int64)
    h = np.asarray(hit_tokens, dtype=np.int64)
    _check_tokens(n, h)
    dense = 2 * model.active_params
    coeff = _attention_coefficient(model)
    reuse = model.reuse_flops_per_token()
    pairs = _pairs(h, np.zeros_like(h))  # h * (h + 1), exact or within 4 roundings
    computed = h < n
    a = np.where(computed, float(dense - reuse), float(dense))
    saved = h.astype(np.float64) * a + pairs * float(coeff)
    if dense - reuse < 0 and computed.any():
        rows = np.flatnonzero(computed)
        saved[rows] = [float(x * (dense - reuse) + coeff * x * (x + 1)) for x in h[rows].tolist()]
    return saved


def reused_blocks(hit_tokens: np.ndarray, block_size: int) -> np.ndarray:
    """Blocks a request loads from the cache: ``ceil(hit_tokens / block_size)`` (int64). A hit
    clamped to a prompt that ends inside a block still loads that whole block."""
    h = np.asarray(hit_tokens, dtype=np.int64)
    return -(-h // int(block_size))


def tier_reused_blocks(tier_hit_tokens: np.ndarray, block_size: int) -> np.ndarray:
    """Blocks each request loads from each tier: ``ceil(tier_hit_tokens[t, r] / block_size)``
    (int64 ``[tier, request]``). Their sum over tiers is ``ceil(hit_tokens / block_size)``
    because only a request's last reused block can be partial, so at most one tier per request
    holds a number of tokens that is not a multiple of ``block_size``; input with two such tiers
    (which no replay gives) is a :class:`ParameterError`."""
    t = np.asarray(tier_hit_tokens, dtype=np.int64)
    b = int(block_size)
    if t.ndim != 2:
        raise ParameterError("tier_hit_tokens", f"shape {t.shape}", "expected [tier, request]")
    if t.shape[0] < 2:  # one tier cannot hold two partial blocks of a request
        return -(-t // b)
    partial = (t % b != 0).sum(axis=0)
    if t.size and int(partial.max()) > 1:
        r = int(np.flatnonzero(partial > 1)[0])
        raise ParameterError(
            f"tier_hit_tokens[:, {r}]",
            t[:, r].tolist(),
            f"a partial block (not a multiple of block_size={b}) in more than one tier; only "
            "the last reused block can be partial",
        )
    return -(-t // b)


def block_recompute_flops(model: ModelProfile, block_size: int, block_index: int = 0) -> int:
    """Exact FLOPs to recompute block ``block_index`` of a prompt (its tokens
    ``block_index * block_size .. (block_index + 1) * block_size - 1``) given the earlier ones."""
    h = block_index * block_size
    n = h + block_size
    return 2 * model.active_params * block_size + _attention_coefficient(model) * (
        n * (n + 1) - h * (h + 1)
    )


def _reuse_gain_flops(model: ModelProfile, block_size: int, block_index: int) -> int:
    """FLOPs that reusing block ``block_index`` saves: its recompute, less the up-projection of
    its tokens (MLA with ``reuse_up_projection``), which reuse costs instead."""
    gain = block_recompute_flops(model, block_size, block_index)
    gain -= model.reuse_flops_per_token() * block_size
    if gain <= 0:
        raise ParameterError(
            "model.reuse_up_projection",
            True,
            f"up-projecting a reused block of {model.name} costs at least its recompute",
        )
    return gain


def break_even_bandwidth(
    model: ModelProfile, hardware: HardwareProfile, block_size: int, block_index: int = 0
) -> float:
    """Bytes/s below which loading block ``block_index`` costs more than recomputing it (block
    0, the default, is the cheapest to recompute: the largest break-even bandwidth). Reusing a
    block also costs its tokens' up-projection with ``reuse_up_projection``."""
    gain_seconds = _reuse_gain_flops(model, block_size, block_index) / hardware.effective_flops
    return model.kv_bytes_per_block(block_size) / gain_seconds


def break_even_block(
    model: ModelProfile, hardware: HardwareProfile, block_size: int, tier: str
) -> int:
    """The first block index from which loading a block from ``tier`` is no slower than
    recomputing it (0: loading always wins). Recompute cost grows linearly with the index."""
    eff = hardware.effective_flops
    up = model.reuse_flops_per_token() * block_size  # reuse costs it on top of the transfer
    load = model.kv_bytes_per_block(block_size) / hardware.tier_bandwidth(tier) + up / eff
    c = _attention_coefficient(model)
    # recompute(j) = (2 P b + c (b^2 (2 j + 1) + b)) / eff >= load  <=>  j >= x
    x = (
        (load * eff - 2 * model.active_params * block_size - c * block_size) / (c * block_size**2)
        - 1
    ) / 2
    j = max(0, math.ceil(x))
    while j > 0 and block_recompute_flops(model, block_size, j - 1) / eff >= load:
        j -= 1  # guard the float rounding of x
    while block_recompute_flops(model, block_size, j) / eff < load:
        j += 1
    return j
