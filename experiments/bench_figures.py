"""Drawing time of a small grid's figures: this code against a baseline commit, same run.

The grid is the user's command (``capacity=1024,2048,4096 policy=S3FIFO,LRU``: 6 points, four
figures), run once with ``plot=false``. Each variant is then measured --repeat times, the
variants alternating within each repetition, and the median printed:

* whole process: ``python -m sweep.plot RUN_DIR --out TMP ...`` (interpreter start-up, imports,
  reading the Parquet files, drawing, writing), wall time;
* in process: the same interpreter's import of the figure code, and the ``draw_figures`` call
  alone.

Variants: the baseline (``git archive BASELINE_REF src``, default the commit before the figures
package) with its default formats (PNG and PDF) and with PNG only, made to redraw when it
skips unchanged figures; this code with its default (PNG), with PNG and PDF, and a second call
on unchanged inputs (nothing redrawn).

    python experiments/bench_figures.py [--repeat 5] [--baseline REF] [--grid ARGS...]
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

ROOT = Path(__file__).resolve().parent.parent
GRID = ["capacity=1024,2048,4096", "policy=S3FIFO,LRU"]
IN_PROCESS = r"""
import json, sys, time
t0 = time.perf_counter()
try:
    from sweep.figures import draw_figures
except ImportError:
    from sweep.plot import draw_figures
t1 = time.perf_counter()
kw = json.loads(sys.argv[3])
draw_figures(sys.argv[1], sys.argv[2], **kw)
t2 = time.perf_counter()
print(json.dumps({"import": t1 - t0, "draw": t2 - t1}))
"""


def run(cmd: list[str], src: Path, cwd: Path) -> tuple[float, str]:
    env = {**os.environ, "PYTHONPATH": str(src)}
    t = time.perf_counter()
    done = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t
    if done.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{done.stderr}")
    return wall, done.stdout


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--baseline-ref", "--baseline", dest="baseline_ref", default="652434d")
    p.add_argument("--grid", nargs="*", default=GRID)
    args = p.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench_figures."))
    base_src = tmp / "baseline"
    base_src.mkdir()
    archive = subprocess.run(
        ["git", "archive", args.baseline_ref, "src"], cwd=ROOT, capture_output=True, check=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(base_src)], input=archive, check=True)
    old, new = base_src / "src", ROOT / "src"
    run_dir = tmp / "run"
    py = sys.executable
    run([py, "-m", "sweep", *args.grid, f"out_dir={run_dir}", "plot=false"], new, tmp)
    # a baseline that skips unchanged figures must redraw too, or it is timed doing nothing
    redraws = any("--force" in p.read_text() for p in (old / "sweep").rglob("*.py"))
    force, force_kw = (["--force"], {"force": True}) if redraws else ([], {})
    variants: dict[str, tuple[Path, list[str], dict[str, object]]] = {
        "baseline, png+pdf (its default)": (old, [*force], {**force_kw}),
        "baseline, png": (old, ["--format", "png", *force], {"formats": ["png"], **force_kw}),
        "new, png (default)": (new, ["--force"], {"force": True}),
        "new, png+pdf": (
            new,
            ["--format", "png,pdf", "--force"],
            {"formats": ["png", "pdf"], "force": True},
        ),
        "new, unchanged inputs": (new, [], {}),
    }
    whole: dict[str, list[float]] = {k: [] for k in variants}
    inproc: dict[str, list[dict[str, float]]] = {k: [] for k in variants}
    for i in range(args.repeat):
        for name, (src, flags, kw) in variants.items():
            out = tmp / f"out-{abs(hash(name))}"
            wall, _ = run(
                [py, "-m", "sweep.plot", str(run_dir), "--out", str(out), *flags], src, tmp
            )
            whole[name].append(wall)
            _, stdout = run(
                [py, "-c", IN_PROCESS, str(run_dir), str(out), json.dumps(kw)], src, tmp
            )
            inproc[name].append(json.loads(stdout.strip().splitlines()[-1]))
        print(f"repetition {i + 1}/{args.repeat} done", file=sys.stderr)
    print(
        f"figures of `python -m sweep {' '.join(args.grid)}`, median of {args.repeat} "
        f"(variants alternating); baseline = {args.baseline_ref}"
    )
    print(f"{'variant':34} {'whole process (s)':>18} {'import (s)':>11} {'draw_figures (s)':>17}")
    for name in variants:
        imp = statistics.median(r["import"] for r in inproc[name])
        draw = statistics.median(r["draw"] for r in inproc[name])
        print(f"{name:34} {statistics.median(whole[name]):18.2f} {imp:11.2f} {draw:17.2f}")


if __name__ == "__main__":
    main()
