"""Figures against capacity, one line per policy: ``hit_rate_vs_capacity`` and ``occupancy``."""

from __future__ import annotations

import logging

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from .data import Panel, RunData, SkipFigure, choices, one_value, panels, select
from .registry import FigureKind, register
from .style import (
    CEILING_GID,
    Series,
    capacity_axis,
    draw_series,
    figure_legend,
    layout,
    policy_style,
    styled,
)

log = logging.getLogger("sweep.plot")


def _policy_series(
    panel_list: list[Panel], results: pd.DataFrame, column: str, x: str = "capacity"
) -> list[Series]:
    """One series per panel and policy (drawn with its :func:`choices` parameters); ``column``
    of ``results`` in percent (occupancy: of the capacity) against ``x`` (``capacity`` or
    ``cache_bytes``)."""
    out = []
    for i, panel in enumerate(panel_list):
        for policy, choice in choices(results).items():
            rows = select(panel.rows, policy, choice)
            if rows.empty:
                continue
            y = rows[column].to_numpy(dtype=float)
            if column == "final_cache_blocks":
                y = y / rows["capacity"].to_numpy(dtype=float)
            out.append(
                Series(
                    i,
                    policy,
                    choice.label,
                    rows[x].to_numpy(dtype=float),
                    y * 100,
                    policy_style(policy),
                )
            )
    return out


def x_axis(results: pd.DataFrame, capacity_axis: str = "blocks") -> str:
    """The column on the capacity axis: ``cache_bytes`` for ``capacity_axis="bytes"`` when
    every point has it (a model was given), else ``capacity`` (logged)."""
    if capacity_axis != "bytes":
        return "capacity"
    if "cache_bytes" in results.columns and bool(results["cache_bytes"].notna().all()):
        return "cache_bytes"
    log.info("plot.capacity_axis=bytes needs a model (cache_bytes): capacity in blocks drawn")
    return "capacity"


def _axis(ax: Axes, rows: pd.DataFrame, x: str, block_size: int | None) -> None:
    if x == "cache_bytes":
        capacity_axis(ax, rows[x].tolist(), None, label="Cache size (bytes)", unit="B")
    else:
        capacity_axis(ax, rows[x].tolist(), block_size)


@styled
def fig_hit_rate_vs_capacity(
    results: pd.DataFrame, traces: pd.DataFrame | None = None, capacity_axis: str = "blocks"
) -> Figure:
    """Token hit rate against capacity (or the cache in bytes: ``capacity_axis="bytes"``), one
    line per policy, one panel per trace; the infinite-cache ceiling of ``traces``
    (traces.parquet) as a dashed grey line."""
    reason = one_value(results, "capacity", "capacity")
    if reason:
        raise SkipFigure(reason)
    panel_list = panels(results)
    one_size = results["block_size"].nunique() == 1
    x = x_axis(results, capacity_axis)
    fig, axes = layout(len(panel_list))
    draw_series(axes, _policy_series(panel_list, results, "overall_hit_rate", x))
    for ax, panel in zip(axes, panel_list, strict=True):
        ceiling = _ceiling(traces, panel)
        if ceiling is not None:
            ax.axhline(
                ceiling * 100,
                color="0.45",
                linestyle=(0, (5, 2)),
                linewidth=0.9,
                label="infinite cache",
                gid=CEILING_GID,
                zorder=1,
            )
        _axis(ax, panel.rows, x, panel.block_size if one_size else None)
        ax.set_ylabel("Token hit rate (%)")
        ax.set_ylim(bottom=0)
        ax.set_title(panel.title)
    figure_legend(fig, axes)
    return fig


def _ceiling(traces: pd.DataFrame | None, panel: Panel) -> float | None:
    if traces is None or traces.empty:
        return None
    rows = traces[
        (traces["trace_sha256"] == panel.trace_sha256) & (traces["block_size"] == panel.block_size)
    ]
    if rows.empty or pd.isna(rows["ceiling_hit_rate"].iloc[0]):
        return None
    return float(rows["ceiling_hit_rate"].iloc[0])


@styled
def fig_occupancy(results: pd.DataFrame, capacity_axis: str = "blocks") -> Figure:
    """Final resident blocks as a share of the capacity, one line per policy."""
    reason = one_value(results, "capacity", "capacity")
    if reason:
        raise SkipFigure(reason)
    panel_list = panels(results)
    x = x_axis(results, capacity_axis)
    fig, axes = layout(len(panel_list))
    series = _policy_series(panel_list, results, "final_cache_blocks", x)
    draw_series(axes, series)
    top = max((float(np.max(s.y)) for s in series), default=100.0)
    for ax, panel in zip(axes, panel_list, strict=True):
        _axis(ax, panel.rows, x, None)
        ax.set_ylabel("Final occupancy (% of capacity)")
        ax.set_ylim(0, max(105.0, top * 1.05))
        ax.set_title(panel.title)
    figure_legend(fig, axes)
    return fig


def _draw_hit_rate(data: RunData) -> Figure:
    return fig_hit_rate_vs_capacity(data.results, data.traces, data.capacity_axis)


def _draw_occupancy(data: RunData) -> Figure:
    return fig_occupancy(data.results, data.capacity_axis)


register(FigureKind("hit_rate_vs_capacity", _draw_hit_rate, order=10))
register(FigureKind("occupancy", _draw_occupancy, order=40))
