"""Prefill work and estimated prefill time, with and without the reused prefix.

The one place the formulas live (``docs/cost-model.md`` derives them); the CLI, the sweep and
the figures all call these functions. This module states them, holds the compiled one-request
time (:func:`prefill_seconds`) and re-exports the public names of the modules it is split into
(import them from here):

* :mod:`prefixsim.cost_formulas`: one request's work, vectorised (FLOPs, FLOPs saved, reused
  blocks) and a block's break-even;
* :mod:`prefixsim.cost_table`: a replay's cost per request and its exact totals
  (:class:`PrefillCost`, :func:`prefill_cost`, :func:`prefill_cost_tiers`, the report's keys);
* :mod:`prefixsim.cost_bounds`: a cache size in blocks and the int64 checks before a replay;
* :mod:`prefixsim.cost_reference`: the plain-Python references the tests hold them to.

:func:`prefill_seconds` stays here, with no compiled callee: the cluster driver's disk cache is
keyed by this file (numba checks only a compiled function's own file).

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
:func:`prefill_constants` (its arguments); also importable from here as before the split,
:func:`prefill_flops_saved`, :func:`capacity_from_size` and :func:`cost_report`.
"""

from __future__ import annotations

from numba import njit

from .cost_bounds import capacity_blocks, capacity_from_size, check_cost
from .cost_formulas import (
    _attention_coefficient,
    block_recompute_flops,
    break_even_bandwidth,
    break_even_block,
    prefill_flops,
    prefill_flops_saved,
    reused_blocks,
    tier_reused_blocks,
)
from .cost_reference import (
    prefill_cost_reference,
    prefill_cost_tiers_reference,
    prefill_flops_reference,
)
from .cost_table import PrefillCost, cost_report, prefill_cost, prefill_cost_tiers
from .hardware import HardwareProfile
from .models import ModelProfile

__all__ = [
    "PrefillCost",
    "block_recompute_flops",
    "break_even_bandwidth",
    "break_even_block",
    "capacity_blocks",
    "capacity_from_size",
    "check_cost",
    "cost_report",
    "prefill_constants",
    "prefill_cost",
    "prefill_cost_reference",
    "prefill_cost_tiers",
    "prefill_cost_tiers_reference",
    "prefill_flops",
    "prefill_flops_reference",
    "prefill_flops_saved",
    "prefill_seconds",
    "reused_blocks",
    "tier_reused_blocks",
]


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
