"""The sweep, in process: override rewriting, configuration, planning, execution, resume.

Command-line behaviour (the exact user command, ``--help``, errors, kills) is in
``test_sweep_cli.py``. Expected values come from :func:`prefixsim.replay`, point by point.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

import prefixsim
from conftest import bundled_head, has_kernel
from sweep import ExecutorConfig, PlanError, StoreError, SweepConfig, run_sweep
from sweep.__main__ import CONF_DIR
from sweep.argv import ArgvError, rewrite_argv, rewrite_override, rewrite_overrides
from sweep.config import GRID_KEYS, register_configs, to_sweep_config
from sweep.grid import plan_grid, point_key
from sweep.store import (
    PER_REQUEST_SCHEMA,
    RESULT_SCHEMA,
    TIMING_COLUMNS,
    RunDir,
    atomic_file,
)

S3_PARAMS = ("small_ratio", "max_freq", "ghost_freq")


# --- helpers ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def small_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The first 1,500 requests of the bundled trace, as a plain JSONL file."""
    return bundled_head(tmp_path_factory.mktemp("traces"), 1500)


def config(out_dir: Path, trace: Path | str, **kw: object) -> SweepConfig:
    executor = kw.pop("executor", None) or ExecutorConfig(n_jobs=1)
    kw.setdefault("plot", False)  # figures have their own tests (test_plot.py)
    return SweepConfig(
        trace=[str(trace)], out_dir=str(out_dir), progress=False, executor=executor, **kw
    )


def results(out_dir: Path) -> pd.DataFrame:
    return pd.read_parquet(out_dir / "results.parquet").drop(columns=list(TIMING_COLUMNS))


def per_request(out_dir: Path) -> pd.DataFrame:
    return pd.read_parquet(out_dir / "per_request.parquet")


def assert_rows_equal_replay(out_dir: Path) -> None:
    """Every row (and its per-request rows) equals prefixsim.replay of its parameters."""
    df = pd.read_parquet(out_dir / "results.parquet")
    pr = per_request(out_dir)
    traces: dict[str, prefixsim.Trace] = {}
    for row in df.to_dict("records"):
        trace = traces.setdefault(row["trace"], prefixsim.load_trace(row["trace"]))
        assert row["trace_sha256"] == trace.sha256
        kwargs = {k: row[k] for k in S3_PARAMS if not pd.isna(row[k])}
        r = prefixsim.replay(
            trace,
            policy=row["policy"],
            capacity=row["capacity"],
            block_size=row["block_size"],
            **kwargs,
        )
        assert row["n_requests"] == r.n_requests
        assert row["total_prompt_tokens"] == r.total_prompt_tokens
        assert row["total_hit_tokens"] == r.total_hit_tokens
        assert row["overall_hit_rate"] == r.overall_hit_rate
        assert row["final_cache_blocks"] == r.final_cache_blocks
        for name, value in r.counters.items():
            assert row[name] == value, name
        mine = pr[pr.point_id == row["point_id"]]
        np.testing.assert_array_equal(mine.request.to_numpy(), np.arange(r.n_requests))
        np.testing.assert_array_equal(mine.hit_tokens.to_numpy(), r.hit_tokens)
        np.testing.assert_array_equal(mine.prompt_tokens.to_numpy(), r.prompt_tokens)


# --- the command-line pre-pass ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("typed", "expected"),
    [
        ("capacity=1024", "capacity=[1024]"),
        ("capacity=1024,2048,4096", "capacity=[1024,2048,4096]"),
        ("capacity=choice(1024,2048)", "capacity=[1024,2048]"),
        ("capacity=range(1024,4097,1024)", "capacity=[1024,2048,3072,4096]"),
        ("capacity=[1024,2048]", "capacity=[1024,2048]"),
        ("small_ratio=range(0.05,0.3,0.05)", "small_ratio=[0.05,0.1,0.15,0.2,0.25]"),
        ("policy='S3FIFO'", "policy=['S3FIFO']"),
        ("policy=S3FIFO,LRU", "policy=[S3FIFO,LRU]"),
        ("trace=conversation,'my trace.jsonl'", "trace=[conversation,'my trace.jsonl']"),
        ("trace='a,b.jsonl'", "trace=['a,b.jsonl']"),
        ("trace=/data/x.jsonl.gz", "trace=[/data/x.jsonl.gz]"),
        ("++capacity=5", "++capacity=[5]"),
        ("out_dir=/tmp/x", "out_dir=/tmp/x"),
        ("executor=dask", "executor=dask"),
        ("executor.n_jobs=2", "executor.n_jobs=2"),
        ("hydra.verbose=true", "hydra.verbose=true"),
        ("+experiment=big", "+experiment=big"),
        ("~capacity", "~capacity"),
        ("hardware=null", "~hardware"),  # Hydra's "no choice" (null is a traceback there)
    ],
)
def test_rewrite_override(typed: str, expected: str) -> None:
    assert rewrite_override(typed) == expected


