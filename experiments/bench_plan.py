"""Planning speed of big grids: this checkout's code beside a baseline revision's, in the same
run, alternating, median of several.

    python experiments/bench_plan.py [--baseline REV] [--repeats K] [N ...]
        # default: --baseline main --repeats 3, N = 100000 200000

For each N and each code version (the baseline is ``git archive REV src conf`` unpacked into a
temporary folder; each measurement is a fresh process with that version's ``src`` first on
``PYTHONPATH``):

* ``plan``: in process, ``plan_grid`` + ``assign_points`` + ``plan_batches`` of ``capacity =
  1..N`` (LRU) and ``capacity = 10..N+9`` (S3FIFO), on the bundled trace, with a fixed replay
  cost per access (1e-8 s; the sweep measures it in a warm-up);
* ``--cfg job``: the whole ``python -m sweep --cfg job 'capacity=range(1,N+1)'``;
* ``first replay``: ``python -m sweep 'capacity=range(1,N+1)' policy=LRU plot=false
  save_per_request=false`` from its start to its ``running N points`` log line (after which the
  replays start); the process is then killed. A first, untimed run per version fills numba's
  cache.

``python experiments/bench_plan.py --compact-vs-list [N ...]`` times ``--cfg job`` with the
compact ``range()`` beside the same grid as an explicit list (Hydra's parser is quadratic in a
list's length; lists above 10,000 values are skipped).
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
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIST_LIMIT = 10_000
FIRST_REPLAY_TIMEOUT = 600.0


def inner(n: int, policy: str) -> None:
    """Child: time the three planning steps of one grid, print them as JSON."""
    from sweep.app import load_traces
    from sweep.config import SweepConfig
    from sweep.grid import assign_points, plan_grid
    from sweep.run import plan_batches

    first = 1 if policy == "LRU" else 10  # S3FIFO needs both queues non-empty
    cfg = SweepConfig(capacity=list(range(first, first + n)), policy=[policy])
    shas, traces = load_traces(cfg.trace, cfg.block_size, cfg.trace_options())
    t0 = time.perf_counter()
    grid = plan_grid(cfg)
    t1 = time.perf_counter()
    points, _ = assign_points(grid, shas, {})
    t2 = time.perf_counter()
    plan_batches(points, traces, cfg.executor, 2, {policy: 1e-8})
    t3 = time.perf_counter()
    print(json.dumps({"plan_grid": t1 - t0, "assign_points": t2 - t1, "plan_batches": t3 - t2}))


def env_for(src: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(src)}


def time_inner(src: Path, n: int, policy: str) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, __file__, "--inner", str(n), policy],
        check=True,
        capture_output=True,
        text=True,
        env=env_for(src),
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def time_cfg_job(src: Path, override: str, cwd: Path) -> float:
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "sweep", "--cfg", "job", override],
        check=True,
        capture_output=True,
        env=env_for(src),
        cwd=cwd,
    )
    return time.perf_counter() - start


def time_first_replay(src: Path, n: int, cwd: Path) -> float:
    """Seconds from the start of a real sweep to its ``running N points`` line."""
    out_dir = tempfile.mkdtemp(prefix="bench_plan_run_", dir=cwd)
    start = time.perf_counter()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "sweep",
            f"capacity=range(1,{n + 1})",
            "policy=LRU",
            "plot=false",
            "save_per_request=false",
            "progress=false",
            f"out_dir={out_dir}",
            f"hydra.run.dir={out_dir}/hydra",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env_for(src),
        cwd=cwd,
    )
    assert proc.stderr is not None
    try:
        for line in proc.stderr:
            if "] running " in line:
                return time.perf_counter() - start
            if time.perf_counter() - start > FIRST_REPLAY_TIMEOUT:
                break
        raise RuntimeError(f"no 'running' line from the sweep ({src})")
    finally:
        proc.kill()  # our own child: the replays are not what is measured
        proc.wait()


def unpack(rev: str, into: Path) -> Path:
    """``src`` and ``conf`` of ``rev`` under ``into``; returns its ``src``."""
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", rev, "src", "conf"], check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into / "src"


def compare(sizes: list[int], baseline: str, repeats: int) -> None:
    with tempfile.TemporaryDirectory(prefix="bench_plan_") as tmp:
        work = Path(tmp)
        (work / "old").mkdir()
        versions = {f"baseline {baseline}": unpack(baseline, work / "old"), "this": ROOT / "src"}
        for src in versions.values():  # fill numba's cache; not timed
            time_first_replay(src, 10, work)
        print(f"median of {repeats}, versions alternating; seconds")
        header = f"{'N':>7}  {'what':<28}" + "".join(f"{v:>20}" for v in versions)
        print(header)
        for n in sizes:
            rows: dict[str, dict[str, list[float]]] = {}
            for _ in range(repeats):
                for name, src in versions.items():
                    for policy in ("LRU", "S3FIFO"):
                        for step, s in time_inner(src, n, policy).items():
                            rows.setdefault(f"{policy} {step}", {}).setdefault(name, []).append(s)
                    cfg_job = time_cfg_job(src, f"capacity=range(1,{n + 1})", work)
                    rows.setdefault("--cfg job", {}).setdefault(name, []).append(cfg_job)
                    first = time_first_replay(src, n, work)
                    rows.setdefault("start to first replay", {}).setdefault(name, []).append(first)
            for what, by_version in rows.items():
                cells = "".join(f"{statistics.median(by_version[v]):>20.3f}" for v in versions)
                print(f"{n:>7}  {what:<28}{cells}")


def compact_vs_list(sizes: list[int]) -> None:
    print(f"{'N':>8}  {'range() (compact)':>18}  {'explicit list':>14}")
    for n in sizes:
        compact = time_cfg_job(ROOT / "src", f"capacity=range(1,{n + 1})", Path.cwd())
        if n <= LIST_LIMIT:
            values = ",".join(map(str, range(1, n + 1)))
            listed = f"{time_cfg_job(ROOT / 'src', f'capacity=[{values}]', Path.cwd()):.2f} s"
        else:
            listed = "skipped"
        print(f"{n:>8}  {compact:>16.2f} s  {listed:>14}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sizes", nargs="*", type=int)
    parser.add_argument("--baseline", default="main")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--inner", nargs=2, metavar=("N", "POLICY"))
    parser.add_argument("--compact-vs-list", action="store_true")
    args = parser.parse_args()
    if args.inner:
        inner(int(args.inner[0]), args.inner[1])
    elif args.compact_vs_list:
        compact_vs_list(args.sizes or [2000, 5000, 10_000, 100_000])
    else:
        compare(args.sizes or [100_000, 200_000], args.baseline, args.repeats)


if __name__ == "__main__":
    main()
