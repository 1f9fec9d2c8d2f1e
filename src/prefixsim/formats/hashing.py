"""Chained block hashing: token ids -> block hashes that identify the whole prefix.

The hash (``prefixsim-chain-v1``, documented in ``docs/trace-formats.md``) is 128 bits, two
independent 64-bit lanes. For a request's token ids cut into full blocks of ``block_size``
tokens (a partial last block is not hashed, so it can never be a hit), block ``j`` gets::

    lane0 = fmix_a(parent0 ^ SEED0); lane1 = fmix_b(parent1 ^ SEED1)
    for t in the block's tokens (as unsigned 64-bit):
        lane0 = fmix_a(lane0 ^ t); lane1 = fmix_b(lane1 ^ t)

where ``(parent0, parent1)`` is block ``j - 1``'s hash, ``(0, 0)`` for block 0, ``fmix_a`` is
the splitmix64 finaliser and ``fmix_b`` MurmurHash3's ``fmix64``; all arithmetic is modulo
2**64. A block's hash therefore depends on its parent's hash and its own tokens in order: two
requests share block ``j``'s hash exactly when (barring a 128-bit collision) they share their
first ``(j + 1) * block_size`` tokens.

:func:`chain_hashes_reference` is the plain-Python statement of the rule; :func:`chain_hashes`
is the numba kernel the loaders use (the tests hold them equal). :func:`intern_blocks` maps the
128-bit hashes to dense ids ``0..n_blocks-1`` in order of first appearance, exactly (both lanes
compared), and refuses a detected collision: the same hash reached from two different parents.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ..errors import TraceError
from ..policies.base import ix

HASH_NAME = "prefixsim-chain-v1"
SEED0 = 0x9E3779B97F4A7C15
SEED1 = 0xC2B2AE3D27D4EB4F
_M64 = (1 << 64) - 1


# -- plain-Python reference ---------------------------------------------------------------------


# Both lanes' finalisers are one construction, xor-shift, multiply, xor-shift, multiply,
# xor-shift, with different constants: (shift, multiplier, shift, multiplier, shift).
_SPLITMIX64 = (30, 0xBF58476D1CE4E5B9, 27, 0x94D049BB133111EB, 31)
_MURMUR3_FMIX64 = (33, 0xFF51AFD7ED558CCD, 33, 0xC4CEB9FE1A85EC53, 33)


def _finalise_py(x: int, a: int, m1: int, b: int, m2: int, c: int) -> int:
    """The xor-shift-multiply finaliser with these constants, on Python ints modulo 2**64."""
    x ^= x >> a
    x = (x * m1) & _M64
    x ^= x >> b
    x = (x * m2) & _M64
    return x ^ (x >> c)


def _fmix_a_py(x: int) -> int:
    """splitmix64's finaliser."""
    return _finalise_py(x, *_SPLITMIX64)


def _fmix_b_py(x: int) -> int:
    """MurmurHash3's fmix64."""
    return _finalise_py(x, *_MURMUR3_FMIX64)


def block_hash_reference(parent: tuple[int, int], tokens: list[int]) -> tuple[int, int]:
    """One block's 128-bit hash (two lanes) from its parent's hash and its tokens."""
    h0 = _fmix_a_py(parent[0] ^ SEED0)
    h1 = _fmix_b_py(parent[1] ^ SEED1)
    for t in tokens:
        u = t & _M64
        h0 = _fmix_a_py(h0 ^ u)
        h1 = _fmix_b_py(h1 ^ u)
    return h0, h1


