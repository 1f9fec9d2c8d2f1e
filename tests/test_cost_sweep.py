"""The sweep with a model: cache_size in bytes, and the bytes, FLOPs and est_ columns, whose
values are derived here independently (closed forms in exact Python ints) from a replay."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

import prefixsim
from conftest import bundled_head
from prefixsim.hardware import HardwareProfile, load_hardware
from prefixsim.models import ModelProfile, load_model, profile_dir
from sweep import ExecutorConfig, SweepConfig, run_sweep
from sweep.__main__ import CONF_DIR
from sweep.config import HardwareConfig, ModelConfig
from sweep.costing import check_profile_overrides
from sweep.grid import plan_grid

GIB = 2**30


@pytest.fixture(scope="module")
def small_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The first 800 requests of the bundled trace."""
    return bundled_head(tmp_path_factory.mktemp("traces"), 800)


def model_config(name: str) -> ModelConfig:
    return ModelConfig(**load_model(name).to_dict())


def hardware_config(name: str) -> HardwareConfig:
    return HardwareConfig(**load_hardware(name).to_dict())


def config(out_dir: Path, trace: Path, **kw: object) -> SweepConfig:
    return SweepConfig(
        trace=[str(trace)],
        out_dir=str(out_dir),
        progress=False,
        plot=False,
        executor=ExecutorConfig(n_jobs=1),
        **kw,  # type: ignore[arg-type]
    )


def test_schemas_mirror_the_engine_profiles() -> None:
    for schema, profile in ((ModelConfig, ModelProfile), (HardwareConfig, HardwareProfile)):
        ours = [(f.name, f.default) for f in dataclasses.fields(schema)]
        engine = [
            (f.name, "???" if f.default is dataclasses.MISSING else f.default)
            for f in dataclasses.fields(profile)
        ]
        assert ours == engine


def test_cache_size_plans_whole_blocks() -> None:
    cfg = SweepConfig(
        policy=["LRU"],
        cache_size=["64GiB", "256GiB", "1TiB"],
        block_size=[512, 256],
        model=model_config("llama-3.1-70b"),
    )
    points = plan_grid(cfg)
    # 160 MiB a block at 512 tokens: 65,536 / 160 = 409.6, 262,144 / 160 = 1,638.4,
    # 1,048,576 / 160 = 6,553.6; at 256 tokens, 80 MiB a block: twice as many (819, 3276, 13107)
    got = [(p.params.capacity, p.block_size, p.cache_bytes) for p in points]
    assert got == [
        (409, 512, 64 * GIB),
        (819, 256, 64 * GIB),
        (1638, 512, 256 * GIB),
        (3276, 256, 256 * GIB),
        (6553, 512, 1024 * GIB),
        (13107, 256, 1024 * GIB),
    ]


def test_capacity_with_a_model_has_its_bytes() -> None:
    cfg = SweepConfig(policy=["LRU"], capacity=[10], model=model_config("llama-3.1-8b"))
    # 10 blocks of 64 MiB
    assert [p.cache_bytes for p in plan_grid(cfg)] == [10 * 64 * 2**20]
    assert [p.cache_bytes for p in plan_grid(SweepConfig(policy=["LRU"]))] == [None] * 5


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"capacity": [1024], "cache_size": ["64GiB"]}, "not both"),
        ({"cache_size": ["64Gb"]}, "Gb is in bits"),
        ({"cache_size": ["-1GiB"]}, "cannot be negative"),
        ({"cache_size": ["100MiB"]}, "smaller than one block of llama-3.1-70b"),
        ({"cache_size": []}, "cache_size: empty"),
        ({"cache_tier": "ssd"}, "invalid cache_tier='ssd'"),
    ],
)
def test_plan_errors(kw: dict[str, object], message: str) -> None:
    cfg = SweepConfig(
        policy=["LRU"],
        model=model_config("llama-3.1-70b"),
        hardware=hardware_config("h100"),
        **kw,  # type: ignore[arg-type]
    )
    with pytest.raises(prefixsim.PrefixSimError, match=message):
        plan_grid(cfg)


def test_cache_size_needs_a_model() -> None:
    with pytest.raises(prefixsim.ParameterError, match="needs a model"):
        plan_grid(SweepConfig(cache_size=["64GiB"]))


