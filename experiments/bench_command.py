"""The user's first minute, timed as whole processes, beside a baseline checkout in the same run.

Each case is one command, run as a new process from an empty folder, ``/usr/bin/time``-style:
wall time and the peak resident memory of the largest process (``wait4``). The cases:

* ``command warm``: ``python -m sweep capacity=1024,2048,4096 policy=S3FIFO,LRU`` (figures
  included) with numba's disk cache and the trace cache filled;
* ``command cold``: the same with both caches empty (``NUMBA_CACHE_DIR`` and
  ``PREFIXSIM_CACHE_DIR`` pointed at new empty folders): the first run after an install;
* ``sweep --help`` and ``prefixsim --help``;
* ``1,008 points``: the grid of ``bench_sweep.py`` (``plot=false``, warm caches).

Every case runs ``--repeat`` times (5) for this checkout and for ``--baseline REF`` (a
temporary ``git worktree``; default: the merge base of HEAD and ``main``), alternating between
the two so that a busy machine slows both alike; the table gives the median, and the range.

    python experiments/bench_command.py [--baseline REF] [--repeat 5] [--cases warm,cold,...]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
USER_COMMAND = ("capacity=1024,2048,4096", "policy=S3FIFO,LRU")
SMALL_RATIOS = (0.05, 0.1, 0.15, 0.2, 0.25)
MAX_FREQS = (1, 2, 3, 4)
N_CAPACITIES = 48  # 48 x (5 x 4 S3FIFO + 1 LRU) = 1,008 points, as bench_sweep.py


def grid_1008() -> list[str]:
    """The 1,008-point grid of ``bench_sweep.py`` (capacities geometric from 256 to 131,072)."""
    caps: list[int] = []
    for i in range(N_CAPACITIES):
        c = round(256 * (512 ** (i / (N_CAPACITIES - 1))))
        caps.append(max(c, caps[-1] + 1) if caps else c)
    return [
        "policy=S3FIFO,LRU",
        f"capacity={','.join(map(str, caps))}",
        f"small_ratio={','.join(map(str, SMALL_RATIOS))}",
        f"max_freq={','.join(map(str, MAX_FREQS))}",
        "plot=false",
    ]


CASES: dict[str, tuple[str, list[str], bool]] = {
    # name: (module, arguments, cold caches)
    "warm": ("sweep", list(USER_COMMAND), False),
    "cold": ("sweep", list(USER_COMMAND), True),
    "sweep-help": ("sweep", ["--help"], False),
    "prefixsim-help": ("prefixsim", ["--help"], False),
    "1008": ("sweep", grid_1008(), False),
}
LABELS = {
    "warm": "user's command, warm",
    "cold": "user's command, cold",
    "sweep-help": "python -m sweep --help",
    "prefixsim-help": "python -m prefixsim --help",
    "1008": "1,008 points (plot=false)",
}


@dataclass
class Checkout:
    label: str
    src: Path
    caches: Path
    """Warm numba and trace caches of this checkout (numba keys its cache by source path)."""
    times: dict[str, list[float]] = field(default_factory=dict)
    rss: dict[str, list[int]] = field(default_factory=dict)


def run(checkout: Checkout, case: str, tmp: Path) -> None:
    module, args, cold = CASES[case]
    cwd = Path(tempfile.mkdtemp(dir=tmp, prefix=f"{checkout.label}-{case}-"))
    caches = Path(tempfile.mkdtemp(dir=tmp, prefix="cold-caches-")) if cold else checkout.caches
    env = dict(os.environ)
    env.update(
        PYTHONPATH=str(checkout.src),
        NUMBA_CACHE_DIR=str(caches / "numba"),
        PREFIXSIM_CACHE_DIR=str(caches / "traces"),
    )
    if module == "sweep" and "--help" not in args:
        args = [*args, "out_dir=run"]
    start = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", module, *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    assert proc.stderr is not None
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        sys.exit(f"{checkout.label}: {module} {' '.join(args)} failed:\n{err.decode()[-2000:]}")
    checkout.times.setdefault(case, []).append(wall)
    checkout.rss.setdefault(case, []).append(usage.ru_maxrss * 1024)
    shutil.rmtree(cwd, ignore_errors=True)
    if cold:
        shutil.rmtree(caches, ignore_errors=True)


def _git(*args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(REPO), *args], check=True, capture_output=True, text=True
    ).stdout.strip()


def _cell(times: list[float], rss: list[int]) -> str:
    return (
        f"{statistics.median(times):6.2f} s ({min(times):.2f}-{max(times):.2f}), "
        f"{statistics.median(rss) / 2**20:4.0f} MiB"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", help="git ref to compare with (default: merge-base HEAD main)")
    ap.add_argument("--no-baseline", action="store_true", help="time this checkout only")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--cases", default=",".join(CASES), help=f"among {','.join(CASES)}")
    args = ap.parse_args()
    cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    for c in cases:
        if c not in CASES:
            ap.error(f"--cases: unknown case {c!r} (known: {', '.join(CASES)})")

    tmp = Path(tempfile.mkdtemp(prefix="bench_command."))
    worktree: Path | None = None
    try:
        checkouts = [Checkout("new", REPO / "src", tmp / "caches-new")]
        if not args.no_baseline:
            ref = args.baseline or _git("merge-base", "HEAD", "main")
            commit = _git("rev-parse", "--short", f"{ref}^{{commit}}")
            worktree = tmp / "baseline"
            _git("worktree", "add", "--detach", str(worktree), commit)
            checkouts.insert(0, Checkout(f"base {commit}", worktree / "src", tmp / "caches-base"))
        print(f"this checkout: {_git('rev-parse', '--short', 'HEAD')}; {os.cpu_count()} cores; ")
        print(f"median of {args.repeat} (min-max), peak RSS of the largest process")
        # fill each checkout's warm caches (trace cache and numba's disk cache) once
        for co in checkouts:
            run(co, "warm", tmp)
            co.times.clear()
            co.rss.clear()
        for case in cases:
            for _ in range(args.repeat):
                for co in checkouts:  # alternating: a noisy machine slows both alike
                    run(co, case, tmp)
            row = " | ".join(_cell(co.times[case], co.rss[case]) for co in checkouts)
            print(f"{LABELS[case]:28s} | {row}", flush=True)
        print("columns: " + " | ".join(co.label for co in checkouts))
    finally:
        if worktree is not None:
            _git("worktree", "remove", "--force", str(worktree))
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
