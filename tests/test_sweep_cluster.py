"""Cluster points in the sweep: ``instances`` and ``router`` as grid keys, their columns."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import prefixsim
from conftest import bundled_head
from prefixsim.cluster import replay_cluster
from sweep import ExecutorConfig, PlanError, SweepConfig, run_sweep
from sweep.cluster import RESULT_FIELDS
from sweep.grid import plan_grid, point_key


@pytest.fixture(scope="module")
def small_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The first 800 requests of the bundled trace."""
    return bundled_head(tmp_path_factory.mktemp("traces"), 800)


def cfg(**kw: object) -> SweepConfig:
    kw.setdefault("policy", ["S3FIFO"])
    kw.setdefault("capacity", [256])
    kw.setdefault("plot", False)
    return SweepConfig(progress=False, executor=ExecutorConfig(n_jobs=1), **kw)  # type: ignore[arg-type]


def test_no_cluster_keys_no_cluster_points() -> None:
    points = plan_grid(cfg(policy=["S3FIFO", "LRU"]))
    assert [p.cluster for p in points] == [None, None]


def test_router_parameters_multiply_only_their_router() -> None:
    # 2 instance counts x (round_robin + kv_aware at 2 weights + random at 3 seeds) = 12.
    points = plan_grid(
        cfg(
            instances=[2, 4],
            router=["round_robin", "kv_aware", "random"],
            overlap_weight=[0.5, 1.0],
            seed=[1, 2, 3],
            model="llama-3.1-8b",
        )
    )
    routers = [p.cluster.router.to_dict() for p in points if p.cluster is not None]
    assert len(points) == 12
    assert routers.count({"router": "round_robin"}) == 2
    assert routers.count({"router": "kv_aware", "overlap_weight": 0.5}) == 2
    assert sum(r["router"] == "random" for r in routers) == 6
    assert {p.cluster.instances for p in points if p.cluster is not None} == {2, 4}


def test_defaults_when_only_one_key_is_given() -> None:
    (only,) = plan_grid(cfg(router=["session"]))
    assert only.cluster is not None and only.cluster.instances == 1
    (rr,) = plan_grid(cfg(instances=[3]))
    assert rr.cluster is not None and rr.cluster.router.router == "round_robin"
    # no model or hardware given: the documented default load model, so TTFT columns exist
    assert rr.cluster.load is not None
    assert (rr.cluster.load.model.name, rr.cluster.load.hardware.name) == ("llama-3.1-8b", "h100")


def test_a_router_that_needs_the_load_model_gets_the_default_one() -> None:
    # The command gives no model: kv_aware runs with DEFAULT_LOAD_MODEL, and a model
    # that is given is used instead.
    (default,) = plan_grid(cfg(instances=[2], router=["kv_aware"]))
    assert default.cluster is not None and default.cluster.load is not None
    assert default.cluster.load.model.name == "llama-3.1-8b"
    (given,) = plan_grid(cfg(instances=[2], router=["kv_aware"], model="llama-3.1-70b"))
    assert given.cluster is not None and given.cluster.load is not None
    assert given.cluster.load.model.name == "llama-3.1-70b"
    with pytest.raises(PlanError, match="instances=0"):
        plan_grid(cfg(instances=[0], router=["round_robin"]))
    with pytest.raises(PlanError, match="router='nope'"):
        plan_grid(cfg(instances=[2], router=["nope"]))


def test_single_cache_point_keys_are_unchanged() -> None:
    # A single-cache point keeps the key it had before clusters existed; a cluster is part of
    # a cluster point's key.
    (single,) = plan_grid(cfg())
    (cluster,) = plan_grid(cfg(instances=[1], router=["round_robin"]))
    sha = "a" * 64
    # the key as it was before clusters (and models) existed, derived here independently
    doc = {"trace_sha256": sha, "block_size": 512, "policy": "S3FIFO", "capacity": 256}
    doc.update(small_ratio=0.1, max_freq=3, ghost_freq=0)
    canonical = json.dumps(doc, sort_keys=True, separators=(",", ":"))
    assert point_key(sha, single.params, 512) == hashlib.sha256(canonical.encode()).hexdigest()[:20]
    assert point_key(sha, cluster.params, 512, cluster=cluster.cluster) != point_key(
        sha, single.params, 512
    )


def test_sweep_writes_the_cluster_columns(small_trace: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    summary = run_sweep(
        cfg(
            trace=[str(small_trace)],
            out_dir=str(out),
            instances=[1, 4],
            router=["round_robin", "kv_aware"],
            model="llama-3.1-8b",
        )
    )
    assert summary.exit_code == 0
    df = pd.read_parquet(out / "results.parquet")
    assert {f.name for f in RESULT_FIELDS} <= set(df.columns)
    assert len(df) == 4
    trace = prefixsim.load_trace(small_trace)
    per_request = pd.read_parquet(out / "per_request.parquet")
    for row in df.itertuples():
        r = replay_cluster(
            trace,
            int(row.instances),
            str(row.router),
            "S3FIFO",
            256,
            model="llama-3.1-8b",
            hardware="h100",
        )
        assert row.total_hit_tokens == r.total_hit_tokens
        assert row.block_hits == r.counters["block_hits"]
        assert row.est_ttft_p99_seconds == r.ttft_percentile(99)
        assert row.load_imbalance == r.load_imbalance
        assert row.load_model == "llama-3.1-8b" and row.load_hardware == "h100"
        hits = per_request[per_request.point_id == row.point_id].hit_tokens.to_numpy()
        np.testing.assert_array_equal(hits, r.hit_tokens)
    # One instance: the single-cache numbers whatever the router.
    ones = df[df.instances == 1]
    single = prefixsim.replay(trace, "S3FIFO", 256)
    assert (ones.total_hit_tokens == single.total_hit_tokens).all()
    assert (ones.load_imbalance == 1.0).all()


def test_cli_refuses_an_unknown_router(small_trace: Path, tmp_path: Path) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "sweep",
            f"trace={small_trace}",
            "instances=2",
            "router=round_robin,kv_awar",
            f"out_dir={tmp_path / 'out'}",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2, proc.stderr
    assert "router='kv_awar'" in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_a_run_with_cluster_points_draws_the_cluster_figures(
    small_trace: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    kw = {"instances": [1, 2], "router": ["round_robin"], "save_per_request": False}
    summary = run_sweep(cfg(trace=[str(small_trace)], out_dir=str(out), plot=True, **kw))
    assert summary.exit_code == 0
    # No model given: the default load model, so TTFT and imbalance are drawn too; the
    # single-cache figures would mix the cluster points and are not drawn.
    drawn = sorted(p.stem for p in (out / "figures").glob("*.png"))
    assert drawn == ["cluster_hit_rate", "cluster_load_imbalance", "cluster_ttft"]
