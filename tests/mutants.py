"""The specification's "common mistakes", as mutants of the reference implementation.

Each hand-worked test in ``test_spec_rules.py`` asserts the correct numbers on both engines
*and* that the mutant for the rule it pins gives different numbers, so every test is shown to
be able to fail under the mistake it is meant to catch.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

from prefixsim.policies.base import ReferencePolicy
from prefixsim.policies.lru import LRUReference
from prefixsim.policies.s3fifo import S3FIFOParams, S3FIFOReference


class GhostResident(S3FIFOReference):
    """Counts ghost entries as resident."""

    def is_resident(self, h: Hashable) -> bool:
        return super().is_resident(h) or h in self.G


class Unsaturated(S3FIFOReference):
    """Forgets to clamp freq at max_freq."""

    def access(self, h: Hashable) -> None:
        if h in self.S:
            self.S[h] += 1
        elif h in self.M:
            self.M[h] += 1
        else:
            super().access(h)


class PlainFifoMain(S3FIFOReference):
    """Evicts M's head whatever its freq (no second chance)."""

    def admit_to_M(self, h: Hashable, freq: int) -> None:
        while len(self.M) >= self.main_cap:
            victim, _ = self.M.popitem(last=False)
            self.insert_to_G(victim)
        self.M[h] = freq


class HeadRequeue(S3FIFOReference):
    """Second chance that requeues at the head instead of the tail."""

    def admit_to_M(self, h: Hashable, freq: int) -> None:
        while len(self.M) >= self.main_cap:
            victim, vf = next(iter(self.M.items()))
            if vf >= 1:
                self.M[victim] = vf - 1  # stays at the head
                continue
            del self.M[victim]
            self.insert_to_G(victim)
            break
        self.M[h] = freq


class SecondChanceResetsFreq(S3FIFOReference):
    """Second chance that requeues M's head with freq 0 instead of freq - 1 (a block with
    freq >= 2 gets one more pass instead of freq passes)."""

    def admit_to_M(self, h: Hashable, freq: int) -> None:
        while len(self.M) >= self.main_cap:
            victim, vf = next(iter(self.M.items()))
            if vf >= 1:
                del self.M[victim]
                self.M[victim] = 0  # requeued at the tail, but reset
                continue
            del self.M[victim]
            self.insert_to_G(victim)
            break
        self.M[h] = freq


class FreqResetOnPromotion(S3FIFOReference):
    """Resets freq to 0 when an S entry is promoted to M."""

    def admit_to_S(self, h: Hashable) -> None:
        while len(self.S) >= self.small_cap:
            victim, vf = self.S.popitem(last=False)
            if vf >= 1:
                self.admit_to_M(victim, 0)
            else:
                self.insert_to_G(victim)
        self.S[h] = 0


class IntSmallCap(S3FIFOReference):
    """Sizes S with int() (truncation) instead of round()."""

    def __init__(self, params: S3FIFOParams) -> None:
        super().__init__(params)
        self.small_cap = int(params.capacity * params.small_ratio)
        self.main_cap = params.capacity - self.small_cap
        self.ghost_cap = self.main_cap


class GhostSizedLikeSmall(S3FIFOReference):
    """ghost_cap = small_cap."""

    def __init__(self, params: S3FIFOParams) -> None:
        super().__init__(params)
        self.ghost_cap = self.small_cap


class GhostInFinalSize(S3FIFOReference):
    """Reports |S| + |M| + |G| as the final size."""

    def resident_count(self) -> int:
        return super().resident_count() + len(self.G)


class FifoForLRU(LRUReference):
    """'LRU' that does not refresh recency on a hit (that is FIFO)."""

    def access(self, h: Hashable) -> None:
        if h in self.cache:
            return
        super().access(h)


Request = tuple[int, Sequence[Hashable]]

REPLAY_MISTAKES = ("no_clamp", "set_intersection", "freq_only_on_prefix", "access_before_scan")


def simulate(
    requests: Sequence[Request],
    cache: ReferencePolicy,
    block_size: int,
    mistake: str | None = None,
) -> tuple[list[int], int]:
    """Replay loop of the specification over ``cache``, optionally with one replay mistake."""
    hits = []
    for input_length, hash_ids in requests:
        if mistake == "access_before_scan":
            for h in hash_ids:
                cache.access(h)
        if mistake == "set_intersection":
            k = len({h for h in hash_ids if cache.is_resident(h)})
        else:
            k = 0
            while k < len(hash_ids) and cache.is_resident(hash_ids[k]):
                k += 1
        hits.append(k * block_size if mistake == "no_clamp" else min(k * block_size, input_length))
        if mistake == "access_before_scan":
            continue
        for i, h in enumerate(hash_ids):
            if mistake == "freq_only_on_prefix" and i >= k and cache.is_resident(h):
                continue  # a resident block outside the prefix window: no freq update
            cache.access(h)
    return hits, cache.resident_count()
