"""FIFO, CLOCK, SIEVE, LFU and ARC: hand-worked cases and engine agreement.

Every expected number below is derived by hand in the comment above it, from the policy's
definition in its module docstring (every block is 512 tokens; one request = one block unless
written ``[a,b,c]``). Each case is checked on both engines, and each is shown to tell the policy
apart from its nearest neighbour: a registered policy (by name) or a mutant of the reference
defined here must produce different numbers on it.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import make_trace
from mutants import Request, simulate
from prefixsim import Trace, make_params, replay
from prefixsim.policies import (
    COMMON_COUNTERS,
    ReferencePolicy,
    arc,  # importing a policy's module registers it
    clock,
    fifo,
    get_policy,
    lfu,
    policy_names,
    sieve,
)
from prefixsim.policies.arc import ARCReference
from prefixsim.policies.clock import CLOCKReference
from prefixsim.policies.lfu import LFUReference
from prefixsim.policies.sieve import SIEVEReference
from strategies import BLOCK_SIZES, conversations
from test_equivalence import assert_engines_agree

MODULES = {"FIFO": fifo, "CLOCK": clock, "SIEVE": sieve, "LFU": lfu, "ARC": arc}
POLICIES = tuple(MODULES)
BS = 512


def seq(blocks: str) -> list[Request]:
    """One single-block request per character: ``seq("aab")`` = [a], [a], [b]."""
    return [(BS, [b]) for b in blocks]


def req(*hash_ids: str) -> Request:
    """One request whose input is exactly len(hash_ids) full blocks."""
    return (BS * len(hash_ids), list(hash_ids))


# --- mutants: the nearest variants each case must tell apart ------------------------------


class ClockBitOnInsert(CLOCKReference):
    """CLOCK that sets the reference bit when a block is inserted, not only on a hit."""

    def access(self, h: Hashable) -> None:
        new = h not in self.slot_of
        super().access(h)
        if new:
            self.bit[self.slot_of[h]] = 1


class SieveHandResets(SIEVEReference):
    """SIEVE whose hand restarts from the tail at every eviction (a FIFO-reinsertion sweep)."""

    def access(self, h: Hashable) -> None:
        self.p = None
        super().access(h)


class LfuTieByInsertion(LFUReference):
    """LFU that breaks count ties by insertion time (oldest inserted first), not last access."""

    def __init__(self, params: Any) -> None:
        super().__init__(params)
        self.inserted: dict[Hashable, int] = {}

    def access(self, h: Hashable) -> None:
        if h not in self.count:
            self.inserted[h] = self.now + 1
        super().access(h)

    def victim(self) -> Hashable:
        return min(self.count, key=lambda b: (self.count[b], self.inserted[b]))


class PerfectLfu(LFUReference):
    """LFU that remembers the counts of evicted blocks ("perfect" instead of in-cache LFU)."""

    def __init__(self, params: Any) -> None:
        super().__init__(params)
        self.ever: dict[Hashable, int] = {}

    def access(self, h: Hashable) -> None:
        super().access(h)
        self.ever[h] = self.ever.get(h, 0) + 1
        self.count[h] = self.ever[h]

    def victim(self) -> Hashable:
        return min(self.count, key=lambda b: (self.count[b], self.last[b]))


class ArcFrozenP(ARCReference):
    """ARC without adaptation: REPLACE always sees p = 0."""

    def replace(self, x: Hashable) -> None:
        self.p = 0.0
        super().replace(x)


class ArcNoTieRule(ARCReference):
    """ARC whose REPLACE lacks the ``x in B2 and |T1| = p`` clause."""

    def replace(self, x: Hashable) -> None:
        if self.T1 and len(self.T1) > self.p:
            y, _ = self.T1.popitem(last=False)
            self.B1[y] = None
        else:
            y, _ = self.T2.popitem(last=False)
            self.B2[y] = None
        self.counters["evictions"] += 1


class ArcIntegerDelta1(ARCReference):
    """ARC whose Case II adaptation uses integer division: δ1 = max(1, |B2| // |B1|)."""

    def access(self, x: Hashable) -> None:
        if x not in self.B1:
            super().access(x)
            return
        self.counters["b1_hits"] += 1
        self.p = min(self.p + max(1, len(self.B2) // len(self.B1)), self.c)
        self.replace(x)
        del self.B1[x]
        self.T2[x] = None


class ArcIntegerDelta2(ARCReference):
    """ARC whose Case III adaptation uses integer division: δ2 = max(1, |B1| // |B2|)."""

    def access(self, x: Hashable) -> None:
        if x not in self.B2:
            super().access(x)
            return
        self.counters["b2_hits"] += 1
        self.p = max(self.p - max(1, len(self.B1) // len(self.B2)), 0)
        self.replace(x)
        del self.B2[x]
        self.T2[x] = None


# --- hand-worked cases --------------------------------------------------------------------


@dataclass
class Case:
    policy: str
    capacity: int
    requests: list[Request]
    hits: list[int]
    final: int
    neighbours: list[Any] = field(default_factory=list)
    """Registered policy names or mutant reference classes that must give other numbers."""


CASES: dict[str, Case] = {}

# FIFO: a hit changes nothing. capacity 3, queue written oldest first.
# R1 [a,b,c]: cold, 0; Q=[a,b,c].
# R2 [a,d]: a resident, d not: k = 1, 512. a hit (no change); d evicts the oldest, a: Q=[b,c,d].
# R3 [a,b]: a is gone: 0. a evicts b: Q=[c,d,a]; b evicts c: Q=[d,a,b].
# R4 [d,a,b]: all resident, 1536. Final 3.
# LRU: R2's hit refreshes a, d evicts b, so R3 hits a (512). CLOCK: R2's hit sets a's bit, d
# evicts b, R3 = 512 too.
CASES["fifo_hit_changes_nothing"] = Case(
    "FIFO", 3, [req("a", "b", "c"), req("a", "d"), req("a", "b"), req("d", "a", "b")],
    hits=[0, 512, 0, 1536], final=3, neighbours=["LRU", "CLOCK"],
)  # fmt: skip

# CLOCK second chance. capacity 3, ring slots s0 s1 s2 written [block+bit], hand ^.
# R1 [a,b,c]: fills the ring in order, bits 0: [a0 b0 c0] ^s0. 0.
# R2 a: hit, 512: [a1 b0 c0] ^s0.
# R3 d: s0 a1 -> a0, hand to s1; b0 is evicted, d takes s1, hand to s2: [a0 d0 c0] ^s2. 0.
# R4 a: hit, 512: [a1 d0 c0] ^s2.
# R5 e: s2 c0 evicted, e takes s2, hand wraps to s0: [a1 d0 e0] ^s0. 0.
# R6 f: s0 a1 -> a0; s1 d0 evicted, f takes s1: [a0 f0 e0] ^s2. 0.
# R7 a: hit, 512. Final 3.
# FIFO evicts a at R3 (R4 = 0). Bit set on insert: R3's sweep clears a, b, c and evicts a at
# the second pass (R4 = 0).
CASES["clock_second_chance"] = Case(
    "CLOCK", 3, [req("a", "b", "c"), *seq("adaefa")],
    hits=[0, 512, 0, 512, 0, 0, 512], final=3, neighbours=["FIFO", ClockBitOnInsert],
)  # fmt: skip

# CLOCK is not LRU: the hand order, not recency, decides among referenced blocks. capacity 2.
# R1 a, R2 b: [a0 b0] ^s0. R3 b: 512, [a0 b1]. R4 a: 512, [a1 b1].
# R5 c: a1 -> a0, b1 -> b0, back at s0: a0 evicted, c takes s0: [c0 b0] ^s1. 0.
# R6 a: 0; s1 b0 evicted: [c0 a0] ^s0. R7 b: 0; s0 c0 evicted: [b0 a0] ^s1. Final 2.
# LRU evicts b (least recent) at R5, so R6 hits a.
CASES["clock_is_not_lru"] = Case(
    "CLOCK", 2, seq("abbacab"),
    hits=[0, 0, 512, 512, 0, 0, 0], final=2, neighbours=["LRU"],
)  # fmt: skip

# SIEVE keeps its hand. capacity 4, T written tail (oldest) to head (newest), * = visited,
# ^ marks the hand (none = NULL).
# R1-R4 a b c d: T=[a b c d]. 0 each.
# R5 a: hit, 512: T=[a* b c d].
# R6 e: hand NULL -> o = tail a*: clear, o = a.prev = b; b unvisited: p = b.prev = c;
#   discard b; e at the head: T=[a c^ d e]. 0.
# R7 c: 512, c*. R8 d: 512, d*: T=[a c*^ d* e].
# R9 f: o = p = c*: clear, o = d*: clear, o = e: unvisited: p = e.prev = NULL (e was the
#   head); discard e: T=[a c d f]. 0.
# R10 a: a is resident: 512. Final 4.
# A hand restarting from the tail evicts a at R9 (a was cleared at R6): R10 = 0. CLOCK puts
# e behind its hand (ring [a0 e0 c0 d0], hand at c) and evicts a at R9 too; FIFO evicts a at
# R6; LRU evicts a (least recent after R8) at R9.
CASES["sieve_hand_kept"] = Case(
    "SIEVE", 4, seq("abcdaecdfa"),
    hits=[0, 0, 0, 0, 512, 0, 512, 512, 0, 512], final=4,
    neighbours=[SieveHandResets, "CLOCK", "FIFO", "LRU"],
)  # fmt: skip

# SIEVE's hand wraps from the head back to the tail (lines 11-12). capacity 2.
# R1 a, R2 b: T=[a b]. R3 [a,b]: both resident, 1024; T=[a* b*].
# R4 c: o = tail a*: clear, o = b*: clear, o = b.prev = NULL -> tail a: unvisited;
#   p = a.prev = b; discard a: T=[b^ c]. 0.
# R5 b: 512, T=[b*^ c]. R6 d: o = b*: clear, o = c: unvisited, p = c.prev = NULL; discard c:
#   T=[b d]. 0. R7 c: 0; o = tail b (cleared at R6) is evicted: T=[d c]. Final 2.
CASES["sieve_hand_wraps"] = Case(
    "SIEVE", 2, [*seq("ab"), req("a", "b"), *seq("cbdc")],
    hits=[0, 0, 1024, 0, 512, 0, 0], final=2,
)  # fmt: skip

# LFU: smallest count first, ties by least recent access; counts forgotten on eviction.
# capacity 3, blocks written count(last access time), time = request number.
# R1 a: a1(1). R2 a: 512, a2(2). R3 a: 512, a3(3). R4 b: b1(4). R5 c: c1(5).
# R6 c: 512, c2(6). R7 b: 512, b2(7).
# R8 d: full; lowest count 2: b(7), c(6); c is the least recent: evict c. d1(8). 0.
# R9 b: 512, b3(9). R10 a: 512, a4(10).
# R11 c: 0 (its count 2 was forgotten); lowest count 1: d: evict d. c1(11).
# R12 e: 0; evict c (count 1). e1(12). R13 c: 0; evict e. Final 3: a4, b3, c1.
# LRU evicts a (least recent, time 3) at R8: R10 = 0. Ties by insertion evict b (inserted at
# 4, before c) at R8: R9 = 0. Perfect LFU re-admits c with count 3 at R11, evicts b at R12
# and hits c at R13.
CASES["lfu_tie_by_recency"] = Case(
    "LFU", 3, seq("aaabccbdbacec"),
    hits=[0, 512, 512, 0, 0, 512, 512, 0, 512, 512, 0, 0, 0], final=3,
    neighbours=["LRU", LfuTieByInsertion, PerfectLfu],
)  # fmt: skip

# ARC: adapting p changes REPLACE's victim. c = 2, lists written LRU first.
# R1 a: Case IV B (|L1| = 0, total 0 < 2): T1=[a]. R2 b: T1=[a,b].
# R3 a: Case I, 512: T1=[b], T2=[a].
# R4 c: Case IV B: |L1| = 1 < 2, total 2 >= 2 (not 4): REPLACE(c, 0): |T1| = 1 > 0: b -> B1.
#   T1=[c], T2=[a], B1=[b]. 0.
# R5 b: in B1, not resident: 0. Case II: δ1 = 1 (|B1| = 1 >= |B2| = 0), p = 1.
#   REPLACE(b, 1): |T1| = 1 is not > 1, b not in B2: T2's LRU a -> B2. b -> T2:
#   T1=[c], T2=[b], B1=[], B2=[a].
# R6 a: in B2: 0. Case III: δ2 = 1, p = 0. REPLACE(a, 0): c -> B1. T2=[b,a]. Final 2.
# With p frozen at 0, R5's REPLACE evicts c from T1 instead, and R6 hits a.
CASES["arc_adaptation_changes_victim"] = Case(
    "ARC", 2, seq("abacba"),
    hits=[0, 0, 512, 0, 0, 0], final=2, neighbours=[ArcFrozenP],
)  # fmt: skip

# ARC's tie rule "x in B2 and |T1| = p". c = 3.
# R1-R3 a b c: Case IV B, total < 3: T1=[a,b,c]. R4 a: Case I, 512: T1=[b,c], T2=[a].
# R5 d: Case IV B (|L1| = 2, total 3): REPLACE(d, 0): b -> B1. T1=[c,d], B1=[b].
# R6 e: Case IV A (|L1| = 3), |T1| = 2 < 3: drop B1's LRU b; REPLACE(e, 0): c -> B1.
#   T1=[d,e], T2=[a], B1=[c].
# R7 c: Case II, δ1 = 1: p = 1. REPLACE(c, 1): |T1| = 2 > 1: d -> B1. c -> T2.
#   T1=[e], T2=[a,c], B1=[d].
# R8 d: Case II, δ1 = 1: p = 2. REPLACE(d, 2): 1 is not > 2: T2's LRU a -> B2. d -> T2.
#   T1=[e], T2=[c,d], B1=[], B2=[a].
# R9 a: Case III, δ2 = 1: p = 1. REPLACE(a, 1): |T1| = 1 is not > 1, but a is in B2 and
#   |T1| = p: T1's LRU e -> B1. a -> T2: T1=[], T2=[c,d,a], B1=[e], B2=[].
# R10 e: in B1: 0. Case II: p = 2; REPLACE: T1 empty: c -> B2. e -> T2: T2=[d,a,e].
# R11 a: Case I, 512. Final 3. R1-R11 hit only at R4 and R11.
# Without the tie rule R9 evicts c from T2 and R10 hits e. With p frozen at 0, R8 evicts e
# from T1 and R9 hits a (still in T2). LRU (capacity 3) hits d at R8.
CASES["arc_b2_tie_rule"] = Case(
    "ARC", 3, seq("abcadecdaea"),
    hits=[0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 512], final=3,
    neighbours=[ArcNoTieRule, ArcFrozenP, "LRU"],
)  # fmt: skip

# ARC's δ1 uses real division (p is a real). c = 5; lists LRU first, H = hit. (The shortest
# trace a random search found on which integer division changes a number; every step below
# checked by hand against Figure 4.)
# R1 j, R2 c: T1=[j,c]. R3 j: H, T1=[c], T2=[j]. R4-R6 a f e: T1=[c,a,f,e] (total 5).
# R7 c: H, T1=[a,f,e], T2=[j,c].
# R8 k: Case IV B (|L1| = 3, total 5): REPLACE(k, 0): a -> B1=[a]. T1=[f,e,k].
# R9 e: H, T1=[f,k], T2=[j,c,e]. R10 h: Case IV B, REPLACE: f -> B1=[a,f]. T1=[k,h].
# R11 f: Case II, δ1 = 1 (2 >= 0): p = 1. REPLACE: 2 > 1: k -> B1. f -> T2=[j,c,e,f].
#   T1=[h], B1=[a,k].
# R12 d: Case IV B, REPLACE(d, 1): 1 is not > 1: j -> B2=[j]. T1=[h,d], T2=[c,e,f].
# R13 g: Case IV B (|L1| = 4), REPLACE: 2 > 1: h -> B1=[a,k,h]. T1=[d,g].
# R14 g: H, T1=[d], T2=[c,e,f,g]. R15 c: H, T2=[e,f,g,c].
# R16 k: Case II, δ1 = 1 (3 >= 1): p = 2. REPLACE: 1 is not > 2: e -> B2=[j,e].
#   k -> T2=[f,g,c,k]; B1=[a,h].
# R17 b: Case IV B, REPLACE(b, 2): f -> B2=[j,e,f]. T1=[d,b], T2=[g,c,k].
# R18 a: Case II, |B1| = 2 < |B2| = 3: δ1 = 3/2, p = 3.5 (integer division: 1, p = 3).
#   REPLACE: 2 is not > p: g -> B2=[j,e,f,g]. a -> T2=[c,k,a]; B1=[h].
# R19 e: Case III, δ2 = 1 (4 >= 1): p = 2.5 (integer: 2). REPLACE(e, 2.5): 2 is not > 2.5 and
#   not = 2.5: c -> B2. e -> T2=[k,a,e]; T1=[d,b]. (Integer: |T1| = 2 = p and e in B2: d -> B1.)
# R20 d: H (integer: d is in B1, 0). Final 5.
CASES["arc_real_division_case_ii"] = Case(
    "ARC", 5, seq("jcjafeckehfdggckbaed"),
    hits=[0, 0, 512, 0, 0, 0, 512, 0, 512, 0, 0, 0, 0, 512, 512, 0, 0, 0, 0, 512], final=5,
    neighbours=[ArcIntegerDelta1],
)  # fmt: skip

# ARC's δ2 uses real division too. c = 6; same conventions (found the same way).
# R1-R4 g l i d: T1=[g,l,i,d]. R5 i: H, T2=[i]. R6 f: T1=[g,l,d,f]. R7 g: H, T2=[i,g].
# R8 c: T1=[l,d,f,c] (total 6 now). R9 b: Case IV B, REPLACE(b, 0): l -> B1. R10 h: d -> B1.
#   T1=[f,c,b,h], T2=[i,g], B1=[l,d].
# R11 l: Case II, δ1 = 1, p = 1; REPLACE: 4 > 1: f -> B1; l -> T2=[i,g,l]; B1=[d,f].
# R12 g: H, T2=[i,l,g]. R13 a: Case IV B, REPLACE: 3 > 1: c -> B1=[d,f,c]; T1=[b,h,a].
# R14 b: H, T1=[h,a], T2=[i,l,g,b].
# R15 d: Case II, δ1 = 1, p = 2; REPLACE: 2 is not > 2: i -> B2=[i]; T2=[l,g,b,d]; B1=[f,c].
# R16 j: Case IV B, REPLACE(j, 2): 2 is not > 2: l -> B2=[i,l]; T1=[h,a,j], T2=[g,b,d].
# R17 k: Case IV B (|L1| = 5), REPLACE: 3 > 2: h -> B1=[f,c,h]; T1=[a,j,k].
# R18 i: Case III, |B2| = 2 < |B1| = 3: δ2 = 3/2, p = 0.5 (integer division: 1, p = 1).
#   REPLACE: 3 > p: a -> B1=[f,c,h,a]; i -> T2=[g,b,d,i]; T1=[j,k], B2=[l].
# R19 c: Case II, δ1 = 1: p = 1.5 (integer: 2). REPLACE: |T1| = 2 > 1.5: j -> B1
#   (integer: 2 is not > 2: g -> B2, j stays). c -> T2=[g,b,d,i,c]; T1=[k].
# R20 j: in B1: 0 (integer: still in T1, 512). Case II: p = 2.5; REPLACE: g -> B2.
# R21 c: H. Final 6.
CASES["arc_real_division_case_iii"] = Case(
    "ARC", 6, seq("glidifgcbhlgabdjkicjc"),
    hits=[0, 0, 0, 0, 512, 0, 512, 0, 0, 0, 0, 512, 0, 512, 0, 0, 0, 0, 0, 0, 512], final=6,
    neighbours=[ArcIntegerDelta2],
)  # fmt: skip


@pytest.mark.parametrize("engine", ["kernel", "reference"])
@pytest.mark.parametrize("name", list(CASES))
def test_hand_worked(name: str, engine: str) -> None:
    case = CASES[name]
    trace = make_trace(case.requests)
    result = replay(trace, case.policy, case.capacity, block_size=BS, engine=engine)
    assert result.hit_tokens.tolist() == case.hits
    assert result.final_cache_blocks == case.final
    assert result.total_hit_tokens == sum(case.hits)


def _neighbour_cache(case: Case, neighbour: Any) -> ReferencePolicy:
    if isinstance(neighbour, str):
        return get_policy(neighbour).reference(make_params(neighbour, case.capacity))
    return neighbour(make_params(case.policy, case.capacity))


@pytest.mark.parametrize(
    ("name", "neighbour"),
    [(n, m) for n, c in CASES.items() for m in c.neighbours],
    ids=lambda v: v if isinstance(v, str) else v.__name__,
)
def test_hand_worked_case_tells_neighbour_apart(name: str, neighbour: Any) -> None:
    case = CASES[name]
    own = get_policy(case.policy).reference(make_params(case.policy, case.capacity))
    assert simulate(case.requests, own, BS) == (case.hits, case.final)
    assert simulate(case.requests, _neighbour_cache(case, neighbour), BS) != (
        case.hits,
        case.final,
    )


def test_every_policy_has_a_hand_worked_case_with_a_neighbour() -> None:
    assert {c.policy for c in CASES.values() if c.neighbours} == set(POLICIES)


# --- registration -------------------------------------------------------------------------


@pytest.mark.parametrize("policy", POLICIES)
def test_registered_with_capacity_only(policy: str) -> None:
    assert policy in policy_names()
    spec = get_policy(policy)
    assert spec is MODULES[policy].SPEC
    assert spec.params_type.field_names() == ("capacity",)
    assert spec.counter_names[: len(COMMON_COUNTERS)] == COMMON_COUNTERS
    assert make_params(policy, 8).to_dict() == {"policy": policy, "capacity": 8}


# --- kernel == reference ------------------------------------------------------------------


@pytest.mark.parametrize("policy", POLICIES)
@settings(max_examples=150, deadline=None)
@given(
    requests=conversations(),
    capacity=st.integers(1, 64),
    block_size=st.sampled_from(BLOCK_SIZES),
)
def test_kernel_matches_reference(policy: str, requests, capacity, block_size) -> None:  # type: ignore[no-untyped-def]
    assert_engines_agree(make_trace(requests), make_params(policy, capacity), block_size)


@settings(max_examples=100, deadline=None)
@given(requests=conversations(), capacity=st.integers(1, 16))
def test_arc_invariants(requests, capacity) -> None:  # type: ignore[no-untyped-def]
    """The paper's invariants hold after every access: 0 <= p <= c, |T1| + |T2| <= c,
    |T1| + |B1| <= c, |T1| + |T2| + |B1| + |B2| <= 2c, the four lists disjoint."""
    cache = ARCReference(make_params("ARC", capacity))
    c = capacity
    for _, hash_ids in requests:
        for h in hash_ids:
            cache.access(h)
            t1, t2, b1, b2 = len(cache.T1), len(cache.T2), len(cache.B1), len(cache.B2)
            assert 0 <= cache.p <= c
            assert t1 + t2 <= c
            assert t1 + b1 <= c
            assert t1 + t2 + b1 + b2 <= 2 * c
            assert len({*cache.T1, *cache.T2, *cache.B1, *cache.B2}) == t1 + t2 + b1 + b2


@pytest.mark.slow
@pytest.mark.parametrize("capacity", [64, 4096])
@pytest.mark.parametrize("policy", POLICIES)
def test_engines_agree_on_bundled_trace(conversation: Trace, policy: str, capacity: int) -> None:
    assert_engines_agree(conversation, make_params(policy, capacity), 512)


class _ExactArc(ARCReference):
    """ARC with p an exact ``Fraction`` (the paper's real p, without rounding)."""

    def __init__(self, params: Any) -> None:
        super().__init__(params)
        self.p = Fraction(0)

    def access(self, x: Hashable) -> None:
        if x in self.B1:
            self.counters["b1_hits"] += 1
            b1, b2 = len(self.B1), len(self.B2)
            self.p = min(self.p + (1 if b1 >= b2 else Fraction(b2, b1)), Fraction(self.c))
        elif x in self.B2:
            self.counters["b2_hits"] += 1
            b1, b2 = len(self.B1), len(self.B2)
            self.p = max(self.p - (1 if b2 >= b1 else Fraction(b1, b2)), Fraction(0))
        else:
            super().access(x)
            return
        self.replace(x)
        (self.B1 if x in self.B1 else self.B2).pop(x)
        self.T2[x] = None


@pytest.mark.slow
@pytest.mark.parametrize("capacity", [1024, 4096])
def test_arc_double_p_matches_exact_p_on_bundled_trace(conversation: Trace, capacity: int) -> None:
    """What the ARC module docstring claims: on the bundled trace, p as a double makes the same
    decisions as p as an exact rational."""
    offsets = conversation.offsets.tolist()
    requests = [
        (length, conversation.block_ids[offsets[r] : offsets[r + 1]].tolist())
        for r, length in enumerate(conversation.input_lengths.tolist())
    ]
    exact = _ExactArc(make_params("ARC", capacity))
    hits, final = simulate(requests, exact, 512)
    kernel = replay(conversation, "ARC", capacity, block_size=512)
    assert kernel.hit_tokens.tolist() == hits
    assert kernel.final_cache_blocks == final
    assert {k: v for k, v in kernel.counters.items() if k != "block_accesses"} == exact.counters