def expected_costs(
    model: ModelProfile, hw: HardwareProfile, tier: str, n: int, h: int, block_size: int
) -> dict[str, float]:
    """One request's numbers from the closed forms of docs/cost-model.md, in exact ints."""
    coeff = model.layers * model.attention_heads * (model.head_dim + model.value_dim)

    def flops(n: int, h: int) -> int:
        return 2 * model.active_params * (n - h) + coeff * (n * (n + 1) - h * (h + 1))

    reused = -(-h // block_size) * model.kv_bytes_per_block(block_size)
    eff = hw.peak_flops[hw.compute_dtype] * hw.mfu
    no_cache = flops(n, 0) / eff
    with_cache = flops(n, h) / eff + reused / hw.bandwidth[tier]
    return {
        "prefill_flops": flops(n, 0),
        "prefill_flops_saved": flops(n, 0) - flops(n, h),
        "reused_bytes": reused,
        "est_prefill_seconds_no_cache": no_cache,
        "est_prefill_seconds": with_cache,
        "est_ttft_saved_seconds": no_cache - with_cache,
    }


def test_sweep_columns_match_an_independent_derivation(tmp_path: Path, small_trace: Path) -> None:
    model, hw, tier = load_model("llama-3.1-8b"), load_hardware("a100"), "dram_pcie"
    cfg = config(
        tmp_path / "out",
        small_trace,
        policy=["S3FIFO", "LRU"],
        cache_size=["1GiB", "4GiB"],  # 64 MiB blocks: 16 and 64 blocks
        model=model_config("llama-3.1-8b"),
        hardware=hardware_config("a100"),
        cache_tier=tier,
    )
    summary = run_sweep(cfg)
    assert summary.exit_code == 0
    res = pd.read_parquet(tmp_path / "out" / "results.parquet")
    per = pd.read_parquet(tmp_path / "out" / "per_request.parquet")
    trace = prefixsim.load_trace(str(small_trace))
    assert sorted(res.capacity.unique()) == [16, 64]
    for row in res.itertuples():
        assert (row.model, row.kv_dtype, row.hardware, row.cache_tier) == (
            "llama-3.1-8b",
            "bf16",
            "a100",
            "dram_pcie",
        )
        assert row.kv_bytes_per_block == 64 * 2**20
        assert row.cache_bytes == row.capacity * 64 * 2**20  # 1 GiB and 4 GiB exactly
        replayed = prefixsim.replay(trace, row.policy, int(row.capacity))
        assert row.total_hit_tokens == replayed.total_hit_tokens
        rows = [
            expected_costs(model, hw, tier, int(n), int(h), 512)
            for n, h in zip(replayed.prompt_tokens, replayed.hit_tokens, strict=True)
        ]
        assert row.reused_bytes == sum(r["reused_bytes"] for r in rows)  # exact
        for col in (
            "prefill_flops",
            "prefill_flops_saved",
            "est_prefill_seconds_no_cache",
            "est_prefill_seconds",
            "est_ttft_saved_seconds",
        ):
            assert getattr(row, col) == pytest.approx(sum(r[col] for r in rows), rel=1e-9), col
        # 64 MiB * 156e12 FLOP/s / (2 * 8.03e9 * 512 + 262,144 * 512 * 513) FLOPs of block 0
        first_block = 2 * 8_030_000_000 * 512 + 262_144 * 512 * 513
        assert row.est_break_even_bandwidth == pytest.approx(
            64 * 2**20 * 312e12 * 0.5 / first_block, rel=1e-12
        )
        mine = per[per.point_id == row.point_id].sort_values("request")
        assert mine.prefill_flops_saved.tolist() == pytest.approx(
            [r["prefill_flops_saved"] for r in rows], rel=1e-12
        )
        assert mine.est_ttft_saved_seconds.tolist() == pytest.approx(
            [r["est_ttft_saved_seconds"] for r in rows], rel=1e-9, abs=1e-12
        )


def test_no_model_no_cost_and_per_request_off(tmp_path: Path, small_trace: Path) -> None:
    run_sweep(config(tmp_path / "a", small_trace, policy=["LRU"], capacity=[64]))
    res = pd.read_parquet(tmp_path / "a" / "results.parquet")
    for col in ("cache_bytes", "kv_bytes_per_block", "prefill_flops", "est_prefill_seconds"):
        assert res[col].isna().all(), col
    per = pd.read_parquet(tmp_path / "a" / "per_request.parquet")
    # without a model the cost columns are left out of per_request.parquet (not all null)
    assert per.columns.tolist() == ["point_id", "request", "prompt_tokens", "hit_tokens"]
    # with a model but no per-request output: the totals are there all the same
    cfg = config(
        tmp_path / "b",
        small_trace,
        policy=["LRU"],
        capacity=[64],
        model=model_config("llama-3.1-8b"),
        save_per_request=False,
    )
    run_sweep(cfg)
    res_b = pd.read_parquet(tmp_path / "b" / "results.parquet")
    assert not (tmp_path / "b" / "per_request.parquet").exists()
    assert res_b.prefill_flops_saved.iloc[0] > 0
    assert res_b.est_prefill_seconds.isna().all()  # no hardware: no estimate
    assert res_b.total_hit_tokens.iloc[0] == res.total_hit_tokens.iloc[0]


def test_changed_hardware_is_a_new_point(tmp_path: Path, small_trace: Path) -> None:
    out = tmp_path / "out"
    kw = {"policy": ["LRU"], "cache_size": ["1GiB"], "model": model_config("llama-3.1-8b")}
    assert run_sweep(config(out, small_trace, hardware=hardware_config("h100"), **kw)).computed == 1
    assert run_sweep(config(out, small_trace, hardware=hardware_config("h100"), **kw)).computed == 0
    assert run_sweep(config(out, small_trace, hardware=hardware_config("b200"), **kw)).computed == 1


def sweep_cli(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sweep", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        check=False,
        timeout=600,
    )


@pytest.mark.slow
def test_the_issue_command(tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = sweep_cli(
        tmp_path,
        "model=llama-3.1-70b",
        "cache_size=64GiB,256GiB,1TiB",
        "policy=S3FIFO,LRU",
        f"out_dir={out}",
        "plot=false",
    )
    assert proc.returncode == 0, proc.stderr
    res = pd.read_parquet(out / "results.parquet")
    assert sorted(res.cache_bytes.unique()) == [64 * GIB, 256 * GIB, 1024 * GIB]
    assert sorted(res.capacity.unique()) == [409, 1638, 6553]  # see test_cache_size_plans...
    assert res.kv_bytes_per_block.eq(167_772_160).all()
    assert res.est_ttft_saved_seconds.notna().all()  # the default hardware, h100
    config_yaml = (out / "config.yaml").read_text()
    assert "layers: 80" in config_yaml and "name: h100" in config_yaml
    assert "mfu: 0.5" in config_yaml


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["model=llama-3.1-70b", "cache_size=64Gb"], "invalid cache_size='64Gb': Gb is in bits"),
        (["model=llama-4"], "invalid model='llama-4': unknown model (known: deepseek-v3,"),
    ],
)
def test_cli_errors(tmp_path: Path, args: list[str], message: str) -> None:
    """One line and exit status 2 (the other messages are checked in process above)."""
    proc = sweep_cli(tmp_path, *args, "plot=false")
    assert proc.returncode == 2
    assert message in proc.stderr
    assert proc.stderr.strip().count("\n") == 0, proc.stderr


