"""Traces of millions of requests: generate, load, replay; the growth from 100K to 10M requests.

    python experiments/bench_scale.py [--sizes 100000,1000000,10000000] [--dir DIR] [--keep]
                                      [--reps 5]

For each size, ``prefixsim.synth --like conversation`` (seed 1) writes a Mooncake JSONL file
(block_size 512); then a fresh process loads it without the cache (the streaming parser) and
prints the load time, the peak RSS of the load against the final arrays' bytes, and replays it
with S3FIFO and LRU at 65,536 blocks (kernel only, after one untimed call, median of ``--reps``).
The bundled trace's replay throughput (4,096 blocks) is measured in the same process, as the
baseline, and so are the kernels of commit ebaec63 (:data:`OLD_KERNELS`, copies kept here only
as that baseline; ``bench_replay.py --baseline`` uses them too): old and new alternate within
each repetition, a new kernel's time includes allocating its ``kernel_state`` (the old ones
allocate inside), and their per-request hit tokens and counters must be equal. The files are
deleted unless ``--keep`` (an existing file in ``--dir`` is reused). Targets (issue 12): >= 1M
requests parsed per 3 s; load peak <= 2.5x the final arrays; replay >= 50% of the bundled
trace's throughput.
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

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def old_lru_kernel(block_ids, offsets, input_lengths, n_blocks, block_size, cnt, capacity):
    """The LRU kernel of commit ebaec63, verbatim but for comments: the baseline."""
    resident = np.zeros(n_blocks, np.bool_)
    link = np.empty((n_blocks, 2), np.int32)
    head = -1
    tail = -1
    size = 0
    hits = 0
    evictions = 0
    n_requests = input_lengths.shape[0]
    hit_tokens = np.empty(n_requests, np.int64)
    for r in range(n_requests):
        start = offsets[r]
        end = offsets[r + 1]
        k = start
        while k < end and resident[block_ids[k]]:
            k += 1
        hit_tokens[r] = min((k - start) * block_size, input_lengths[r])
        for i in range(start, end):
            h = block_ids[i]
            if resident[h]:
                hits += 1
                if h == tail:
                    continue
                p = link[h, 0]
                n = link[h, 1]
                if p >= 0:
                    link[p, 1] = n
                else:
                    head = n
                link[n, 0] = p
            else:
                if size >= capacity:
                    victim = head
                    head = link[victim, 1]
                    if head >= 0:
                        link[head, 0] = -1
                    else:
                        tail = -1
                    resident[victim] = False
                    size -= 1
                    evictions += 1
                resident[h] = True
                size += 1
            link[h, 0] = tail
            link[h, 1] = -1
            if tail >= 0:
                link[tail, 1] = h
            else:
                head = h
            tail = h
    cnt[0] += hits
    cnt[1] += evictions
    return hit_tokens, size


_NONE, _IN_S, _IN_M, _IN_G = 0, 1, 2, 3


@njit(cache=True, nogil=True)
def old_s3fifo_kernel(
    block_ids, offsets, input_lengths, n_blocks, block_size, cnt,
    small_cap, main_cap, max_freq, ghost_freq,
):  # fmt: skip
    """The S3FIFO kernel of commit ebaec63, verbatim but for comments: the baseline."""
    where = np.zeros(n_blocks, np.int8)
    freq = np.zeros(n_blocks, np.int32)
    g_link = np.empty((n_blocks, 2), np.int32)
    s_ring = np.empty(small_cap, np.int32)
    m_ring = np.empty(main_cap, np.int32)
    s_head = s_len = m_head = m_len = g_len = 0
    g_head = g_tail = -1
    ghost_cap = main_cap
    hits = evictions = ghost_hits = promotions = 0
    n_requests = input_lengths.shape[0]
    hit_tokens = np.empty(n_requests, np.int64)
    for r in range(n_requests):
        start = offsets[r]
        end = offsets[r + 1]
        k = start
        while k < end:
            w = where[block_ids[k]]
            if w != _IN_S and w != _IN_M:
                break
            k += 1
        hit_tokens[r] = min((k - start) * block_size, input_lengths[r])
        for i in range(start, end):
            h = block_ids[i]
            w = where[h]
            if w == _IN_S or w == _IN_M:  # noqa: SIM109 (plain compares in the hot loop)
                hits += 1
                f = freq[h] + 1
                freq[h] = f if f < max_freq else max_freq
                continue
            to_g = -1
            to_m = -1
            to_m_freq = 0
            to_s = -1
            if w == _IN_G:
                ghost_hits += 1
                p = g_link[h, 0]
                n = g_link[h, 1]
                if p >= 0:
                    g_link[p, 1] = n
                else:
                    g_head = n
                if n >= 0:
                    g_link[n, 0] = p
                else:
                    g_tail = p
                g_len -= 1
                to_m = h
                to_m_freq = ghost_freq
            else:
                to_s = h
            while True:
                if to_g >= 0:
                    if g_len >= ghost_cap:
                        old = g_head
                        g_head = g_link[old, 1]
                        if g_head >= 0:
                            g_link[g_head, 0] = -1
                        else:
                            g_tail = -1
                        where[old] = _NONE
                        g_len -= 1
                    g_link[to_g, 0] = g_tail
                    g_link[to_g, 1] = -1
                    if g_tail >= 0:
                        g_link[g_tail, 1] = to_g
                    else:
                        g_head = to_g
                    g_tail = to_g
                    g_len += 1
                    where[to_g] = _IN_G
                    to_g = -1
                if to_m >= 0:
                    while m_len >= main_cap:
                        victim = m_ring[m_head]
                        m_head += 1
                        if m_head == main_cap:
                            m_head = 0
                        vf = freq[victim]
                        if vf >= 1:
                            freq[victim] = vf - 1
                            continue
                        m_len -= 1
                        evictions += 1
                        to_g = victim
                        break
                    pos = m_head + m_len
                    if pos >= main_cap:
                        pos -= main_cap
                    m_ring[pos] = to_m
                    m_len += 1
                    where[to_m] = _IN_M
                    freq[to_m] = to_m_freq
                    to_m = -1
                    continue
                if to_s < 0:
                    break
                if s_len >= small_cap:
                    victim = s_ring[s_head]
                    s_head += 1
                    if s_head == small_cap:
                        s_head = 0
                    s_len -= 1
                    vf = freq[victim]
                    if vf >= 1:
                        promotions += 1
                        to_m = victim
                        to_m_freq = vf
                    else:
                        evictions += 1
                        to_g = victim
                    continue
                pos = s_head + s_len
                if pos >= small_cap:
                    pos -= small_cap
                s_ring[pos] = to_s
                s_len += 1
                where[to_s] = _IN_S
                freq[to_s] = 0
                break
    cnt[0] += hits
    cnt[1] += evictions
    cnt[2] += ghost_hits
    cnt[3] += promotions
    return hit_tokens, s_len + m_len


OLD_KERNELS = {"LRU": old_lru_kernel, "S3FIFO": old_s3fifo_kernel}
"""The baselines, by policy: same contract as the kernels of commit ebaec63 (no kernel_state)."""


CHILD = r"""
import json, resource, statistics, sys, time
import pathlib, tempfile
import numpy as np
import prefixsim
sys.path.insert(0, sys.argv[3])
from bench_scale import OLD_KERNELS
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
variants = ["S3FIFO", "S3FIFO_old", "LRU", "LRU_old"]
def run(variant, tr, cap):
    policy = variant.removesuffix("_old")
    spec, params = specs[policy], prefixsim.make_params(policy, cap)
    cnt = np.zeros(4, np.int64)
    t, c = time.perf_counter(), time.thread_time()
    if variant == policy:  # the kernel's working arrays are allocated in the timed part
        hits, final = spec.kernel(tr.block_ids, tr.offsets, tr.input_lengths, tr.n_blocks, 512,
                                  cnt, *spec.kernel_inputs(params, tr.n_blocks))
    else:
        hits, final = OLD_KERNELS[policy](tr.block_ids, tr.offsets, tr.input_lengths,
                                          tr.n_blocks, 512, cnt, *spec.kernel_args(params))
    return time.perf_counter() - t, (hits, final, cnt), time.thread_time() - c
