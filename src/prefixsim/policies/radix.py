"""RADIX: SGLang's radix cache, one page per block.

Variant: SGLang's ``RadixCache`` (``python/sglang/srt/mem_cache/radix_cache.py``) with
``page_size = block_size``, and the scheduler's allocation rule around it; with
``semantics="sglang"`` (:mod:`prefixsim.semantics`) it reproduces SGLang request by request
(:mod:`prefixsim.oracles.sglang_radix` is the engine-faithful oracle it is tested against).
Unlike ``LRU_LEAF`` (an LRU over single blocks that evicts leaves only), recency and eviction
are per radix *node*: a run of blocks inserted together.

The tree. A radix node holds a run of blocks (its key) under a parent node; the root holds
none. Every resident block is in exactly one node; each node has a ``time`` (its last access, a
counter advanced at every ``time.monotonic()`` call of SGLang's code, in its order) and a lock
count. With block hashes that identify their prefix (Mooncake's: equal hashes mean equal
prefixes) a request's resident blocks are a path from the root, and the tree is SGLang's. Other
traces are replayed by the same rules on the blocks: a resident block is walked to where it is
(its node refreshed, split where the request leaves it), and the blocks a request adds after it
hang under its node.

A request with cached blocks ``B`` (``hit`` of them reused) and ``n_temp`` temporary pages::

    serve(B, hit, n_temp):
        match(B[:hit]):                       # RadixCache._match_prefix_helper
            root.time = now; walk from the root, each visited node's time = now;
            if the match ends inside a node: split it there (the upper part, created now, is
            the last node; the lower part keeps the time the walk just gave it: split refresh)
        lock the nodes walked and their ancestors
        need = len(B) - hit + n_temp          # pages the prefill computes into
        if free < need + spare_pages:         # alloc_paged_token_slots_extend's page per request
            evict(need + spare_pages - free)  # the shortfall (evict_shortfall=False: all of it)
        hold need pages
        for each decode step (with cache_output_blocks: one per generated token but the first):
            make room for max(spare_pages, 1 if the step starts a page else 0) pages the same
            way, then hold the page the step starts, if it does
        insert(B):                            # cache_finished_req -> RadixCache.insert
            root.time = now; walk and refresh as in match, splitting where B leaves a node;
            the rest of B becomes a new leaf node (created now); blocks already in the tree
            are duplicates, their pages freed
        free the temporary pages; unlock

    evict(n): until n pages are freed: take the unlocked leaf node with the oldest time and
        remove it whole (whole_node=False: its last block only); a parent left without
        children becomes a leaf

``split_refresh=False`` keeps the lower part of a split at its old time; ``whole_node=False``
evicts block by block; with both off and ``spare_pages=0`` RADIX is ``LRU_LEAF`` on requests
without a temporary or recomputed block (block-level leaf LRU; tested). A request needing more
pages than the cache can free caches the leading ones that fit (an engine would refuse it;
under the engine semantics such a trace is refused before the replay).

Counters: ``block_hits`` (blocks of the request resident at arrival), ``evictions`` (blocks
evicted), ``evicted_nodes``, ``splits``, ``duplicate_blocks`` (recomputed blocks found in the
tree at insertion and freed).
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from numba import njit

from ..engine.lists import scalars
from ..engine.rules import hit_tokens, scan_limit, temp_from
from ..engine.steps import Space, Steps, counter_array
from ..errors import ParameterError
from . import radix_tree
from .base import (
    COMMON_COUNTERS,
    Check,
    PolicyParams,
    PolicySpec,
    ReferencePolicy,
    ix,
    register,
)
from .radix_tree import DUPLICATES, SIZE, STAMP, RadixState, evict, insert, match


def _check_flag(name: str) -> Any:
    def check(value: object) -> tuple[bool]:
        if not isinstance(value, (bool, np.bool_)):
            raise ParameterError(name, value, "expected true or false")
        return (bool(value),)

    return check


def _check_spare(value: object) -> tuple[int]:
    from .base import check_int

    return (check_int("spare_pages", value, 0),)


@dataclass(frozen=True)
class RadixParams(PolicyParams):
    policy: ClassVar[str] = "RADIX"
    split_refresh: bool = True
    """A split's lower part keeps the access time the match gave it (SGLang)."""
    whole_node: bool = True
    """Evict a leaf node whole (SGLang); False evicts its last block only."""
    spare_pages: int = 1
    """Pages evicted beyond a request's need (SGLang assumes each request needs a new page)."""
    evict_shortfall: bool = True
    """Evict only the shortfall (SGLang since sgl-project/sglang#32016); False evicts the
    whole demand when short, as earlier releases."""

    checks: ClassVar[tuple[Check, ...]] = (
        *PolicyParams.checks,
        (("split_refresh",), _check_flag("split_refresh")),
        (("whole_node",), _check_flag("whole_node")),
        (("spare_pages",), _check_spare),
        (("evict_shortfall",), _check_flag("evict_shortfall")),
    )


