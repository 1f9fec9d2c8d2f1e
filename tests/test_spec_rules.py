"""One hand-worked example per rule of the specification.

Every expected number below is derived by hand in the comment above it (queues written head
first, ``a1`` = block ``a`` with freq 1; every block is 512 tokens unless a request says
otherwise). Each case is checked on both engines, and each is shown to fail under the "common
mistake" it pins: the mutants in ``mutants.py`` must produce different numbers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from conftest import make_trace
from mutants import (
    FifoForLRU,
    FreqResetOnPromotion,
    GhostInFinalSize,
    GhostResident,
    GhostSizedLikeSmall,
    HeadRequeue,
    IntSmallCap,
    PlainFifoMain,
    Request,
    SecondChanceResetsFreq,
    Unsaturated,
    simulate,
)
from prefixsim import Trace, get_policy, make_params, replay, replay_cluster, replay_tiers
from prefixsim.policies.base import ReferencePolicy
from prefixsim.policies.lru import LRUReference
from prefixsim.policies.s3fifo import S3FIFOParams

BS = 512


def one(*hash_ids: str) -> Request:
    """A request whose input is exactly len(hash_ids) full blocks."""
    return (BS * len(hash_ids), list(hash_ids))


@dataclass
class Case:
    policy: str
    params: dict[str, Any]
    requests: list[Request]
    hits: list[int]
    final: int
    mistakes: list[Any] = field(default_factory=list)
    """Mutant reference classes, replay-mistake names, or "LRU" (LRU run in place of S3FIFO)."""


CASES: dict[str, Case] = {}

# Prefix stops at the first miss; no skip-ahead, no set intersection. LRU capacity 8 never
# evicts here. R1 [1,2,3]: cold, 0. R2 [9,2,3]: 9 misses first, so k = 0 although 2 and 3 are
# resident (set intersection would count 2 blocks = 1024). R3 [1,2,3]: all resident, 1536.
CASES["prefix_stops_at_first_miss_lru"] = Case(
    "LRU", {"capacity": 8},
    [one("1", "2", "3"), one("9", "2", "3"), one("1", "2", "3")],
    hits=[0, 0, 1536], final=4, mistakes=["set_intersection"],
)  # fmt: skip
# Same under S3FIFO, capacity 10, small_ratio 0.5: S holds 5, so all four blocks stay in S.
CASES["prefix_stops_at_first_miss_s3fifo"] = Case(
    "S3FIFO", {"capacity": 10, "small_ratio": 0.5},
    [one("1", "2", "3"), one("9", "2", "3"), one("1", "2", "3")],
    hits=[0, 0, 1536], final=4, mistakes=["set_intersection"],
)  # fmt: skip

# Hit tokens are min(k * block_size, L). R1 [a,b] L=700: cold, 0. R2 [a,b] L=700: k = 2,
# 1024 > 700, so 700. R3 [a,b,c] L=1100: k = 2, min(1024, 1100) = 1024. R4 [a] L=0: k = 1,
# min(512, 0) = 0. Unclamped: 1024 and 512 in R2 and R4.
CASES["clamp_to_input_length"] = Case(
    "S3FIFO", {"capacity": 10, "small_ratio": 0.5},
    [(700, ["a", "b"]), (700, ["a", "b"]), (1100, ["a", "b", "c"]), (0, ["a"])],
    hits=[0, 700, 1024, 0], final=3, mistakes=["no_clamp"],
)  # fmt: skip

# The scan sees the cache as it was when the request arrived: the first request of a trace
# hits nothing even though its own accesses admit its blocks (and a duplicate inside one
# request does not hit itself). R1 [a,a]: 0. R2 [a]: a is resident, 512.
CASES["scan_before_access"] = Case(
    "LRU", {"capacity": 4},
    [(1024, ["a", "a"]), one("a")],
    hits=[0, 512], final=1, mistakes=["access_before_scan"],
)  # fmt: skip

# Ghost is not residency. capacity 2, small_ratio 0.5: S 1, M 1, G 1.
# R1 [a]: S=[a0]. R2 [b]: S full, pop a0 (freq 0) -> G=[a]; S=[b0].
# R3 [a]: a is only in G, so k = 0 -> 0 hits; the ghost hit moves a to M: M=[a0], G=[].
# R4 [a]: a in M -> 512. Final |S|+|M| = 2.
# Counting G as resident gives R3 = 512; LRU (capacity 2 holds a and b) also gives R3 = 512.
CASES["ghost_is_not_resident"] = Case(
    "S3FIFO", {"capacity": 2, "small_ratio": 0.5},
    [one("a"), one("b"), one("a"), one("a")],
    hits=[0, 0, 0, 512], final=2, mistakes=[GhostResident, "LRU"],
)  # fmt: skip

# Final size excludes the ghost. capacity 4, small_ratio 0.25: S 1, M 3, G 3.
# R1 [a,b,c]: a -> S=[a0]; b: pop a0 -> G=[a], S=[b0]; c: pop b0 -> G=[a,b], S=[c0].
# Final |S|+|M| = 1 (not padded to capacity); with G it would be 3.
CASES["final_size_excludes_ghost"] = Case(
    "S3FIFO", {"capacity": 4, "small_ratio": 0.25},
    [one("a", "b", "c")],
    hits=[0], final=1, mistakes=[GhostInFinalSize, "LRU"],
)  # fmt: skip

# Second chance in M, requeue at the tail, freq kept on promotion.
# capacity 3, small_ratio 0.34: S round(1.02) = 1, M 2, G 2; max_freq 3.
# R1 [a]: S=[a0].  R2 [a]: a in S -> 512; a1.
# R3 [x]: pop a1 (freq >= 1) -> promoted with its freq: M=[a1]; S=[x0].
# R4 [y]: pop x0 -> G=[x]; S=[y0].
# R5 [x]: not resident, 0; ghost hit -> M=[a1,x0], G=[].
# R6 [z]: pop y0 -> G=[y]; S=[z0].
# R7 [y]: not resident, 0; ghost hit -> admit_to_M(y, 0) with M full: head a1 -> requeue at the
#         tail as a0: M=[x0,a0]; head x0 -> evicted to G=[x]. M=[a0,y0].
# R8 [a]: a in M -> 512.  Final: S=[z0], M=[a1,y0] -> 3.
# Plain FIFO main, head requeue (a0 re-peeked at the head and evicted) and freq reset on
# promotion (a enters M as a0 and is evicted at R7) all lose a: R8 = 0.
# LRU capacity 3 would hit x at R5 (a, x, y all resident).
CASES["second_chance_main"] = Case(
    "S3FIFO", {"capacity": 3, "small_ratio": 0.34},
    [one("a"), one("a"), one("x"), one("y"), one("x"), one("z"), one("y"), one("a")],
    hits=[0, 512, 0, 0, 0, 0, 0, 512], final=3,
    mistakes=[PlainFifoMain, HeadRequeue, FreqResetOnPromotion, "LRU"],
)  # fmt: skip

# Second chance decrements freq by one per pass: a block that enters M with freq 3 survives
# three passes over M's head. capacity 3, small_ratio 0.34: S 1, M 2, G 2; max_freq 3.
# R1 [a]: S=[a0].  R2 [a,a,a] (1536 tokens): all resident at arrival -> 1536; a3.
# R3 [b]: pop a3 -> promoted with its freq: M=[a3]; S=[b0].
# R4 [c]: pop b0 -> G=[b]; S=[c0].  R5 [b]: 0; ghost hit -> M=[a3,b0]; G=[].
# R6 [d]: pop c0 -> G=[c]; S=[d0].
# R7 [c]: 0; ghost hit, M full: a3 -> tail as a2: M=[b0,a2]; b0 evicted -> G=[b]; M=[a2,c0].
# R8 [e]: pop d0 -> G=[b,d]; S=[e0].
# R9 [d]: 0; ghost hit -> G=[b]; a2 -> tail as a1: M=[c0,a1]; c0 evicted -> G=[b,c];
#         M=[a1,d0].
# R10 [f]: pop e0 -> G full, drops b: G=[c,e]; S=[f0].
# R11 [e]: 0; ghost hit -> G=[c]; a1 -> tail as a0: M=[d0,a0]; d0 evicted -> G=[c,d];
#          M=[a0,e0].
# R12 [a]: a in M -> 512.  Final: S=[f0], M=[a1,e0] -> 3.
# Requeueing with freq 0 instead of freq - 1 evicts a at R9 (R12 = 0), as do plain FIFO, head
# requeue and freq reset on promotion (at R7); LRU capacity 3 has evicted a by R12.
CASES["second_chance_decrements_freq"] = Case(
    "S3FIFO", {"capacity": 3, "small_ratio": 0.34},
    [one("a"), one("a", "a", "a"), one("b"), one("c"), one("b"), one("d"), one("c"), one("e"),
     one("d"), one("f"), one("e"), one("a")],
    hits=[0, 1536, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512], final=3,
    mistakes=[SecondChanceResetsFreq, PlainFifoMain, HeadRequeue, FreqResetOnPromotion, "LRU"],
)  # fmt: skip

# Saturating freq. Same queues as above with max_freq 1.
# R1 [a]: S=[a0]. R2 [a,a,a] (3 blocks, 1536 tokens): all three a's resident at arrival, k = 3
#   -> 1536; three accesses: a1, then clamped at 1, 1 (unclamped: 3).
# R3 [x]: pop a1 -> M=[a1]; S=[x0].  R4 [y]: pop x0 -> G=[x]; S=[y0].
# R5 [x]: 0; ghost hit -> M=[a1,x0].  R6 [z]: pop y0 -> G=[y]; S=[z0].
# R7 [y]: 0; ghost hit, M full: a1 -> requeue a0: M=[x0,a0]; x0 evicted -> G=[x]; M=[a0,y0].
# R8 [w]: pop z0 -> G=[x,z]; S=[w0].
# R9 [z]: 0; ghost hit (G=[x]), M full: head a0 evicted -> G=[x,a]; M=[y0,z0].
# R10 [a]: a only in G -> 0; ghost hit, M full: y0 evicted -> G=[x,y]; M=[z0,a0].
# Final: S=[w0], M=[z0,a0] -> 3. Unclamped, a3 survives R7 (a2) and R9 (a1): R10 = 512.
CASES["freq_saturates"] = Case(
    "S3FIFO", {"capacity": 3, "small_ratio": 0.34, "max_freq": 1},
    [one("a"), one("a", "a", "a"), one("x"), one("y"), one("x"), one("z"), one("y"),
     one("w"), one("z"), one("a")],
    hits=[0, 1536, 0, 0, 0, 0, 0, 0, 0, 0], final=3, mistakes=[Unsaturated],
)  # fmt: skip

# freq is updated on every access, not only inside the prefix window.
# capacity 4, small_ratio 0.5: S 2, M 2, G 2.
# R1 [b]: S=[b0].
# R2 [n,b]: n misses first so k = 0; n -> S=[b0,n0]; b is resident -> b1 although it lies
#   past the prefix window.
# R3 [c]: pop b1 -> M=[b1]; S=[n0,c0].
# R4 [b]: b in M -> 512; b2. Final: S=[n0,c0], M=[b2] -> 3.
# Updating freq only on prefix hits leaves b0, sent to G at R3: R4 = 0.
CASES["freq_on_every_access"] = Case(
    "S3FIFO", {"capacity": 4, "small_ratio": 0.5},
    [one("b"), one("n", "b"), one("c"), one("b")],
    hits=[0, 0, 0, 512], final=3, mistakes=["freq_only_on_prefix"],
)  # fmt: skip

# round(), not int(), sizes S. capacity 4, small_ratio 0.4: round(1.6) = 2 (int: 1).
# R1 [a]: S=[a0]. R2 [b]: S=[a0,b0]. R3 [a]: a in S -> 512.
# With S of 1: R2 pops a0 to G, R3 misses (0).
CASES["small_cap_rounds"] = Case(
    "S3FIFO", {"capacity": 4, "small_ratio": 0.4},
    [one("a"), one("b"), one("a")],
    hits=[0, 0, 512], final=2, mistakes=[IntSmallCap],
)  # fmt: skip

# The ghost is as large as M, not S. capacity 4, small_ratio 0.25: S 1, M 3, G 3.
# R1 [a]: S=[a0]. R2 [b]: pop a0 -> G=[a]; S=[b0]. R3 [c]: pop b0 -> G=[a,b]; S=[c0].
# R4 [a]: 0; ghost hit -> M=[a0]; G=[b].
# R5 [d]: pop c0 -> G=[b,c]; S=[d0].  R6 [a]: a in M -> 512.  Final: S=[d0], M=[a0] -> 2.
# With G of 1, a falls out of G at R3, re-enters S at R4 and is pushed to G at R5: R6 = 0.
CASES["ghost_sized_like_main"] = Case(
    "S3FIFO", {"capacity": 4, "small_ratio": 0.25},
    [one("a"), one("b"), one("c"), one("a"), one("d"), one("a")],
    hits=[0, 0, 0, 0, 0, 512], final=2, mistakes=[GhostSizedLikeSmall],
)  # fmt: skip

# LRU is exactly LRU: a hit refreshes recency. capacity 2.
# R1 [a], R2 [b]: cache (LRU first) [a,b]. R3 [a]: 512; [b,a]. R4 [c]: evicts b; [a,c].
# R5 [a]: 512. R6 [b]: 0. Final 2. FIFO (no refresh) evicts a at R4: R5 = 0.
CASES["lru_refreshes_on_hit"] = Case(
    "LRU", {"capacity": 2},
    [one("a"), one("b"), one("a"), one("c"), one("a"), one("b")],
    hits=[0, 0, 512, 0, 512, 0], final=2, mistakes=[FifoForLRU],
)  # fmt: skip


@pytest.mark.parametrize("engine", ["kernel", "reference"])
@pytest.mark.parametrize("name", list(CASES))
def test_hand_worked(name: str, engine: str) -> None:
    case = CASES[name]
    result = replay(make_trace(case.requests), case.policy, block_size=BS, engine=engine,
                    **case.params)  # fmt: skip
    assert result.hit_tokens.tolist() == case.hits
    assert result.final_cache_blocks == case.final
    assert result.total_hit_tokens == sum(case.hits)


def _mutant_outcome(case: Case, mistake: Any) -> tuple[list[int], int]:
    """The case replayed with one mistake: a mutant reference, a replay mistake, or LRU."""
    params = make_params(case.policy, **case.params)
    if mistake == "LRU":
        return simulate(case.requests, LRUReference(make_params("LRU", params.capacity)), BS)
    if isinstance(mistake, str):
        return simulate(case.requests, make_cache(case), BS, mistake)
    return simulate(case.requests, mistake(params), BS)


@pytest.mark.parametrize(
    ("name", "mistake"),
    [(n, m) for n, c in CASES.items() for m in c.mistakes],
    ids=lambda v: v if isinstance(v, str) else v.__name__,
)
def test_hand_worked_case_catches_mistake(name: str, mistake: Any) -> None:
    case = CASES[name]
    assert simulate(case.requests, make_cache(case), BS) == (case.hits, case.final)
    assert _mutant_outcome(case, mistake) != (case.hits, case.final)


def make_cache(case: Case) -> ReferencePolicy:
    """The case's policy as its registered plain-Python reference."""
    return get_policy(case.policy).reference(make_params(case.policy, **case.params))


