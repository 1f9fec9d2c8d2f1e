"""What a hierarchy is made of: tiers, modes, the result, and the checks on them."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from .._exact import HitTotals, exact_sum
from ..errors import ParameterError
from ..policies import PolicyParams, get_policy
from ..semantics import Semantics

MODES: tuple[str, ...] = ("exclusive", "inclusive")
MEDIA: tuple[str, ...] = ("hbm", "dram_pcie", "rdma", "nvme")
"""Where a tier's blocks live: the names of the hardware profiles' tiers of the cost model
(``prefixsim.hardware.TIERS``), whose bandwidth a hit from the tier is charged at by
:func:`prefixsim.cost.prefill_cost_tiers` (``docs/tiers.md``); the replay ignores it."""
COUNTER_NAMES: tuple[str, ...] = (
    "hits",
    "admissions",
    "demotions_in",
    "evictions",
    "promotions_out",
)
"""Per tier: accesses that found the block there (the fastest tier holding it); admissions
into it (demotions included); demotions from the tier above; its policy's victims; blocks
that left it for a faster tier (exclusive) or were copied from it to the faster tiers
(inclusive)."""


def block_tokens(j: int, block_size: int, input_length: int) -> int:
    """Tokens of leading block ``j`` that count as hit tokens: the part of
    ``[j * block_size, (j + 1) * block_size)`` below ``input_length``. Over ``j < k`` they sum
    to the specification's ``min(k * block_size, input_length)``: the clamp falls on the last
    block (and on any block past ``input_length``, which counts 0)."""
    lo = j * block_size
    return max(0, min(lo + block_size, input_length) - lo)


@dataclass(frozen=True)
class Tier:
    """One level of a hierarchy: a registered policy with its capacity and parameters."""

    params: PolicyParams
    name: str = ""
    """A label (``hbm``, ``dram``); ``tier{i}`` when empty."""
    medium: str | None = None
    """One of :data:`MEDIA`, or None."""

    @property
    def policy(self) -> str:
        return self.params.policy

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "medium": self.medium, **self.params.to_dict()}


def make_tier(
    policy: str = "LRU",
    capacity: int = 4096,
    *,
    name: str = "",
    medium: str | None = None,
    **policy_params: Any,
) -> Tier:
    """A validated :class:`Tier` (policy parameters as for :func:`prefixsim.make_params`)."""
    from ..replay import make_params

    if medium is not None and medium not in MEDIA:
        raise ParameterError("medium", medium, f"expected one of {', '.join(MEDIA)} or null")
    return Tier(make_params(policy, capacity, **policy_params), str(name), medium)


def check_tiers(tiers: Sequence[Tier | Mapping[str, Any]], mode: str) -> tuple[Tier, ...]:
    """The hierarchy as named, validated tiers; one-line :class:`ParameterError` otherwise."""
    if mode not in MODES:
        raise ParameterError("mode", mode, f"expected one of {', '.join(MODES)}")
    if isinstance(tiers, (str, bytes, Mapping)) or not len(tiers):
        raise ParameterError("tiers", tiers, "expected a non-empty list of tiers, fastest first")
    out: list[Tier] = []
    for i, tier in enumerate(tiers):
        if isinstance(tier, Mapping):
            tier = make_tier(**tier)
        if not isinstance(tier, Tier):
            raise ParameterError(f"tiers[{i}]", tier, "expected a Tier or a mapping")
        name = tier.name or f"tier{i}"
        if name in {t.name for t in out}:
            raise ParameterError(f"tiers[{i}].name", name, "tier names must be distinct")
        out.append(Tier(tier.params, name, tier.medium))
    for i, tier in enumerate(out):
        steps = get_policy(tier.policy).steps
        if steps is None or not steps.per_block:
            what = "has no compiled steps" if steps is None else "is a request-level policy"
            raise ParameterError(
                f"tiers[{i}].policy",
                tier.policy,
                f"{what}, so it cannot be a tier (it serves whole requests, not the "
                "block-by-block admissions and demotions a hierarchy makes): "
                "docs/policies.md, 'Refusals'",
            )
    for i, tier in enumerate(out[1:], start=1):
        spec = get_policy(tier.policy)
        if mode == "exclusive" and not spec.removable:
            raise ParameterError(
                f"tiers[{i}].policy",
                tier.policy,
                "has no natural removal, so it cannot be a lower tier in exclusive mode (a hit "
                "there moves the block out); docs/tiers.md says which policies go where",
            )
        if spec.offline:
            raise ParameterError(
                f"tiers[{i}].policy",
                tier.policy,
                "is offline: it follows the whole stream of accesses, which only the first "
                "tier sees, so it can only be the first tier",
            )
    return tuple(out)


@dataclass(frozen=True)
class Hierarchy(PolicyParams):
    """A validated hierarchy as one set of parameters (what a sweep point holds).

    ``capacity`` is the total over the tiers; :meth:`to_dict` names every tier's parameters,
    so the point's identity includes the whole hierarchy and the mode."""

    policy: ClassVar[str] = "TIERS"
    tiers: tuple[Tier, ...] = ()
    mode: str = "exclusive"

    def __post_init__(self) -> None:
        object.__setattr__(self, "tiers", check_tiers(self.tiers, self.mode))
        total = sum(t.params.capacity for t in self.tiers)
        object.__setattr__(self, "capacity", total)
        super().__post_init__()

    @classmethod
    def of(cls, tiers: Sequence[Tier | Mapping[str, Any]], mode: str = "exclusive") -> Hierarchy:
        checked = check_tiers(tiers, mode)
        return cls(capacity=sum(t.params.capacity for t in checked), tiers=checked, mode=mode)

    def to_dict(self) -> dict[str, Any]:
        return {
            "policy": self.policy,
            "capacity": self.capacity,
            "mode": self.mode,
            "tiers": [t.to_dict() for t in self.tiers],
        }

    def describe(self) -> str:
        """The tiers as compact JSON, fastest first (a sweep's ``tiers`` column)."""
        return json.dumps([t.to_dict() for t in self.tiers], separators=(",", ":"))


