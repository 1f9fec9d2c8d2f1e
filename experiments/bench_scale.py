"""Traces of millions of requests: generate, load, replay; the growth from 100K to 10M requests.

    python experiments/bench_scale.py [--sizes 100000,1000000,10000000] [--dir DIR] [--keep]
                                      [--reps 5]

For each size, ``prefixsim.synth --like conversation`` (seed 1) writes a Mooncake JSONL file
(block_size 512); then a fresh process loads it without the cache (the streaming parser) and
prints the load time, the peak RSS of the load against the final arrays' bytes, and replays it
with S3FIFO and LRU at 65,536 blocks (kernel only, after one untimed call, median of ``--reps``).
The bundled trace's replay throughput (4,096 blocks) is measured in the same process, as the
baseline, and so are the kernels of commit ebaec63 (:data:`BASELINE`, imported from that commit by
``baseline_kernels.py``; ``bench_replay.py --baseline`` uses them too): old and new alternate within
each repetition, a new kernel's time includes allocating its ``kernel_state`` (the old ones allocate
inside), and their per-request hit tokens and counters must be equal. The files are deleted unless
``--keep`` (an existing file in ``--dir`` is reused). Targets (issue 12): >= 1M requests parsed per
3 s; load peak <= 2.5x the final arrays; replay >= 50% of the bundled trace's throughput.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BASELINE = "ebaec63"
"""The commit whose kernels are timed beside today's (``baseline_kernels.py``)."""


CHILD = r"""
import json, math, resource, statistics, sys, time
import pathlib, tempfile
import numpy as np
import prefixsim
from prefixsim.engine.rules import SpecRule
sys.path.insert(0, sys.argv[3])
from baseline_kernels import baseline_kernel
from bench_scale import BASELINE
WITH_BASELINE = sys.argv[4] == "1"
OLD_KERNELS = {p: baseline_kernel(BASELINE, p) for p in ("S3FIFO", "LRU")} if WITH_BASELINE else {}
REPS = int(sys.argv[2])
from prefixsim.formats import mooncake_stream
path = sys.argv[1]
with tempfile.TemporaryDirectory() as tmp:  # load the compiled parser before measuring
    warm = pathlib.Path(tmp) / "w.jsonl"
    warm.write_text('{"timestamp": 1, "input_length": 1, "output_length": 1, "hash_ids": [1]}')
    mooncake_stream.parse(warm)
import os, threading
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
before, peak, running = rss(), [0], [True]
def sample():  # the load's peak resident memory, sampled every 5 ms
    while running[0]:
        peak[0] = max(peak[0], rss())
        time.sleep(0.005)
sampler = threading.Thread(target=sample)
sampler.start()
t = time.perf_counter()
trace = prefixsim.load_trace(path, use_cache=False)
load = time.perf_counter() - t
running[0] = False
sampler.join()
peak_load = max(peak[0], rss())
arrays = sum(getattr(trace, f).nbytes for f in ("timestamps", "input_lengths", "output_lengths",
             "offsets", "block_ids", "line_numbers", "session_ids")
             if getattr(trace, f) is not None)
out = {"requests": trace.n_requests, "accesses": trace.n_accesses, "blocks": trace.n_blocks,
       "load_s": load, "peak_load": peak_load - before, "arrays": arrays}
bundled = prefixsim.load_trace("conversation")
specs = {"S3FIFO": prefixsim.get_policy("S3FIFO"), "LRU": prefixsim.get_policy("LRU")}
variants = ["S3FIFO", "S3FIFO_old", "LRU", "LRU_old"] if WITH_BASELINE else ["S3FIFO", "LRU"]
def run(variant, tr, cap):
    policy = variant.removesuffix("_old")
    spec, params = specs[policy], prefixsim.make_params(policy, cap)
    cnt = np.zeros(4, np.int64)
    t, c = time.perf_counter(), time.thread_time()
    loop = math.nan  # the kernel's loop alone (its working arrays already allocated)
    if variant == policy:  # the kernel's working arrays are allocated in the timed part
        inputs = spec.kernel_inputs(params, tr.n_blocks)
        t_loop = time.perf_counter()
        hits = np.empty(tr.n_requests, np.int64)
        final = spec.kernel(tr.block_ids, tr.offsets, tr.input_lengths, SpecRule(512), cnt,
                            hits, *inputs)
        loop = time.perf_counter() - t_loop
    else:
        hits, final = OLD_KERNELS[policy](tr.block_ids, tr.offsets, tr.input_lengths,
                                          tr.n_blocks, 512, cnt, cap)
    return time.perf_counter() - t, (hits, final, cnt), time.thread_time() - c, loop
for name, tr, cap in (("bundled", bundled, 4096), ("trace", trace, 65536)):
    first = {v: run(v, tr, cap)[1] for v in variants}  # untimed (compiles or loads the kernels)
    for policy in specs if WITH_BASELINE else ():
        new, old = first[policy], first[policy + "_old"]
        assert np.array_equal(new[0], old[0]) and new[1] == old[1], f"old and new {policy} differ"
        assert np.array_equal(new[2], old[2]), f"old and new {policy} counters differ"
    del first
    times = {v: [] for v in variants}
    cpu = {v: [] for v in variants}
    loops = {v: [] for v in variants}
    for rep in range(REPS):  # alternating, in a rotating order
        order = variants[rep % len(variants):] + variants[:rep % len(variants)]
        for v in order:
            wall, _, busy, loop = run(v, tr, cap)
            times[v].append(wall)
            cpu[v].append(busy)
            loops[v].append(loop)
    for v in variants:
        out[f"{v}_{name}"] = tr.n_accesses / statistics.median(times[v])
        out[f"{v}_{name}_cpu"] = tr.n_accesses / statistics.median(cpu[v])
        out[f"{v}_{name}_loop"] = tr.n_accesses / statistics.median(loops[v])
out["peak_total"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps(out))
"""


