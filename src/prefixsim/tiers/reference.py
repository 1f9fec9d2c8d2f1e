"""The plain-Python reference of a cache hierarchy, written to read like ``docs/tiers.md``.

It is the reference driver of a hierarchy: it composes the policies' own references through
their steps (``begin_request``, ``hit``, ``admit`` which returns the policy's victims,
``remove``, ``end_request``; ``prefixsim.policies.ReferencePolicy``), in the order the compiled
driver calls them (``prefixsim.engine.tiers``), so every tier behaves exactly as the single
cache does; only the moves between tiers are new here.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import numpy as np

from ..policies import ReferencePolicy, get_policy
from ..policies.base import DEMOTED
from ..trace import Trace
from .model import COUNTER_NAMES, Tier, block_tokens


class ReferenceHierarchy:
    """Tiers fastest first; ``counters[t]`` holds the tier counters of ``COUNTER_NAMES``."""

    def __init__(self, tiers: Sequence[Tier], mode: str) -> None:
        self.mode = mode
        self.caches: list[ReferencePolicy] = [
            get_policy(t.params.policy).reference(t.params) for t in tiers
        ]
        self.counters = [dict.fromkeys(COUNTER_NAMES, 0) for _ in tiers]

    def fastest_holder(self, h: Hashable) -> int | None:
        """The fastest tier in which ``h`` is resident, or None (the union's residency)."""
        for t, cache in enumerate(self.caches):
            if cache.is_resident(h):
                return t
        return None

    def access(self, h: Hashable, pred: Hashable | None) -> None:
        """One block of the request; ``pred`` the request's previous block (None: its first)."""
        t = self.fastest_holder(h)
        if t is not None:
            self.counters[t]["hits"] += 1
        if self.mode == "exclusive":
            if t == 0:
                self.caches[0].hit(h, pred)
                return
            if t is not None:
                self.caches[t].remove(h)  # leaves no ghost entry; not an eviction
                self.counters[t]["promotions_out"] += 1
            self.admit(0, h, pred)
        else:  # inclusive
            if t is not None:
                self.caches[t].hit(h, pred)  # slower copies are left untouched
                if t > 0:
                    self.counters[t]["promotions_out"] += 1
            # A miss goes to every tier, a lower hit to every faster one. Tiers do not interact
            # in this mode (a victim just loses that copy), so the order does not matter.
            for u in range(len(self.caches) if t is None else t):
                self.counters[u]["admissions"] += 1
                self.counters[u]["evictions"] += len(self.caches[u].admit(h, pred))

    def admit(self, t: int, h: Hashable, pred: Hashable | None) -> None:
        """Exclusive mode: admit ``h`` to tier ``t``; each victim is demoted to the next tier
        before the following victim (depth first), and dropped from the last tier."""
        self.counters[t]["admissions"] += 1
        for victim in self.caches[t].admit(h, pred):
            self.counters[t]["evictions"] += 1
            if t + 1 < len(self.caches):
                self.counters[t + 1]["demotions_in"] += 1
                self.admit(t + 1, victim, DEMOTED)

    def access_request(self, hash_ids: Sequence[Hashable]) -> None:
        """The request's steps on every tier: ``begin_request``, each block in order,
        ``end_request``."""
        for cache in self.caches:
            cache.begin_request(hash_ids)
        pred = None
        for h in hash_ids:
            self.access(h, pred)
            pred = h
        for cache in self.caches:
            cache.end_request()


def reference_replay(
    trace: Trace, tiers: Sequence[Tier], mode: str, block_size: int
) -> tuple[np.ndarray, np.ndarray, list[dict[str, int]], list[int]]:
    """Per-request hit tokens, per-tier hit tokens ``[tier, request]``, tier counters and
    final occupancy per tier."""
    hierarchy = ReferenceHierarchy(tiers, mode)
    block_ids = trace.block_ids.tolist()
    offsets = trace.offsets.tolist()
    for cache in hierarchy.caches:
        cache.prepare(block_ids, offsets)
    hit_tokens = np.zeros(trace.n_requests, np.int64)
    tier_hit_tokens = np.zeros((len(tiers), trace.n_requests), np.int64)
    for r, input_length in enumerate(trace.input_lengths.tolist()):
        hash_ids = block_ids[offsets[r] : offsets[r + 1]]
        # The specification's prefix scan over the union of the tiers, at arrival; each
        # leading block is credited to the fastest tier holding it.
        k = 0
        while k < len(hash_ids):
            t = hierarchy.fastest_holder(hash_ids[k])
            if t is None:
                break
            tier_hit_tokens[t, r] += block_tokens(k, block_size, input_length)
            k += 1
        hit_tokens[r] = min(k * block_size, input_length)
        hierarchy.access_request(hash_ids)
    occupancy = [cache.resident_count() for cache in hierarchy.caches]
    return hit_tokens, tier_hit_tokens, hierarchy.counters, occupancy