def test_profile_checks_in_process(tmp_path: Path) -> None:
    with pytest.raises(prefixsim.ParameterError, match=r"invalid model\.kv_heads=0"):
        plan_grid(SweepConfig(model=dataclasses.replace(model_config("llama-3.1-8b"), kv_heads=0)))
    with pytest.raises(prefixsim.ParameterError, match=r"unknown hardware \(known: a100, b200,"):
        check_profile_overrides(["model=llama-3.1-8b", "hardware=h1000"], CONF_DIR)
    (tmp_path / "model").mkdir()
    bundled = (profile_dir("model") / "llama-3.1-8b.yaml").read_text()
    (tmp_path / "model" / "mine.yaml").write_text(bundled.replace("llama-3.1-8b", "mine"))
    with pytest.raises(prefixsim.ParameterError, match="unknown model"):
        check_profile_overrides(["model=mine"], CONF_DIR)
    check_profile_overrides(["--config-dir", str(tmp_path), "model=mine"], CONF_DIR)
    check_profile_overrides([f"--config-dir={tmp_path}", "model=mine"], CONF_DIR)
    check_profile_overrides(["model=null", "hardware=h200"], CONF_DIR)
    # the profile is read by the engine's loader (issue 22): a missing key names the file
    (tmp_path / "model" / "stub.yaml").write_text("name: stub\n")
    with pytest.raises(prefixsim.ParameterError, match=r"model/stub\.yaml: layers"):
        check_profile_overrides(["--config-dir", str(tmp_path), "model=stub"], CONF_DIR)


