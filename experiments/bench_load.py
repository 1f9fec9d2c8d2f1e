"""Time loading traces: the bundled trace (cold parse, cached load), or a large file's first load.

    python experiments/bench_load.py [trace]
    python experiments/bench_load.py --large FILE [--baseline-src DIR] [--reps 5]

Without ``--large``: the bundled trace (or ``trace``); budgets: cold parse at most 100 ms, cached
load (hashing included) at most 10 ms. The cache goes to a temporary directory unless
PREFIXSIM_CACHE_DIR is set.

With ``--large FILE`` (a Mooncake trace, e.g. one ``bench_scale.py --keep`` wrote): each
repetition starts a fresh process that times, from before ``import prefixsim``:

* ``first``: ``load_trace(FILE)`` with an empty cache directory: the imports, numba's first use,
  the parse and the cache write (the interpreter's own start is not counted);
* ``warm``: then ``load_trace(FILE, use_cache=False)`` in the same process (the kernels loaded:
  what ``bench_scale.py``'s load column measures), with its CPU time and its peak resident
  memory above the process's before it, against the final arrays' bytes.

With ``--baseline-src DIR`` (the ``src`` folder of another checkout, e.g. ``git archive`` of the
baseline commit unpacked), the same child runs on it too, alternating with this checkout's
within each repetition; medians of ``--reps``. Target (issue 12): >= 1M requests per 3 s, load
memory at most 2.5x the final arrays.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

CHILD = r"""
import json, os, sys, tempfile, threading, time
t0, c0 = time.perf_counter(), time.process_time()
import prefixsim
path = sys.argv[1]
with tempfile.TemporaryDirectory() as cache:
    os.environ["PREFIXSIM_CACHE_DIR"] = cache
    first = prefixsim.load_trace(path)
    first_s, first_cpu = time.perf_counter() - t0, time.process_time() - c0
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
del first
before, peak, running = rss(), [0], [True]
def sample():  # the load's peak resident memory, sampled every 5 ms
    while running[0]:
        peak[0] = max(peak[0], rss())
        time.sleep(0.005)
sampler = threading.Thread(target=sample)
sampler.start()
t, c = time.perf_counter(), time.process_time()
trace = prefixsim.load_trace(path, use_cache=False)
warm_s, warm_cpu = time.perf_counter() - t, time.process_time() - c
running[0] = False
sampler.join()
fields = ("timestamps", "input_lengths", "output_lengths", "offsets", "block_ids", "line_numbers",
          "session_ids")
arrays = sum(getattr(trace, f).nbytes for f in fields if getattr(trace, f) is not None)
print(json.dumps({"requests": trace.n_requests, "sessions": trace.session_ids is not None,
                  "first_s": first_s, "first_cpu": first_cpu,
                  "warm_s": warm_s, "warm_cpu": warm_cpu,
                  "peak": max(peak[0], rss()) - before, "arrays": arrays}))
"""


def best_ms(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times) * 1e3


def bundled(trace: str = "conversation") -> None:
    from prefixsim import load_trace

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


def run_child(src: Path, path: str) -> dict:
    env = dict(os.environ, PYTHONPATH=str(src))
    done = subprocess.run(
        [sys.executable, "-c", CHILD, path], capture_output=True, text=True, env=env
    )
    if done.returncode:
        raise SystemExit(f"child failed on {src}: {done.stderr.strip()[-2000:]}")
    return json.loads(done.stdout)


def large(path: str, baseline: Path | None, reps: int) -> None:
    here = Path(__file__).resolve().parent.parent / "src"
    trees = {"this checkout": here} | ({"baseline": baseline} if baseline else {})
    runs: dict[str, list[dict]] = {name: [] for name in trees}
    for rep in range(reps):
        order = list(trees) if rep % 2 == 0 else list(reversed(trees))  # alternating
        for name in order:
            runs[name].append(run_child(trees[name], path))
    print(f"{path}: {runs['this checkout'][0]['requests']:,} requests; medians of {reps}")
    print(
        f"{'tree':>14} {'first s':>8} {'(cpu)':>6} {'warm s':>7} {'warm cpu':>8} "
        f"{'req/3s (warm)':>14} "
        f"{'peak MB':>8} {'arrays MB':>9} {'x arrays':>8}  sessions"
    )
    for name, rs in runs.items():

        def med(key: str, rs: list[dict] = rs) -> float:
            return statistics.median(r[key] for r in rs)

        mb = 2**20
        print(
            f"{name:>14} {med('first_s'):>8.2f} {med('first_cpu'):>6.2f} {med('warm_s'):>7.2f} "
            f"{med('warm_cpu'):>8.2f} "
            f"{3 * rs[0]['requests'] / med('warm_s'):>14,.0f} {med('peak') / mb:>8.0f} "
            f"{rs[0]['arrays'] / mb:>9.0f} {med('peak') / rs[0]['arrays']:>8.2f}  "
            f"{rs[0]['sessions']}"
        )
        each = ", ".join(f"{r['first_s']:.2f}" for r in rs)
        print(f"{'':>14} first, each run: {each}")
    print("first: import prefixsim + load_trace(FILE) with an empty cache (numba's first use and")
    print("the cache write included); warm: load_trace(FILE, use_cache=False) after it")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("trace", nargs="?", default="conversation")
    ap.add_argument("--large", metavar="FILE", help="time a large file's first load instead")
    ap.add_argument("--baseline-src", type=Path, help="src folder of a baseline checkout")
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    if args.large:
        large(args.large, args.baseline_src, args.reps)
    else:
        bundled(args.trace)


if __name__ == "__main__":
    main()
