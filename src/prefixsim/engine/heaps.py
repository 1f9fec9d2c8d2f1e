"""A binary min-heap of int64 keys in a slice of an array, for the policies' steps.

Cache ``q``'s heap is ``heap[base : base + n]`` (``base`` its first slot, ``n`` its length, kept
by the policy in its per-cache scalars). A policy whose entries go stale (BELADY's next uses,
LRU_LEAF's leaves) drops them lazily: when popped, or when the heap reaches its threshold, by
:func:`compact` (keep the live entries, re-heapify); the threshold doubles when compaction
leaves the heap more than half full, so compaction is amortised O(1) per push.

Every subscript is ``a[ix(i)]``: slots are ``base + j`` with ``0 <= j < n``.
"""

from __future__ import annotations

from numba import njit

from .steps import ix


@njit
def sift_down(heap, base, n, j, key):
    """Place ``key`` at slot ``j`` of a heap of ``n`` entries whose subtrees below ``j`` are
    heaps, moving smaller children up."""
    while True:
        c = 2 * j + 1
        if c >= n:
            break
        if c + 1 < n and heap[ix(base + c + 1)] < heap[ix(base + c)]:
            c += 1
        if heap[ix(base + c)] >= key:
            break
        heap[ix(base + j)] = heap[ix(base + c)]
        j = c
    heap[ix(base + j)] = key


@njit
def push(heap, base, n, key):
    """Add ``key`` to a heap of ``n`` entries (it then has ``n + 1``)."""
    j = n
    while j > 0:
        p = (j - 1) >> 1
        if heap[ix(base + p)] <= key:
            break
        heap[ix(base + j)] = heap[ix(base + p)]
        j = p
    heap[ix(base + j)] = key


@njit
def pop(heap, base, n):
    """Remove the smallest key of a non-empty heap of ``n`` entries (it then has ``n - 1``)."""
    sift_down(heap, base, n - 1, 0, heap[ix(base + n - 1)])


@njit
def heapify(heap, base, n):
    for j in range(n // 2 - 1, -1, -1):
        sift_down(heap, base, n, j, heap[ix(base + j)])
