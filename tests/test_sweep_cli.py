"""``python -m sweep`` as users type it: from another folder, without --multirun, and killed.

Each test runs the real command in a subprocess whose working directory is a temporary folder
outside the repository (the README's set-up installs the package, so it works from anywhere).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest

import prefixsim
from sweep import ExecutorConfig, SweepConfig, run_sweep
from test_sweep import assert_rows_equal_replay, per_request, results, small_trace  # noqa: F401

TIMEOUT = 120


def sweep(cwd: Path, *args: str, plot: bool = False) -> subprocess.CompletedProcess[str]:
    """``python -m sweep ARGS`` in ``cwd`` (without the figures unless ``plot``)."""
    extra = [] if plot or any(a.startswith("plot=") for a in args) else ["plot=false"]
    return subprocess.run(
        [sys.executable, "-m", "sweep", *args, *extra],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env={**os.environ, "HYDRA_FULL_ERROR": ""},
        check=False,
    )


def test_the_exact_user_command(tmp_path: Path) -> None:
    done = sweep(tmp_path, "capacity=1024,2048,4096", "policy=S3FIFO,LRU", plot=True)
    assert done.returncode == 0, done.stderr
    run_dirs = [p for p in (tmp_path / "outputs").glob("*/*") if p.parent.name != "latest"]
    assert len(run_dirs) == 1
    run_dir = run_dirs[0]
    # outputs/latest: the last run, for out_dir= and python -m sweep.plot (issue 21)
    latest = tmp_path / "outputs" / "latest"
    assert latest.is_symlink() and latest.resolve() == run_dir.resolve()
    assert re.fullmatch(
        r"\d{4}-\d{2}-\d{2}/\d{2}-\d{2}-\d{2}", f"{run_dir.parent.name}/{run_dir.name}"
    )
    assert str(run_dir / "results.parquet") in done.stderr  # the log says where results are
    df = pd.read_parquet(run_dir / "results.parquet")
    assert len(df) == 6
    assert sorted(zip(df.policy, df.capacity, strict=True)) == sorted(
        (p, c) for p in ("S3FIFO", "LRU") for c in (1024, 2048, 4096)
    )
    assert set(df.trace) == {"conversation"}
    assert_rows_equal_replay(run_dir)
    assert {p.name for p in run_dir.iterdir()} >= {
        "config.yaml",
        "results.parquet",
        "per_request.parquet",
        "manifest.json",
        "sweep.log",
    }
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["command"][3:] == ["capacity=1024,2048,4096", "policy=S3FIFO,LRU"]
    # The figures' inputs: the ceiling is LRU with room for every distinct block.
    traces = pd.read_parquet(run_dir / "traces.parquet")
    assert len(traces) == 1 and traces.n_blocks[0] == 182_790
    unbounded = prefixsim.replay("conversation", "LRU", 182_790)
    assert traces.ceiling_hit_tokens[0] == unbounded.total_hit_tokens
    requests = pd.read_parquet(run_dir / "requests.parquet")
    assert len(requests) == 12_031 and requests.timestamp.is_monotonic_increasing
    figures = {p.name for p in (run_dir / "figures").iterdir()}
    for name in ("hit_rate_vs_capacity", "occupancy", "hit_ratio_cdf", "hit_rate_over_time"):
        assert f"{name}.png" in figures  # PNG only by default (plot.formats)
    assert "small_ratio_tuning.png" not in figures  # small_ratio did not vary


def test_help_and_cfg_job(tmp_path: Path) -> None:
    helped = sweep(tmp_path, "--help")
    assert helped.returncode == 0
    assert "python -m sweep capacity=1024,2048,4096 policy=S3FIFO,LRU" in helped.stdout
    assert "executor: dask, loky, threads" in helped.stdout
    shown = sweep(tmp_path, "--cfg", "job", "capacity=1,2", "policy='LRU'", "executor=dask")
    assert shown.returncode == 0, shown.stderr
    assert "capacity:\n- 1\n- 2\n" in shown.stdout
    assert "backend: dask" in shown.stdout
    assert not (tmp_path / "outputs").exists()


@pytest.mark.parametrize(
    ("args", "status", "needles"),
    [
        (["capcity=5"], 2, ["capcity", "did you mean capacity?"]),
        (["capacity=abc"], 2, ["capacity=abc: 'abc' is not an integer"]),
        (["capacity=0"], 2, ["invalid capacity=0", "expected an integer >= 1"]),
        (["policy=S3FIFO", "capacity=1"], 2, ["small_ratio", "leaves S empty"]),
        (["executor=loky,dask"], 2, ["only the grid keys"]),
    ],
)
def test_config_errors_before_any_work(
    tmp_path: Path, args: list[str], status: int, needles: list[str]
) -> None:
    done = sweep(tmp_path, *args)
    assert done.returncode == status
    assert "Traceback" not in done.stderr
    for needle in needles:
        assert needle in done.stderr
    if status == 2:
        assert len(done.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "outputs").exists()  # nothing left behind


def test_range_and_several_traces(tmp_path: Path, small_trace: Path) -> None:  # noqa: F811
    out = tmp_path / "out"
    done = sweep(
        tmp_path,
        "capacity=range(64,257,64)",
        f"trace=conversation,{small_trace}",
        "policy=LRU",
        f"out_dir={out}",
    )
    assert done.returncode == 0, done.stderr
    df = results(out)
    assert len(df) == 8
    assert sorted(set(df.trace)) == sorted({"conversation", str(small_trace)})
    assert sorted(df.capacity.unique()) == [64, 128, 192, 256]
    assert_rows_equal_replay(out)


SLOW_SWEEP = """
import os, sys, time
import prefixsim
real = prefixsim.replay_params
delay = float(os.environ.get("SLOW_SWEEP_SECONDS", "0.05"))
def slow(trace, *args, **kwargs):
    if trace.n_requests > 1:  # the replays, not planning's checks on one request
        time.sleep(delay)
    return real(trace, *args, **kwargs)
