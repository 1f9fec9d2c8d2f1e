"""vLLM v1's KV cache manager for one full-attention KV cache group, replayed sequentially.

Written from vLLM's source (read with the search tool; no code copied), each class and method
named after the one it follows:

* ``vllm/v1/core/kv_cache_utils.py``: ``KVCacheBlock`` (``ref_cnt``, ``block_hash``, the free
  list links), ``FreeKVCacheBlockQueue`` (a doubly linked list with fake head and tail:
  ``popleft_n``, ``remove``, ``append_n``, ``prepend_n``); only full blocks get a hash.
* ``vllm/v1/core/block_pool.py`` at c59cb7941357: ``BlockHashToBlockMap`` (hash -> blocks;
  duplicates kept: "we don't de-duplicate the blocks in the cache", the first one returned);
  ``BlockPool.__init__`` (all blocks free, then block 0 popped as the null block),
  ``get_cached_block``, ``cache_full_blocks`` (skips blocks that already carry a hash, i.e.
  prefix hits), ``get_new_blocks`` (``popleft_n``, then ``_maybe_evict_cached_block`` on each:
  the block's hash leaves the map), ``touch`` (a free hit block leaves the free queue),
  ``free_blocks`` (``ref_cnt`` down; the blocks reaching 0 without a hash are ``prepend_n``-ed,
  the hashed ones ``append_n``-ed, each group in the given order).
* ``vllm/v1/core/single_type_kv_cache_manager.py`` at 129ab7c60cbb:
  ``FullAttentionManager.find_longest_cache_hit`` (the first ``max_length // block_size``
  hashes, stopping at the first miss), ``get_num_blocks_to_allocate`` (new blocks plus the
  evictable hit blocks), ``allocate_new_computed_blocks`` (touch the hits first),
  ``allocate_new_blocks``, ``cache_blocks``, ``free`` (``reversed(req_blocks)``: "the tail
  blocks are freed first").
* ``vllm/v1/core/kv_cache_manager.py`` at ace980e6de05: ``get_computed_blocks``
  (``max_cache_hit_length = request.num_tokens - 1``: "we must recompute the last token to
  obtain logits"), ``allocate_slots`` (the free-block check, touch, allocate, then cache up to
  ``min(num_computed + num_new_tokens, request.num_tokens)`` tokens), ``free``.

The scheduler's part, for one request admitted at its arrival (a prefill of its whole prompt in
one step) and finished before the next arrives: ``get_computed_blocks``, ``allocate_slots`` for
the uncached tokens, then one decode step per further generated token (``allocate_slots`` of one
token), then ``free``. The KV of the last sampled token is never computed, so a request that
generates ``out`` tokens holds the KV of ``L + out - 1`` tokens. ``output_lengths=None`` replays
each request as generating one token (the prefill only).

``unhashed_free``: ``"front"`` as ``block_pool.py`` at c59cb7941357 (vLLM PR #42656, "Apply LRU
policy only to proper cache entries"); ``"back"`` as the releases before it (e.g. v0.10/v0.11,
whose ``free_blocks`` ``append_n``-ed every freed block in the order given).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass, field

from . import OracleResult, Request, check_consistent, output_hash, requests_of, trace_hashes


class KVCacheBlock:
    """One physical block (``kv_cache_utils.KVCacheBlock``)."""

    __slots__ = ("block_hash", "block_id", "is_null", "next_free", "prev_free", "ref_cnt")

    def __init__(self, block_id: int) -> None:
        self.block_id = block_id
        self.ref_cnt = 0
        self.block_hash: Hashable | None = None
        self.prev_free: KVCacheBlock | None = None
        self.next_free: KVCacheBlock | None = None
        self.is_null = False


class FreeKVCacheBlockQueue:
    """The free blocks in eviction order, front first (``kv_cache_utils.FreeKVCacheBlockQueue``):
    a block is in the queue iff its ``ref_cnt`` is 0 (free, possibly still cached)."""

    def __init__(self, blocks: Sequence[KVCacheBlock]) -> None:
        self.head = KVCacheBlock(-1)  # fake head and tail: no end is ever None
        self.tail = KVCacheBlock(-1)
        self.num_free_blocks = 0
        self.head.next_free = self.tail
        self.tail.prev_free = self.head
        self.append_n(list(blocks))

    def popleft_n(self, n: int) -> list[KVCacheBlock]:
        out = []
        for _ in range(n):
            block = self.head.next_free
            assert block is not None and block is not self.tail
            self.remove(block)
            out.append(block)
        return out

    def remove(self, block: KVCacheBlock) -> None:
        prev, nxt = block.prev_free, block.next_free
        assert prev is not None and nxt is not None
        prev.next_free = nxt
        nxt.prev_free = prev
        block.prev_free = block.next_free = None
        self.num_free_blocks -= 1

    def append_n(self, blocks: Sequence[KVCacheBlock]) -> None:
        for block in blocks:
            last = self.tail.prev_free
            assert last is not None
            last.next_free = block
            block.prev_free = last
            block.next_free = self.tail
            self.tail.prev_free = block
        self.num_free_blocks += len(blocks)

    def prepend_n(self, blocks: Sequence[KVCacheBlock]) -> None:
        first = self.head.next_free
        assert first is not None
        prev = self.head
        for block in blocks:  # blocks[0] becomes the new front
            prev.next_free = block
            block.prev_free = prev
            prev = block
        prev.next_free = first
        first.prev_free = prev
        self.num_free_blocks += len(blocks)

    def get_all_free_blocks(self) -> list[KVCacheBlock]:
        out = []
        block = self.head.next_free
        while block is not None and block is not self.tail:
            out.append(block)
            block = block.next_free
        return out


class BlockPool:
    """``block_pool.BlockPool`` with its ``BlockHashToBlockMap`` as a dict of dicts (hash ->
    block id -> block, in insertion order, so the first cached copy is found first)."""

    def __init__(self, num_gpu_blocks: int, unhashed_free: str) -> None:
        self.blocks = [KVCacheBlock(i) for i in range(num_gpu_blocks)]
        self.free_block_queue = FreeKVCacheBlockQueue(self.blocks)
        self.cached_block_hash_to_block: dict[Hashable, dict[int, KVCacheBlock]] = {}
        self.null_block = self.free_block_queue.popleft_n(1)[0]  # block 0, never freed
        self.null_block.is_null = True
        self.unhashed_front = unhashed_free == "front"
        self.evictions = 0
        self.duplicates = 0

    def get_cached_block(self, block_hash: Hashable) -> KVCacheBlock | None:
        blocks = self.cached_block_hash_to_block.get(block_hash)
        return next(iter(blocks.values())) if blocks else None

    def cache_full_blocks(
        self,
        blocks: Sequence[KVCacheBlock],
        block_hashes: Sequence[Hashable],
        num_cached_blocks: int,
        num_full_blocks: int,
    ) -> None:
        for i in range(num_cached_blocks, num_full_blocks):
            blk = blocks[i]
            if blk.block_hash is not None:  # a prefix hit: already cached under this hash
                continue
            blk.block_hash = block_hashes[i]
            copies = self.cached_block_hash_to_block.setdefault(block_hashes[i], {})
            if copies:
                self.duplicates += 1  # a second physical block with this hash
            copies[blk.block_id] = blk

    def get_new_blocks(self, num_blocks: int) -> list[KVCacheBlock]:
        if num_blocks > self.free_block_queue.num_free_blocks:
            raise ValueError(f"Cannot get {num_blocks} free blocks from the pool")
        ret = self.free_block_queue.popleft_n(num_blocks)
        for block in ret:
            self._maybe_evict_cached_block(block)
            assert block.ref_cnt == 0
            block.ref_cnt += 1
        return ret

    def _maybe_evict_cached_block(self, block: KVCacheBlock) -> bool:
        if block.block_hash is None:
            return False
        copies = self.cached_block_hash_to_block[block.block_hash]
        del copies[block.block_id]
        if not copies:
            del self.cached_block_hash_to_block[block.block_hash]
        block.block_hash = None
        self.evictions += 1
        return True

    def touch(self, blocks: Iterable[KVCacheBlock]) -> None:
        for block in blocks:
            if block.ref_cnt == 0 and not block.is_null:
                self.free_block_queue.remove(block)
            block.ref_cnt += 1

    def free_blocks(self, ordered_blocks: Iterable[KVCacheBlock]) -> None:
        blocks = list(ordered_blocks)
        for block in blocks:
            block.ref_cnt -= 1
        freeable = [b for b in blocks if b.ref_cnt == 0 and not b.is_null]
        if self.unhashed_front:
            self.free_block_queue.prepend_n([b for b in freeable if b.block_hash is None])
            self.free_block_queue.append_n([b for b in freeable if b.block_hash is not None])
        else:
            self.free_block_queue.append_n(freeable)

    def get_num_free_blocks(self) -> int:
        return self.free_block_queue.num_free_blocks


@dataclass
class EngineRequest:
    """The fields of ``vllm.v1.request.Request`` the manager reads: all token counts and the
    hashes of the full blocks of the tokens so far (prompt hashes from the trace; a block that
    generated tokens fill gets a hash no prompt has)."""

    request_id: int
    prompt_hashes: list[Hashable]
    num_prompt_tokens: int
    block_size: int
    num_tokens: int = 0
    num_computed_tokens: int = 0
    block_hashes: list[Hashable] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.num_tokens = self.num_prompt_tokens
        self.block_hashes = list(self.prompt_hashes[: self.num_tokens // self.block_size])

    def append_output_token(self) -> None:
        self.num_tokens += 1
        while len(self.block_hashes) < self.num_tokens // self.block_size:
            self.block_hashes.append(output_hash(self.request_id, len(self.block_hashes)))


class KVCacheManager:
    """``kv_cache_manager.KVCacheManager`` over one ``FullAttentionManager`` (one group)."""

    def __init__(self, num_gpu_blocks: int, block_size: int, unhashed_free: str) -> None:
        self.block_size = block_size
        self.block_pool = BlockPool(num_gpu_blocks, unhashed_free)
        self.req_to_blocks: dict[int, list[KVCacheBlock]] = {}
        self.num_cached_block: dict[int, int] = {}

    def get_computed_blocks(self, request: EngineRequest) -> tuple[list[KVCacheBlock], int]:
        max_cache_hit_length = request.num_tokens - 1
        computed = self.find_longest_cache_hit(request.block_hashes, max_cache_hit_length)
        return computed, len(computed) * self.block_size

    def find_longest_cache_hit(
        self, block_hashes: Sequence[Hashable], max_length: int
    ) -> list[KVCacheBlock]:
        computed = []
        for block_hash in block_hashes[: max(max_length, 0) // self.block_size]:
            cached = self.block_pool.get_cached_block(block_hash)
            if cached is None:
                break
            computed.append(cached)
        return computed

    def allocate_slots(
        self,
        request: EngineRequest,
        num_new_tokens: int,
        num_new_computed_tokens: int = 0,
        new_computed_blocks: Sequence[KVCacheBlock] = (),
    ) -> list[KVCacheBlock] | None:
        rid = request.request_id
        num_computed_tokens = request.num_computed_tokens + num_new_computed_tokens
        num_tokens_need_slot = num_computed_tokens + num_new_tokens
        req_blocks = self.req_to_blocks.setdefault(rid, [])
        num_required_blocks = -(-num_tokens_need_slot // self.block_size)
        if rid in self.num_cached_block:  # a running request has no new prefix hits
            num_blocks_to_allocate = max(num_required_blocks - len(req_blocks), 0)
        else:
            evictable = sum(b.ref_cnt == 0 and not b.is_null for b in new_computed_blocks)
            num_new = max(num_required_blocks - len(new_computed_blocks) - len(req_blocks), 0)
            num_blocks_to_allocate = num_new + evictable
        if num_blocks_to_allocate > self.block_pool.get_num_free_blocks():
            return None
        if rid not in self.num_cached_block:  # allocate_new_computed_blocks
            self.block_pool.touch(new_computed_blocks)
            req_blocks.extend(new_computed_blocks)
            self.num_cached_block[rid] = len(req_blocks)
        new_blocks: list[KVCacheBlock] = []
        if num_required_blocks > len(req_blocks):  # allocate_new_blocks
            new_blocks = self.block_pool.get_new_blocks(num_required_blocks - len(req_blocks))
            req_blocks.extend(new_blocks)
        num_tokens_to_cache = min(num_computed_tokens + num_new_tokens, request.num_tokens)
        self.cache_blocks(request, num_tokens_to_cache)
        return new_blocks

    def cache_blocks(self, request: EngineRequest, num_tokens: int) -> None:
        rid = request.request_id
        num_cached_blocks = self.num_cached_block.get(rid, 0)
        num_full_blocks = num_tokens // self.block_size
        if num_cached_blocks >= num_full_blocks:
            return
        self.block_pool.cache_full_blocks(
            self.req_to_blocks[rid], request.block_hashes, num_cached_blocks, num_full_blocks
        )
        self.num_cached_block[rid] = num_full_blocks

    def free(self, request: EngineRequest) -> None:
        req_blocks = self.req_to_blocks.pop(request.request_id, [])
        self.block_pool.free_blocks(reversed(req_blocks))  # tail blocks freed first
        self.num_cached_block.pop(request.request_id, None)

    def cached_hashes(self) -> frozenset[Hashable]:
        return frozenset(self.block_pool.cached_block_hash_to_block)


def serve(manager: KVCacheManager, request: EngineRequest, output_length: int) -> int:
    """One request through the scheduler's calls: the prefill of the whole prompt in one step,
    ``output_length - 1`` decode steps, then ``free``. Returns the hit tokens."""
    computed, num_hit_tokens = manager.get_computed_blocks(request)
    new = manager.allocate_slots(
        request, request.num_tokens - num_hit_tokens, num_hit_tokens, computed
    )
    if new is None:
        raise ValueError(
            f"request {request.request_id} needs more blocks than the pool holds: vLLM could "
            "never schedule it"
        )
    request.num_computed_tokens = request.num_tokens
    request.append_output_token()  # the prefill samples the first token
    bs = manager.block_size
    for _ in range(max(output_length, 1) - 1):
        # A decode step computes the KV of one token. allocate_slots changes something only
        # when that token starts a new block or fills one; on every other step it allocates
        # nothing and caches nothing, so those calls are skipped (same state).
        pos = request.num_computed_tokens
        busy = pos % bs == 0 or (pos + 1) % bs == 0
        if busy and manager.allocate_slots(request, 1) is None:
            raise ValueError(
                f"request {request.request_id} ran out of blocks while decoding: vLLM would "
                "preempt it"
            )
        request.num_computed_tokens += 1
        request.append_output_token()
    manager.free(request)
    return num_hit_tokens


def replay(
    requests: Sequence[Request],
    capacity: int,
    block_size: int = 512,
    *,
    unhashed_free: str = "front",
    output_lengths: Sequence[int] | None = None,
) -> OracleResult:
    """What vLLM v1 reports for ``requests`` (``(input_length, hash_ids)`` pairs) with
    ``capacity`` GPU blocks (``num_gpu_blocks``, the null block included) of ``block_size``
    tokens, one request at a time. With ``output_lengths`` each request also decodes that many
    tokens (the blocks they fill are cached); without, it generates one token.

    Counters: ``evictions`` (cached blocks reallocated), ``duplicate_blocks`` (full blocks
    cached under a hash another block already had: vLLM recomputes a resident block past its
    hit, e.g. the last block of a fully cached prompt, into a second copy), the index of the
    ``first_duplicate_request`` (-1: none), ``cached_blocks`` (blocks holding a hash at the
    end)."""
    if unhashed_free not in ("front", "back"):
        raise ValueError(f"unhashed_free must be 'front' or 'back', not {unhashed_free!r}")
    manager = KVCacheManager(capacity, block_size, unhashed_free)
    pool = manager.block_pool
    hits = []
    first_duplicate = -1
    for r, (length, hash_ids) in enumerate(requests):
        check_consistent(r, length, hash_ids, block_size)
        request = EngineRequest(r, list(hash_ids), length, block_size)
        out = 1 if output_lengths is None else int(output_lengths[r])
        before = pool.duplicates
        hits.append(serve(manager, request, out))
        if pool.duplicates > before and first_duplicate < 0:
            first_duplicate = r
    cached = trace_hashes(manager.cached_hashes())
    counters = {
        "evictions": pool.evictions,
        "duplicate_blocks": pool.duplicates,
        "first_duplicate_request": first_duplicate,
        "cached_blocks": sum(map(len, pool.cached_block_hash_to_block.values())),
    }
    return OracleResult(hits, cached, counters)


def replay_trace(
    trace: object,
    capacity: int,
    block_size: int = 512,
    *,
    unhashed_free: str = "front",
    cache_output_blocks: bool = False,
) -> OracleResult:
    """:func:`replay` of a :class:`~prefixsim.trace.Trace` (its dense block ids as the hashes),
    decoding each request's ``output_length`` tokens when ``cache_output_blocks``."""
    requests, outputs = requests_of(trace)
    return replay(
        requests,
        capacity,
        block_size,
        unhashed_free=unhashed_free,
        output_lengths=outputs if cache_output_blocks else None,
    )