@dataclass(frozen=True, eq=False)
class TieredResult(HitTotals):
    """Outcome of a hierarchy replay. Arrays are per request, in trace order."""

    tiers: tuple[Tier, ...]
    mode: str
    block_size: int
    trace_name: str
    trace_sha256: str
    hit_tokens: np.ndarray  # int64, the union's longest-prefix hit tokens
    tier_hit_tokens: np.ndarray  # int64 [tier, request]; sums over tiers to hit_tokens
    prompt_tokens: np.ndarray  # int64
    tier_counters: tuple[dict[str, int], ...]
    final_tier_blocks: tuple[int, ...]
    block_accesses: int
    engine: str
    seconds: float = field(default=0.0, compare=False)
    semantics: Semantics = field(default_factory=Semantics)
    """The hit rule the replay followed (``docs/semantics.md``, "In a hierarchy")."""
    temporary_blocks: int = 0
    """Blocks held in tier 0 for a request and never cached (engine semantics only)."""

    @property
    def n_tiers(self) -> int:
        return len(self.tiers)

    @property
    def total_tier_hit_tokens(self) -> tuple[int, ...]:
        return tuple(exact_sum(row) for row in self.tier_hit_tokens)

    @property
    def final_cache_blocks(self) -> int:
        """Resident blocks over all tiers (a block held by several tiers counts in each)."""
        return sum(self.final_tier_blocks)

    @property
    def counters(self) -> dict[str, int]:
        """``block_accesses``, ``block_hits`` (accesses that found the block in some tier),
        ``evictions`` (the victims of all tiers' policies), ``temporary_blocks`` under an
        engine's semantics, then per tier ``t``:
        ``tier{t}_hit_tokens``, ``tier{t}_final_cache_blocks`` and ``tier{t}_{counter}`` for
        every counter of :data:`COUNTER_NAMES` (flat, as a sweep stores them)."""
        out = {
            "block_accesses": self.block_accesses,
            "block_hits": sum(c["hits"] for c in self.tier_counters),
            "evictions": sum(c["evictions"] for c in self.tier_counters),
        }
        if self.semantics.name != "spec":  # as the single cache's counters under the engines
            out["temporary_blocks"] = self.temporary_blocks
        for t, (hits, final, counters) in enumerate(
            zip(self.total_tier_hit_tokens, self.final_tier_blocks, self.tier_counters, strict=True)
        ):
            out[f"tier{t}_hit_tokens"] = hits
            out[f"tier{t}_final_cache_blocks"] = final
            out.update({f"tier{t}_{k}": v for k, v in counters.items()})
        return out

    def to_report(self, per_request: bool = True) -> dict[str, Any]:
        report: dict[str, Any] = {
            **self.report_totals(),
            "final_cache_blocks": self.final_cache_blocks,
            "block_size": self.block_size,
            **self.semantics.to_dict(),
            "mode": self.mode,
            "tiers": [
                {
                    **tier.to_dict(),
                    "hit_tokens": hits,
                    "final_cache_blocks": final,
                    "counters": dict(counters),
                }
                for tier, hits, final, counters in zip(
                    self.tiers,
                    self.total_tier_hit_tokens,
                    self.final_tier_blocks,
                    self.tier_counters,
                    strict=True,
                )
            ],
            "trace": self.trace_name,
            "trace_sha256": self.trace_sha256,
            "n_requests": self.n_requests,
        }
        if per_request:
            report["per_request"] = [
                {"hit_tokens": h, "prompt_tokens": p, "tier_hit_tokens": list(ts)}
                for h, p, ts in zip(
                    self.hit_tokens.tolist(),
                    self.prompt_tokens.tolist(),
                    self.tier_hit_tokens.T.tolist(),
                    strict=True,
                )
            ]
        return report