class _Node:
    __slots__ = ("children", "key", "lock_ref", "parent", "time", "uid")

    def __init__(self, key: list[Hashable], parent: _Node | None, time: int, uid: int) -> None:
        self.key = key
        self.parent = parent
        self.children: dict[Hashable, _Node] = {}  # by the first block of the child's key
        self.lock_ref = 0
        self.time = time
        self.uid = uid


class RadixReference(ReferencePolicy):
    """The tree of :mod:`the module docstring <prefixsim.policies.radix>`; ``node_of`` maps
    each resident block to its node."""

    counter_names = (
        *COMMON_COUNTERS,
        "evicted_nodes",
        "splits",
        "duplicate_blocks",
    )

    def __init__(self, params: RadixParams) -> None:
        super().__init__(params)
        self.p = params
        self.capacity = params.capacity
        self._clock = itertools.count(1)
        self._uids = itertools.count()
        self.root = _Node([], None, self._now(), next(self._uids))
        self.node_of: dict[Hashable, _Node] = {}

    def _now(self) -> int:
        return next(self._clock)

    def is_resident(self, h: Hashable) -> bool:
        return h in self.node_of

    def resident_count(self) -> int:
        return len(self.node_of)

    def access(self, h: Hashable) -> None:
        self.access_request([h])

    def access_request(self, hash_ids: Sequence[Hashable]) -> None:
        # The specification's replay: every block cached, the whole resident prefix reused.
        self.serve_request(hash_ids, self.prefix_blocks(hash_ids), 0)

    # --- request-level hooks (prefixsim.mode_replay.RequestLevelPolicy) --------------------

    def prefix_blocks(self, blocks: Sequence[Hashable]) -> int:
        k = 0
        while k < len(blocks) and blocks[k] in self.node_of:
            k += 1
        return k

    def serve_request(
        self,
        blocks: Sequence[Hashable],
        hit: int,
        n_temp: int,
        decode: Sequence[bool] = (),
    ) -> None:
        blocks = list(blocks)
        self.counters["block_hits"] += self.prefix_blocks(blocks)
        touched = self._match(blocks[:hit])
        for node in touched:
            self._lock(node, +1)
        # Prefill: the request's pages past the hit, but those its decode steps take later.
        held = len(blocks) - hit + n_temp - sum(decode)
        self._make_room(held + self.p.spare_pages, 0)
        free = self.capacity - len(self.node_of)
        held = min(held, free)
        # Decode: every step checks for its spare page, and a step that starts a page takes it.
        for takes_page in decode:
            self._make_room(max(self.p.spare_pages, int(takes_page)), held)
            if takes_page and held < self.capacity - len(self.node_of):
                held += 1
        # Pages go to the cached blocks first; whatever did not fit is never cached.
        cached = hit + min(len(blocks) - hit, held)
        in_tree = self._insert(blocks[:cached])
        self.counters["duplicate_blocks"] += max(in_tree - hit, 0)
        for node in touched:
            self._lock(node, -1)

    def _make_room(self, target: int, held: int) -> None:
        """SGLang's evict_from_tree_cache: when fewer than ``target`` pages are free (besides
        the ``held`` pages of the running request), evict the shortfall (or all of ``target``
        with ``evict_shortfall=False``)."""
        free = self.capacity - len(self.node_of) - held
        if free < target:
            self._evict(target - free if self.p.evict_shortfall else target)

    # --- the tree --------------------------------------------------------------------------

    def _match(self, key: list[Hashable]) -> list[_Node]:
        """RadixCache._match_prefix_helper over resident blocks: the root and every node the
        key walks through get a new time; a match that ends inside a node splits it there.
        Returns the nodes walked (the upper part of a split), to lock. The key is resident
        (it is the reused prefix), so each of its blocks has a node; with hashes that identify
        their prefix the nodes form one path from the root, as in SGLang. Otherwise a block may
        jump to another branch: the walk goes on from that block's node."""
        if not key:
            return []
        self.root.time = self._now()
        walked = []
        i = 0
        while i < len(key):
            node = self.node_of[key[i]]
            pos = node.key.index(key[i])
            before = node.time
            node.time = self._now()
            m = _common(node.key, pos, key, i)
            i += m
            if i == len(key) and pos + m < len(node.key):
                node = self._split(node, pos + m, before)
            walked.append(node)
        return walked

    def _insert(self, key: list[Hashable]) -> int:
        """RadixCache._insert_helper over resident blocks: walk (refreshing, splitting where the
        key stops inside a node) as far as the key's blocks are resident, then the rest becomes
        a new leaf under the node that ends with the block before it. Returns the number of
        leading blocks already in the tree. With hashes that do not identify their prefix, a
        resident block later in the key is walked to where it is, and new blocks after it hang
        under its node."""
        self.root.time = self._now()
        parent = self.root
        i = 0
        leading = -1
        while i < len(key):
            node = self.node_of.get(key[i])
            if node is None:
                if leading < 0:
                    leading = i
                j = i
                seen = set()
                while j < len(key) and key[j] not in self.node_of and key[j] not in seen:
                    seen.add(key[j])
                    j += 1
                leaf = _Node(key[i:j], parent, self._now(), next(self._uids))
                parent.children[key[i]] = leaf
                for h in leaf.key:
                    self.node_of[h] = leaf
                parent = leaf
                i = j
                continue
            pos = node.key.index(key[i])
            before = node.time
            node.time = self._now()
            m = _common(node.key, pos, key, i)
            i += m
            if pos + m < len(node.key):
                node = self._split(node, pos + m, before)
            parent = node
        return len(key) if leading < 0 else leading

    def _split(self, child: _Node, m: int, before: int) -> _Node:
        """``child`` becomes the part of its key after ``m`` blocks, under a new node holding
        the first ``m`` (created now, so newer than ``child``)."""
        parent = child.parent
        assert parent is not None
        upper = _Node(child.key[:m], parent, self._now(), next(self._uids))
        upper.lock_ref = child.lock_ref
        parent.children[upper.key[0]] = upper
        child.key = child.key[m:]
        child.parent = upper
        upper.children[child.key[0]] = child
        for h in upper.key:
            self.node_of[h] = upper
        if not self.p.split_refresh:
            child.time = before
        self.counters["splits"] += 1
        return upper

    def _lock(self, node: _Node, delta: int) -> None:
        while node is not self.root:
            node.lock_ref += delta
            assert node.parent is not None
            node = node.parent

    def _evict(self, n: int) -> None:
        heap = [(x.time, x.uid, x) for x in self._leaves()]
        heapq.heapify(heap)
        evicted = 0
        while evicted < n and heap:
            _, _, x = heapq.heappop(heap)
            if x is self.root:
                break
            if x.lock_ref > 0:
                continue
            parent = x.parent
            assert parent is not None
            if self.p.whole_node or len(x.key) == 1:
                del parent.children[x.key[0]]
                for h in x.key:
                    del self.node_of[h]
                evicted += len(x.key)
                self.counters["evictions"] += len(x.key)
                self.counters["evicted_nodes"] += 1
                if not parent.children:
                    heapq.heappush(heap, (parent.time, parent.uid, parent))
            else:  # one block, the node stays a leaf with its time
                del self.node_of[x.key.pop()]
                evicted += 1
                self.counters["evictions"] += 1
                heapq.heappush(heap, (x.time, x.uid, x))

    def _leaves(self) -> list[_Node]:
        out, stack = [], [self.root]
        while stack:
            node = stack.pop()
            if node.children:
                stack.extend(node.children.values())
            else:
                out.append(node)
        return out


