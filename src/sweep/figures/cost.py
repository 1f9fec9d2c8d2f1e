"""Figures of the cost model: hit rate and prefill work saved against the cache size in bytes.

Self-contained (matplotlib's object API, no pyplot): each ``fig_*`` function takes the run's
``results.parquet`` as a DataFrame (and optionally ``traces.parquet``) and returns a
:class:`~matplotlib.figure.Figure`, or raises :class:`SkipCostFigure` with the reason when the
run has no model (its cost columns are null) or a single cache size. :func:`draw_cost_figures`
draws them all into a folder. Sizes go on a log2 axis labelled in binary units (``64 GiB``,
``1 TiB``) from ``cache_bytes``; every estimated quantity is labelled ``est.`` with the hardware
and cache tier it assumes (docs/cost-model.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

from prefixsim.units import format_size

from .data import SkipFigure
from .registry import FigureKind, register

PANEL_WIDTH_IN = 3.4
PANEL_HEIGHT_IN = 2.6
PANEL_KEYS = ("trace", "model", "kv_dtype", "block_size")
"""One panel per trace, model, KV dtype and block size (a figure per hit-rate question)."""


class SkipCostFigure(SkipFigure):
    """The run cannot show this figure (the message says why)."""


def _has_model(results: pd.DataFrame) -> bool:
    return "model" in results.columns and bool(results["model"].notna().any())


def cost_rows(results: pd.DataFrame) -> pd.DataFrame:
    """The points that have the cost columns (a model was given), sorted by cache size."""
    if "cache_bytes" not in results.columns or "model" not in results.columns:
        raise SkipCostFigure("results without cost columns (written before the cost model)")
    rows = results[results["model"].notna() & results["cache_bytes"].notna()]
    if rows.empty:
        raise SkipCostFigure("no model in the run (model=NAME adds the cost columns)")
    if rows["cache_bytes"].nunique() < 2:
        raise SkipCostFigure("one cache size in the run")
    rows = rows.copy()
    rows["cache_bytes"] = rows["cache_bytes"].astype("int64")
    return rows.sort_values("cache_bytes")


def _panels(rows: pd.DataFrame) -> list[tuple[dict[str, Any], pd.DataFrame]]:
    return [
        (dict(zip(PANEL_KEYS, key, strict=True)), group)
        for key, group in rows.groupby(list(PANEL_KEYS), sort=True)
    ]


def _figure(n_panels: int, n_cols: int = 1) -> tuple[Figure, list[Axes]]:
    fig = Figure(
        figsize=(PANEL_WIDTH_IN * n_cols, PANEL_HEIGHT_IN * n_panels + 0.3),
        layout="constrained",
    )
    axes = fig.subplots(n_panels, n_cols, squeeze=False)
    return fig, [ax for row in axes for ax in row]


def bytes_axis(ax: Axes, sizes: Sequence[int]) -> None:
    """Log2 x axis of cache sizes in bytes, ticks at the sizes of the run, in GiB/TiB."""
    ax.set_xscale("log", base=2)
    ticks = sorted({int(s) for s in sizes})
    ax.xaxis.set_major_locator(FixedLocator([float(t) for t in ticks]))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: format_size(round(v))))
    ax.set_xlabel("Cache size (1 GiB = 2$^{30}$ bytes)")
    if len(ticks) > 5:
        for label in ax.get_xticklabels():
            label.set_rotation(30)


def _title(panel: dict[str, Any], rows: pd.DataFrame) -> str:
    per_block = int(rows["kv_bytes_per_block"].iloc[0])
    return (
        f"{panel['trace']}: {panel['model']}\n{panel['kv_dtype']} KV, "
        f"{panel['block_size']}-token blocks of {format_size(per_block)}"
    )


def _policy_lines(ax: Axes, rows: pd.DataFrame, y: pd.Series) -> None:
    for policy, group in rows.groupby("policy", sort=True):
        ax.plot(group["cache_bytes"], y.loc[group.index], marker="o", ms=3, label=str(policy))


def fig_hit_rate_vs_cache_size(results: pd.DataFrame, traces: pd.DataFrame | None = None) -> Figure:
    """Token hit rate against the cache size in bytes, one line per policy, with the
    infinite-cache ceiling of ``traces`` (traces.parquet) when given."""
    rows = cost_rows(results)
    panels = _panels(rows)
    fig, axes = _figure(len(panels))
    for ax, (panel, group) in zip(axes, panels, strict=True):
        _policy_lines(ax, group, group["overall_hit_rate"])
        if traces is not None and not traces.empty:
            ceil = traces[
                (traces["trace"] == panel["trace"]) & (traces["block_size"] == panel["block_size"])
            ]
            if not ceil.empty:
                ax.axhline(
                    float(ceil["ceiling_hit_rate"].iloc[0]),
                    color="0.4",
                    ls="--",
                    lw=0.8,
                    label="infinite cache",
                )
        bytes_axis(ax, group["cache_bytes"].tolist())
        ax.set_ylabel("Token hit rate")
        ax.set_title(_title(panel, group), fontsize=8)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    return fig


def fig_prefill_saved_vs_cache_size(
    results: pd.DataFrame, traces: pd.DataFrame | None = None
) -> Figure:
    """Prefill work saved against the cache size in bytes: FLOPs saved (exact, share of the
    no-cache FLOPs) and, with hardware, the est. prefill time saved (share of the est. no-cache
    prefill time, transfer of the reused blocks included). ``traces`` is not used (the
    signature of every figure)."""
    rows = cost_rows(results)
    has_est = bool(rows["est_ttft_saved_seconds"].notna().any())
    panels = _panels(rows)
    fig, axes = _figure(len(panels), 2 if has_est else 1)
    n_cols = 2 if has_est else 1
    for i, (panel, group) in enumerate(panels):
        ax = axes[i * n_cols]
        flops = 100.0 * group["prefill_flops_saved"] / group["prefill_flops"]
        _policy_lines(ax, group, flops)
        bytes_axis(ax, group["cache_bytes"].tolist())
        ax.set_ylabel("Prefill FLOPs saved (%)")
        ax.set_title(_title(panel, group), fontsize=8)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        if has_est:
            ax = axes[i * n_cols + 1]
            est = group[group["est_ttft_saved_seconds"].notna()]
            share = 100.0 * est["est_ttft_saved_seconds"] / est["est_prefill_seconds_no_cache"]
            _policy_lines(ax, est, share)
            bytes_axis(ax, est["cache_bytes"].tolist())
            ax.axhline(0.0, color="0.4", lw=0.6)
            ax.set_ylabel("est. prefill time saved (%)")
            hw = ", ".join(sorted(set(est["hardware"].astype(str))))
            tier = ", ".join(sorted(set(est["cache_tier"].astype(str))))
            ax.set_title(f"est. (a model): {hw},\ncached blocks in {tier}", fontsize=8)
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7)
    return fig


register(
    FigureKind(
        "hit_rate_vs_cache_size",
        lambda data: fig_hit_rate_vs_cache_size(data.results, data.traces),
        order=80,
        applies=lambda data: _has_model(data.results),
    )
)
register(
    FigureKind(
        "prefill_saved_vs_cache_size",
        lambda data: fig_prefill_saved_vs_cache_size(data.results, data.traces),
        order=81,
        applies=lambda data: _has_model(data.results),
    )
)