prefixsim.replay_params = slow
from sweep.__main__ import main
sys.exit(main(sys.argv[1:]))
"""


def _start_slow(cwd: Path, *args: str, seconds: float = 0.05) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", SLOW_SWEEP, *args],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "SLOW_SWEEP_SECONDS": str(seconds)},
    )


def signal_when(
    proc: subprocess.Popen[str], ready: Callable[[], bool], how: int = signal.SIGINT
) -> str:
    """Send ``how`` to ``proc`` once ``ready()`` (or after a minute); its stderr."""
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None and not ready():
            time.sleep(0.02)
        proc.send_signal(how)
        _, stderr = proc.communicate(timeout=TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return stderr


def resume_command_of(stderr: str) -> list[str]:
    """The command the interrupted run's last message gives (after ``to compute the N
    missing: ``), as arguments for this interpreter."""
    import shlex

    line = next(x for x in reversed(stderr.splitlines()) if "missing: " in x)
    command = shlex.split(line.split("missing: ", 1)[1])
    assert command[:3] == ["python", "-m", "sweep"], line
    return [sys.executable, *command[1:]]


@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGINT], ids=["SIGKILL", "SIGINT"])
def test_killed_sweep_loses_no_finished_point(
    tmp_path: Path,
    small_trace: Path,  # noqa: F811
    how: signal.Signals,
) -> None:
    capacities = list(range(16, 16 * 41, 16))  # 40 points, 50 ms each in the slowed run
    grid = [f"trace={small_trace}", "policy=LRU", f"capacity={','.join(map(str, capacities))}"]
    out = tmp_path / "out"
    args = [*grid, f"out_dir={out}", "executor.n_jobs=1", "executor.batch_size=1"]
    proc = _start_slow(tmp_path, *args)
    stderr = signal_when(proc, lambda: len(list((out / ".sweep/parts").glob("*.arrow"))) >= 3, how)
    if how == signal.SIGINT:
        assert proc.returncode == 130, stderr
        status = json.loads((out / "manifest.json").read_text())["status"]
        assert status == "interrupted"
        assert len(results(out)) >= 3  # consolidated on the way out
        # the message gives the command that resumes (issue 21): run it as printed
        command = resume_command_of(stderr)
        assert "out_dir=out" in command, command
        finished = 0
        assert not list(out.glob(".*.tmp"))
        again = subprocess.run(
            [*command, "plot=false"], cwd=tmp_path, capture_output=True, text=True, check=False
        )
    else:
        assert proc.returncode == -signal.SIGKILL
        finished = len(list((out / ".sweep" / "parts").glob("*.arrow")))
        assert not list(out.glob(".*.tmp"))
        again = sweep(tmp_path, *args)
    assert again.returncode == 0, again.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["points"]["already_done"] >= max(3, finished)
    assert manifest["points"]["computed"] == 40 - manifest["points"]["already_done"]
    expected_first = "killed" if how == signal.SIGKILL else "interrupted"
    assert [r["status"] for r in manifest["runs"]] == [expected_first, "complete"]

    reference = tmp_path / "reference"
    run_sweep(
        SweepConfig(
            trace=[str(small_trace)],
            policy=["LRU"],
            capacity=capacities,
            out_dir=str(reference),
            progress=False,
            executor=ExecutorConfig(n_jobs=1),
        )
    )
    pd.testing.assert_frame_equal(results(out), results(reference))
    pd.testing.assert_frame_equal(per_request(out), per_request(reference))


def test_an_interrupted_dated_run_resumes_with_the_command_it_gives(
    tmp_path: Path,
    small_trace: Path,  # noqa: F811
) -> None:
    # issue 21: "run the same command again" started a new dated folder and recomputed all
    capacities = ",".join(str(c) for c in range(16, 16 * 21, 16))
    args = [f"trace={small_trace}", "policy=LRU", f"capacity={capacities}"]
    args += ["executor.n_jobs=1", "executor.batch_size=1"]
    proc = _start_slow(tmp_path, *args)
    stderr = signal_when(
        proc, lambda: bool(list(tmp_path.glob("outputs/*/*/.sweep/parts/*.arrow")))
    )
    assert proc.returncode == 130, stderr
    (run_dir,) = (p for p in tmp_path.glob("outputs/*/*") if p.parent.name != "latest")
    command = resume_command_of(stderr)
    assert f"out_dir={run_dir.relative_to(tmp_path)}" in command
    again = subprocess.run(
        [*command, "plot=false"], cwd=tmp_path, capture_output=True, text=True, check=False
    )
    assert again.returncode == 0, again.stderr
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["points"]["already_done"] >= 1
    assert [r["status"] for r in manifest["runs"]] == ["interrupted", "complete"]
    assert len(list(tmp_path.glob("outputs/*/*"))) == 1 + len(list(run_dir.iterdir()))  # latest
    # outputs/latest: the last run, as out_dir (nothing left to compute) and for sweep.plot
    latest = sweep(tmp_path, *args, "out_dir=outputs/latest")
    assert latest.returncode == 0, latest.stderr
    assert "20 points in the grid; 20 already in" in latest.stderr
    plotted = subprocess.run(
        [sys.executable, "-m", "sweep.plot", "outputs/latest"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={**os.environ, "MPLBACKEND": "Agg"},
        check=False,
    )
    assert plotted.returncode == 0, plotted.stderr
    assert list((run_dir / "figures").glob("*.png"))


def test_interrupted_before_any_point_finished_leaves_no_folder(
    tmp_path: Path,
    small_trace: Path,  # noqa: F811
) -> None:
    # issue 21: such runs left empty "interrupted" folders behind
    proc = _start_slow(tmp_path, f"trace={small_trace}", "policy=LRU", "capacity=16", seconds=30)
    stderr = signal_when(proc, lambda: bool(list(tmp_path.glob("outputs/*/*/manifest.json"))))
    assert proc.returncode == 130, stderr
    assert "nothing kept, no run folder left" in stderr
    assert "Traceback" not in stderr
    assert not (tmp_path / "outputs").exists()


@pytest.mark.parametrize("delay", [0.0, 0.05, 0.1, 0.2, 0.3, 0.5])
def test_ctrl_c_in_the_first_moments_is_one_line(tmp_path: Path, delay: float) -> None:
    # issue 21: Ctrl-C in the first 0.3 s printed a 34-line traceback (an import cut short).
    # From the moment the sweep's code runs (the interpreter's own start-up is before it).
    code = (
        "import sys\nimport sweep.__main__ as m\nprint('ready', flush=True)\n"
        "sys.exit(m.main(sys.argv[1:]))"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code, "capacity=1024,2048", "plot=false"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(delay)
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode in (0, 130), stderr
    assert "Traceback" not in stderr, stderr
    if proc.returncode == 130:
        lines = [x for x in stderr.splitlines() if not x.startswith("[")]  # the log's lines
        assert len(lines) <= 1, stderr
        assert not (tmp_path / "outputs").exists() or "to compute the" in stderr


def test_profiled_run_writes_its_profile(tmp_path: Path) -> None:
    # python -m sweep ends with os._exit to skip the interpreter's teardown; under a profiler
    # it must exit normally, or cProfile (which writes -o after the module returns) writes
    # nothing.
    prof = tmp_path / "sweep.prof"
    args = ["capacity=64", "policy=LRU", "plot=false", "out_dir=run"]
    done = subprocess.run(
        [sys.executable, "-m", "cProfile", "-o", str(prof), "-m", "sweep", *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "run" / "results.parquet").exists()
    assert prof.stat().st_size > 0


def test_ctrl_c_wrapped_by_omegaconf_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # OmegaConf wraps a KeyboardInterrupt raised while it resolves a value in an error of its
    # own (seen once as the flaky Ctrl-C test above): Hydra printed that with a traceback.
    import sweep.__main__ as m

    def interrupted(cfg: object, argv: object, started: float) -> int:
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as err:
            raise RuntimeError("resolver failed") from err

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(m, "_run", interrupted)
    assert m.main(["capacity=64", "plot=false"]) == 130
    err = capsys.readouterr().err
    assert "Traceback" not in err and "resolver failed" not in err
    assert err.strip().splitlines() == [
        "sweep: error: interrupted before the run folder was made: nothing written"
    ]


def test_ctrl_c_wrapped_during_composition_is_an_interrupt() -> None:
    # the same, raised while Hydra composes (outside the job): Hydra's report is not called
    from hydra._internal import utils

    import sweep.__main__ as m

    def compose() -> None:
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as err:
            raise ValueError("interpolation failed") from err

    with m._one_line_hydra_errors(), pytest.raises(KeyboardInterrupt):
        utils.run_and_report(compose)