def _common(node_key: list[Hashable], pos: int, key: list[Hashable], start: int) -> int:
    """Blocks ``node_key[pos:]`` shares with ``key[start:]``, from the first."""
    m = 0
    while pos + m < len(node_key) and start + m < len(key) and node_key[pos + m] == key[start + m]:
        m += 1
    return m


def radix_state(p: RadixParams, space: Space) -> RadixState:
    m = min(p.capacity, space.n_ids) + 1  # nodes per cache, its root included
    bits = m.bit_length()
    # A cache's clock advances at most twice per block of a request's match and twice per
    # block of its insertion (a refresh or creation, and a split): below 4 per access.
    if (4 * len(space.stream) + 8).bit_length() + bits > 62 or space.n_caches * m >= 2**31:
        raise ValueError("RADIX's heap keys hold a node and a time in 62 bits")
    heap_size = 2 * m + 2
    nc = space.n_caches
    free = np.empty(nc * m, np.int32)
    time = np.full(nc * m, -1, np.int64)
    for q in range(nc):
        free[q * m : q * m + m - 1] = np.arange(q * m + m - 1, q * m, -1)
        time[q * m] = 0  # the root
    return RadixState(
        np.full(space.n_ids, -1, np.int32),
        np.empty(space.n_ids, np.int32),
        np.empty(space.n_ids, np.int32),
        np.empty(nc * m, np.int32),
        np.empty(nc * m, np.int32),
        np.full(nc * m, -1, np.int32),
        np.zeros(nc * m, np.int32),
        time,
        np.zeros(nc * m, np.int64),
        np.zeros(nc * m, np.bool_),
        free,
        np.empty(nc * heap_size, np.int64),
        np.empty(nc * m, np.int32),
        scalars(nc, 0, 1, 0, 0, min(16, heap_size), m - 1, 0, 0),
        counter_array(nc, RadixReference.counter_names),
        p.capacity,
        m,
        heap_size,
        bits,
        p.split_refresh,
        p.whole_node,
        p.spare_pages,
        p.evict_shortfall,
        np.zeros(0, np.int64) if space.output_lengths is None else space.output_lengths,
        np.zeros(1, np.int64),
        space.output_lengths is not None,
    )


