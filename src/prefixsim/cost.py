"""Prefill work and estimated prefill time, with and without the reused prefix.

The one place the formulas live (``docs/cost-model.md`` derives them); the CLI, the sweep and
the figures all call these functions.

**FLOPs** of a request's prefill with ``n`` prompt tokens of which the first ``h`` are reused
from the cache (its ``hit_tokens``; ``0 <= h <= n``), so positions ``h .. n-1`` are computed::

    flops(n, h) = 2 * active_params * (n - h)
                + layers * attention_heads * (head_dim + value_dim) * (n*(n+1) - h*(h+1))
                + (h < n) * reuse_flops_per_token * h

The first term is the dense (weight) work: a multiply and an add per active parameter per
computed token. The second is causal attention: computed position ``i`` attends to the ``i + 1``
positions ``0 .. i``; per (query, key) pair, layer and query head, ``Q.K`` costs
``2 * head_dim`` and the weighted sum of values ``2 * value_dim``; summed over
``i = h .. n-1``, ``sum (i + 1) = (n*(n+1) - h*(h+1)) / 2``. The third, for a latent-attention
profile with ``reuse_up_projection`` (``ModelProfile.reuse_flops_per_token``), is the
up-projection of every reused token's latent to per-head keys and values that the
prefill's attention over the reused prefix needs (0 when nothing is computed). ``flops(n, 0)``
is the prefill with no cache; the work saved is ``flops(n, 0) - flops(n, h)``. Under the
specification's hit rule a fully cached prompt (``h == n``) costs 0 FLOPs; the engines' rule
(:mod:`prefixsim.semantics`) never reuses a prompt's last token, so its ``h`` leaves at least
that token (a whole block when the prompt ends on a block boundary) to compute.

**Estimated time** (a model, hence ``est_``), with a :class:`~prefixsim.hardware.HardwareProfile`
and the tier the cache is kept in::

    est_prefill_seconds(n, h) = flops(n, h) / effective_flops
                              + ceil(h / block_size) * kv_bytes_per_block / bandwidth[tier]
    est_ttft_saved_seconds    = est_prefill_seconds(n, 0) - est_prefill_seconds(n, h)

(negative when loading the reused blocks costs more than recomputing them). For a
hierarchy of tiers (:mod:`prefixsim.tiers`) the transfer term is one per tier, each at the
bandwidth of the medium the tier's blocks live in::

    est_prefill_seconds(n, h) = flops(n, h) / effective_flops
                              + sum over tiers t of ceil(h[t] / block_size) * kv_bytes_per_block
                                                    / bandwidth[medium[t]]

where ``h[t]`` are the hit tokens credited to tier ``t`` and ``h = sum h[t]``. This is the
single-tier rule split by tier, exactly: the reused blocks are the ``ceil(h / block_size)``
leading blocks, every one of them full except possibly the last (the clamp to the prompt), so
``h[t]`` is ``block_size`` times the full blocks found in ``t``, plus the partial block's
tokens in the one tier that held it; ``ceil`` per tier counts that partial block once, and the
per-tier counts sum to ``ceil(h / block_size)``. Input with a partial block in two tiers of one
request cannot come from a replay and is refused. :func:`prefill_cost` is this with one tier.
The
**break-even bandwidth** of a block is the bandwidth below which loading it costs more than
recomputing it: ``kv_bytes_per_block * effective_flops / flops_of_that_block``; the first
block of a prompt is the cheapest to recompute, so a tier faster than its break-even bandwidth
wins on every block.

Exactness: FLOPs per request are exact Python ints in :func:`prefill_flops_reference` and
float64 (relative error below 1e-15) in the vectorised :func:`prefill_flops`, for any prompt of
up to ``2**63 - 1`` tokens; totals over requests are exact Python ints (sums of ``n``,
``n*(n+1)``, ``h``, ``h*(h+1)`` in integers), rounded once to float64. Bytes and block counts
are exact ints (int64 per request, checked against overflow; totals as Python ints);
:func:`check_cost` refuses before a replay what could pass int64.

Finiteness: every float here is finite, by the bounds of the inputs rather than by checks of
the outputs (``docs/cost-model.md``, "Bounds"): the model's numbers and the products
:class:`~prefixsim.models.ModelProfile` checks are at most ``2**63 - 1``, so with prompts of at
most ``2**63 - 1`` tokens a FLOP count (one request's or a total) is below ``2**191``; the
hardware's rates are in ``[1, 1e30]``, ``mfu`` in ``[1e-6, 1]`` and ``n_gpus`` at most
``2**20``, so a time is below ``2**191 / 1e-6`` seconds and a break-even bandwidth below
``2**63 * 1.1e36`` bytes/s, all far below float64's ``1.8e308``.

Public names (stable): :func:`prefill_flops`, :func:`prefill_flops_reference`,
:func:`reused_blocks`, :func:`tier_reused_blocks`, :class:`PrefillCost`, :func:`prefill_cost`,
:func:`prefill_cost_reference`, :func:`prefill_cost_tiers`, :func:`prefill_cost_tiers_reference`,
:func:`block_recompute_flops`, :func:`break_even_bandwidth`, :func:`break_even_block`,
:func:`capacity_blocks`, :func:`check_cost`, :func:`prefill_seconds` (one request's estimated
prefill time as a compiled scalar function, for the cluster's load model) and
:func:`prefill_constants` (its arguments).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from numba import njit

from ._exact import INT64_MAX, exact_sum, first_running_total_over
from .errors import ParameterError, TraceError
from .hardware import HardwareProfile
from .models import ModelProfile

if TYPE_CHECKING:
    from .trace import Trace


def _attention_coefficient(model: ModelProfile) -> int:
    """FLOPs per unit of ``n*(n+1) - h*(h+1)``: ``layers * heads * (head_dim + value_dim)``."""
    return model.layers * model.attention_heads * (model.head_dim + model.value_dim)


def prefill_flops_reference(model: ModelProfile, prompt_tokens: int, hit_tokens: int = 0) -> int:
    """Exact prefill FLOPs of one request with ``hit_tokens`` reused (the formula above,
    summed position by position, so that it stays readable next to the docs)."""
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


def _exact_pair_sum(a: np.ndarray, name: str) -> int:
    """Exact ``sum(a * (a + 1))`` of non-negative int64 values (a Python int): numpy for the
    values up to ``2**31``, Python integers for the longer ones."""
    big = a > _EXACT_PAIRS
    if not big.any():
        return _exact_sum(a * (a + 1), name, None)
    small = np.where(big, 0, a)
    return _exact_sum(small * (small + 1), name, None) + sum(x * (x + 1) for x in a[big].tolist())


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


def _reuse_past_int64(
    model: ModelProfile, block_size: int, key: str, value: object
) -> ParameterError:
    per_block = model.kv_bytes_per_block(block_size)
    return ParameterError(
        key,
        value,
        f"the reused blocks (ceil(hit_tokens / block_size) per request) of {model.name} at "
        f"block_size={block_size} ({per_block} bytes each, the model's kv_bytes_per_block) "
        "would pass 2**63 - 1 bytes; use a smaller block_size, model or trace "
        "(prefixsim.cost.check_cost refuses such a trace before a replay)",
    )


def check_cost(
    model: ModelProfile,
    block_size: int,
    *,
    capacity: int | None = None,
    trace: Trace | None = None,
) -> int:
    """Refuse, before any replay, what would make a byte count of the cost model pass int64
    (the type of the bytes columns), naming the key or the trace line that causes it; returns
    ``kv_bytes_per_block``. Checked: one block (names ``block_size``), the cache of
    ``capacity`` blocks (names ``capacity``), and the bytes the trace's requests would reuse
    if every block hit: a request reuses at most ``ceil(input_length / block_size)`` blocks
    (its hit tokens are at most its prompt) and at most ``len(hash_ids)`` (a hit is a run of
    its blocks), so ``sum(min(...)) * kv_bytes_per_block`` (names the trace file, the line where
    the running total passes 2**63 - 1 and ``input_length``): so no total can fail after the
    replay, whatever it hits. The CLI runs it before replaying, the sweep's planning for each
    trace and block size of a grid with a model (:func:`sweep.engine_checks.check_with_engine`),
    so both refuse the same traces."""
    per_block = model.kv_bytes_per_block(block_size)
    if capacity is not None and capacity * per_block > INT64_MAX:
        raise ParameterError(
            "capacity",
            capacity,
            f"{capacity} blocks of {per_block} bytes ({model.name} at block_size={block_size}) "
            f"pass 2**63 - 1 bytes: at most {INT64_MAX // per_block} blocks",
        )
    if trace is not None and trace.n_requests:
        blocks = np.minimum(-(-trace.input_lengths // block_size), np.diff(trace.offsets))
        if exact_sum(blocks) > INT64_MAX // per_block:
            i = first_running_total_over(blocks, INT64_MAX // per_block)
            line = None if i is None else int(trace.line_numbers[i])
            raise TraceError(
                trace.name,
                f"with {model.name} at block_size={block_size} ({per_block} bytes per block) "
                "the requests up to this line could reuse more than 2**63 - 1 bytes of KV "
                "cache (their blocks, if every one hit); use a smaller block_size, model or "
                "trace",
                line=line,
                field="input_length",
            )
    return per_block


def capacity_blocks(
    cache_bytes: int, model: ModelProfile, block_size: int, key: str = "cache_size"
) -> int:
    """Whole blocks of ``model`` (at its ``kv_dtype``) that fit in ``cache_bytes`` (floor).
    A size below one block is a :class:`ParameterError` naming ``key``."""
    per_block = model.kv_bytes_per_block(block_size)
    blocks = int(cache_bytes) // per_block
    if blocks < 1:
        raise ParameterError(
            key,
            cache_bytes,
            f"smaller than one block of {model.name} ({per_block} bytes at "
            f"block_size={block_size}, {model.kv_dtype})",
        )
    return blocks


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


def prefill_constants(
    model: ModelProfile, hardware: HardwareProfile, tier: str, block_size: int
) -> tuple[int, float, float, float, float, int, float]:
    """The trailing arguments of :func:`prefill_seconds` for ``model`` on ``hardware`` with the
    cache in ``tier``: ``(block_size, 2 * active_params, attention coefficient,
    reuse_flops_per_token, effective_flops, kv_bytes_per_block, bandwidth)``."""
    return (
        block_size,
        float(2 * model.active_params),
        float(_attention_coefficient(model)),
        float(model.reuse_flops_per_token()),
        hardware.effective_flops,
        model.kv_bytes_per_block(block_size),
        hardware.tier_bandwidth(tier),
    )


@njit(cache=True)
def prefill_seconds(n, h, block_size, two_active, attention_coeff, reuse, eff_flops, kv_bytes, bw):
    """``est_prefill_seconds`` of one request of ``n`` prompt tokens with the first ``h``
    reused, :func:`prefill_cost`'s formula for one request in its operations and their order
    (so the two agree to the bit)::

        flops(n, h) / effective_flops + ceil(h / block_size) * kv_bytes_per_block / bandwidth

    with ``flops(n, h)`` the module's, the up-projection of the reused latents included
    (``reuse``, 0 but for latent attention). The arguments are :func:`prefill_constants`'s;
    ``n * (n + 1)`` and the reused bytes are exact int64 for ``n <= 2**31`` (the cluster's
    bound on prompts, checked by its caller). Compiled, so that the cluster driver's routing
    and queues (and, as ``py_func``, its reference) call this one formula."""
    pairs = float(n * (n + 1) - h * (h + 1))
    flops = float(n - h) * two_active + pairs * attention_coeff
    if reuse != 0.0 and h < n:  # prefill_flops adds it only for such a profile
        flops += float(h) * reuse
    reused = ((h + block_size - 1) // block_size) * kv_bytes
    return flops / eff_flops + float(reused) / bw


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


def capacity_from_size(
    cache_size: str | int, model: ModelProfile, block_size: int, key: str = "cache_size"
) -> tuple[int, int]:
    """``(capacity in blocks, cache bytes)`` of a cache of ``cache_size`` (``"64GiB"``, or an
    int of bytes) for ``model`` at ``block_size``: whole blocks, floor. Errors name ``key``."""
    from .units import parse_size

    cache_bytes = parse_size(key, cache_size)
    return capacity_blocks(cache_bytes, model, block_size, key), cache_bytes


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