def test_every_common_mistake_is_caught() -> None:
    """The spec's list of common mistakes, each with at least one hand-worked case."""
    caught = {m if isinstance(m, str) else m.__name__ for c in CASES.values() for m in c.mistakes}
    assert caught >= {
        "LRU", "no_clamp", "GhostResident", "Unsaturated", "PlainFifoMain", "HeadRequeue",
        "set_intersection", "freq_only_on_prefix", "GhostInFinalSize", "FreqResetOnPromotion",
        "IntSmallCap", "GhostSizedLikeSmall", "access_before_scan", "FifoForLRU",
        "SecondChanceResetsFreq",
    }  # fmt: skip


def test_small_cap_uses_bankers_round() -> None:
    # round(4096 * 0.1) = round(409.6) = 410 (int() gives 409); round(10 * 0.25) = round(2.5)
    # = 2 (round half to even; half-up would give 3).
    assert S3FIFOParams(capacity=4096, small_ratio=0.1).small_cap == 410
    assert S3FIFOParams(capacity=4096, small_ratio=0.1).main_cap == 3686
    assert S3FIFOParams(capacity=10, small_ratio=0.25).small_cap == 2
    assert S3FIFOParams(capacity=4096, small_ratio=0.1).ghost_cap == 3686


# --- second chance, for every freq up to max_freq ----------------------------------------------


