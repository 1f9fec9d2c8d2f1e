"""SGLang's ``RadixCache`` with ``page_size = block_size``, replayed sequentially.

Written from SGLang's source (read with the search tool; no code copied), each function named
after the one it follows:

* ``python/sglang/srt/mem_cache/radix_cache.py`` at 95769b280eaa: ``TreeNode`` (``key``,
  ``value``, ``children`` by child key, ``lock_ref``, ``last_access_time`` set at creation);
  ``RadixCache.match_prefix`` (the key truncated to whole pages, an empty key matches nothing
  and touches nothing), ``_match_prefix_helper`` (the root and every visited child get a new
  ``last_access_time``; a match ending inside a node splits it, the new upper node created after
  the child was refreshed), ``_split_node``, ``insert`` / ``_insert_helper`` (every traversed
  node refreshed, split on divergence, the rest as a new leaf; returns the length already in the
  tree), ``evict`` (a heap of the leaves by ``last_access_time``; locked leaves skipped; a whole
  node's value freed at a time until at least ``num_tokens`` are; a parent left childless is
  pushed), ``inc_lock_ref`` / ``dec_lock_ref`` (the path to the root), ``cache_finished_req``
  (``(origin_input_ids + output_ids)[:-1]``, the unaligned tail freed, the page-aligned part
  inserted, the pages already in the tree freed as duplicates, the lock released).
* ``python/sglang/srt/managers/schedule_batch.py``: ``Req.init_next_round_input`` and
  ``_compute_max_prefix_len`` (the match key is ``fill_ids[:input_len - 1]``).
* ``python/sglang/srt/mem_cache/common.py`` at 2752c8285adf: ``alloc_paged_token_slots_extend``
  ("over estimate the number of tokens: assume each request needs a new page":
  ``extend_num_tokens + page_size`` per request), ``evict_from_tree_cache`` (evicts when the
  allocator has fewer free tokens than that), ``alloc_paged_token_slots_decode`` (one page per
  request, checked at every decode step). ``evict_shortfall``: ``True`` evicts only the
  shortfall (``num_tokens - available``), as since sgl-project/sglang#32016 ("Evict only the
  KV shortfall in evict_from_tree_cache", 2026); ``False`` evicts the whole ``num_tokens``, as
  at 2752c8285adf and before.
* The paged allocator (``allocator.py``): ``free_pages = arange(1, num_pages + 1)``, page 0
  kept for padding outside the pool's ``num_pages``: all ``capacity`` pages are usable.

Tokens are not simulated: a page's key is its block hash, so the tree is SGLang's over
``page_size = 1`` keys of hash ids, which is its tree over token pages when, as in Mooncake
traces, equal hashes mean equal prefixes. Times are a counter advanced at every
``time.monotonic()`` call of the source, in the source's order. The scheduler's part for one
request admitted at arrival (its whole prompt in one prefill; no chunked prefill) and finished
before the next: match, lock, allocate (with the eviction above), decode, ``cache_finished_req``.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Hashable, Sequence

from . import OracleResult, Request, check_consistent, output_hash, requests_of, trace_hashes


class TreeNode:
    __slots__ = ("children", "key", "last_access_time", "lock_ref", "parent", "uid", "value")

    _ids = itertools.count()

    def __init__(self, now: int) -> None:
        self.children: dict[Hashable, TreeNode] = {}
        self.parent: TreeNode | None = None
        self.key: list[Hashable] = []
        self.value: list[int] = []  # page ids
        self.lock_ref = 0
        self.last_access_time = now
        self.uid = next(TreeNode._ids)


class PagedAllocator:
    """Free page ids; page 0 is the padding page, outside the pool."""

    def __init__(self, num_pages: int) -> None:
        self.free_pages = list(range(1, num_pages + 1))

    def available_pages(self) -> int:
        return len(self.free_pages)

    def alloc(self, n: int) -> list[int] | None:
        if n > len(self.free_pages):
            return None
        out, self.free_pages = self.free_pages[:n], self.free_pages[n:]
        return out

    def free(self, pages: Sequence[int]) -> None:
        self.free_pages.extend(pages)


class RadixCache:
    def __init__(self, num_pages: int, evict_shortfall: bool = True) -> None:
        self._clock = itertools.count(1)
        self.allocator = PagedAllocator(num_pages)
        self.evict_shortfall = evict_shortfall
        self.root = TreeNode(self.now())
        self.root.lock_ref = 1
        self.evicted_pages = 0
        self.duplicate_pages = 0

    def now(self) -> int:
        """``time.monotonic()``: strictly increasing, one tick per call."""
        return next(self._clock)

    # --- RadixCache's public API ---------------------------------------------------------

    def match_prefix(self, key: Sequence[Hashable]) -> tuple[list[int], TreeNode]:
        if len(key) == 0:
            return [], self.root
        value: list[int] = []
        node = self.root
        node.last_access_time = self.now()
        key = list(key)
        while key and key[0] in node.children:
            child = node.children[key[0]]
            child.last_access_time = self.now()
            prefix_len = _key_match(child.key, key)
            if prefix_len < len(child.key):
                new_node = self._split_node(child, prefix_len)
                value.extend(new_node.value)
                node = new_node
                break
            value.extend(child.value)
            node = child
            key = key[prefix_len:]
        return value, node

    def insert(self, key: Sequence[Hashable], value: Sequence[int]) -> int:
        node = self.root
        node.last_access_time = self.now()
        key, value = list(key), list(value)
        if not key:
            return 0
        total_prefix_length = 0
        while key and key[0] in node.children:
            node = node.children[key[0]]
            node.last_access_time = self.now()
            prefix_len = _key_match(node.key, key)
            total_prefix_length += prefix_len
            key, value = key[prefix_len:], value[prefix_len:]
            if prefix_len < len(node.key):
                node = self._split_node(node, prefix_len)
        if key:
            new_node = TreeNode(self.now())
            new_node.parent = node
            new_node.key = key
            new_node.value = value
            node.children[key[0]] = new_node
        return total_prefix_length

    def evict(self, num_pages: int) -> None:
        leaves = [(n.last_access_time, n.uid, n) for n in self._collect_leaves()]
        heapq.heapify(leaves)
        num_evicted = 0
        while num_evicted < num_pages and leaves:
            _, _, x = heapq.heappop(leaves)
            if x is self.root:
                break
            if x.lock_ref > 0:
                continue
            self.allocator.free(x.value)
            num_evicted += len(x.value)
            self.evicted_pages += len(x.value)
            parent = x.parent
            assert parent is not None
            del parent.children[x.key[0]]
            if not parent.children:
                heapq.heappush(leaves, (parent.last_access_time, parent.uid, parent))

    def inc_lock_ref(self, node: TreeNode) -> None:
        while node is not self.root:
            node.lock_ref += 1
            assert node.parent is not None
            node = node.parent

    def dec_lock_ref(self, node: TreeNode) -> None:
        while node is not self.root:
            node.lock_ref -= 1
            assert node.parent is not None
            node = node.parent

    # --- internals -----------------------------------------------------------------------

    def _split_node(self, child: TreeNode, split_len: int) -> TreeNode:
        new_node = TreeNode(self.now())
        parent = child.parent
        assert parent is not None
        new_node.children = {child.key[split_len]: child}
        new_node.parent = parent
        new_node.lock_ref = child.lock_ref
        new_node.key = child.key[:split_len]
        new_node.value = child.value[:split_len]
        child.parent = new_node
        child.key = child.key[split_len:]
        child.value = child.value[split_len:]
        parent.children[new_node.key[0]] = new_node
        return new_node

    def _collect_leaves(self) -> list[TreeNode]:
        out, stack = [], [self.root]
        while stack:
            node = stack.pop()
            if not node.children:
                out.append(node)
            else:
                stack.extend(node.children.values())
        return out

    def cached_keys(self) -> frozenset[Hashable]:
        out: set[Hashable] = set()
        stack = [self.root]
        while stack:
            node = stack.pop()
            out.update(node.key)
            stack.extend(node.children.values())
        return frozenset(out)

    # --- the scheduler's calls for one request -------------------------------------------

    def evict_from_tree_cache(self, num_pages: int) -> None:
        available = self.allocator.available_pages()
        if available < num_pages:
            self.evict(num_pages - available if self.evict_shortfall else num_pages)

    def serve(self, rid: int, input_length: int, pages: list[Hashable], out: int, bs: int) -> int:
        """One request: ``pages`` are the hashes of its prompt's pages (``ceil(L / b)``).
        Returns the hit tokens."""
        # Req.init_next_round_input: match fill_ids[:input_len - 1], whole pages only.
        max_prefix_pages = max(input_length - 1, 0) // bs
        prefix_indices, last_node = self.match_prefix(pages[:max_prefix_pages])
        prefix_len = len(prefix_indices)
        self.inc_lock_ref(last_node)
        # alloc_for_extend -> alloc_paged_token_slots_extend: the extend tokens plus one page.
        extend_pages = len(pages) - prefix_len
        self.evict_from_tree_cache(extend_pages + 1)
        new_pages = self.allocator.alloc(extend_pages)
        if new_pages is None:
            raise ValueError(f"request {rid}: prefill out of memory (SGLang would abort it)")
        kv_indices = prefix_indices + new_pages  # one page id per page of the request
        # Decode: each step checks one page per request, and takes a page when the token it
        # computes starts one. The KV of tokens 0 .. L + out - 2 is computed.
        for pos in range(input_length, input_length + max(out, 1) - 1):
            self.evict_from_tree_cache(1)
            if pos % bs == 0:
                page = self.allocator.alloc(1)
                if page is None:
                    raise ValueError(f"request {rid}: decode out of memory")
                kv_indices += page
        # cache_finished_req: the full pages of (input + output)[:-1] are inserted; past the
        # prompt's full pages (the partial one included, once generated tokens fill it) their
        # keys are the generated tokens', which no prompt of the trace has.
        aligned = (input_length + max(out, 1) - 1) // bs
        full = input_length // bs
        keys = [*pages[:full], *_output_keys(rid, full, aligned)]
        self.allocator.free(kv_indices[aligned:])  # the unaligned tail
        new_prefix_len = self.insert(keys, kv_indices[:aligned])
        self.allocator.free(kv_indices[prefix_len:new_prefix_len])  # already in the tree
        self.duplicate_pages += max(new_prefix_len - prefix_len, 0)
        self.dec_lock_ref(last_node)
        return prefix_len * bs


def _output_keys(rid: int, start: int, end: int) -> list[Hashable]:
    """Keys of the full pages past the prompt's full pages: generated tokens make them, so no
    prompt of the trace has them."""
    return [output_hash(rid, i) for i in range(start, end)]


def _key_match(key0: Sequence[Hashable], key1: Sequence[Hashable]) -> int:
    """``_key_match_page_size1``: the length of the common prefix."""
    i = 0
    for a, b in zip(key0, key1, strict=False):
        if a != b:
            break
        i += 1
    return i


def replay(
    requests: Sequence[Request],
    capacity: int,
    block_size: int = 512,
    *,
    evict_shortfall: bool = True,
    output_lengths: Sequence[int] | None = None,
) -> OracleResult:
    """What SGLang's radix cache reports for ``requests`` (``(input_length, hash_ids)`` pairs)
    with a pool of ``capacity`` pages of ``block_size`` tokens, one request at a time. With
    ``output_lengths`` each request also decodes that many tokens; without, it generates one."""
    cache = RadixCache(capacity, evict_shortfall)
    hits = []
    for r, (length, hash_ids) in enumerate(requests):
        check_consistent(r, length, hash_ids, block_size)
        out = 1 if output_lengths is None else int(output_lengths[r])
        hits.append(cache.serve(r, length, list(hash_ids), out, block_size))
    keys = trace_hashes(cache.cached_keys())
    counters = {
        "evictions": cache.evicted_pages,
        "duplicate_pages": cache.duplicate_pages,
        "free_pages": cache.allocator.available_pages(),
    }
    return OracleResult(hits, keys, counters)


def replay_trace(
    trace: object,
    capacity: int,
    block_size: int = 512,
    *,
    evict_shortfall: bool = True,
    cache_output_blocks: bool = False,
) -> OracleResult:
    """:func:`replay` of a :class:`~prefixsim.trace.Trace`, decoding each request's
    ``output_length`` tokens when ``cache_output_blocks``."""
    requests, outputs = requests_of(trace)
    return replay(
        requests,
        capacity,
        block_size,
        evict_shortfall=evict_shortfall,
        output_lengths=outputs if cache_output_blocks else None,
    )