for name, tr, cap in (("bundled", bundled, 4096), ("trace", trace, 65536)):
    first = {v: run(v, tr, cap)[1] for v in variants}  # untimed (compiles or loads the kernels)
    for policy in specs:
        new, old = first[policy], first[policy + "_old"]
        assert np.array_equal(new[0], old[0]) and new[1] == old[1], f"old and new {policy} differ"
        assert np.array_equal(new[2], old[2]), f"old and new {policy} counters differ"
    del first
    times = {v: [] for v in variants}
    cpu = {v: [] for v in variants}
    for rep in range(REPS):  # alternating, in a rotating order
        order = variants[rep % 4:] + variants[:rep % 4]
        for v in order:
            wall, _, busy = run(v, tr, cap)
            times[v].append(wall)
            cpu[v].append(busy)
    for v in variants:
        out[f"{v}_{name}"] = tr.n_accesses / statistics.median(times[v])
        out[f"{v}_{name}_cpu"] = tr.n_accesses / statistics.median(cpu[v])
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
            [sys.executable, "-c", CHILD, str(path), str(args.reps), str(Path(__file__).parent)],
            capture_output=True,
            text=True,
            env=env,
        )
        if proc.returncode:
            print(f"{n:>10} failed: {proc.stderr.strip().splitlines()[-1]}")
            continue
        r = json.loads(proc.stdout)
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
        if not args.keep:
            path.unlink()
    print("load +MB: the load's peak RSS above the process's before it (interpreter, numpy, numba)")
    print(f"M/s: million block accesses per second, median of {args.reps} alternating runs;")
    print("old: the kernels of commit ebaec63 (OLD_KERNELS), checked equal per request")
    print("by CPU time: the kernel thread's CPU time (time spent descheduled on a shared machine")
    print("excluded; cache misses caused by other processes are not)")


if __name__ == "__main__":
    main()
