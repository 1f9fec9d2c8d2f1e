"""The sweep in a hostile world (issue 10): full or read-only disks, an out_dir in the way,
signals during the final write, overflowing traces, huge ranges. Failures that cannot be
produced here (ENOSPC, EROFS) are injected by replacing the writer, in process, or in a small
wrapper around ``python -m sweep`` for the command line."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest

from sweep import ExecutorConfig, StoreError, run_sweep
from sweep.store import RunDir
from test_sweep import config, results, small_trace  # noqa: F401

TIMEOUT = 120
GRID = {"policy": ["LRU"], "capacity": [16, 64, 256, 1024]}
ONE_BY_ONE = ExecutorConfig(n_jobs=1, batch_size=1)


def manifest(out: Path) -> dict:  # type: ignore[type-arg]
    return json.loads((out / "manifest.json").read_text())


def enospc(path: object = "x") -> OSError:
    return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))


# --- a full disk ---------------------------------------------------------------------------------


def test_full_disk_while_writing_batches_keeps_what_was_written(
    tmp_path: Path,
    small_trace: Path,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = RunDir.write_part
    calls = []

    def third_fails(self, table):  # type: ignore[no-untyped-def]
        calls.append(1)
        if len(calls) == 3:
            raise enospc(self.parts / "part.arrow")
        return real(self, table)

    monkeypatch.setattr(RunDir, "write_part", third_fails)
    out = tmp_path / "out"
    cfg = config(out, small_trace, executor=ONE_BY_ONE, **GRID)
    with pytest.raises(StoreError, match="no space left on the device") as info:
        run_sweep(cfg)
    assert "\n" not in str(info.value)
    assert "2 point(s) finished and kept" in str(info.value)
    assert results(out).capacity.tolist() == [16, 64]  # the two written batches
    doc = manifest(out)
    assert doc["status"] == "failed"
    assert "no space left" in doc["error"]
    assert doc["points"]["computed"] == 2

    monkeypatch.setattr(RunDir, "write_part", real)
    again = run_sweep(cfg)
    assert (again.skipped, again.computed, again.exit_code) == (2, 2, 0)
    assert manifest(out)["status"] == "complete"


def test_full_disk_during_the_final_merge_keeps_the_parts(
    tmp_path: Path,
    small_trace: Path,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def no_space(self):  # type: ignore[no-untyped-def]
        raise enospc(self.results)

    monkeypatch.setattr(RunDir, "consolidate", no_space)
    out = tmp_path / "out"
    cfg = config(out, small_trace, executor=ONE_BY_ONE, **GRID)
    with pytest.raises(StoreError, match="no space left"):
        run_sweep(cfg)
    assert len(list((out / ".sweep" / "parts").glob("*.arrow"))) == 4
    assert manifest(out)["status"] == "failed"
    monkeypatch.undo()
    again = run_sweep(cfg)
    assert (again.skipped, again.computed) == (4, 0)
    assert results(out).capacity.tolist() == [16, 64, 256, 1024]


def test_full_disk_for_the_new_manifest_overwrites_the_old_in_place(
    tmp_path: Path,
    small_trace: Path,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import sweep.store as store

    real = store.atomic_write_text
    out = tmp_path / "out"

    def manifest_once_only(path: Path, text: str) -> None:
        if path.name == "manifest.json" and path.exists():
            raise enospc(path)
        real(path, text)

    monkeypatch.setattr(store, "atomic_write_text", manifest_once_only)
    summary = run_sweep(config(out, small_trace, executor=ONE_BY_ONE, **GRID))
    assert summary.exit_code == 0
    assert manifest(out)["status"] == "complete"  # not "running"


def test_read_only_mount_is_one_line(
    tmp_path: Path,
    small_trace: Path,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def read_only(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(self))

    monkeypatch.setattr(Path, "mkdir", read_only)
    with pytest.raises(StoreError, match="read-only file system") as info:
        run_sweep(config(tmp_path / "new", small_trace, executor=ONE_BY_ONE, **GRID))
    assert str(info.value).startswith(f"out_dir={str(tmp_path / 'new')!r}: cannot write")


# --- signals during the final write --------------------------------------------------------------


def test_interrupt_during_the_final_merge_leaves_an_interrupted_manifest(
    tmp_path: Path,
    small_trace: Path,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def interrupted(self):  # type: ignore[no-untyped-def]
        raise KeyboardInterrupt

    monkeypatch.setattr(RunDir, "consolidate", interrupted)
    out = tmp_path / "out"
    cfg = config(out, small_trace, executor=ONE_BY_ONE, **GRID)
    summary = run_sweep(cfg)
    assert summary.exit_code == 130
    assert manifest(out)["status"] == "interrupted"
    assert manifest(out)["points"]["computed"] == 4  # in the part files
    monkeypatch.undo()
    again = run_sweep(cfg)
    assert (again.skipped, again.computed) == (4, 0)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["INT", "TERM"])
def test_a_signal_during_the_final_manifest_write_waits_for_it(
    tmp_path: Path,
    small_trace: Path,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    signum: signal.Signals,
) -> None:
    real = RunDir.write_manifest

    def signalled(self, doc):  # type: ignore[no-untyped-def]
        if doc["status"] != "running":
            os.kill(os.getpid(), signum)
            time.sleep(0.05)  # delivered now, unless held back
        real(self, doc)

    monkeypatch.setattr(RunDir, "write_manifest", signalled)
    out = tmp_path / "out"
    summary = run_sweep(config(out, small_trace, executor=ONE_BY_ONE, **GRID))
    assert summary.exit_code == 0
    assert manifest(out)["status"] == "complete"


# --- the command line: one line and exit 2 -------------------------------------------------------


def sweep_cli(cwd: Path, *args: str, prelude: str = "") -> subprocess.CompletedProcess[str]:
    code = f"import sys\n{prelude}\nfrom sweep.__main__ import main\nsys.exit(main(sys.argv[1:]))"
    return subprocess.run(
        [sys.executable, "-c", code, *args, "plot=false"],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env={**os.environ, "HYDRA_FULL_ERROR": ""},
        check=False,
    )


def assert_one_error_line(done: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    errors = [line for line in done.stderr.splitlines() if "error" in line.lower()]
    assert len(errors) == 1, done.stderr
    assert errors[0].startswith("sweep: error: ")
    for needle in needles:
        assert needle in errors[0]


@pytest.mark.parametrize("where", ["is-a-file", "under-a-file"])
def test_out_dir_in_the_way_of_a_file(
    tmp_path: Path,
    small_trace: Path,  # noqa: F811
    where: str,
) -> None:
    blocker = tmp_path / "blocker"
    blocker.write_text("a file")
    out = blocker if where == "is-a-file" else blocker / "run"
    done = sweep_cli(tmp_path, f"trace={small_trace}", "policy=LRU", f"out_dir={out}")
    assert_one_error_line(done, f"out_dir={str(out)!r}", "a file is in the way")
    assert blocker.read_text() == "a file"


def test_out_dir_inside_a_symlink_loop_is_one_line(tmp_path: Path, small_trace: Path) -> None:  # noqa: F811
    # issue 22: the right line, then a chained traceback of the clean-up, exit 1
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    for out in (tmp_path / "a", tmp_path / "a" / "run"):
        done = sweep_cli(tmp_path, f"trace={small_trace}", "policy=LRU", f"out_dir={out}")
        assert_one_error_line(done, f"out_dir={str(out)!r}", "symbolic links")


@pytest.mark.parametrize("blocked", ["config.yaml", "manifest.json"])
def test_a_directory_in_the_way_of_a_file_names_the_file_not_its_temporary(
    tmp_path: Path,
    small_trace: Path,  # noqa: F811
    blocked: str,
) -> None:
    # issue 22: the message named the writer's temporary file ('.config.yaml.kxabgifd.tmp')
    out = tmp_path / "out"
    (out / blocked).mkdir(parents=True)
    done = sweep_cli(tmp_path, f"trace={small_trace}", "policy=LRU", f"out_dir={out}")
    assert_one_error_line(done, f"cannot write {out / blocked}: Is a directory")
    assert ".tmp" not in done.stderr


def test_full_disk_on_the_command_line(tmp_path: Path, small_trace: Path) -> None:  # noqa: F811
    prelude = (
        "import errno, os\n"
        "from sweep.store import RunDir\n"
        "def full(self, table):\n"
        "    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self.parts))\n"
        "RunDir.write_part = full\n"
    )
    out = tmp_path / "out"
    done = sweep_cli(
        tmp_path, f"trace={small_trace}", "policy=LRU", "capacity=16,64", f"out_dir={out}",
        prelude=prelude,
    )  # fmt: skip
    assert_one_error_line(done, "no space left on the device", "0 point(s) finished")
    assert manifest(out)["status"] == "failed"


def test_an_overflowing_trace_is_refused_by_the_sweep(tmp_path: Path) -> None:
    trace = tmp_path / "big.jsonl"
    line = '{{"timestamp": {t}, "input_length": 5000000000000000000, "output_length": 1, '
    trace.write_text("".join((line + '"hash_ids": [1]}}\n').format(t=t) for t in range(2)))
    out = tmp_path / "elsewhere" / "run"
    done = sweep_cli(tmp_path, f"trace={trace}", f"out_dir={out}")
    assert_one_error_line(done, f"{trace}:2: input_length:")
    assert not out.exists()


def test_a_rejected_command_leaves_no_out_dir_outside_the_current_folder(
    tmp_path: Path,
) -> None:
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    out = tmp_path / "runs" / "new"
    done = sweep_cli(cwd, f"trace={tmp_path / 'missing.jsonl'}", f"out_dir={out}")
    assert_one_error_line(done, "no such file")
    assert not (tmp_path / "runs").exists()


# --- range() planning is linear ----------------------------------------------------------------


def compose_config(*typed: str):  # type: ignore[no-untyped-def]
    from hydra import compose, initialize_config_dir

    from sweep.__main__ import CONF_DIR
    from sweep.argv import rewrite_overrides
    from sweep.config import register_configs

    register_configs()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose("config", overrides=rewrite_overrides(list(typed)))


def test_a_long_range_reaches_hydra_as_one_interpolation() -> None:
    from sweep.argv import ArgvError, rewrite_override

    assert rewrite_override("capacity=range(1,100001)") == "capacity=${sweep_range:1,100001,1}"
    # short ranges, shuffled ones and float ranges on integer keys stay lists, as typed
    assert rewrite_override("capacity=range(1,5)") == "capacity=[1,2,3,4]"
    assert rewrite_override("capacity=shuffle(range(1,3))").startswith("capacity=[")
    with pytest.raises(ArgvError, match=r"0\.5 is not an integer; capacity takes integers"):
        rewrite_override("capacity=range(0.5,2000.5,1.0)")  # refused naming the key's type


def test_a_compact_range_expands_to_the_typed_values() -> None:
    from decimal import Decimal

    from sweep import ranges
    from sweep.config import GRID_KEYS, to_sweep_config

    cfg = compose_config(
        "capacity=range(2,200001,2)", "small_ratio=range(0.0005,1,0.0005)", "out_dir=o"
    )
    sweep_cfg = to_sweep_config(cfg)
    assert sweep_cfg.capacity == list(range(2, 200001, 2))
    # 0.0005 * i in decimal, i = 1..1999 (1 is excluded: the stop)
    assert sweep_cfg.small_ratio == [float(Decimal("0.0005") * i) for i in range(1, 2000)]
    text = ranges.to_yaml(cfg, GRID_KEYS)
    assert "capacity: ${sweep_range:2,200001,2}\n" in text
    assert "out_dir: o\n" in text


def test_cfg_job_prints_a_grid_of_100000_capacities(tmp_path: Path) -> None:
    # Before: the expanded list went through Hydra's quadratic parser (136 s for 40,000).
    done = subprocess.run(
        [sys.executable, "-m", "sweep", "--cfg", "job", "capacity=range(1,100001)"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "capacity: ${sweep_range:1,100001,1}\n" in done.stdout


# --- executors that break down ------------------------------------------------------------------

# Loaded at start-up by every process of the sweep (it is on PYTHONPATH): a worker asked to
# replay capacity $TEST_KILL_AT_CAPACITY kills itself as the system's OOM killer would.
SITECUSTOMIZE = """
import os
if os.environ.get("TEST_KILL_AT_CAPACITY"):
    import signal
    import prefixsim
    _real = prefixsim.replay_params
    def _replay_params(trace, params, block_size, **kw):
        if params.capacity == int(os.environ["TEST_KILL_AT_CAPACITY"]) and (
            str(os.getpid()) != os.environ["TEST_MAIN_PID"]
        ):
            os.kill(os.getpid(), signal.SIGKILL)
        return _real(trace, params, block_size, **kw)
    prefixsim.replay_params = _replay_params
