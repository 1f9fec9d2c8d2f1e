"""Chained block hashing throughput: the numba kernel against plain Python, same run.

    python experiments/bench_hash.py [--tokens N] [--block-size B] [--repeat R]

Hashes N random token ids (requests of 2,000 to 20,000 tokens) into blocks of B tokens with
:func:`prefixsim.formats.hashing.chain_hashes` (the kernel) and, on a slice, with two plain-Python
baselines: the reference (:func:`chain_hashes_reference`, the documented hash) and what a
hand-written converter typically does, ``hash((parent, tuple(block)))`` per block. Also times
the interning of the hashes to dense ids. Runs alternate (kernel, baseline, kernel, ...) and the
medians are printed. Budget: the kernel hashes at least 50M tokens/s.
"""

from __future__ import annotations

import argparse
import statistics
import time
import tracemalloc

import numpy as np

from prefixsim.formats import hashing


def python_tuple_hash(tokens: list[int], offsets: list[int], block_size: int) -> int:
    n = 0
    for r in range(len(offsets) - 1):
        parent = 0
        for start in range(offsets[r], offsets[r + 1] - block_size + 1, block_size):
            parent = hash((parent, tuple(tokens[start : start + block_size])))
            n += 1
    return n


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=50_000_000)
    ap.add_argument("--block-size", type=int, default=16)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--baseline-tokens", type=int, default=500_000)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    lengths = rng.integers(2_000, 20_000, size=args.tokens // 2_000 + 1)
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    offsets = offsets[offsets <= args.tokens]
    n_tokens = int(offsets[-1])
    tokens = rng.integers(0, 150_000, size=n_tokens, dtype=np.int64)
    bs = args.block_size
    hashing.chain_hashes(tokens[:100], np.array([0, 100]), bs)  # compile / load the kernel
    # the baselines on a prefix of the requests (plain Python is ~1000x slower)
    nb = int(np.searchsorted(offsets, args.baseline_tokens, side="right"))
    b_off = offsets[: max(nb, 2)]
    b_tok = tokens[: int(b_off[-1])].tolist()
    b_off_list = b_off.tolist()

    kernel, intern, reference, tuple_hash = [], [], [], []
    for _ in range(args.repeat):
        t = time.perf_counter()
        h0, h1, bo = hashing.chain_hashes(tokens, offsets, bs)
        kernel.append(n_tokens / (time.perf_counter() - t))
        t = time.perf_counter()
        _ids, n_blocks = hashing.intern_blocks(h0, h1, bo, "bench")
        intern.append(len(h0) / (time.perf_counter() - t))
        t = time.perf_counter()
        for r in range(len(b_off_list) - 1):
            hashing.chain_hashes_reference(b_tok[b_off_list[r] : b_off_list[r + 1]], bs)
        reference.append(len(b_tok) / (time.perf_counter() - t))
        t = time.perf_counter()
        python_tuple_hash(b_tok, b_off_list, bs)
        tuple_hash.append(len(b_tok) / (time.perf_counter() - t))
    tracemalloc.start()
    hashing.intern_blocks(*hashing.chain_hashes(tokens, offsets, bs), "bench")
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    med = statistics.median
    print(
        f"{n_tokens:,} tokens in {len(offsets) - 1:,} requests, block_size {bs}: "
        f"{len(h0):,} blocks, {n_blocks:,} distinct; median of {args.repeat}, alternating"
    )
    print(f"kernel chain_hashes:            {med(kernel) / 1e6:9.1f} M tokens/s  (budget >= 50)")
    print(f"kernel intern_blocks:           {med(intern) / 1e6:9.1f} M blocks/s")
    print(f"baseline: reference (Python):   {med(reference) / 1e6:9.3f} M tokens/s")
    print(f"baseline: hash((parent, tuple)):{med(tuple_hash) / 1e6:9.3f} M tokens/s")
    print(f"kernel / reference: {med(kernel) / med(reference):,.0f}x")
    print(
        f"peak numpy memory of hashing + interning: {peak / 2**20:,.0f} MiB "
        f"(tokens themselves: {tokens.nbytes / 2**20:,.0f} MiB)"
    )


if __name__ == "__main__":
    main()
