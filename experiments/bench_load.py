"""Time loading the bundled trace: cold parse (no cache) and cached load.

    python experiments/bench_load.py [trace]

Budgets: cold parse at most 100 ms, cached load (hashing included) at most 10 ms. The cache goes
to a temporary directory unless PREFIXSIM_CACHE_DIR is set.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from collections.abc import Callable

from prefixsim import load_trace


def best_ms(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times) * 1e3


def main(trace: str = "conversation") -> None:
    with tempfile.TemporaryDirectory() as tmp:
        os.environ.setdefault("PREFIXSIM_CACHE_DIR", tmp)
        start = time.perf_counter()
        loaded = load_trace(trace, use_cache=False)  # includes the lazy pyarrow import
        first_ms = (time.perf_counter() - start) * 1e3
        cold_ms = best_ms(lambda: load_trace(trace, use_cache=False), 5)
        load_trace(trace)  # fill the cache
        cached_ms = best_ms(lambda: load_trace(trace), 20)
    print(
        f"{loaded.name}: {loaded.n_requests} requests, {loaded.n_accesses} accesses, "
        f"{loaded.n_blocks} blocks"
    )
    print(f"first cold parse (incl. pyarrow import): {first_ms:7.1f} ms")
    print(f"cold parse, use_cache=False, best of 5:  {cold_ms:7.1f} ms  (budget 100 ms)")
    print(f"cached load, best of 20:                 {cached_ms:7.1f} ms  (budget 10 ms)")


if __name__ == "__main__":
    main(*sys.argv[1:2])
