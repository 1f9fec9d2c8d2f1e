"""Sweep throughput: a ~1,000-point grid through ``python -m sweep``, against one Hydra job per
point.

The grid is 2 policies x N capacities x 5 ``small_ratio`` x 4 ``max_freq`` on the bundled trace;
LRU has neither S3FIFO parameter, so it is deduplicated to one point per capacity, and N (48)
is chosen so that the grid has at least --points points (21 N). Prints, for the whole
``python -m sweep`` process (interpreter start-up, imports, Hydra, numba cache load, worker
start, replays, Parquet writing):

* wall time and peak memory (resident set of the process tree, sampled, and of the largest
  process);
* replay time (the kernels' own time, summed over points) and the phases from manifest.json;
* per-point overhead: the execution phase's worker-time not spent replaying, per point, for
  the parallel run and for a serial run (``executor.n_jobs=1``) of the same grid;

beside the same kind of points run as one Hydra job each (``--multirun``, through
``hydra/launcher=joblib`` when hydra-joblib-launcher is installed, else Hydra's basic launcher)
on a --baseline-points sample, extrapolated to the grid.

    python experiments/bench_sweep.py [--points 1000] [--n-jobs -1] [--baseline-points 20]
                                      [--no-per-request] [--no-serial] [--no-baseline]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

SMALL_RATIOS = (0.05, 0.1, 0.15, 0.2, 0.25)
MAX_FREQS = (1, 2, 3, 4)
ONE_JOB_ENV = "BENCH_SWEEP_ONE_HYDRA_JOB"


def capacities(n: int) -> list[int]:
    """``n`` distinct capacities, geometric from 256 to 131,072 blocks."""
    out: list[int] = []
    for i in range(n):
        c = round(256 * (512 ** (i / max(1, n - 1))))
        out.append(max(c, out[-1] + 1) if out else c)
    return out


def grid_args(n_capacities: int) -> list[str]:
    return [
        "policy=S3FIFO,LRU",
        f"capacity={','.join(map(str, capacities(n_capacities)))}",
        f"small_ratio={','.join(map(str, SMALL_RATIOS))}",
        f"max_freq={','.join(map(str, MAX_FREQS))}",
    ]


class TreeMemory:
    """Peak resident memory of a process and its descendants, sampled every 20 ms."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> TreeMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        try:
            import psutil
        except ImportError:
            return
        try:
            root = psutil.Process(self.pid)
        except psutil.Error:
            return
        while not self._stop.is_set():
            total = 0
            try:
                for p in [root, *root.children(recursive=True)]:
                    with contextlib.suppress(psutil.Error):
                        total += p.memory_info().rss
            except psutil.Error:
                break
            self.peak = max(self.peak, total)
            self._stop.wait(0.02)


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_sweep_process(args: list[str], cwd: Path) -> dict[str, Any]:
    cpu = _children_cpu()
    start = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "sweep", *args],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    with TreeMemory(proc.pid) as mem:
        _, err = proc.communicate()
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"sweep failed ({proc.returncode}):\n{err}")
    return {
        "wall": wall,
        "cpu": _children_cpu() - cpu,
        "tree_peak": mem.peak,
        "largest_peak": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024,
    }


def one_hydra_job_per_point(n_points: int, n_jobs: int, tmp: Path) -> dict[str, Any] | None:
    """The baseline: ``--multirun`` with one Hydra job per point (this file is the app)."""
    try:
        import hydra_plugins.hydra_joblib_launcher  # noqa: F401

        launcher = ["hydra/launcher=joblib", f"hydra.launcher.n_jobs={n_jobs}"]
        name = "joblib launcher"
    except ImportError:
        launcher = []
        name = "basic launcher (hydra-joblib-launcher not installed)"
    caps = capacities(n_points)
    args = [
        "--multirun",
        *launcher,
        "policy=S3FIFO",
        f"capacity={','.join(map(str, caps))}",
        f"hydra.sweep.dir={tmp / 'multirun'}",
    ]
    timings = []
    for points in (1, n_points):
        run_args = list(args)
        run_args[len(launcher) + 2] = f"capacity={','.join(map(str, caps[:points]))}"
        start = time.perf_counter()
        done = subprocess.run(
            [sys.executable, __file__, *run_args],
            env={**os.environ, ONE_JOB_ENV: "1"},
            capture_output=True,
            text=True,
            check=False,
        )
        timings.append(time.perf_counter() - start)
        if done.returncode != 0:
            print(f"baseline failed:\n{done.stderr[-2000:]}")
            return None
    single, many = timings
    return {
        "launcher": name,
        "points": n_points,
        "wall": many,
        "per_point": many / n_points,
        "marginal_per_point": (many - single) / (n_points - 1),
    }