"""


def killing_sweep(tmp_path: Path, *args: str, kill_at: int, **env: str):  # type: ignore[no-untyped-def]
    import prefixsim

    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    src = Path(prefixsim.__file__).resolve().parents[1]
    code = (
        "import os, sys\nos.environ['TEST_MAIN_PID'] = str(os.getpid())\n"
        "from sweep.__main__ import main\nsys.exit(main(sys.argv[1:]))"
    )
    return subprocess.run(
        [sys.executable, "-c", code, *args, "plot=false"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env={
            **os.environ,
            **env,
            "PYTHONPATH": f"{site}{os.pathsep}{src}",
            "TEST_KILL_AT_CAPACITY": str(kill_at),
        },
        check=False,
    )


def assert_one_failure_line(done: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    errors = [line for line in done.stderr.splitlines() if "ERROR" in line or "error:" in line]
    assert len(errors) == 1, done.stderr
    for needle in needles:
        assert needle in errors[0], errors[0]


@pytest.mark.slow
def test_a_killed_loky_worker_keeps_finished_points(tmp_path: Path, small_trace: Path) -> None:  # noqa: F811
    out = tmp_path / "out"
    args = [f"trace={small_trace}", "policy=S3FIFO", "capacity=100,200,300,400", f"out_dir={out}"]
    loky = ("executor=loky", "executor.n_jobs=2", "executor.batch_size=1")  # worker processes
    done = killing_sweep(tmp_path, *args, *loky, kill_at=400)
    assert_one_failure_line(done, "a worker process was killed", "for want of memory")
    doc = manifest(out)
    assert doc["status"] == "failed" and "killed" in doc["error"]
    kept = results(out).capacity.tolist()
    assert 400 not in kept and doc["points"]["computed"] == len(kept)  # rebuilt from the parts
    again = sweep_cli(tmp_path, *args, "executor.n_jobs=1")
    assert again.returncode == 0, again.stderr
    assert results(out).capacity.tolist() == [100, 200, 300, 400]


@pytest.mark.slow
def test_ctrl_c_while_workers_start_prints_no_worker_traceback(
    tmp_path: Path,
    small_trace: Path,  # noqa: F811
) -> None:
    out = tmp_path / "out"
    capacities = ",".join(str(c) for c in range(100, 900, 100))
    proc = subprocess.Popen(
        [sys.executable, "-m", "sweep", f"trace={small_trace}", "policy=S3FIFO",
         f"capacity={capacities}", "executor=loky", "executor.n_jobs=2", "executor.batch_size=1",
         f"out_dir={out}", "plot=false"],
        cwd=tmp_path, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    assert proc.stderr is not None
    stderr = ""
    try:
        for text in proc.stderr:  # Ctrl-C at a terminal reaches the whole process group
            stderr += text
            if "running 8 points on loky" in text:
                time.sleep(0.3)  # the workers are importing (they take about a second)
                os.killpg(proc.pid, signal.SIGINT)
                break
        stderr += proc.stderr.read()
        proc.wait(timeout=TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stderr.close()
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr, stderr
    if out.exists():  # a point finished before the interrupt: kept, and said so
        assert manifest(out)["status"] == "interrupted"
    else:  # none did: no folder left behind (sweep.lifecycle)
        assert "nothing kept, no run folder left" in stderr


def test_dask_missing_is_refused_before_the_run_folder(tmp_path: Path, small_trace: Path) -> None:  # noqa: F811
    # issue 21: executor=dask without dask left an empty failed run folder
    prelude = "import sys\nsys.modules['distributed'] = None\nsys.modules['dask'] = None\n"
    out = tmp_path / "out"
    done = sweep_cli(
        tmp_path, f"trace={small_trace}", "executor=dask", f"out_dir={out}", prelude=prelude
    )
    assert_one_error_line(done, "executor=dask needs the dask and distributed packages")
    assert not out.exists()


def test_an_unreachable_dask_scheduler_is_one_line(tmp_path: Path) -> None:
    pytest.importorskip("distributed")
    out = tmp_path / "out"
    done = sweep_cli(
        tmp_path, "executor=dask", "executor.address=tcp://127.0.0.1:1",
        "executor.connect_timeout=1", "policy=LRU", "capacity=1024", f"out_dir={out}",
    )  # fmt: skip
    assert_one_error_line(done, "executor.address='tcp://127.0.0.1:1'", "within 1 s")
    assert manifest(out)["status"] == "failed"


def test_a_dask_cluster_lost_mid_sweep_keeps_finished_points(
    tmp_path: Path,
    small_trace: Path,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    distributed = pytest.importorskip("distributed")
    import sweep.app as app
    from sweep.run import Plan

    real = app.execute

    def lose_the_cluster(plan, traces, ex, per_request, on_batch, client=None, **kw):  # type: ignore[no-untyped-def]
        first = Plan([plan.batches[0]], 1, True, 1, 0.0)
        real(first, traces, ex, per_request, on_batch, **kw)  # one batch finishes, then the loss
        worker = types.SimpleNamespace(address="tcp://127.0.0.1:4321")
        raise distributed.KilledWorker("run_batch-123", worker, 0)

    monkeypatch.setattr(app, "execute", lose_the_cluster)
    out = tmp_path / "out"
    cfg = config(out, small_trace, executor=ExecutorConfig(n_jobs=2, batch_size=1), **GRID)
    summary = run_sweep(cfg)
    assert summary.exit_code == 1
    assert summary.error is not None and summary.error.startswith("Dask lost the workers")
    assert results(out).capacity.tolist() == [16]
    doc = manifest(out)
    assert doc["status"] == "failed" and doc["error"] == summary.error
    assert "Traceback" in (out / "sweep.log").read_text()  # the details, for sweep.log only
    errors = [r for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 1 and "1 point(s) finished and kept" in errors[0].getMessage()


@pytest.mark.slow
def test_a_dask_worker_killed_mid_sweep_is_one_line_not_a_hang(
    tmp_path: Path,
    small_trace: Path,  # noqa: F811
) -> None:
    pytest.importorskip("distributed")
    out = tmp_path / "out"
    done = killing_sweep(
        tmp_path, f"trace={small_trace}", "policy=S3FIFO", "capacity=100,200,300",
        "executor=dask", "executor.n_workers=2", "executor.batch_size=1", f"out_dir={out}",
        kill_at=300, DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES="0",
    )  # fmt: skip
    # Before: joblib's Dask backend never heard of the failed task and waited forever.
    assert_one_failure_line(done, "Dask lost the workers")
    assert manifest(out)["status"] == "failed"
    assert 300 not in results(out).capacity.tolist()