def second_chance_trace(main_cap: int, f: int, k: int) -> list[Request]:
    """Block ``a`` accessed ``1 + f`` times in S, promoted to M (with freq min(f, max_freq)),
    then M filled with ``main_cap - 1`` cold blocks and ``k`` more admissions to M, then ``a``.

    S holds 1 block. R1 [a]; R2 [a] * f; R3 [n0] promotes a: M=[a]. Then for i = 1, 2, ...:
    [n_i] pushes S's cold head n_{i-1} to G and [n_{i-1}] ghost-hits it into M with freq 0. The
    first main_cap - 1 of those fill M = [a, n0, ...]; each later one evicts exactly one block.
    """
    requests = [one("a"), one(*["a"] * f), one("n0")]
    for i in range(1, main_cap + k):
        requests += [one(f"n{i}"), one(f"n{i - 1}")]
    return [*requests, one("a")]


def every_s3fifo_engine(trace: Trace, params: dict[str, Any]) -> dict[str, tuple[list[int], int]]:
    """Hit tokens per request and final size from each implementation of S3FIFO the public
    APIs reach: the single cache (kernel and reference), a one-tier hierarchy (the tier
    kernel), and one instance behind the least_loaded router (the cluster kernel)."""
    out = {}
    for engine in ("kernel", "reference"):
        r = replay(trace, "S3FIFO", block_size=BS, engine=engine, **params)
        out[engine] = (r.hit_tokens.tolist(), r.final_cache_blocks)
    t = replay_tiers(trace, [{"policy": "S3FIFO", **params}], block_size=BS)
    out["tiers"] = (t.hit_tokens.tolist(), t.final_cache_blocks)
    c = replay_cluster(trace, 1, "least_loaded", "S3FIFO", params["capacity"], BS,
                       policy_params={k: v for k, v in params.items() if k != "capacity"},
                       model="llama-3.1-8b", hardware="h100")  # fmt: skip
    assert c.engine == "kernel"
    out["cluster"] = (c.hit_tokens.tolist(), int(c.final_cache_blocks.sum()))
    return out