def chain_hashes_reference(token_ids: list[int], block_size: int) -> list[tuple[int, int]]:
    """The hashes of one request's full blocks, in order (the partial last block has none)."""
    out: list[tuple[int, int]] = []
    parent = (0, 0)
    for j in range(len(token_ids) // block_size):
        parent = block_hash_reference(parent, token_ids[j * block_size : (j + 1) * block_size])
        out.append(parent)
    return out


# -- kernels -------------------------------------------------------------------------------------


@njit(cache=True, inline="always")
def _finalise(x, a, m1, b, m2, c):
    """:func:`_finalise_py` on uint64 (the constants are uint64 too; inlined, they fold)."""
    x ^= x >> a
    x *= m1
    x ^= x >> b
    x *= m2
    return x ^ (x >> c)


_A = tuple(np.uint64(k) for k in _SPLITMIX64)
_B = tuple(np.uint64(k) for k in _MURMUR3_FMIX64)


@njit(cache=True, inline="always")
def _fmix_a(x: np.uint64) -> np.uint64:
    return _finalise(x, _A[0], _A[1], _A[2], _A[3], _A[4])


@njit(cache=True, inline="always")
def _fmix_b(x: np.uint64) -> np.uint64:
    return _finalise(x, _B[0], _B[1], _B[2], _B[3], _B[4])


@njit(cache=True)
def _chain_kernel(tokens, token_offsets, block_offsets, block_size, h0, h1):
    # Signed subscripts on purpose: unsigned ones (``a[ix(i)]``) measured 1.01-1.03x here, within
    # noise (docs/performance.md): two chains of 64-bit multiplications per token hide the
    # negative-index fix-up of one load.
    s0 = np.uint64(SEED0)
    s1 = np.uint64(SEED1)
    for r in range(len(token_offsets) - 1):
        p0 = np.uint64(0)
        p1 = np.uint64(0)
        t = token_offsets[r]
        for b in range(block_offsets[r], block_offsets[r + 1]):
            a = _fmix_a(p0 ^ s0)
            c = _fmix_b(p1 ^ s1)
            for i in range(t, t + block_size):
                u = np.uint64(tokens[i])
                a = _fmix_a(a ^ u)
                c = _fmix_b(c ^ u)
            t += block_size
            h0[b] = a
            h1[b] = c
            p0 = a
            p1 = c


def block_offsets_for(token_offsets: np.ndarray, block_size: int) -> np.ndarray:
    """Offsets of each request's full blocks in the flat block arrays."""
    n_blocks = np.diff(token_offsets) // block_size
    out = np.zeros(len(token_offsets), dtype=np.int64)
    np.cumsum(n_blocks, out=out[1:])
    return out


def chain_hashes(
    tokens: np.ndarray, token_offsets: np.ndarray, block_size: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The kernel: ``(lane0, lane1, block_offsets)`` of every request's full blocks.

    ``tokens`` is the flat int64 token ids (request ``r`` is ``tokens[token_offsets[r]:
    token_offsets[r + 1]]``); negative ids are hashed as their two's complement, exactly as the
    reference does.
    """
    tokens = np.ascontiguousarray(tokens, dtype=np.int64)
    token_offsets = np.ascontiguousarray(token_offsets, dtype=np.int64)
    block_offsets = block_offsets_for(token_offsets, block_size)
    n = int(block_offsets[-1])
    h0 = np.empty(n, dtype=np.uint64)
    h1 = np.empty(n, dtype=np.uint64)
    _chain_kernel(tokens.view(np.uint64), token_offsets, block_offsets, block_size, h0, h1)
    return h0, h1, block_offsets


@njit(cache=True)
def _intern_kernel(h0, h1, block_offsets, ids, table_bits):
    """Open addressing on lane 0's low bits; a slot matches only if both lanes are equal.
    Returns ``(n_blocks, -1)``, or ``(n_blocks, i)`` for the first access ``i`` whose hash was
    seen before with a different parent (a detected collision)."""
    size = 1 << table_bits
    mask = np.uint64(size - 1)
    slots = np.full(size, -1, dtype=np.int64)
    key0 = np.empty(len(h0), dtype=np.uint64)  # per dense id
    key1 = np.empty(len(h0), dtype=np.uint64)
    parent_of = np.empty(len(h0), dtype=np.int64)
    n = 0
    # Indices are unsigned (``a[ix(i)]``): access positions and request numbers are offsets
    # positions, ``s`` is a uint64 already, and a dense id ``d`` is used only once it is known
    # to be ``>= 0`` (``-1``, an empty slot, is tested first).
    for r in range(len(block_offsets) - 1):
        parent = -1
        for i in range(block_offsets[ix(r)], block_offsets[ix(r + 1)]):
            a = h0[ix(i)]
            b = h1[ix(i)]
            s = a & mask
            while True:
                d = slots[s]
                if d < 0:
                    slots[s] = n
                    key0[ix(n)] = a
                    key1[ix(n)] = b
                    parent_of[ix(n)] = parent
                    d = n
                    n += 1
                    break
                if key0[ix(d)] == a and key1[ix(d)] == b:
                    if parent_of[ix(d)] != parent:
                        return n, i
                    break
                s = (s + np.uint64(1)) & mask
            ids[ix(i)] = d
            parent = d
    return n, -1


def intern_blocks(
    h0: np.ndarray, h1: np.ndarray, block_offsets: np.ndarray, display: str
) -> tuple[np.ndarray, int]:
    """Dense int32 ids of the 128-bit hashes in order of first appearance, and their number.

    Raises :class:`TraceError` on a detected hash collision (the same hash with two different
    parent blocks), or when the trace has 2**31 or more distinct blocks (int32 ids).
    """
    n = len(h0)
    if n >= 2**31:
        raise TraceError(display, f"{n} block accesses; at most 2**31 - 1 are supported")
    bits = max(4, int(2 * max(n, 1) - 1).bit_length())  # load factor <= 1/2
    ids = np.empty(n, dtype=np.int32)
    n_blocks, bad = _intern_kernel(h0, h1, block_offsets, ids, bits)
    if bad >= 0:
        request = int(np.searchsorted(block_offsets, bad, side="right")) - 1
        raise TraceError(
            display,
            f"{HASH_NAME} hash collision detected at block {bad - int(block_offsets[request])} "
            f"of request {request}: its hash was seen before after a different parent block; "
            "refusing rather than merging two different prefixes",
        )
    return ids, int(n_blocks)