def test_help_lists_every_bundled_profile() -> None:
    from prefixsim import hardware_names, model_names

    # Hydra's $APP_CONFIG_GROUPS does not list groups found on the search path: the help
    # template in conf/config.yaml lists the bundled profiles itself
    template = " ".join((CONF_DIR / "config.yaml").read_text().split())
    for name in [*model_names(), *hardware_names()]:
        assert f" {name}," in template or f" {name} " in template, name


def test_a_user_profile_in_a_config_dir(tmp_path: Path, small_trace: Path) -> None:
    # a user adds a model by writing a YAML file in a model/ folder of a --config-dir
    (tmp_path / "mine" / "model").mkdir(parents=True)
    (tmp_path / "mine" / "model" / "tiny.yaml").write_text(
        "name: tiny\nlayers: 2\nattention_heads: 4\nkv_heads: 2\nhead_dim: 8\n"
        "hidden_size: 32\ntotal_params: 1000\nactive_params: 1000\n"
    )
    # a block: 2 * 2 layers * 2 KV heads * 8 * 2 bytes * 512 tokens = 65,536 bytes
    out = tmp_path / "run"
    proc = sweep_cli(
        tmp_path,
        "--config-dir",
        str(tmp_path / "mine"),
        "model=tiny",
        f"trace={small_trace}",
        "policy=LRU",
        "cache_size=1MiB",  # 1,048,576 / 65,536 = 16 blocks
        f"out_dir={out}",
        "plot=false",
    )
    assert proc.returncode == 0, proc.stderr
    res = pd.read_parquet(out / "results.parquet")
    assert res.capacity.tolist() == [16] and res.model.tolist() == ["tiny"]


def test_capacity_null_clears_an_experiments_capacities() -> None:
    from sweep.argv import rewrite_override
    from test_sweep import compose

    assert rewrite_override("capacity=null") == "capacity=null"
    cfg = compose(
        "+experiment=capacity_curve", "capacity=null", "model=llama-3.1-8b", "cache_size=1GiB"
    )
    assert cfg.capacity is None and cfg.cache_size == ["1GiB"]
    assert {p.params.capacity for p in plan_grid(cfg)} == {16}  # 1 GiB / 64 MiB


def test_per_request_gains_the_cost_columns_when_a_model_joins(
    tmp_path: Path, small_trace: Path
) -> None:
    # A run directory without a model has no cost columns in per_request.parquet; a later run
    # with a model into the same directory adds them: null for the points without a model,
    # values for the new ones. Derivation: the points of one model run have the columns
    # computed from their own hits, the earlier capacity=64 point has none (null).
    out = tmp_path / "out"
    assert run_sweep(config(out, small_trace, policy=["LRU"], capacity=[64])).exit_code == 0
    per = pd.read_parquet(out / "per_request.parquet")
    assert "prefill_flops_saved" not in per.columns
    cfg = config(
        out,
        small_trace,
        policy=["LRU"],
        cache_size=["1GiB"],  # 64 MiB blocks: 16 blocks
        model=model_config("llama-3.1-8b"),
        hardware=hardware_config("a100"),
        cache_tier="dram_pcie",
    )
    assert run_sweep(cfg).exit_code == 0
    per = pd.read_parquet(out / "per_request.parquet")
    res = pd.read_parquet(out / "results.parquet").set_index("point_id")
    assert per.columns.tolist()[4:] == ["prefill_flops_saved", "est_ttft_saved_seconds"]
    assert sorted(per.point_id.unique()) == sorted(res.index)
    for point_id, rows in per.groupby("point_id"):
        if pd.isna(res.loc[point_id, "model"]):
            assert rows.prefill_flops_saved.isna().all()
            assert rows.est_ttft_saved_seconds.isna().all()
        else:
            total = res.loc[point_id, "prefill_flops_saved"]
            assert rows.prefill_flops_saved.sum() == pytest.approx(total, rel=1e-12)
            assert rows.est_ttft_saved_seconds.notna().all()
