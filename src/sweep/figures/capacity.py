"""Figures against capacity, one line per policy: ``hit_rate_vs_capacity`` and ``occupancy``."""

from __future__ import annotations

import logging

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from . import findings
from .axes import bytes_axis, capacity_axis, draw_ceiling, percent_axis
from .data import Panel, RunData, SkipFigure, choices, one_value, panels, select
from .legend import finish, layout
from .registry import FigureKind, register
from .series import Series, draw_series
from .style import Palette, styled

log = logging.getLogger("sweep.plot")


def policy_series(
    panel_list: list[Panel],
    results: pd.DataFrame,
    column: str,
    palette: Palette,
    x: str = "capacity",
) -> list[Series]:
    """One series per panel and policy (drawn with its :func:`choices` parameters); ``column``
    of ``results`` in percent (``final_cache_blocks``: of the capacity) against ``x``
    (``capacity`` or ``cache_bytes``)."""
    out = []
    chosen = choices(results)
    for i, panel in enumerate(panel_list):
        for policy, choice in chosen.items():
            rows = select(panel.rows, policy, choice)
            if rows.empty:
                continue
            y = rows[column].to_numpy(dtype=float)
            if column == "final_cache_blocks":
                y = y / rows["capacity"].to_numpy(dtype=float)
            xs = rows[x].to_numpy(dtype=float)
            out.append(Series(i, policy, choice.label, xs, y * 100, palette.policy(policy)))
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
        bytes_axis(ax, rows[x].tolist())
    else:
        capacity_axis(ax, rows[x].tolist(), block_size)


def ceiling_of(traces: pd.DataFrame | None, sha: str, block_size: int) -> float | None:
    """The infinite-cache hit rate (a fraction) of a trace at a block size, from
    ``traces.parquet``; None when it is not there."""
    if traces is None or traces.empty or not sha:
        return None
    rows = traces[(traces["trace_sha256"] == sha) & (traces["block_size"] == block_size)]
    if rows.empty or pd.isna(rows["ceiling_hit_rate"].iloc[0]):
        return None
    return float(rows["ceiling_hit_rate"].iloc[0])


def most(series: list[Series]) -> int:
    """The most series of any one panel."""
    counts: dict[int, int] = {}
    for s in series:
        counts[s.panel] = counts.get(s.panel, 0) + 1
    return max(counts.values(), default=0)


def top(series: list[Series], *more: float | None) -> float:
    """The highest value of ``series`` and ``more`` (what a percent axis must reach)."""
    values = [float(np.nanmax(s.y)) for s in series if len(s.y)]
    values += [float(m) for m in more if m is not None]
    return max(values, default=0.0)


@styled
def fig_hit_rate_vs_capacity(
    results: pd.DataFrame,
    traces: pd.DataFrame | None = None,
    capacity_axis: str = "blocks",
    palette: Palette | None = None,
) -> Figure:
    """Token hit rate against capacity (or the cache in bytes: ``capacity_axis="bytes"``), one
    line per policy, one panel per trace; the infinite-cache ceiling of ``traces``
    (traces.parquet) as a dashed grey line."""
    reason = one_value(results, "capacity", "capacity")
    if reason:
        raise SkipFigure(reason)
    palette = palette or Palette.of(results)
    panel_list = panels(results)
    one_size = results["block_size"].nunique() == 1
    x = x_axis(results, capacity_axis)
    series = policy_series(panel_list, results, "overall_hit_rate", palette, x)
    fig, axes = layout(len(panel_list), sharey=True, series=most(series))
    draw_series(axes, series)
    ceilings = [ceiling_of(traces, p.trace_sha256, p.block_size) for p in panel_list]
    percents = [None if c is None else c * 100 for c in ceilings]
    for ax, panel, ceiling in zip(axes, panel_list, percents, strict=True):
        draw_ceiling(ax, ceiling)
        _axis(ax, panel.rows, x, panel.block_size if one_size else None)
        percent_axis(ax, "Token hit rate (%)", top(series, *percents))
        ax.set_title(panel.title)
    return finish(fig, axes)


@styled
def fig_occupancy(
    results: pd.DataFrame, capacity_axis: str = "blocks", palette: Palette | None = None
) -> Figure:
    """Final resident blocks as a share of the capacity, one line per policy."""
    reason = one_value(results, "capacity", "capacity")
    if reason:
        raise SkipFigure(reason)
    palette = palette or Palette.of(results)
    panel_list = panels(results)
    x = x_axis(results, capacity_axis)
    series = policy_series(panel_list, results, "final_cache_blocks", palette, x)
    fig, axes = layout(len(panel_list), sharey=True, series=most(series))
    draw_series(axes, series)
    for ax, panel in zip(axes, panel_list, strict=True):
        _axis(ax, panel.rows, x, None)
        percent_axis(ax, "Final occupancy (% of capacity)", max(100.0, top(series)))
        ax.set_title(panel.title)
    return finish(fig, axes)


def _draw_hit_rate(data: RunData) -> Figure:
    return fig_hit_rate_vs_capacity(data.results, data.traces, data.capacity_axis, data.palette)


def _draw_occupancy(data: RunData) -> Figure:
    return fig_occupancy(data.results, data.capacity_axis, data.palette)


def drawn(data: RunData, x: str) -> findings.Drawn:
    """The run's rows split for the notes (once per run and x axis)."""
    result: findings.Drawn = data.once(f"drawn:{x}", lambda: findings.split(data.results, x))
    return result


def _hit_rate_notes(data: RunData) -> list[str]:
    d = drawn(data, x_axis(data.results, data.capacity_axis))
    return findings.identical(d) + findings.falls_below(d)


def _occupancy_notes(data: RunData) -> list[str]:
    return findings.underfull(drawn(data, x_axis(data.results, data.capacity_axis)))


register(FigureKind("hit_rate_vs_capacity", _draw_hit_rate, order=10, notes=_hit_rate_notes))
register(FigureKind("occupancy", _draw_occupancy, order=40, notes=_occupancy_notes))
