"""The cluster figures (``sweep/figures/cluster.py``), from hand-made results tables."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from layout_checks import looks_by_series, problems, run_problems
from sweep.figures.cluster import (
    SkipFigure,
    fig_cluster_hit_rate,
    fig_cluster_load_imbalance,
    fig_cluster_ttft,
)
from sweep.figures.style import style_context


def results(with_load: bool = True, big_singles: bool = True) -> pd.DataFrame:
    """kv_aware and round_robin on 1, 2, 4 instances of 100 blocks; with ``big_singles``, the
    one-instance points at 200 and 400 blocks (a cache holding the whole memory). Hit rates:
    round_robin 0.4 / n, kv_aware 0.4 + 0.05 * (n - 1); one cache of 100, 200, 400 blocks:
    0.4 (the one-instance cluster points), 0.5, 0.6."""
    rows = [{"instances": None, "router": None, "capacity": 100, "overall_hit_rate": 0.1}]
    for router in ("round_robin", "kv_aware"):
        for n in (1, 2, 4):
            rate = 0.4 / n if router == "round_robin" else 0.4 + 0.05 * (n - 1)
            rows.append(
                {"instances": n, "router": router, "capacity": 100, "overall_hit_rate": rate}
            )
    if big_singles:
        for c, rate in ((200, 0.5), (400, 0.6)):
            rows.append(
                {
                    "instances": 1,
                    "router": "round_robin",
                    "capacity": c,
                    "overall_hit_rate": rate,
                }
            )
    df = pd.DataFrame(rows)
    df["trace"], df["policy"], df["block_size"] = "t", "S3FIFO", 512
    df["overlap_weight"] = np.where(df["router"] == "kv_aware", 1.0, np.nan)
    n = df["instances"].astype(float)
    df["est_ttft_p50_seconds"] = 10.0 / n if with_load else np.nan
    df["est_ttft_p99_seconds"] = 100.0 / n if with_load else np.nan
    df["load_imbalance"] = 1.0 + 0.1 * n if with_load else np.nan
    df["instances"] = df["instances"].astype("Int64")
    return df


def ydata(fig, row: int = 0) -> dict[str, list[float]]:  # type: ignore[no-untyped-def]
    ax = fig.axes[row]
    return {ln.get_label(): list(ln.get_ydata()) for ln in ax.lines if ln.get_label()[0] != "_"}


def test_hit_rate_lines_and_share_of_one_cache() -> None:
    fig = fig_cluster_hit_rate(results())
    lines = ydata(fig)  # in percent
    assert lines["round_robin"] == pytest.approx([40, 20, 10])
    assert lines["kv_aware"] == pytest.approx([40, 45, 55])
    # One cache of n * 100 blocks at n = 1, 2, 4: 0.4, 0.5, 0.6.
    assert lines["one cache of all memory"] == pytest.approx([40, 50, 60])
    # Shares: round_robin 0.4/0.4, 0.2/0.5, 0.1/0.6; kv_aware 0.4/0.4, 0.45/0.5, 0.55/0.6.
    shares = ydata(fig, row=1)
    assert shares["round_robin"] == pytest.approx([100, 40, 100 / 6])
    assert shares["kv_aware"] == pytest.approx([100, 90, 55 / 0.6])
    assert fig.axes[0].get_ylim()[0] == fig.axes[1].get_ylim()[0] == 0
    assert fig.axes[0].get_xlabel() == "Instances (100 blocks each)"


def test_hit_rate_without_bigger_single_caches_has_no_share_row() -> None:
    fig = fig_cluster_hit_rate(results(big_singles=False))
    assert len(fig.axes) == 1
    assert "one cache of all memory" not in ydata(fig)


def test_ttft_and_imbalance() -> None:
    ttft = fig_cluster_ttft(results())
    p50, p99 = ydata(ttft, row=0), ydata(ttft, row=1)
    # per router: p50 = 10 / n and p99 = 100 / n at n = 1, 2, 4 (the same for both routers)
    assert p50["round_robin"] == pytest.approx([10, 5, 2.5])
    assert p99["round_robin"] == pytest.approx([100, 50, 25])
    assert p99["kv_aware (= round_robin)"] == pytest.approx([100, 50, 25])
    assert [ax.get_ylabel() for ax in ttft.axes] == ["p50 est. TTFT (s)", "p99 est. TTFT (s)"]
    assert ttft.axes[0].get_ylim() == ttft.axes[1].get_ylim()  # one scale: p99 reads above p50
    imbalance = ydata(fig_cluster_load_imbalance(results()))
    assert imbalance["kv_aware (= round_robin)"] == pytest.approx([1.1, 1.2, 1.4])


def test_a_router_variant_looks_the_same_in_every_cluster_figure() -> None:
    # issue 21: session key_blocks=2 was dotted in cluster_hit_rate and cluster_load_imbalance
    # and solid in cluster_ttft (p50 solid, p99 dashed took the line style from the series)
    rows = results()
    variants = []
    for k, scale in ((1, 1.0), (2, 0.8)):
        v = rows[rows["router"] == "round_robin"].assign(router="session", key_blocks=k)
        v["overall_hit_rate"] *= scale
        v["est_ttft_p50_seconds"] *= scale
        v["est_ttft_p99_seconds"] *= scale
        v["load_imbalance"] = 1.0 + 0.2 * k * v["instances"].astype(float)
        variants.append(v)
    rows = pd.concat([rows.assign(key_blocks=np.nan), *variants], ignore_index=True)
    figures = {
        f.__name__: f(rows)
        for f in (fig_cluster_hit_rate, fig_cluster_ttft, fig_cluster_load_imbalance)
    }
    styles = {
        name: {look[1] for look in looks_by_series(fig)["session key_blocks=2"]}
        for name, fig in figures.items()
    }
    assert [str(s).split(" ")[0] for s in styles["fig_cluster_ttft"]] == [":"]  # dotted
    assert styles["fig_cluster_ttft"] == styles["fig_cluster_hit_rate"]
    assert run_problems(figures, {"S3FIFO"}) == []
    for fig in figures.values():
        assert problems(fig, style_context()) == []


def test_skips_say_why(tmp_path: Path) -> None:
    single_only = results().iloc[:1]
    with pytest.raises(SkipFigure, match="no cluster point"):
        fig_cluster_hit_rate(single_only)
    with pytest.raises(SkipFigure, match="model=NAME"):
        fig_cluster_ttft(results(with_load=False))
    with pytest.raises(SkipFigure, match="model=NAME"):
        fig_cluster_load_imbalance(results(with_load=False))
    fig_cluster_hit_rate(results(with_load=False))  # hit rates need no load model
