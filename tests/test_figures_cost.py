"""The cost model's figures, drawn from results written by a real sweep with a model."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

import prefixsim
from conftest import bundled_head
from prefixsim.hardware import load_hardware
from prefixsim.models import load_model
from sweep import ExecutorConfig, SweepConfig, run_sweep
from sweep.config import HardwareConfig, ModelConfig, PlotConfig
from sweep.figures import draw_figures
from sweep.figures.cost import (
    SkipCostFigure,
    fig_hit_rate_vs_cache_size,
    fig_prefill_saved_vs_cache_size,
)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("cost_figures")
    trace = bundled_head(base, 600)
    cfg = SweepConfig(
        trace=[str(trace)],
        policy=["S3FIFO", "LRU"],
        cache_size=["1GiB", "2GiB", "4GiB"],
        model=ModelConfig(**load_model("llama-3.1-8b").to_dict()),
        hardware=HardwareConfig(**load_hardware("h100").to_dict()),
        cache_tier="nvme",
        out_dir=str(base / "run"),
        progress=False,
        plot=False,
        executor=ExecutorConfig(n_jobs=1),
    )
    assert run_sweep(cfg).exit_code == 0
    return base / "run"


def test_axes_in_bytes_and_est_labels(run_dir: Path) -> None:
    results = pd.read_parquet(run_dir / "results.parquet")
    traces = pd.read_parquet(run_dir / "traces.parquet")
    fig = fig_hit_rate_vs_cache_size(results, traces)
    ax = fig.axes[0]
    fig.canvas.draw()  # tick labels are formatted on draw
    assert [t.get_text() for t in ax.get_xticklabels()] == ["1GiB", "2GiB", "4GiB"]
    assert ax.get_xlabel() == "Cache size (bytes)"
    assert ax.get_ylabel() == "Token hit rate (%)"
    assert {line.get_label() for line in ax.get_lines()} >= {"S3FIFO", "LRU", "infinite cache"}
    # the plotted hit rates are the results' own, in percent
    lru = results[results.policy == "LRU"].sort_values("cache_bytes")
    line = next(ln for ln in ax.get_lines() if ln.get_label() == "LRU")
    assert list(line.get_ydata()) == pytest.approx((lru.overall_hit_rate * 100).tolist())
    assert ax.get_ylim()[0] == 0

    fig = fig_prefill_saved_vs_cache_size(results)
    flops_ax, est_ax = fig.axes[:2]
    assert "FLOPs saved" in flops_ax.get_ylabel()
    assert est_ax.get_ylabel().startswith("est.")
    assert "h100" in est_ax.get_title() and "nvme" in est_ax.get_title()
    line = next(ln for ln in flops_ax.get_lines() if ln.get_label() == "LRU")
    expected = (100 * lru.prefill_flops_saved / lru.prefill_flops).tolist()
    assert list(line.get_ydata()) == pytest.approx(expected)


def test_the_cost_figures_are_drawn_with_the_run(run_dir: Path, tmp_path: Path) -> None:
    report = draw_figures(run_dir, tmp_path / "figs", formats=("png",), force=True)
    cost = {"hit_rate_vs_cache_size", "prefill_saved_vs_cache_size"}
    assert cost <= set(report.drawn), report.skipped
    written = [p for p in report.written if p.stem in cost]
    assert sorted(p.name for p in written) == [
        "hit_rate_vs_cache_size.png",
        "prefill_saved_vs_cache_size.png",
    ]
    assert all(p.stat().st_size > 1000 for p in written)


def test_skipped_without_a_model(run_dir: Path, tmp_path: Path) -> None:
    results = pd.read_parquet(run_dir / "results.parquet")
    no_model = results.assign(model=None)
    with pytest.raises(SkipCostFigure, match="no model"):
        fig_hit_rate_vs_cache_size(no_model)
    for draw in (fig_hit_rate_vs_cache_size, fig_prefill_saved_vs_cache_size):
        with pytest.raises(SkipCostFigure, match="one cache size in the run"):
            draw(results.head(1))


def test_capacity_axis_in_bytes(run_dir: Path) -> None:
    # plot.capacity_axis=bytes: the capacity figures are drawn against cache_bytes (with a
    # model), labelled in binary units; without cache_bytes they keep blocks.
    from sweep.figures.capacity import fig_hit_rate_vs_capacity
    from sweep.figures.style import format_capacity

    results = pd.read_parquet(run_dir / "results.parquet")
    fig = fig_hit_rate_vs_capacity(results, None, "bytes")
    ax = fig.axes[0]
    assert ax.get_xlabel() == "Cache size (bytes)"
    lru = results[results.policy == "LRU"].sort_values("cache_bytes")
    line = next(ln for ln in ax.get_lines() if ln.get_label() == "LRU")
    assert list(line.get_xdata()) == lru.cache_bytes.astype(float).tolist()
    blocks = fig_hit_rate_vs_capacity(results.assign(cache_bytes=None), None, "bytes")
    assert blocks.axes[0].get_xlabel() == "Capacity (blocks)"
    assert format_capacity(2.0**40, True, "B") == "1TiB"  # not 1024GiB
    with pytest.raises(prefixsim.ParameterError, match=r"plot\.capacity_axis"):
        SweepConfig(plot=PlotConfig(capacity_axis="GiB"))


def test_one_colour_per_policy_in_every_figure(run_dir: Path) -> None:
    """A policy has one colour in every figure of a run, two policies never share one (the
    cost figures used matplotlib's cycle: S3FIFO was orange there and navy elsewhere)."""
    from layout_checks import colours_by_policy
    from sweep.figures import RunData, SkipFigure, figure_kinds
    from sweep.figures.data import load_results
    from sweep.figures.style import style_context

    data = RunData(run_dir, load_results(run_dir))
    colours: dict[str, set[tuple[float, ...]]] = {}
    drawn = []
    with style_context():
        for kind in figure_kinds():
            if kind.applies is not None and not kind.applies(data):
                continue
            try:
                fig = kind.draw(data)
            except SkipFigure:
                continue
            drawn.append(kind.name)
            for policy, seen in colours_by_policy(fig, ["S3FIFO", "LRU"]).items():
                colours.setdefault(policy, set()).update(seen)
    assert {"hit_rate_vs_capacity", "hit_rate_vs_cache_size", "prefill_saved_vs_cache_size"} <= (
        set(drawn)
    )
    assert {p: len(c) for p, c in colours.items()} == {"S3FIFO": 1, "LRU": 1}
    assert colours["S3FIFO"] != colours["LRU"]