@pytest.mark.parametrize(
    ("typed", "message"),
    [
        ("executor=loky,dask", "only the grid keys"),
        ("save_per_request=true,false", "only the grid keys"),
        ("capacity=interval(1,5)", "interval()"),
        ("capacity=[1,", "Hydra cannot parse this override"),
        ("capcity=5", "did you mean capacity?"),
    ],
)
def test_rewrite_override_rejects(typed: str, message: str) -> None:
    with pytest.raises(ArgvError, match=message.replace("(", r"\(").replace(")", r"\)")):
        rewrite_override(typed)


def test_rewrite_argv_keeps_flags_and_drops_multirun() -> None:
    rw = rewrite_argv(["--cfg", "job", "-m", "capacity=1,2", "policy=LRU"])
    assert rw.argv == ["--cfg", "job", "capacity=[1,2]", "policy=[LRU]"]
    assert any("-m is not needed" in n for n in rw.notes)
    assert rewrite_argv(["--help"]).argv == ["--help"]
    assert rewrite_argv(["-c", "job", "capacity=3"]).argv == ["-c", "job", "capacity=[3]"]
    # arguments Hydra's own parser rejects are left for Hydra to report
    assert rewrite_argv(["--bogus", "capacity=3"]).argv == ["--bogus", "capacity=3"]


# --- configuration ---------------------------------------------------------------------------


def compose(*overrides: str) -> SweepConfig:
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    register_configs()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = hydra_compose(config_name="config", overrides=rewrite_overrides(list(overrides)))
    return to_sweep_config(cfg)


def test_defaults_are_a_useful_run_and_match_the_schema() -> None:
    cfg = compose()
    # conf/config.yaml repeats the defaults; it also picks the hardware group's h100 (the
    # schema cannot: the profile is a YAML file), used only when a model is given
    assert cfg.hardware is not None and cfg.hardware.name == "h100"
    assert cfg == SweepConfig(out_dir=cfg.out_dir, hardware=cfg.hardware)
    assert cfg.trace == ["conversation"]
    assert len(plan_grid(cfg)) >= 6
    assert cfg.out_dir.startswith("outputs/")


def test_composed_grid_and_executor_group() -> None:
    cfg = compose(
        "capacity=range(1024,4097,1024)",
        "policy=S3FIFO",
        "small_ratio=0.05,0.1",
        "executor=dask",
        "executor.address=tcp://127.0.0.1:8786",
    )
    assert cfg.capacity == [1024, 2048, 3072, 4096]
    assert cfg.policy == ["S3FIFO"]
    assert cfg.small_ratio == [0.05, 0.1]
    assert cfg.executor.backend.value == "dask"
    assert cfg.executor.address == "tcp://127.0.0.1:8786"


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("capcity=5", "capcity: not a key of the sweep configuration; did you mean capacity?"),
        ("capacity=abc", "'abc' is not an integer"),
        ("small_ratio=x", "'x' is not a number"),
        ("executor.backend=spark", "one of loky, threading, dask"),
        ("save_per_request=maybe", "expected true or false"),
    ],
)
def test_config_errors_name_the_key(override: str, message: str) -> None:
    # checked against the schema before Hydra (sweep.overrides; tests/test_sweep_config_errors)
    with pytest.raises(ArgvError) as info:
        compose(override)
    assert message in str(info.value)


def test_an_unknown_group_option_is_hydras_error() -> None:
    from hydra.errors import HydraException

    with pytest.raises(HydraException, match="executor/lokyy"):
        compose("executor=lokyy")


def test_added_unknown_key_is_rejected() -> None:
    with pytest.raises(ArgvError, match=r"capcity: .*did you mean capacity"):
        compose("+capcity=5")
    # a key a config file adds is refused when the sweep converts the configuration
    from omegaconf import OmegaConf

    cfg = OmegaConf.merge(OmegaConf.structured(SweepConfig), {})
    OmegaConf.set_struct(cfg, False)
    cfg.capcity = [5]
    with pytest.raises(prefixsim.PrefixSimError, match=r"capcity: .*did you mean capacity"):
        to_sweep_config(cfg)


