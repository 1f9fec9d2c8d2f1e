"""BELADY and the prefix-aware policies (LRU_TAIL_FIRST, LRU_LEAF, S3FIFO_LEAF).

Hand-worked cases (derived in the comment above each; queues and LRU lists written oldest
first, ``a1`` = block ``a`` with freq 1, every block 512 tokens) are checked on both engines,
together with the numbers the plain policy gives on the same trace, so each case shows where the
variant differs. Then Hypothesis holds kernel and reference equal, and checks that BELADY never
has fewer block hits than any registered policy.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import prefixsim.policies.belady
import prefixsim.policies.lru_leaf
import prefixsim.policies.lru_tail_first
import prefixsim.policies.s3fifo_leaf  # noqa: F401  (the imports register the policies)
from conftest import Request, make_trace
from prefixsim import ParameterError, make_params, replay, replay_params
from prefixsim.policies import get_policy, policy_names
from prefixsim.policies.belady import BeladyParams, BeladyReference
from strategies import BLOCK_SIZES, conversations
from test_equivalence import assert_engines_agree

BS = 512
NEW_POLICIES = ("BELADY", "LRU_TAIL_FIRST", "LRU_LEAF", "S3FIFO_LEAF")


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
    counters: dict[str, int] = field(default_factory=dict)
    """Counters checked exactly (a subset)."""
    plain: tuple[str, list[int]] | None = None
    """A plain policy (same params) and its hit tokens on the same trace, which differ."""


CASES: dict[str, Case] = {}

# BELADY evicts the block reused farthest in the future. capacity 2, stream a b c a b.
# R1 [a,b]: 0; cache {a,b}. R2 [c]: 0; c misses into a full cache: a is next used at position 3,
# b at 4 -> evict b; {a,c}. R3 [a]: 512. R4 [b]: 0; b misses: a and c are never used again
# (tie: the earliest last access goes, c at 2 before a at 3) -> evict c; final 2.
# Block hits 1 (a in R3), evictions 2. LRU evicts a at R2 (the least recent): R3 = 0.
CASES["belady_farthest_next_use"] = Case(
    "BELADY", {"capacity": 2},
    [one("a", "b"), one("c"), one("a"), one("b")],
    hits=[0, 0, 512, 0], final=2, counters={"block_hits": 1, "evictions": 2},
    plain=("LRU", [0, 0, 0, 0]),
)  # fmt: skip

# BELADY is optimal for block hits, not for prefix hits. capacity 2, stream c a b c a c.
# BELADY: R1 [c]: 0; {c}. R2 [a,b]: 0; a admitted; b misses: c next at 3, a at 4 -> evict a;
# {c,b}. R3 [c]: 512; c hit. R4 [a,c]: a is gone -> 0; a misses: b never again, c next at 5 ->
# evict b; c hit. Tokens 512, block hits 2.
# LRU_TAIL_FIRST: R1: [c]. R2: a admitted; b misses with the cache full: the old LRU end c goes;
# the request leaves [b,a]. R3 [c]: 0; c evicts b: [a,c]. R4 [a,c]: both resident -> 1024.
# Tokens 1024 with the same 2 block hits (a, c in R4).
CASES["belady_not_prefix_optimal"] = Case(
    "BELADY", {"capacity": 2},
    [one("c"), one("a", "b"), one("c"), one("a", "c")],
    hits=[0, 0, 512, 0], final=2, counters={"block_hits": 2, "evictions": 2},
    plain=("LRU_TAIL_FIRST", [0, 0, 0, 1024]),
)  # fmt: skip

# LRU_TAIL_FIRST keeps a chain's head. capacity 3.
# R1 [a,b,c]: 0; placed a, b, c; the request leaves [c,b,a] (a most recent).
# R2 [x]: 0; x evicts the LRU end c: [b,a,x]. R3 [a,b]: 1024. Final 3.
# LRU leaves [a,b,c] after R1, so x evicts the head a and R3 = 0.
CASES["tail_first_keeps_head"] = Case(
    "LRU_TAIL_FIRST", {"capacity": 3},
    [one("a", "b", "c"), one("x"), one("a", "b")],
    hits=[0, 0, 1024], final=3, counters={"block_hits": 2, "evictions": 1, "self_evictions": 0},
    plain=("LRU", [0, 0, 0]),
)  # fmt: skip

# A request larger than the cache evicts its own tail. capacity 2.
# R1 [a,b,c,d]: a, b placed; c: nothing old, evict the last placed b (self); d evicts c (self);
# the request leaves [d,a]. R2 [a,b]: a resident -> 512; a hit; b misses: old d goes: [b,a].
# R3 [a,b]: 1024. Final 2; evictions b, c, d; self_evictions 2; block hits a, a, b = 3.
# LRU keeps the tail [c,d] after R1: R2 = 0.
CASES["tail_first_request_larger_than_cache"] = Case(
    "LRU_TAIL_FIRST", {"capacity": 2},
    [one("a", "b", "c", "d"), one("a", "b"), one("a", "b")],
    hits=[0, 512, 1024], final=2,
    counters={"block_hits": 3, "evictions": 3, "self_evictions": 2},
    plain=("LRU", [0, 0, 1024]),
)  # fmt: skip

# Duplicates: an already placed block keeps its place; one evicted from the request is a miss.
# capacity 2. R1 [a,b,c,b]: a, b placed; c evicts b (self); b misses and evicts c (self); the
# request leaves [b,a]. R2 [a,b]: 1024. Block hits 2 (R2), evictions 2, both self.
# LRU: R1 leaves [c,b] (a evicted by c, b hit): R2 = 0.
CASES["tail_first_duplicates"] = Case(
    "LRU_TAIL_FIRST", {"capacity": 2},
    [one("a", "b", "c", "b"), one("a", "b")],
    hits=[0, 1024], final=2, counters={"block_hits": 2, "evictions": 2, "self_evictions": 2},
    plain=("LRU", [0, 0]),
)  # fmt: skip

# LRU_LEAF protects a parent whose child is still resident. capacity 3.
# R1 [a,b]: a (root), b (parent a). R2 [z,b]: z misses -> 0; z admitted (root); b hit (keeps
# parent a). LRU order [a,z,b]; leaves z, b; a has child b. R3 [x]: the LRU leaf z goes.
# R4 [a,b]: 1024. Final 3.
# LRU evicts a at R3 (R4 = 0); so does LRU_TAIL_FIRST, whose R2 leaves [a,b,z].
CASES["leaf_protects_parent"] = Case(
    "LRU_LEAF", {"capacity": 3},
    [one("a", "b"), one("z", "b"), one("x"), one("a", "b")],
    hits=[0, 0, 0, 1024], final=3, counters={"block_hits": 3, "evictions": 1},
    plain=("LRU", [0, 0, 0, 0]),
)  # fmt: skip
CASES["leaf_protects_parent_vs_tail_first"] = Case(
    "LRU_LEAF", {"capacity": 3},
    [one("a", "b"), one("z", "b"), one("x"), one("a", "b")],
    hits=[0, 0, 0, 1024], final=3,
    plain=("LRU_TAIL_FIRST", [0, 0, 0, 0]),
)  # fmt: skip

# A cycle of parent links forces a plain-LRU eviction. capacity 2.
# R0 [x,b]: x (root), b (parent x). R1 [b,a]: b resident -> 512; b hit; a misses: leaves: b
# only (x has child b) -> evict b (x becomes a leaf); a admitted under b (not resident).
# R2 [a,b]: a resident -> 512; a hit; b misses: leaves x (last 0), a (last 4) -> evict x; b
# admitted under a. Now a's parent is b and b's is a: no leaf. R3 [c]: 0; forced: the LRU block
# a goes (b loses its child). R4 [b]: 512. Final {b,c}: 2; evictions b, x, a; block hits 3.
# LRU: R1 evicts x, so R2 finds a and b resident: 1024; R3 evicts a; R4 512.
CASES["leaf_cycle_forces_lru"] = Case(
    "LRU_LEAF", {"capacity": 2},
    [one("x", "b"), one("b", "a"), one("a", "b"), one("c"), one("b")],
    hits=[0, 512, 512, 0, 512], final=2,
    counters={"block_hits": 3, "evictions": 3, "forced_evictions": 1},
    plain=("LRU", [0, 512, 1024, 0, 512]),
)  # fmt: skip

# S3FIFO_LEAF skips a freq-0 parent in M. capacity 4, small_ratio 0.5: S 2, M 2, G 2.
# R1 [a,b]: S=[a0,b0], b under a. R2 [a,b]: 1024; a1, b1.
# R3 [c]: pop a1 -> M=[a1]; S=[b1,c0]. R4 [d]: pop b1 -> M=[a1,b1]; S=[c0,d0].
# R5 [e]: pop c0 -> G=[c]; S=[d0,e0].
# R6 [c]: 0; ghost hit, admit_to_M(c, 0) with M full: a1 -> [b1,a0]; b1 -> [a0,b0];
#   a0 has the resident child b: skipped -> [b0,a0]; b0 has no child: evicted -> G=[b].
#   M=[a0,c0].
# R7 [a,b]: a resident, b in G -> 512. Final: a hit; b ghost hit: a1 -> [c0,a0]; c0 evicted;
#   M=[a0,b0], S=[d0,e0] -> 4. leaf_skips 1.
# S3FIFO evicts a0 at R6 (M=[b0,c0]), so R7 = 0.
CASES["s3fifo_leaf_skips_parent"] = Case(
    "S3FIFO_LEAF", {"capacity": 4, "small_ratio": 0.5},
    [one("a", "b"), one("a", "b"), one("c"), one("d"), one("e"), one("c"), one("a", "b")],
    hits=[0, 1024, 0, 0, 0, 0, 512], final=4,
    counters={"leaf_skips": 1, "forced_evictions": 0, "ghost_hits": 2, "promotions": 2},
    plain=("S3FIFO", [0, 1024, 0, 0, 0, 0, 0]),
)  # fmt: skip

# Every block of M a freq-0 parent: after |M| skips in a row the head goes anyway.
# capacity 3, small_ratio 0.34: S 1, M 2, G 2.
# R1 [x]: S=[x0]. R2 [z]: pop x0 -> G=[x]; S=[z0].
# R3 [x,y]: 0; x ghost hit -> M=[x0] (root); y: pop z0 -> G=[z]; S=[y0], y under x.
# R4 [x,y,v]: x, y resident -> 1024; x1, y1; v: pop y1 -> M=[x1,y1]; S=[v0], v under y.
# R5 [z]: 0; ghost hit, admit_to_M(z, 0): x1 -> [y1,x0]; y1 -> [x0,y0]; x0 (child y) skipped
#   -> [y0,x0]; y0 (child v) skipped -> [x0,y0]; 2 skips in a row = |M|: x0 evicted (forced)
#   -> G=[x]. M=[y0,z0], S=[v0]: final 3. Evictions x (R2), z (R3), x (R5); block hits x, y
#   (R4). Same hits as S3FIFO (which also evicts x0 here).
CASES["s3fifo_leaf_forced"] = Case(
    "S3FIFO_LEAF", {"capacity": 3, "small_ratio": 0.34},
    [one("x"), one("z"), one("x", "y"), one("x", "y", "v"), one("z")],
    hits=[0, 0, 0, 1024, 0], final=3,
    counters={"block_hits": 2, "evictions": 3, "ghost_hits": 2, "promotions": 1,
              "leaf_skips": 2, "forced_evictions": 1},
)  # fmt: skip


@pytest.mark.parametrize("engine", ["kernel", "reference"])
@pytest.mark.parametrize("name", list(CASES))
def test_hand_worked(name: str, engine: str) -> None:
    case = CASES[name]
    trace = make_trace(case.requests)
    result = replay(trace, case.policy, block_size=BS, engine=engine, **case.params)
    assert result.hit_tokens.tolist() == case.hits
    assert result.final_cache_blocks == case.final
    for counter, value in case.counters.items():
        assert result.counters[counter] == value, counter
    if case.plain is not None:
        plain, plain_hits = case.plain
        kwargs = {k: v for k, v in case.params.items() if k != "capacity"}
        other = replay(trace, plain, case.params["capacity"], BS, engine=engine, **kwargs)
        assert other.hit_tokens.tolist() == plain_hits
        assert plain_hits != case.hits


# --- kernel == reference ----------------------------------------------------------------------


@st.composite
def params_for(draw: st.DrawFn, policy: str, capacity: int | None = None) -> Any:
    if capacity is None:
        capacity = draw(st.one_of(st.integers(1, 6), st.integers(7, 64)))
    kwargs: dict[str, Any] = {}
    if policy == "S3FIFO_LEAF":
        max_freq = draw(st.integers(0, 4))
        kwargs = {
            "small_ratio": draw(st.sampled_from([0.1, 0.25, 0.34, 0.5, 0.75, 0.9])),
            "max_freq": max_freq,
            "ghost_freq": draw(st.integers(0, max_freq)),
        }
    try:
        return make_params(policy, capacity, **kwargs)
    except ParameterError:  # S3FIFO_LEAF needs non-empty S and M
        assume(False)
        raise


@st.composite
def forests(draw: st.DrawFn) -> tuple[list[Request], int]:
    """Rounds of (short chains under shared parents, the parents hit alone, fresh roots and
    parent hits), at a capacity near the working set: parents then become leaves again out of
    recency order, which is what LRU_LEAF's heap (and S3FIFO_LEAF's skips) are for."""
    requests: list[Request] = []
    fresh = 0
    for rnd in range(draw(st.integers(1, 3))):
        parents = draw(st.lists(st.integers(0, 30), min_size=1, max_size=24, unique=True))
        for p in parents:
            chain = [f"c{p}.{rnd}.{d}" for d in range(draw(st.integers(1, 2)))]
            requests.append(one(f"p{p}", *chain))
        for p in draw(st.permutations(parents)):
            requests.append(one(f"p{p}"))
        for _ in range(draw(st.integers(0, 30))):
            if draw(st.booleans()):
                fresh += 1
                requests.append(one(f"x{fresh}"))
            else:
                requests.append(one(f"p{draw(st.sampled_from(parents))}"))
    distinct = len({h for _, ids in requests for h in ids})
    capacity = draw(st.integers(max(1, distinct // 4), max(1, distinct)))
    return requests, capacity


def _agree_on_conversations(policy: str, data: st.DataObject) -> None:
    requests = data.draw(conversations())
    params = data.draw(params_for(policy))
    block_size = data.draw(st.sampled_from(BLOCK_SIZES))
    assert_engines_agree(make_trace(requests), params, block_size)


@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_belady_kernel_matches_reference(data: st.DataObject) -> None:
    _agree_on_conversations("BELADY", data)


@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_lru_tail_first_kernel_matches_reference(data: st.DataObject) -> None:
    _agree_on_conversations("LRU_TAIL_FIRST", data)


@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_lru_leaf_kernel_matches_reference(data: st.DataObject) -> None:
    _agree_on_conversations("LRU_LEAF", data)


@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_s3fifo_leaf_kernel_matches_reference(data: st.DataObject) -> None:
    _agree_on_conversations("S3FIFO_LEAF", data)


@settings(max_examples=60, deadline=None)
@given(
    forest=forests(),
    policy=st.sampled_from(["LRU_LEAF", "S3FIFO_LEAF", "LRU_TAIL_FIRST"]),
    data=st.data(),
)
def test_kernels_match_reference_on_forests(forest, policy, data) -> None:  # type: ignore[no-untyped-def]
    requests, capacity = forest
    params = data.draw(params_for(policy, max(capacity, 2)))
    assert_engines_agree(make_trace(requests), params, BS)


@pytest.mark.parametrize(("parents", "kills"), [(20, 10), (40, 0), (40, 30)])
def test_lru_leaf_heap_compaction_and_growth(parents: int, kills: int) -> None:
    """Parents p_j are re-hit after their children c_j, so evicting c_j (oldest first) makes
    p_j a leaf newer than the leaf-list head: it goes to the kernel's heap. q's entry, the
    oldest, stays on top while the c_j go, so the entries of parents hit again (``kills``) die
    below it: the heap (16 slots to start) fills up, is compacted and, with many live entries,
    grows. Checked against the reference (checked with an instrumented copy of the kernel:
    the first case compacts 10 dead entries away without growing, the others grow)."""
    requests = [one("q", "cq")] + [one(f"p{j}", f"c{j}") for j in range(parents)]
    requests += [one("q")] + [one(f"p{j}") for j in range(parents)]
    requests += [one(f"x{k}") for k in range(11)]
    requests += [one(f"p{j}") for j in range(kills)]
    requests += [one(f"x{k}") for k in range(11, 2 * parents)]
    params = make_params("LRU_LEAF", 2 * parents + 2)
    assert_engines_agree(make_trace(requests), params, BS)


def test_belady_heap_compaction() -> None:
    """A long run of hits on one block leaves a stale heap entry per hit: 200 of them overflow
    the kernel's initial 16 slots many times over."""
    requests = [one(*(["a"] * 100)), one("b", "c"), one(*(["a"] * 100)), one("c", "b")]
    for capacity in (1, 2, 3):
        assert_engines_agree(make_trace(requests), make_params("BELADY", capacity), BS)


