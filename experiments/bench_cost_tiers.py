"""Overhead of the per-tier transfer term: ``prefill_cost_tiers`` on a hierarchy replay's
``tier_hit_tokens`` against ``prefill_cost`` on its summed hit tokens (the single-``cache_tier``
rule a hierarchy row used before) and against the replay itself, alternating, median of
--repeat rounds, on the bundled trace (LRU 2,048 over S3FIFO 16,384, exclusive).

With ``--baseline-src DIR`` (a checkout's ``src``, e.g. main before this change) it also times
``prefill_cost`` of a single cache in a fresh process of that source and of this one,
alternating, median of --rounds processes: what making ``prefill_cost`` the one-tier case of
``prefill_cost_tiers`` costs.

    PYTHONPATH=src python experiments/bench_cost_tiers.py [--repeat 30] [--baseline-src DIR]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

SINGLE = """
import statistics, time
from prefixsim import load_hardware, load_model, load_trace, prefill_cost, replay
trace = load_trace("conversation")
model, hw = load_model("llama-3.1-70b"), load_hardware("h100")
r = replay(trace, "S3FIFO", 4096)
times = []
for _ in range({repeat}):
    t = time.perf_counter()
    prefill_cost(model, r.prompt_tokens, r.hit_tokens, 512, hw, "rdma")
    times.append(time.perf_counter() - t)
print(statistics.median(times))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--baseline-src", type=Path, default=None)
    args = ap.parse_args()

    from prefixsim import load_hardware, load_model, load_trace
    from prefixsim.cost import prefill_cost, prefill_cost_tiers
    from prefixsim.tiers import make_tier, replay_tiers

    trace = load_trace("conversation")
    model, hw = load_model("llama-3.1-70b"), load_hardware("h100")
    tiers = [
        make_tier("LRU", 2048, name="hbm", medium="hbm"),
        make_tier("S3FIFO", 16384, name="dram", medium="dram_pcie"),
    ]
    r = replay_tiers(trace, tiers)  # compiles or loads the kernel
    media = [t.medium for t in r.tiers]
    runs = {
        "replay_tiers (the replay itself)": lambda: replay_tiers(trace, tiers),
        "prefill_cost on summed hits (before)": lambda: prefill_cost(
            model, r.prompt_tokens, r.hit_tokens, 512, hw, "hbm"
        ),
        "prefill_cost_tiers, 2 tiers (now)": lambda: prefill_cost_tiers(
            model, r.prompt_tokens, r.tier_hit_tokens, 512, hw, media
        ),
    }
    times: dict[str, list[float]] = {k: [] for k in runs}
    for _ in range(args.repeat):
        for name, fn in runs.items():  # alternating, so load changes hit all alike
            t = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t)
    print(f"requests: {trace.n_requests}; median of {args.repeat} alternating rounds")
    for name, ts in times.items():
        print(f"  {name:40s} {statistics.median(ts) * 1e3:8.3f} ms")

    if args.baseline_src is not None:
        here = Path(__file__).resolve().parents[1] / "src"
        got: dict[str, list[float]] = {"baseline": [], "this checkout": []}
        for _ in range(args.rounds):
            for label, src in (("baseline", args.baseline_src), ("this checkout", here)):
                env = {**os.environ, "PYTHONPATH": str(src)}
                out = subprocess.run(
                    [sys.executable, "-c", SINGLE.format(repeat=args.repeat)],
                    env=env,
                    capture_output=True,
                    text=True,
                    check=True,
                )
                got[label].append(float(out.stdout.strip()))
        print(f"single-cache prefill_cost, median of {args.rounds} alternating processes:")
        for label, ts in got.items():
            print(f"  {label:40s} {statistics.median(ts) * 1e3:8.3f} ms")


if __name__ == "__main__":
    main()