def test_grid_keys_are_lists_in_the_schema() -> None:
    cfg = SweepConfig()
    optional = ("instances", "router")  # null: no cluster points (sweep.cluster)
    for key in GRID_KEYS:
        value = getattr(cfg, key)
        if key in ("capacity", "cache_size"):  # None: not given (default capacities)
            assert value is None
            continue
        assert isinstance(value, list) or (value is None and key in optional), key


# --- planning --------------------------------------------------------------------------------


def test_inapplicable_parameters_do_not_multiply() -> None:
    cfg = SweepConfig(policy=["S3FIFO", "LRU"], capacity=[1024, 2048], small_ratio=[0.05, 0.1, 0.2])
    points = plan_grid(cfg)
    assert sum(p.policy == "S3FIFO" for p in points) == 6
    lru = [p for p in points if p.policy == "LRU"]
    assert [p.params.capacity for p in lru] == [1024, 2048]


def test_duplicate_values_are_one_point() -> None:
    cfg = SweepConfig(policy=["LRU", "LRU"], capacity=[8, 8, 16], small_ratio=[0.1, 0.2])
    assert [p.params.capacity for p in plan_grid(cfg)] == [8, 16]


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"capacity": [0]}, "invalid capacity=0"),
        ({"policy": ["S3FIFO"], "capacity": [1]}, "small_ratio"),
        ({"policy": ["MRU"]}, "invalid policy='MRU'"),
        ({"block_size": [0]}, "invalid block_size=0"),
        ({"max_freq": [-1], "policy": ["S3FIFO"]}, "max_freq"),
        ({"capacity": []}, "capacity: empty"),
        ({"small_ratio": [], "policy": ["S3FIFO"]}, "small_ratio: empty"),
    ],
)
def test_engine_rules_checked_for_every_point(kw: dict[str, object], message: str) -> None:
    with pytest.raises(prefixsim.PrefixSimError, match=message.replace("(", r"\(")):
        plan_grid(SweepConfig(**kw))  # type: ignore[arg-type]


def test_invalid_point_anywhere_fails_before_any_work(tmp_path: Path, small_trace: Path) -> None:
    cfg = config(tmp_path / "out", small_trace, policy=["S3FIFO"], capacity=[64, 4096, 2])
    with pytest.raises(PlanError, match=r"1 invalid point; first: policy=S3FIFO capacity=2"):
        run_sweep(cfg)
    assert not (tmp_path / "out").exists()


def test_unreadable_trace_fails_before_any_work(tmp_path: Path) -> None:
    with pytest.raises(prefixsim.TraceError):
        run_sweep(config(tmp_path / "out", tmp_path / "missing.jsonl"))
    assert not (tmp_path / "out").exists()


def test_point_key_depends_on_content_not_name() -> None:
    a = prefixsim.make_params("S3FIFO", 1024, small_ratio=0.1)
    b = prefixsim.make_params("S3FIFO", 1024, small_ratio=0.2)
    assert point_key("x" * 64, a, 512) == point_key("x" * 64, a, 512)
    assert point_key("x" * 64, a, 512) != point_key("x" * 64, b, 512)
    assert point_key("x" * 64, a, 512) != point_key("y" * 64, a, 512)
    assert point_key("x" * 64, a, 512) != point_key("x" * 64, a, 256)


# --- running ---------------------------------------------------------------------------------


def test_rows_equal_replay_and_schema(tmp_path: Path, small_trace: Path) -> None:
    out = tmp_path / "out"
    cfg = config(
        out,
        small_trace,
        policy=["S3FIFO", "LRU"],
        capacity=[64, 512],
        small_ratio=[0.05, 0.2],
        max_freq=[1, 3],
        block_size=[256, 512],
    )
    summary = run_sweep(cfg)
    assert summary.exit_code == 0
    assert summary.computed == summary.planned == 2 * 2 * (2 * 2 + 1)  # capacity, block_size
    table = pq.read_table(out / "results.parquet")
    assert table.schema.remove_metadata() == RESULT_SCHEMA
    assert pq.read_schema(out / "per_request.parquet").remove_metadata() == PER_REQUEST_SCHEMA
    df = pd.read_parquet(out / "results.parquet")
    assert df.point_id.tolist() == list(range(len(df)))
    lru = df[df.policy == "LRU"]
    assert lru.small_ratio.isna().all() and lru.max_freq.isna().all()
    assert lru.ghost_hits.isna().all()
    assert str(df.max_freq.dtype) == "Int64"  # nullable integers stay integers in pandas
    assert_rows_equal_replay(out)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "complete"
    assert manifest["points"]["computed"] == summary.computed
    assert manifest["traces"][0]["sha256"] == df.trace_sha256[0]
    assert manifest["versions"]["prefixsim"] == prefixsim.__version__
    assert {"total_seconds", "replay_seconds", "write_seconds"} <= set(manifest["timings"])
    assert (out / "config.yaml").read_text().startswith("trace:")
    assert "results:" in (out / "sweep.log").read_text()
    assert not (out / ".sweep" / "parts").exists()