def radix_is_resident(s, q, h):
    return s.node[ix(h)] >= 0


@njit
def _make_room(s, q, target, held, stamp):
    """RadixReference._make_room: when fewer than ``target`` pages are free besides the
    ``held`` pages of the running request, evict the shortfall (or all of ``target`` without
    ``shortfall``); returns the blocks evicted."""
    free = s.capacity - s.sc[ix(8 * q + SIZE)] - held
    if free >= target:
        return 0
    return evict(s, q, target - free if s.shortfall else target, stamp)


@njit
def _decode(s, q, held, length, steps, bs, stamp):
    """The reference's decode steps (``decode_pages``: positions ``length .. length + steps -
    1``, a step taking a page when its position is a multiple of ``bs``), after the prefill
    holds ``held`` pages: ``(held, blocks evicted)``. A loop over the pages, not the steps: a
    run of steps that take no page is one ``_make_room(spare)``, since after one ``spare`` pages
    are free besides the held ones or no unlocked leaf is left, and nothing changes before the
    next step of the run. The run before the first page is none: the prefill made room for its
    pages and the spare ones (or found no leaf left), so it would evict nothing."""
    evicted = 0
    stop = length + steps  # past the last step's position
    page = -(-length // bs) * bs  # the first position that starts a page
    while page < stop:
        evicted += _make_room(s, q, max(s.spare, 1), held, stamp)
        if held < s.capacity - s.sc[ix(8 * q + SIZE)]:
            held += 1
        if bs > 1 and page + 1 < stop:  # steps after it, before the next page (or the end)
            evicted += _make_room(s, q, s.spare, held, stamp)
        page += bs
    return held, evicted


def radix_request(s, q, ids, start, end_, length, rule):
    """RadixReference.serve_request for ``ids[start:end_]``, its temporary pages from the rule's
    ``temp_from``, its decode steps from its output length (``outputs``, with ``decode``: the
    prefill holds the pages of the prompt, each decode step that starts a page takes the next).
    ``removed``: the accesses that leave no resident block (temporary pages, recomputed blocks
    found in the tree, blocks that did not fit, repeats)."""
    e = 8 * q
    r = s.served[0]
    s.served[0] = r + 1
    cached = temp_from(rule, ids, start, end_)
    k = start
    while k < cached and s.node[ix(ids[ix(k)])] >= 0:
        k += 1
    k -= start  # block hits: the leading resident blocks
    hit = min(k, scan_limit(rule, end_ - start, length))  # reused
    tokens = hit_tokens(rule, hit, length)
    before = s.sc[ix(e + SIZE)]
    stamp = s.sc[ix(e + STAMP)] + 1
    s.sc[ix(e + STAMP)] = stamp
    match(s, q, ids, start, start + hit, stamp)
    steps = 0  # decode steps whose tokens' KV is kept: all but the last sampled token's
    pages = 0  # the pages they start, taken as they go (the rest is the prefill's)
    if s.decode and s.outputs[ix(r)] > 1:
        steps = s.outputs[ix(r)] - 1
        bs = rule.block_size
        pages = -(-(length + steps) // bs) - -(-length // bs)
    need = end_ - start - hit - pages  # the pages the prefill computes into
    evicted = _make_room(s, q, need + s.spare, 0, stamp)  # SGLang's page per request
    held = min(need, s.capacity - s.sc[ix(e + SIZE)])
    if steps > 0:
        held, more = _decode(s, q, held, length, steps, rule.block_size, stamp)
        evicted += more
    n_cached = hit + min(cached - start - hit, held)  # pages go to the cached blocks first
    leading = insert(s, q, ids, start, start + n_cached)
    if leading > hit:
        s.cnt[ix(q), DUPLICATES] += leading - hit
    added = s.sc[ix(e + SIZE)] - before + evicted
    return tokens, k, evicted, end_ - start - k - added


# The request step calls the tree's compiled functions, in another file: the drivers' disk
# cache is keyed by it too.
STEPS = Steps(
    RadixState,
    radix_state,
    radix_is_resident,
    None,
    None,
    request=radix_request,
    files=(radix_tree.__file__,),
)


def _state_bytes(p: RadixParams, n_blocks: int, n_accesses: int) -> int:
    """:func:`radix_state` for one cache: ``node``, ``nxt``, ``prv`` (int32) per id; per node
    (``min(capacity, n_blocks) + 1``) four int32, two int64 and a flag, its free-list and stash
    slots (int32) and two heap slots (int64)."""
    return 12 * n_blocks + 57 * (min(p.capacity, n_blocks) + 2)


SPEC = register(
    PolicySpec(
        name="RADIX",
        params_type=RadixParams,
        reference=RadixReference,
        steps=STEPS,
        state_bytes=_state_bytes,
    )
)