def test_belady_reference_needs_its_stream() -> None:
    cache = BeladyReference(BeladyParams(capacity=2))
    with pytest.raises(ValueError, match="prepare"):
        cache.access("a")
    cache.prepare(["a", "b"], [0, 2])
    cache.access("a")
    with pytest.raises(ValueError, match="prepare"):
        cache.access("c")


# --- BELADY's optimality for block hits -------------------------------------------------------


def _competitors(capacity: int) -> list[Any]:
    """Every registered policy at its defaults, plus S3FIFO-like policies with several splits
    and max_freq 0 (FIFO-like S and M)."""
    out = []
    for name in policy_names():
        if name == "RADIX":
            continue  # it may bypass: a request larger than the cache keeps only what fits
        variants: list[dict[str, Any]] = [{}]
        if "max_freq" in get_policy(name).params_type.field_names():
            variants += [
                {"small_ratio": ratio, "max_freq": mf, "ghost_freq": 0}
                for ratio in (0.1, 0.5, 0.9)
                for mf in (0, 3)
            ]
        for kwargs in variants:
            try:
                out.append(make_params(name, capacity, **kwargs))
            except ParameterError:
                continue  # e.g. S3FIFO at capacity 1
    return out


@settings(max_examples=100, deadline=None)
@given(requests=conversations(), capacity=st.one_of(st.integers(1, 6), st.integers(7, 64)))
def test_belady_has_the_most_block_hits(requests, capacity) -> None:  # type: ignore[no-untyped-def]
    """MIN is optimal for block hits among policies that keep every accessed block resident right
    after its access within ``capacity`` blocks (all registered ones do; a policy that may
    bypass admission would not be covered). Prefix hit tokens are NOT compared: BELADY is not
    optimal for them (see ``belady_not_prefix_optimal``)."""
    trace = make_trace(requests)
    best = replay_params(trace, make_params("BELADY", capacity), 1).counters["block_hits"]
    for params in _competitors(capacity):
        hits = replay_params(trace, params, 1).counters["block_hits"]
        assert hits <= best, params


def test_new_policies_are_registered() -> None:
    assert set(NEW_POLICIES) <= set(policy_names())
    for name in NEW_POLICIES:
        assert get_policy(name).counter_names[:2] == ("block_hits", "evictions")


@pytest.mark.slow
@pytest.mark.parametrize(
    ("policy", "capacity"),
    [("BELADY", 64), ("LRU_TAIL_FIRST", 64), ("LRU_TAIL_FIRST", 4096), ("LRU_LEAF", 64),
     ("LRU_LEAF", 4096), ("S3FIFO_LEAF", 64), ("S3FIFO_LEAF", 4096)],
)  # fmt: skip
def test_engines_agree_on_bundled_trace(conversation: Any, policy: str, capacity: int) -> None:
    # (BELADY's reference takes a linear max per miss: at 4096 it needs minutes.)
    assert_engines_agree(conversation, make_params(policy, capacity), 512)
