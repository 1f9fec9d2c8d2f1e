"""Overhead of the cost model: its per-point columns against the replay they derive from, and a
sweep with a model against the same sweep without one (the baseline), in the same run.

Prints the time of ``prefixsim.prefill_cost`` on one replay's per-request arrays beside the
replay itself (median of --repeat), then the wall time of an in-process sweep of --points
points with ``model=llama-3.1-70b`` (cache_size) and without a model (the same capacities),
alternating, median of --rounds; and peak memory.

    python experiments/bench_cost.py [--repeat 20] [--rounds 5]
"""

from __future__ import annotations

import argparse
import resource
import statistics
import tempfile
import time
from pathlib import Path

from prefixsim import load_hardware, load_model, load_trace, prefill_cost, replay
from sweep import ExecutorConfig, SweepConfig, run_sweep
from sweep.config import HardwareConfig, ModelConfig

SIZES_GIB = [64, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048]


def median_time(fn, repeat: int) -> float:  # type: ignore[no-untyped-def]
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()

    trace = load_trace("conversation")
    model, hw = load_model("llama-3.1-70b"), load_hardware("h100")
    result = replay(trace, "S3FIFO", 4096)  # compiles or loads the kernel
    t_replay = median_time(lambda: replay(trace, "S3FIFO", 4096), args.repeat)
    t_cost = median_time(
        lambda: prefill_cost(model, result.prompt_tokens, result.hit_tokens, 512, hw, "rdma"),
        args.repeat,
    )
    print(f"requests: {trace.n_requests}")
    print(f"replay S3FIFO capacity=4096 (baseline): {t_replay * 1e3:8.2f} ms (median)")
    print(f"prefill_cost on its per-request arrays:  {t_cost * 1e3:8.2f} ms (median)")
    print(f"cost / replay: {t_cost / t_replay:.2f}")

    per_block = model.kv_bytes_per_block(512)
    capacities = [s * 2**30 // per_block for s in SIZES_GIB]
    with_model, without = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for kind in ("without", "with"):
                extra: dict[str, object] = (
                    {
                        "cache_size": [f"{s}GiB" for s in SIZES_GIB],
                        "model": ModelConfig(**model.to_dict()),
                        "hardware": HardwareConfig(**hw.to_dict()),
                        "cache_tier": "rdma",
                    }
                    if kind == "with"
                    else {"capacity": capacities}
                )
                cfg = SweepConfig(
                    policy=["S3FIFO", "LRU"],
                    out_dir=str(Path(tmp) / f"{kind}{r}"),
                    progress=False,
                    plot=False,
                    executor=ExecutorConfig(n_jobs=1),
                    **extra,  # type: ignore[arg-type]
                )
                start = time.perf_counter()
                summary = run_sweep(cfg)
                elapsed = time.perf_counter() - start
                assert summary.exit_code == 0 and summary.computed == 2 * len(SIZES_GIB)
                (with_model if kind == "with" else without).append(elapsed)
    a, b = statistics.median(without), statistics.median(with_model)
    n = 2 * len(SIZES_GIB)
    print(f"sweep of {n} points, in process, median of {args.rounds} alternating rounds:")
    print(f"  without a model (baseline): {a:6.3f} s")
    print(f"  with llama-3.1-70b + h100:  {b:6.3f} s  ({(b - a) / n * 1e3:+.2f} ms per point)")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak memory: {peak:.0f} MiB")


if __name__ == "__main__":
    main()
