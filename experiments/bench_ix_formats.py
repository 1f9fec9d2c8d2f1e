"""The trace parsers' and the cluster static routers' kernels against a baseline commit's,
alternating in one process.

    python experiments/bench_ix_formats.py --baseline REF [--requests N] [--repeat R]

Times, on a generated Mooncake JSONL buffer and generated token ids, the strict-subset
parser kernel (``mooncake_kernel._parse_chunk``), the chained hash (``hashing._chain_kernel``),
the interning (``hashing._intern_kernel``), and on a generated cluster assignment
``cluster.load.split_subtraces``, ``cluster.load.fcfs_kernel`` and
``cluster.routers.session_assign_kernel``, of this checkout and of ``REF`` (imported with
``baseline_kernels``), old and new alternating, thread CPU time, medians of R; each pair's
outputs are checked equal before timing.
"""

from __future__ import annotations

import argparse
import importlib
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import prefixsim.cluster.routers as routers_new
import prefixsim.formats.hashing as hashing_new


def mooncake_buffer(n: int, rng: np.random.Generator) -> np.ndarray:
    lines = []
    for r in range(n):
        k = int(rng.integers(1, 200))
        ids = ", ".join(str(int(x)) for x in rng.integers(0, 400_000, size=k))
        lines.append(
            f'{{"timestamp": {r * 7}, "input_length": {k * 512}, "output_length": 300, '
            f'"hash_ids": [{ids}]}}'
        )
    return np.frombuffer(("\n".join(lines) + "\n").encode(), dtype=np.uint8)


def parse_args(buf: np.ndarray) -> tuple[Any, ...]:
    m = len(buf) // 2 + 1
    cols = [np.empty(m, np.float64)] + [np.empty(m, np.int64) for _ in range(4)]
    out_ids = np.empty(m, np.int32)
    table = np.zeros(1 << 20, np.int64)
    return (buf, 0, 0, 0, 1, *cols, out_ids, table, 0, *[np.empty(m, np.int64) for _ in range(3)])


def run_parse(kernel: Callable[..., Any], buf: np.ndarray) -> Any:
    args = parse_args(buf)
    t = time.thread_time()
    res = kernel(*args)
    dt = time.thread_time() - t
    assert res[0] == 0, res
    r, nid = res[2], res[3]
    return dt, (args[8][:r].copy(), args[10][:nid].copy(), args[11].copy())


Bench = tuple[Callable[[Any], Any], str, float, str]
"""(run on a module -> (seconds, outputs), the module's path under the package, units, unit)."""


def timed(f: Callable[[], Any]) -> tuple[float, Any]:
    t = time.thread_time()
    res = f()
    return time.thread_time() - t, res


