"""The sweep's ``tiers`` group: composed configuration, grid, result columns, the figure."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import prefixsim
from prefixsim.tiers import Hierarchy, make_tier, replay_tiers
from sweep import run_sweep
from sweep.argv import ArgvError, rewrite_override
from sweep.config import TierConfig, TiersConfig
from sweep.figures.tiers import NoTierPoints, tier_split_figure
from sweep.grid import plan_grid, point_key
from test_sweep import compose, config, small_trace  # noqa: F401


@pytest.mark.parametrize(
    ("typed", "expected"),
    [
        ("tiers.dram.capacity=16384,65536", "tiers.dram.capacity=[16384,65536]"),
        ("tiers.dram.policy=S3FIFO", "tiers.dram.policy=[S3FIFO]"),
        ("tiers.mode=exclusive,inclusive", "tiers.mode=[exclusive,inclusive]"),
        ("tiers.ssd.small_ratio=range(0.1,0.3,0.1)", "tiers.ssd.small_ratio=[0.1,0.2]"),
        ("tiers=hbm_dram", "tiers=hbm_dram"),  # the group choice itself is not a grid key
    ],
)
def test_tier_keys_are_grid_keys(typed: str, expected: str) -> None:
    assert rewrite_override(typed) == expected


def test_composed_hierarchy_and_its_grid() -> None:
    cfg = compose(
        "tiers=hbm_dram",
        "tiers.hbm.capacity=2048",
        "tiers.dram.capacity=range(8192,131073,8192)",
        "tiers.dram.policy=S3FIFO,LRU",
    )
    assert cfg.tiers is not None
    assert cfg.tiers.order == ["hbm", "dram"]
    assert cfg.tiers.dram is not None and cfg.tiers.dram.capacity[-1] == 131072
    grid = plan_grid(cfg)
    assert len(grid) == 16 * 2  # 16 DRAM capacities x 2 DRAM policies; top-level keys unused
    first = grid[0].params
    assert isinstance(first, Hierarchy)
    assert [(t.name, t.policy, t.params.capacity, t.medium) for t in first.tiers] == [
        ("hbm", "LRU", 2048, "hbm"),
        ("dram", "S3FIFO", 8192, "dram_pcie"),
    ]
    three = plan_grid(compose("tiers=hbm_dram_ssd", "tiers.mode=exclusive,inclusive"))
    assert len(three) == 2 and len(three[0].params.tiers) == 3  # type: ignore[attr-defined]


def test_misspelt_tier_key_is_rejected() -> None:
    with pytest.raises(
        ArgvError, match=r"tiers\.dramm: not a key of the tiers node; did you mean tiers\.dram\?"
    ):
        compose("tiers=hbm_dram", "tiers.dramm.capacity=5")
    with pytest.raises(ArgvError, match=r"did you mean tiers\.dram\.capacity\?"):
        compose("tiers=hbm_dram", "tiers.dram.capacty=5")


def test_added_unknown_tier_key_is_rejected() -> None:
    with pytest.raises(ArgvError, match=r"tiers\.dram\.foo: not a key"):
        compose("tiers=hbm_dram", "+tiers.dram.foo=1")
    with pytest.raises(ArgvError, match=r"tiers\.bar: not a key"):
        compose("tiers=hbm_dram", "+tiers.bar=1")


def test_invalid_tier_names_its_key() -> None:
    with pytest.raises(prefixsim.ParameterError, match=r"tiers\.dram\.capacity"):
        plan_grid(compose("tiers=hbm_dram", "tiers.dram.capacity=0"))
    with pytest.raises(
        prefixsim.ParameterError, match=r"tiers\.dram\.policy='CLOCK'.*no natural removal"
    ):
        plan_grid(compose("tiers=hbm_dram", "tiers.dram.policy=CLOCK"))


def test_point_key_names_the_whole_hierarchy() -> None:
    def key(mode: str, dram_policy: str, medium: str | None = "dram_pcie") -> str:
        h = Hierarchy.of(
            [
                make_tier("LRU", 8, name="hbm"),
                make_tier(dram_policy, 64, name="dram", medium=medium),
            ],
            mode,
        )
        return point_key("0" * 64, h, 512)

    keys = {key("exclusive", "LRU"), key("inclusive", "LRU"), key("exclusive", "FIFO"),
            key("exclusive", "LRU", None)}  # fmt: skip
    assert len(keys) == 4


def test_sweep_rows_equal_replay_tiers(tmp_path: Path, small_trace: Path) -> None:  # noqa: F811
    tiers = TiersConfig(
        name="t",
        order=["hbm", "dram"],
        mode=["exclusive", "inclusive"],
        hbm=TierConfig(policy=["LRU"], capacity=[64], medium="hbm"),
        dram=TierConfig(policy=["S3FIFO", "SIEVE"], capacity=[256, 1024], medium="rdma"),
    )
    out = tmp_path / "run"
    summary = run_sweep(config(out, small_trace, tiers=tiers))
    assert summary.exit_code == 0
    df = pd.read_parquet(out / "results.parquet")
    assert len(df) == 2 * 2 * 2
    trace = prefixsim.load_trace(small_trace)
    for row in df.to_dict("records"):
        spec = json.loads(row["tiers"])
        r = replay_tiers(trace, spec, row["mode"], int(row["block_size"]))
        assert row["total_hit_tokens"] == r.total_hit_tokens
        assert row["policy"] == "TIERS" and row["capacity"] == 64 + row["tier1_capacity"]
        for t in range(2):
            assert row[f"tier{t}_hit_tokens"] == r.total_tier_hit_tokens[t]
            assert row[f"tier{t}_final_cache_blocks"] == r.final_tier_blocks[t]
            for c, v in r.tier_counters[t].items():
                assert row[f"tier{t}_{c}"] == v
        assert pd.isna(row["tier2_policy"]) and pd.isna(row["tier2_hit_tokens"])
        if row["mode"] == "exclusive":
            assert row["tier0_evictions"] == row["tier1_demotions_in"]
    pr = pd.read_parquet(out / "per_request.parquet")
    first = df.iloc[0]
    r = replay_tiers(trace, json.loads(first["tiers"]), first["mode"])
    got = pr[pr.point_id == first["point_id"]].hit_tokens.to_numpy()
    np.testing.assert_array_equal(got, r.hit_tokens)
    # Running again computes nothing: the point keys are stable.
    again = run_sweep(config(out, small_trace, tiers=tiers))
    assert again.computed == 0


def test_tier_split_figure(tmp_path: Path, small_trace: Path) -> None:  # noqa: F811
    tiers = TiersConfig(
        order=["hbm", "dram"],
        hbm=TierConfig(policy=["LRU"], capacity=[32]),
        dram=TierConfig(policy=["LRU"], capacity=[64, 128, 256]),
    )
    out = tmp_path / "run"
    run_sweep(config(out, small_trace, tiers=tiers, plot=True))
    df = pd.read_parquet(out / "results.parquet")
    fig = tier_split_figure(df)
    ax = fig.axes[0]
    # The stack's top line is the overall hit rate (%) at each DRAM capacity.
    (line,) = [ln for ln in ax.lines if ln.get_label() == "all tiers"]
    expected = df.sort_values("tier1_capacity").eval("total_hit_tokens / total_prompt_tokens")
    np.testing.assert_allclose(line.get_ydata(), expected.to_numpy() * 100)
    assert list(line.get_xdata()) == [64, 128, 256]
    # the sweep drew it with the run, and no single-cache figure (the run has none)
    assert (out / "figures" / "tier_split.png").stat().st_size > 0
    assert not (out / "figures" / "hit_rate_vs_capacity.png").exists()
    single = df.assign(policy="LRU")
    with pytest.raises(NoTierPoints):
        tier_split_figure(single)


# --- the cost columns of a hierarchy (model= and hardware=) ------------------------------------


def test_cost_columns_charge_each_tier_its_medium(tmp_path: Path, small_trace: Path) -> None:  # noqa: F811
    from prefixsim.cost import prefill_cost, prefill_cost_tiers
    from prefixsim.hardware import load_hardware
    from prefixsim.models import load_model
    from test_cost_sweep import hardware_config, model_config

    model, hw = load_model("llama-3.1-8b"), load_hardware("h100")
    tiers = TiersConfig(
        order=["hbm", "ssd"],
        mode=["exclusive", "inclusive"],
        hbm=TierConfig(policy=["LRU"], capacity=[32], medium="hbm"),
        ssd=TierConfig(policy=["S3FIFO"], capacity=[512], medium="nvme"),
    )
    out = tmp_path / "run"
    kw = {"model": model_config("llama-3.1-8b"), "hardware": hardware_config("h100")}
    assert run_sweep(config(out, small_trace, tiers=tiers, **kw)).exit_code == 0
    df = pd.read_parquet(out / "results.parquet")
    pr = pd.read_parquet(out / "per_request.parquet")
    trace = prefixsim.load_trace(small_trace)
    assert len(df) == 2
    for row in df.to_dict("records"):
        r = replay_tiers(trace, json.loads(row["tiers"]), row["mode"])
        assert r.total_tier_hit_tokens[1] > 0  # hits from NVMe, or the test proves nothing
        want = prefill_cost_tiers(
            model, r.prompt_tokens, r.tier_hit_tokens, 512, hw, ["hbm", "nvme"]
        )
        totals = want.totals()
        for col in (
            "prefill_flops",
            "prefill_flops_saved",
            "reused_bytes",
            "est_prefill_seconds_no_cache",
            "est_prefill_seconds",
            "est_ttft_saved_seconds",
            "est_break_even_bandwidth",
        ):
            assert row[col] == totals[col], col
        # cache_bytes: the tiers' sum, 544 blocks of 64 MiB; no single cache_tier
        assert row["cache_bytes"] == (32 + 512) * 64 * 2**20
        assert row["hardware"] == "h100" and pd.isna(row["cache_tier"])
        # the single cache_tier rule (every hit from HBM) would give a different time
        single = prefill_cost(model, r.prompt_tokens, r.hit_tokens, 512, hw, "hbm").totals()
        assert row["est_prefill_seconds"] > single["est_prefill_seconds"]
        mine = pr[pr.point_id == row["point_id"]].sort_values("request")
        assert want.est_ttft_saved_seconds is not None
        np.testing.assert_array_equal(mine.est_ttft_saved_seconds, want.est_ttft_saved_seconds)
        np.testing.assert_array_equal(mine.prefill_flops_saved, want.prefill_flops_saved)
    # a model without hardware: bytes and FLOPs, no medium needed, no est_ columns
    plain = TiersConfig(order=["hbm"], hbm=TierConfig(policy=["LRU"], capacity=[32]))
    run_sweep(config(tmp_path / "b", small_trace, tiers=plain, model=kw["model"]))
    b = pd.read_parquet(tmp_path / "b" / "results.parquet").iloc[0]
    assert b["cache_bytes"] == 32 * 64 * 2**20 and pd.isna(b["est_prefill_seconds"])


def test_hardware_needs_every_tier_medium() -> None:
    with pytest.raises(prefixsim.ParameterError, match=r"tiers\.hbm\.medium=None.*needed"):
        plan_grid(compose("tiers=hbm_dram", "model=llama-3.1-8b", "tiers.hbm.medium=null"))
    # without a model nothing is costed, so no medium is needed
    assert plan_grid(compose("tiers=hbm_dram", "tiers.hbm.medium=null"))[0].cache_bytes is None