def test_identical_whatever_n_jobs_and_backend(tmp_path: Path, small_trace: Path) -> None:
    grid = {"policy": ["S3FIFO", "LRU"], "capacity": [32, 256, 1024], "small_ratio": [0.1, 0.3]}
    runs = {
        "serial": ExecutorConfig(n_jobs=1),
        "loky": ExecutorConfig(n_jobs=2, batch_size=1),
        "loky_batched": ExecutorConfig(n_jobs=2, batch_size=4),
        "threads": ExecutorConfig(backend="threading", n_jobs=2, batch_size=2),  # type: ignore[arg-type]
    }
    for name, ex in runs.items():
        summary = run_sweep(config(tmp_path / name, small_trace, executor=ex, **grid))
        assert summary.exit_code == 0, name
    reference = results(tmp_path / "serial")
    ref_pr = per_request(tmp_path / "serial")
    for name in runs:
        pd.testing.assert_frame_equal(results(tmp_path / name), reference)
        pd.testing.assert_frame_equal(per_request(tmp_path / name), ref_pr)


def test_failed_point_is_reported_and_others_written(
    tmp_path: Path, small_trace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = prefixsim.replay_params

    def flaky(trace, params, block_size, **kw):  # type: ignore[no-untyped-def]
        if params.capacity == 200 and trace.n_requests > 1:  # at run time, not in planning
            raise MemoryError("simulated")
        return real(trace, params, block_size, **kw)

    monkeypatch.setattr(prefixsim, "replay_params", flaky)
    out = tmp_path / "out"
    cfg = config(out, small_trace, policy=["LRU"], capacity=[100, 200, 300])
    summary = run_sweep(cfg)
    assert summary.exit_code == 1
    assert len(summary.failures) == 1
    failure = summary.failures[0]
    assert "capacity=200" in failure.point and "policy=LRU" in failure.point
    assert "MemoryError: simulated" in failure.error
    assert results(out).capacity.tolist() == [100, 300]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "failed"
    assert manifest["failures"][0]["point"] == failure.point

    monkeypatch.setattr(prefixsim, "replay_params", real)
    again = run_sweep(cfg)
    assert (again.computed, again.skipped, again.exit_code) == (1, 2, 0)
    assert results(out).capacity.tolist() == [100, 200, 300]
    assert results(out).point_id.tolist() == [0, 1, 2]


def test_interrupted_sweep_keeps_finished_points_and_resumes(
    tmp_path: Path, small_trace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    grid = {"policy": ["S3FIFO", "LRU"], "capacity": [16, 64, 256, 1024], "small_ratio": [0.1, 0.3]}
    ex = ExecutorConfig(n_jobs=1, batch_size=2)
    run_sweep(config(tmp_path / "ref", small_trace, executor=ex, **grid))

    real_write = RunDir.write_part
    written = []

    def write_then_interrupt(self, table):  # type: ignore[no-untyped-def]
        path = real_write(self, table)
        written.append(path)
        if len(written) == 2:
            raise KeyboardInterrupt
        return path

    monkeypatch.setattr(RunDir, "write_part", write_then_interrupt)
    out = tmp_path / "out"
    first = run_sweep(config(out, small_trace, executor=ex, **grid))
    assert first.interrupted and first.exit_code == 130
    assert first.computed == 4
    assert len(results(out)) == 4  # consolidated on the way out
    assert json.loads((out / "manifest.json").read_text())["status"] == "interrupted"

    monkeypatch.setattr(RunDir, "write_part", real_write)
    second = run_sweep(config(out, small_trace, executor=ex, **grid))
    assert (second.skipped, second.computed) == (4, first.planned - 4)
    pd.testing.assert_frame_equal(results(out), results(tmp_path / "ref"))
    pd.testing.assert_frame_equal(per_request(out), per_request(tmp_path / "ref"))
    runs = json.loads((out / "manifest.json").read_text())["runs"]
    assert [r["status"] for r in runs] == ["interrupted", "complete"]


def test_leftover_parts_are_folded_in(
    tmp_path: Path, small_trace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run killed before consolidating leaves part files; the next run uses them."""
    grid = {"policy": ["LRU"], "capacity": [16, 64, 256, 1024]}
    ex = ExecutorConfig(n_jobs=1, batch_size=1)
    out = tmp_path / "out"
    monkeypatch.setattr(RunDir, "consolidate", lambda self: (0, set()))
    run_sweep(config(out, small_trace, executor=ex, **grid))
    assert len(list((out / ".sweep" / "parts").iterdir())) == 4
    assert not (out / "results.parquet").exists()
    monkeypatch.undo()
    summary = run_sweep(config(out, small_trace, executor=ex, **grid))
    assert (summary.skipped, summary.computed) == (4, 0)
    assert results(out).capacity.tolist() == [16, 64, 256, 1024]
    assert_rows_equal_replay(out)


def test_extending_the_grid_computes_only_new_points(tmp_path: Path, small_trace: Path) -> None:
    out = tmp_path / "out"
    ex = ExecutorConfig(n_jobs=1, batch_size=1)
    run_sweep(config(out, small_trace, executor=ex, policy=["LRU"], capacity=[16, 1024]))
    summary = run_sweep(
        config(out, small_trace, executor=ex, policy=["LRU"], capacity=[16, 64, 256, 1024])
    )
    assert (summary.skipped, summary.computed) == (2, 2)
    df = results(out)
    assert df.point_id.tolist() == [0, 1, 2, 3]
    assert df.capacity.tolist() == [16, 1024, 64, 256]  # ids are kept, new points after
    assert_rows_equal_replay(out)
    pr = per_request(out)
    assert pr.point_id.is_monotonic_increasing


def test_per_request_off_then_on(tmp_path: Path, small_trace: Path) -> None:
    out = tmp_path / "out"
    grid = {"policy": ["LRU"], "capacity": [16, 1024]}
    first = run_sweep(config(out, small_trace, save_per_request=False, **grid))
    assert first.computed == 2
    assert not (out / "per_request.parquet").exists()
    again = run_sweep(config(out, small_trace, save_per_request=False, **grid))
    assert again.computed == 0
    with_pr = run_sweep(config(out, small_trace, **grid))
    assert with_pr.computed == 2  # the per-request rows were missing
    assert_rows_equal_replay(out)


def test_one_writer_per_run_dir(tmp_path: Path, small_trace: Path) -> None:
    out = tmp_path / "out"
    holder = RunDir(out)
    holder.lock()
    try:
        with pytest.raises(StoreError, match="another sweep is writing there"):
            run_sweep(config(out, small_trace, policy=["LRU"], capacity=[16]))
    finally:
        holder.unlock()
    assert run_sweep(config(out, small_trace, policy=["LRU"], capacity=[16])).exit_code == 0


def test_atomic_file_leaves_nothing_on_error(tmp_path: Path) -> None:
    target = tmp_path / "x.parquet"
    target.write_text("old")
    with pytest.raises(RuntimeError), atomic_file(target) as f:
        f.write(b"half")
        raise RuntimeError
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["x.parquet"]


def test_same_content_under_two_names_runs_once(
    tmp_path: Path, small_trace: Path, caplog: pytest.LogCaptureFixture
) -> None:
    copy = tmp_path / "copy.jsonl"
    copy.write_bytes(small_trace.read_bytes())
    cfg = config(tmp_path / "out", small_trace, policy=["LRU"], capacity=[16, 64])
    cfg.trace = [str(small_trace), str(copy)]
    with caplog.at_level(logging.WARNING, logger="sweep"):
        summary = run_sweep(cfg)
    assert summary.planned == 2
    assert "same content" in caplog.text


def test_default_out_dir_from_python(
    tmp_path: Path, small_trace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    cfg = SweepConfig(trace=[str(small_trace)], policy=["LRU"], capacity=[16], progress=False)
    summary = run_sweep(cfg)
    assert summary.out_dir.parent.parent == tmp_path / "outputs"
    assert "$" not in str(summary.out_dir)
    assert (summary.out_dir / "results.parquet").exists()


def test_run_sweep_from_a_thread(tmp_path: Path, small_trace: Path) -> None:
    """No signal handler is installed outside the main thread (notebooks, servers)."""
    box: dict[str, int] = {}

    def target() -> None:
        box["code"] = run_sweep(
            config(tmp_path / "out", small_trace, policy=["LRU"], capacity=[16])
        ).exit_code

    t = threading.Thread(target=target)
    t.start()
    t.join()
    assert box["code"] == 0


def _kernel_misses_after_batch(trace: prefixsim.Trace, items: list) -> int:  # type: ignore[type-arg]
    """In a worker: run a batch, then count the kernels' disk-cache misses (compilations)."""
    from sweep.run import run_batch

    run_batch(trace, items, True)
    return sum(
        sum(prefixsim.get_policy(name).kernel.stats.cache_misses.values())
        for name in prefixsim.policy_names()
        if has_kernel(name)
    )


def test_workers_compile_nothing() -> None:
    """The parent's warm-up leaves every kernel the workers need in numba's disk cache, for the
    argument types they see (the bundled trace's block ids arrive memory-mapped, read-only)."""
    import joblib

    from sweep.grid import assign_points
    from sweep.run import warm_up

    trace = prefixsim.load_trace("conversation")
    assert trace.block_ids.nbytes > 1_000_000  # joblib memory-maps it for loky workers
    cfg = SweepConfig(policy=["S3FIFO", "LRU"], capacity=[64])
    points, _ = assign_points(plan_grid(cfg), {"conversation": trace.sha256}, {})
    warm_up({trace.sha256: trace}, points)
    items = [(p.point_id, p.params, p.block_size) for p in points]
    with joblib.parallel_config(backend="loky", n_jobs=2):
        misses = joblib.Parallel()(
            joblib.delayed(_kernel_misses_after_batch)(trace, items) for _ in range(4)
        )
    assert misses == [0, 0, 0, 0]


def test_dask_local_cluster_matches_loky(tmp_path: Path, small_trace: Path) -> None:
    pytest.importorskip("distributed")
    grid = {"policy": ["S3FIFO", "LRU"], "capacity": [32, 256, 1024], "small_ratio": [0.1, 0.3]}
    loky = run_sweep(
        config(tmp_path / "loky", small_trace, executor=ExecutorConfig(batch_size=2), **grid)
    )
    dask_ex = ExecutorConfig(backend="dask", n_workers=2, batch_size=2)  # type: ignore[arg-type]
    dask = run_sweep(config(tmp_path / "dask", small_trace, executor=dask_ex, **grid))
    assert loky.exit_code == dask.exit_code == 0
    manifest = json.loads((tmp_path / "dask" / "manifest.json").read_text())
    assert manifest["executor"]["backend"] == "dask"
    assert manifest["executor"]["in_process"] is False
    pd.testing.assert_frame_equal(results(tmp_path / "dask"), results(tmp_path / "loky"))
    pd.testing.assert_frame_equal(per_request(tmp_path / "dask"), per_request(tmp_path / "loky"))


def test_the_progress_bar_counts_from_the_first_replays(
    tmp_path: Path, small_trace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # issue 21: the first estimate of the time left was 7x too long: the bar's clock ran
    # through the warm-up (a first compile), the workers' start and the inputs' writing
    import io

    from tqdm import tqdm

    import sweep.app as app

    bars: list[Any] = []

    def bar(total: int, enabled: bool) -> Any:
        bars.append(tqdm(total=total, file=io.StringIO(), mininterval=0, miniters=1))
        return bars[-1]

    real_warm_up = app.warm_up

    def slow_warm_up(*args: Any) -> Any:
        time.sleep(1.0)  # a first compile
        return real_warm_up(*args)

    monkeypatch.setattr(app, "progress_bar", bar)
    monkeypatch.setattr(app, "warm_up", slow_warm_up)
    elapsed: list[float] = []
    real_update = tqdm.update

    def update(self: Any, n: int = 1) -> Any:
        elapsed.append(self.format_dict["elapsed"])
        return real_update(self, n)

    monkeypatch.setattr(tqdm, "update", update)
    cfg = config(tmp_path / "out", small_trace, policy=["LRU", "FIFO"], capacity=[16, 64, 256])
    assert run_sweep(cfg).exit_code == 0
    assert elapsed and elapsed[0] < 0.5, elapsed  # not the second of warm-up