def format_benches(requests: int, n_tokens: int, rng: np.random.Generator) -> dict[str, Bench]:
    buf = mooncake_buffer(requests, rng)
    lengths = rng.integers(2_000, 20_000, size=n_tokens // 2_000 + 1)
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    offsets = offsets[offsets <= n_tokens]
    tokens = rng.integers(0, 150_000, size=int(offsets[-1]), dtype=np.uint64)
    bo = hashing_new.block_offsets_for(offsets, 16)
    n_acc = int(bo[-1])

    def parse(mod: Any) -> Any:
        return run_parse(mod._parse_chunk, buf)

    def chain(mod: Any) -> Any:
        h0 = np.empty(n_acc, np.uint64)
        h1 = np.empty(n_acc, np.uint64)
        return timed(lambda: (mod._chain_kernel(tokens, offsets, bo, 16, h0, h1), h0, h1))

    h0, h1 = chain(hashing_new)[1][1:]
    # interned twice over: every access's hash, then all of them again (all seen before)
    h0r, h1r = np.concatenate([h0, h0]), np.concatenate([h1, h1])
    bor = np.concatenate([bo, bo[1:] + n_acc])
    bits = max(4, int(4 * n_acc - 1).bit_length())

    def intern(mod: Any) -> Any:
        ids = np.empty(len(h0r), np.int32)
        return timed(lambda: (ids, mod._intern_kernel(h0r, h1r, bor, ids, bits)))

    return {
        "parse": (parse, "formats.mooncake_kernel", len(buf) / 1e6, "MB/s"),
        "chain": (chain, "formats.hashing", len(tokens) / 1e6, "M tokens/s"),
        "intern": (intern, "formats.hashing", len(h0r) / 1e6, "M accesses/s"),
    }


def cluster_benches(n_req: int, rng: np.random.Generator) -> dict[str, Bench]:
    """The static routers' kernels on a generated trace: 16 instances, random routing."""
    n_inst = 16
    counts = rng.integers(1, 100, size=n_req)
    off = np.zeros(n_req + 1, np.int64)
    np.cumsum(counts, out=off[1:])
    n_blocks = int(off[-1]) // 4
    ids = rng.integers(0, n_blocks, size=int(off[-1])).astype(np.int32)
    inst = rng.integers(0, n_inst, size=n_req).astype(np.int32)
    arrival = np.sort(rng.random(n_req)) * n_req
    prompt = counts * 16
    hits = (prompt * rng.random(n_req)).astype(np.int64)
    out_len = rng.integers(1, 1000, size=n_req)
    consts = (16, 16e9, 1.0e6, 4e14, 131072, 3e12)
    sessions = rng.integers(-1, 1000, size=n_req)
    points, owners = routers_new.ring_arrays(n_inst, 100)

    def split(mod: Any) -> Any:
        return timed(lambda: mod.split_subtraces(ids, off, inst, n_inst, n_blocks))

    def fcfs(mod: Any) -> Any:
        return timed(
            lambda: mod.fcfs_kernel(arrival, inst, prompt, hits, out_len, n_inst, 0.01, consts)
        )

    def session(mod: Any) -> Any:
        return timed(lambda: (mod.session_assign_kernel(ids, off, sessions, 2, points, owners),))

    return {
        "split": (split, "cluster.load", len(ids) / 1e6, "M accesses/s"),
        "fcfs": (fcfs, "cluster.load", n_req / 1e6, "M requests/s"),
        "session": (session, "cluster.routers", n_req / 1e6, "M requests/s"),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--baseline", required=True)
    ap.add_argument("--requests", type=int, default=100_000)
    ap.add_argument("--tokens", type=int, default=20_000_000)
    ap.add_argument("--repeat", type=int, default=9)
    ap.add_argument("--only", default="parse,chain,intern,split,fcfs,session")
    a = ap.parse_args()
    from baseline_kernels import _package  # experiments/ is on sys.path when run as a script

    old = _package(a.baseline).__name__
    rng = np.random.default_rng(0)
    benches = format_benches(a.requests, a.tokens, rng) | cluster_benches(4 * a.requests, rng)
    for name in a.only.split(","):
        f, path, units, unit = benches[name]
        mods = [importlib.import_module(f"{pkg}.{path}") for pkg in ("prefixsim", old)]
        _, r_new = f(mods[0])
        _, r_old = f(mods[1])
        for x, y in zip(r_new, r_old, strict=True):
            assert np.array_equal(np.asarray(x), np.asarray(y)), name
        times: dict[int, list[float]] = {0: [], 1: []}
        for rep in range(a.repeat):
            for which in (0, 1) if rep % 2 == 0 else (1, 0):
                times[which].append(f(mods[which])[0])
        new, oldt = statistics.median(times[0]), statistics.median(times[1])
        print(
            f"{name:>7}: now {units / new:8.1f} / {a.baseline} {units / oldt:8.1f} {unit}"
            f"  {oldt / new:.2f}x  (medians of {a.repeat}, thread CPU time)"
        )


if __name__ == "__main__":
    main()