def a_survives(main_cap: int, freq: int, k: int) -> bool:
    """Whether ``a`` (freq ``freq`` at M's head, the other main_cap - 1 blocks cold) is still
    resident after k admissions to the full M. Each admission evicts one cold block; a is
    passed over (requeued with freq - 1) at the admissions that find it at the head: the 1st,
    then every main_cap - 1 admissions after (the cold blocks ahead of it): admissions
    1 + j * (main_cap - 1), j = 0, 1, ... At its pass j + 1 it holds freq - j, so it is
    evicted at pass freq + 1, admission 1 + freq * (main_cap - 1): resident iff
    k <= freq * (main_cap - 1)."""
    return k <= freq * (main_cap - 1)


@pytest.mark.parametrize("max_freq", [1, 2, 3, 5])
@pytest.mark.parametrize("main_cap", [2, 3, 5])
def test_second_chance_passes_equal_freq(main_cap: int, max_freq: int) -> None:
    """For every freq a promoted block can hold (1 .. max_freq, and past it, saturated), the
    block survives exactly freq passes over M's head: resident after freq * (main_cap - 1)
    admissions, evicted by the next one. Requeueing with freq 0 (not freq - 1) fails every
    freq >= 2; a missing decrement or a decrement by two fails too."""
    params = {"capacity": main_cap + 1, "small_ratio": 1 / (main_cap + 1), "max_freq": max_freq}
    assert S3FIFOParams(**params).small_cap == 1
    for f in range(1, max_freq + 2):
        freq = min(f, max_freq)
        for k in (freq * (main_cap - 1), freq * (main_cap - 1) + 1):
            requests = second_chance_trace(main_cap, f, k)
            probe = BS if a_survives(main_cap, freq, k) else 0
            hits = [0, BS * f, *[0] * (len(requests) - 3), probe]
            for engine, (got, final) in every_s3fifo_engine(make_trace(requests), params).items():
                assert got == hits, (engine, f, k)
                assert final == main_cap + 1, (engine, f, k)
            if freq >= 2 and probe:
                mutant = SecondChanceResetsFreq(make_params("S3FIFO", **params))
                assert simulate(requests, mutant, BS)[0][-1] == 0
