"""The sweep's semantics keys: ``semantics=spec,vllm,sglang``, ``unhashed_free``,
``cache_output_blocks``: the points they make, their keys, their columns, their refusals (one
line, exit 2, no run folder), and rows equal to ``prefixsim.replay`` under each semantics."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import prefixsim
from cli_checks import one_line_exit_2, run_module
from conftest import bundled_head
from prefixsim import Semantics
from sweep import ExecutorConfig, SweepConfig, run_sweep
from sweep.config import GRID_KEYS
from sweep.grid import plan_grid, point_key, point_keys
from sweep.semantics import figure_policies


def config(out_dir: Path | str = "unused", **kw: object) -> SweepConfig:
    kw.setdefault("trace", ["conversation"])
    return SweepConfig(
        out_dir=str(out_dir), progress=False, executor=ExecutorConfig(n_jobs=1), plot=False, **kw
    )


def test_keys_are_grid_keys() -> None:
    assert {"semantics", "unhashed_free", "cache_output_blocks"} <= set(GRID_KEYS)


def test_each_option_multiplies_only_the_semantics_that_have_it() -> None:
    cfg = config(
        policy=["LRU"],
        capacity=[64],
        semantics=["spec", "vllm", "sglang"],
        unhashed_free=["front", "back"],
        cache_output_blocks=[False, True],
    )
    got = [gp.semantics for gp in plan_grid(cfg)]
    assert got == [
        Semantics("spec"),
        Semantics("vllm", "front", False),
        Semantics("vllm", "front", True),
        Semantics("vllm", "back", False),
        Semantics("vllm", "back", True),
        Semantics("sglang", cache_output_blocks=False),
        Semantics("sglang", cache_output_blocks=True),
    ]


def test_spec_keys_are_todays_and_engine_keys_differ() -> None:
    cfg = config(policy=["LRU", "S3FIFO"], capacity=[64, 128], semantics=["spec", "vllm"])
    grid = plan_grid(cfg)
    shas = {"conversation": "0" * 64}
    keys = [k for _, k in point_keys(grid, shas)]
    # the template path equals the plain digest, and a spec point's digest is the one every
    # run before the semantics gave it (no semantics in its document)
    for gp, key in zip(grid, keys, strict=True):
        assert key == point_key("0" * 64, gp.params, gp.block_size, semantics=gp.semantics)
        if gp.semantics == Semantics():
            assert key == point_key("0" * 64, gp.params, gp.block_size)
    assert len(set(keys)) == len(keys) == 8


@pytest.mark.parametrize(
    ("override", "fragment"),
    [
        (["semantics=vLLM"], "invalid semantics='vLLM': expected one of spec, vllm, sglang; "
         "did you mean vllm?"),
        (["unhashed_free=back"], "invalid unhashed_free='back': applies to semantics=vllm only"),
        (["semantics=sglang", "unhashed_free=middle"], "invalid unhashed_free='middle': "
         "expected one of front, back"),
        (["cache_output_blocks=true"], "invalid cache_output_blocks=True: applies to "
         "semantics=vllm or sglang"),
        (["semantics=vllm", "tiers=hbm_dram", "tiers.hbm.capacity=20"],
         "line 7 of conversation needs 46 blocks"),
        (["semantics=vllm", "policy=LRU", "capacity=20"], "line 7 of conversation needs 46 blocks"),
        (["semantics=vllm", "policy=LRU", "capacity=1"], "reserves block 0 as the null block"),
    ],
)  # fmt: skip
def test_refused_at_planning_in_one_line(
    tmp_path: Path, override: list[str], fragment: str
) -> None:
    out = tmp_path / "run"
    proc = run_module("sweep", *override, f"out_dir={out}", "plot=false")
    one_line_exit_2(proc, fragment)
    assert not out.exists()


def test_rows_are_the_replays_under_each_semantics(tmp_path: Path) -> None:
    trace = bundled_head(tmp_path, 300)
    cfg = config(
        tmp_path / "run",
        trace=[str(trace)],
        policy=["LRU_TAIL_FIRST"],
        capacity=[256, 1024],
        semantics=["spec", "vllm", "sglang"],
        unhashed_free=["front", "back"],
    )
    run_sweep(cfg)
    rows = pd.read_parquet(tmp_path / "run" / "results.parquet")
    per = pd.read_parquet(tmp_path / "run" / "per_request.parquet")
    assert len(rows) == 8
    for row in rows.itertuples():
        sem = Semantics(row.semantics, row.unhashed_free, bool(row.cache_output_blocks))
        want = prefixsim.replay(str(trace), "LRU_TAIL_FIRST", int(row.capacity), semantics=sem)
        assert row.total_hit_tokens == want.total_hit_tokens
        assert row.final_cache_blocks == want.final_cache_blocks
        assert row.block_accesses == want.counters["block_accesses"]
        got = per[per["point_id"] == row.point_id]["hit_tokens"].to_numpy()
        np.testing.assert_array_equal(got, want.hit_tokens)
        assert pd.isna(row.temporary_blocks) == (sem.name == "spec")


def test_figures_draw_each_semantics_as_a_series() -> None:
    df = pd.DataFrame(
        {
            "policy": ["LRU", "LRU", "LRU", "S3FIFO"],
            "semantics": ["spec", "vllm", "vllm", None],
            "unhashed_free": ["front", "front", "back", None],
            "cache_output_blocks": [False, True, False, None],
        }
    )
    got = figure_policies(df)["policy"].tolist()
    assert got == ["LRU", "LRU@vllm[outputs]", "LRU@vllm[back]", "S3FIFO"]
    spec_only = df.iloc[[0, 3]]
    assert figure_policies(spec_only) is spec_only


def test_hierarchy_and_cluster_rows_under_each_semantics(tmp_path: Path) -> None:
    """A hierarchy's rows (and a kv_aware cluster's) carry the semantics they ran under and
    equal ``replay_tiers`` (``replay_cluster``) under it, per request."""
    from prefixsim.cluster import replay_cluster
    from prefixsim.tiers import make_tier, replay_tiers
    from sweep.config import TierConfig, TiersConfig

    trace = bundled_head(tmp_path, 300)
    tiers = TiersConfig(
        name="t",
        order=["hbm", "dram"],
        hbm=TierConfig(policy=["LRU"], capacity=[256]),
        dram=TierConfig(policy=["S3FIFO"], capacity=[1024]),
    )
    names = ["spec", "vllm", "sglang"]
    run_sweep(config(tmp_path / "t", trace=[str(trace)], tiers=tiers, semantics=names))
    rows = pd.read_parquet(tmp_path / "t" / "results.parquet")
    per = pd.read_parquet(tmp_path / "t" / "per_request.parquet")
    assert sorted(rows.semantics) == sorted(names)
    hierarchy = [make_tier("LRU", 256, name="hbm"), make_tier("S3FIFO", 1024, name="dram")]
    for row in rows.itertuples():
        want = replay_tiers(str(trace), hierarchy, semantics=row.semantics)
        assert row.total_hit_tokens == want.total_hit_tokens
        assert row.tier1_hit_tokens == want.total_tier_hit_tokens[1]
        got = per[per["point_id"] == row.point_id]["hit_tokens"].to_numpy()
        np.testing.assert_array_equal(got, want.hit_tokens)
        assert pd.isna(row.temporary_blocks) == (row.semantics == "spec")
    cluster = config(tmp_path / "c", trace=[str(trace)], policy=["LRU"], capacity=[256],
                     instances=[2], router=["kv_aware"], model="llama-3.1-8b", hardware="h100",
                     semantics=["vllm"])  # fmt: skip
    run_sweep(cluster)
    (row,) = pd.read_parquet(tmp_path / "c" / "results.parquet").itertuples()
    want = replay_cluster(str(trace), 2, "kv_aware", "LRU", 256, model="llama-3.1-8b",
                          hardware="h100", semantics="vllm")  # fmt: skip
    assert (row.semantics, row.total_hit_tokens) == ("vllm", want.total_hit_tokens)