def generate(n: int, path: Path) -> float:
    import dataclasses

    from prefixsim.convert import write_mooncake
    from prefixsim.synth import PRESETS, plan_trace, synth_plan

    t = time.perf_counter()
    plan = synth_plan(dataclasses.replace(PRESETS["conversation"], requests=n, seed=1))
    write_mooncake(plan_trace(plan, 512, str(path)), path)
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="100000,1000000,10000000")
    ap.add_argument("--dir", default=None)
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument(
        "--no-baseline",
        action="store_true",
        help="today's kernels only: the old ones, alternating in the same process, fragment "
        "memory, and the new kernels' fresh per-block state then costs more to allocate",
    )
    args = ap.parse_args()
    folder = Path(args.dir or tempfile.mkdtemp(prefix="bench_scale."))
    folder.mkdir(parents=True, exist_ok=True)
    print(
        f"{'requests':>10} {'accesses':>12} {'file MB':>8} {'gen s':>6} {'load s':>7} "
        f"{'req/3s':>9} {'arrays MB':>9} {'load +MB':>9} {'x arrays':>8} "
        f"{'S3FIFO M/s':>10} {'(bundled)':>9} {'old':>6} {'(bundled)':>9} "
        f"{'LRU M/s':>8} {'(bundled)':>9} {'old':>6} {'(bundled)':>9}"
    )
    for n in (int(s) for s in args.sizes.split(",")):
        path = folder / f"synth_{n}.jsonl"
        gen = generate(n, path) if not path.exists() else float("nan")
        env = dict(os.environ, PREFIXSIM_CACHE_DIR=str(folder / "cache"))
        proc = subprocess.run(
            [
                *(sys.executable, "-c", CHILD, str(path), str(args.reps)),
                *(str(Path(__file__).parent), "0" if args.no_baseline else "1"),
            ],
            capture_output=True,
            text=True,
            env=env,
        )
        if proc.returncode:
            print(f"{n:>10} failed: {proc.stderr.strip().splitlines()[-1]}")
            continue
        r = json.loads(proc.stdout)
        nan = float("nan")
        for v in ("S3FIFO_old", "LRU_old"):
            for key in ("trace", "bundled", "trace_cpu", "bundled_cpu"):
                r.setdefault(f"{v}_{key}", nan)
        mb = 2**20
        print(
            f"{r['requests']:>10,} {r['accesses']:>12,} {path.stat().st_size / mb:>8.0f} "
            f"{gen:>6.1f} {r['load_s']:>7.2f} {3 * r['requests'] / r['load_s']:>9,.0f} "
            f"{r['arrays'] / mb:>9.0f} {r['peak_load'] / mb:>9.0f} "
            f"{r['peak_load'] / r['arrays']:>8.2f} "
            f"{r['S3FIFO_trace'] / 1e6:>10.1f} {r['S3FIFO_bundled'] / 1e6:>9.1f} "
            f"{r['S3FIFO_old_trace'] / 1e6:>6.1f} {r['S3FIFO_old_bundled'] / 1e6:>9.1f} "
            f"{r['LRU_trace'] / 1e6:>8.1f} {r['LRU_bundled'] / 1e6:>9.1f} "
            f"{r['LRU_old_trace'] / 1e6:>6.1f} {r['LRU_old_bundled'] / 1e6:>9.1f}"
        )
        cpu = "  ".join(
            f"{v.replace('_old', ' old')} {r[f'{v}_trace_cpu'] / 1e6:.1f} "
            f"({r[f'{v}_bundled_cpu'] / 1e6:.1f})"
            for v in ("S3FIFO", "S3FIFO_old", "LRU", "LRU_old")
        )
        print(f"{'':>10} by CPU time, M/s (bundled): {cpu}")
        loop = "  ".join(
            f"{v} {r[f'{v}_trace_loop'] / 1e6:.1f} ({r[f'{v}_bundled_loop'] / 1e6:.1f})"
            for v in ("S3FIFO", "LRU")
        )
        print(f"{'':>10} the loop alone, state allocated before, M/s (bundled): {loop}")
        if not args.keep:
            path.unlink()
    print("load +MB: the load's peak RSS above the process's before it (interpreter, numpy, numba)")
    print(f"M/s: million block accesses per second, median of {args.reps} alternating runs;")
    print(f"old: the kernels of commit {BASELINE}, checked equal per request")
    print("the loop alone: today's kernels without allocating their per-block state (wall)")
    print("by CPU time: the kernel thread's CPU time (time spent descheduled on a shared machine")
    print("excluded; cache misses caused by other processes are not)")


if __name__ == "__main__":
    main()