def hydra_job_app() -> None:
    """One point per Hydra job: load the trace (binary cache), replay, return the hit rate."""
    from dataclasses import dataclass

    import hydra
    from hydra.core.config_store import ConfigStore

    @dataclass
    class Point:
        trace: str = "conversation"
        policy: str = "S3FIFO"
        capacity: int = 4096
        block_size: int = 512
        small_ratio: float = 0.1
        max_freq: int = 3

    ConfigStore.instance().store(name="point", node=Point)

    @hydra.main(version_base="1.3", config_path=None, config_name="point")
    def job(cfg: Any) -> float:
        import prefixsim

        trace = prefixsim.load_trace(cfg.trace)
        params = prefixsim.make_params(
            cfg.policy, cfg.capacity, small_ratio=cfg.small_ratio, max_freq=cfg.max_freq
        )
        return prefixsim.replay_params(trace, params, cfg.block_size).overall_hit_rate

    job()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", type=int, default=1000, help="at least this many points")
    ap.add_argument("--n-jobs", type=int, default=-1)
    ap.add_argument("--baseline-points", type=int, default=20)
    ap.add_argument("--no-per-request", action="store_true", help="save_per_request=false")
    ap.add_argument("--no-serial", action="store_true", help="skip the n_jobs=1 run")
    ap.add_argument("--no-baseline", action="store_true", help="skip the Hydra-job baseline")
    args = ap.parse_args()

    n_caps = math.ceil(args.points / (len(SMALL_RATIOS) * len(MAX_FREQS) + 1))
    grid = grid_args(n_caps)
    n_points = n_caps * (len(SMALL_RATIOS) * len(MAX_FREQS) + 1)
    tmp = Path(tempfile.mkdtemp(prefix="bench_sweep."))
    try:
        # warm the trace's binary cache and the kernels' disk cache (a fresh clone compiles once)
        import prefixsim

        trace = prefixsim.load_trace("conversation")
        for policy in ("S3FIFO", "LRU"):
            prefixsim.replay(trace, policy=policy, capacity=64)
        print(
            f"grid: {n_points} points = 2 policies x {n_caps} capacities x "
            f"{len(SMALL_RATIOS)} small_ratio x {len(MAX_FREQS)} max_freq, LRU deduplicated "
            f"({n_caps * len(SMALL_RATIOS) * len(MAX_FREQS)} S3FIFO + {n_caps} LRU) on "
            f"{trace.name} ({trace.n_requests:,} requests, {trace.n_accesses:,} block accesses); "
            f"{os.cpu_count()} cores"
        )
        # The figures (a few seconds, whatever the grid size) are not part of what is measured.
        extra = ["plot=false", *(["save_per_request=false"] if args.no_per_request else [])]
        runs = {"parallel": [f"executor.n_jobs={args.n_jobs}"]}
        if not args.no_serial:
            runs["serial"] = ["executor.n_jobs=1"]
        for label, executor in runs.items():
            out = tmp / label
            m = run_sweep_process([*grid, *executor, *extra, f"out_dir={out}"], tmp)
            manifest = json.loads((out / "manifest.json").read_text())
            t = manifest["timings"]
            ex = manifest["executor"]
            workers = ex.get("workers", 1)
            worker_start = t.get("worker_start_seconds", 0.0)
            steady = t["execute_seconds"] - worker_start
            overhead = (steady * workers - t["replay_seconds"]) / n_points
            started = m["wall"] - t["total_seconds"]
            where = "in process" if ex.get("in_process") else ex["backend"]
            print(f"\n== python -m sweep, {label}: {where}, {workers} worker(s), "
                  f"{ex.get('batches')} batches of <= {ex.get('batch_size')} points"
                  f"{', per-request off' if extra else ''}")  # fmt: skip
            print(f"wall time, whole process      {m['wall']:8.2f} s")
            print(f"CPU time, process tree        {m['cpu']:8.2f} s  (user + system)")
            print(f"  start-up (python, imports,  {started:8.2f} s")
            print("   Hydra) before run_sweep")
            for key in ("plan_seconds", "load_traces_seconds", "warm_up_seconds"):
                print(f"  {key.removesuffix('_seconds'):<28}{t.get(key, 0):8.2f} s")
            print(f"  execute (workers + replays) {t['execute_seconds']:8.2f} s")
            print(f"    of which worker start-up  {worker_start:8.2f} s")
            print(f"  inputs, beside the replays  {t.get('inputs_seconds', 0):8.2f} s")
            print(f"  write Parquet (consolidate) {t['write_seconds']:8.2f} s")
            print(f"replay time, summed           {t['replay_seconds']:8.2f} s  "
                  f"({t['replay_seconds'] / n_points * 1e3:.2f} ms/point)")  # fmt: skip
            print(f"per-point overhead            {overhead * 1e3:8.2f} ms  "
                  "(worker-time not replaying, after worker start-up)")  # fmt: skip
            print(f"per-point write               {t['write_seconds'] / n_points * 1e3:8.2f} ms")
            print(f"peak memory, process tree     {m['tree_peak'] / 2**20:8.0f} MiB")
            print(f"peak memory, largest process  {m['largest_peak'] / 2**20:8.0f} MiB")
            for name in ("results.parquet", "per_request.parquet"):
                if (out / name).exists():
                    print(f"{name:<30}{(out / name).stat().st_size / 2**20:8.1f} MiB")
            shutil.rmtree(out)
        if not args.no_baseline:
            base = one_hydra_job_per_point(args.baseline_points, args.n_jobs, tmp)
            if base is not None:
                print(f"\n== one Hydra job per point (--multirun, {base['launcher']}), "
                      f"{base['points']} S3FIFO points")  # fmt: skip
                print(f"wall time                     {base['wall']:8.2f} s")
                print(f"per point                     {base['per_point'] * 1e3:8.1f} ms")
                print(f"marginal per point            {base['marginal_per_point'] * 1e3:8.1f} ms"
                      "  (beyond a 1-job multirun)")  # fmt: skip
                print(f"extrapolated to {n_points} points   "
                      f"{base['marginal_per_point'] * n_points:8.1f} s")  # fmt: skip
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    if os.environ.get(ONE_JOB_ENV):
        hydra_job_app()
    else:
        main()
