"""The plain-Python reference of a cache hierarchy, written to read like ``docs/tiers.md``.

It is the reference driver of a hierarchy: it composes the policies' own references through
their steps (``begin_request``, ``hit``, ``admit`` which returns the policy's victims,
``remove``, ``end_request``; ``prefixsim.policies.ReferencePolicy``), in the order the compiled
driver calls them (``prefixsim.engine.tiers``), so every tier behaves exactly as the single
cache does; only the moves between tiers are new here.

Under an engine's semantics (``docs/semantics.md``, "In a hierarchy") each request's blocks are
those of :func:`prefixsim.mode_replay.request_accesses` (its cached blocks, then its temporary
ones); the scan stops at the engine's cap and counts whole blocks; a temporary block is
admitted to tier 0 only, is never demoted, and leaves tier 0 when its request ends (unless vLLM
frees it to the back of its queue).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import numpy as np

from ..mode_replay import _release, request_accesses
from ..policies import ReferencePolicy, get_policy
from ..policies.base import DEMOTED
from ..semantics import SPEC, Semantics, hit_tokens
from ..trace import Trace
from .model import COUNTER_NAMES, Tier, block_tokens


class ReferenceHierarchy:
    """Tiers fastest first; ``counters[t]`` holds the tier counters of ``COUNTER_NAMES``."""

    def __init__(self, tiers: Sequence[Tier], mode: str) -> None:
        self.mode = mode
        self.temporary: set[Hashable] = set()
        """The temporary blocks (engine semantics): never cached below tier 0."""
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
        if h in self.temporary and self.mode == "inclusive":  # never resident at its access
            self.counters[0]["admissions"] += 1
            self.counters[0]["evictions"] += len(self.caches[0].admit(h, pred))
            return
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
        before the following victim (depth first), and dropped from the last tier (a temporary
        block, from any tier: no slower tier takes a block without a hash)."""
        self.counters[t]["admissions"] += 1
        for victim in self.caches[t].admit(h, pred):
            self.counters[t]["evictions"] += 1
            if victim in self.temporary:
                continue
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
    trace: Trace,
    tiers: Sequence[Tier],
    mode: str,
    block_size: int,
    semantics: Semantics | None = None,
) -> tuple[np.ndarray, np.ndarray, list[dict[str, int]], list[int], int, int]:
    """Per-request hit tokens, per-tier hit tokens ``[tier, request]``, tier counters, final
    occupancy per tier, the block accesses made and the temporary blocks held. ``tiers`` as
    replayed (under vLLM, tier 0 at its usable capacity)."""
    semantics = Semantics.of(semantics)
    hierarchy = ReferenceHierarchy(tiers, mode)
    code = semantics.code
    cached, temps, max_hits = request_accesses(trace, semantics, block_size)
    hierarchy.temporary = {h for held in temps for h in held}
    stream: list[Hashable] = []
    offsets = [0]
    for blocks, held in zip(cached, temps, strict=True):
        stream.extend([*blocks, *held])
        offsets.append(len(stream))
    for cache in hierarchy.caches:
        cache.prepare(stream, offsets)
    hits = np.zeros(trace.n_requests, np.int64)
    tier_hit_tokens = np.zeros((len(tiers), trace.n_requests), np.int64)
    for r, input_length in enumerate(trace.input_lengths.tolist()):
        blocks = cached[r]
        # The prefix scan at arrival over the union of the tiers, up to the rule's cap (all the
        # blocks under the specification); each leading block is credited to the fastest tier
        # holding it: its tokens below the prompt's length (spec), or a whole block (engines).
        k = 0
        while k < min(len(blocks), max_hits[r]):
            t = hierarchy.fastest_holder(blocks[k])
            if t is None:
                break
            credit = block_tokens(k, block_size, input_length) if code == SPEC else block_size
            tier_hit_tokens[t, r] += credit
            k += 1
        hits[r] = hit_tokens(code, k, max_hits[r], input_length, block_size)
        hierarchy.access_request([*blocks, *temps[r]])
        if temps[r] and semantics.free_front:
            _release(hierarchy.caches[0], temps[r], tiers[0].policy)  # tier 0 only holds them
    occupancy = [cache.resident_count() for cache in hierarchy.caches]
    n_temp = sum(len(held) for held in temps)
    return hits, tier_hit_tokens, hierarchy.counters, occupancy, len(stream), n_temp
