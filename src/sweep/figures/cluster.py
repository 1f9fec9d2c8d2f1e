"""Figures of cluster points (issue 14), drawn from ``results.parquet`` rows only.

Each ``fig_*`` function takes the results DataFrame (and optionally ``traces.parquet`` and the
run's :class:`~.style.Palette`) and returns a :class:`~matplotlib.figure.Figure` or raises
:class:`SkipFigure` with the reason. Rows without ``instances`` (single-cache points) are
ignored. One panel per trace, block size and policy, titled by what differs between them, on
one y scale; the per-instance ``capacity`` drawn is the one given, else the smallest of the
cluster points, named on the x axis. One colour and marker per router (the run's palette); a
router run with several parameter values gets another marker and line style per value.

``cluster_hit_rate``
    token hit rate (%) against the number of instances, one line per router, with the
    infinite-cache ceiling; dashed black, a single cache holding the cluster's whole memory
    (the one-instance points at ``instances * capacity``, when the run has them); a second row
    of panels with each router's share of it (%).
``cluster_ttft``
    estimated TTFT against the number of instances, p50 in the first row of panels and p99 in
    the second (one log y scale), one line per router. Skipped without the load model's
    columns.
``cluster_load_imbalance``
    max / mean busy time against the number of instances, one line per router. Skipped without
    the load model's columns.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from .axes import (
    draw_ceiling,
    format_capacity,
    instances_axis,
    is_binary,
    log_axis_plain,
    percent_axis,
)
from .capacity import ceiling_of, top
from .data import SkipFigure, titles_by_difference, trace_labels
from .legend import finish, layout
from .registry import FigureKind, register
from .series import Series, draw_series
from .style import MARKERS, Palette, styled

ROUTER_PARAMS = ("overlap_weight", "seed", "vnodes", "key_blocks")
ROUTER_ORDER = ("round_robin", "random", "session", "least_loaded", "kv_aware")
SINGLE_LABEL = "one cache of all memory"
VARIANT_LINESTYLES = ("-", ":", "-.", (0, (5, 1)))


def cluster_rows(results: pd.DataFrame) -> pd.DataFrame:
    """The cluster points of a results table (``instances`` not null)."""
    if "instances" not in results.columns:
        return results.iloc[0:0]
    return results[results["instances"].notna()]


def _capacity(rows: pd.DataFrame, capacity: int | None) -> int:
    if capacity is not None:
        if not (rows["capacity"] == capacity).any():
            raise SkipFigure(f"no cluster point at capacity {capacity}")
        return capacity
    multi = rows[rows["instances"] > 1]
    return int((multi if len(multi) else rows)["capacity"].min())


def router_label(row: pd.Series, varying: Sequence[str]) -> str:
    """``kv_aware`` or ``kv_aware overlap_weight=0.5`` (parameters that vary in the run)."""
    params = [f"{k}={row[k]:g}" for k in varying if k in row and pd.notna(row[k])]
    return " ".join([str(row["router"]), *params])


def _router_rank(label: str) -> tuple[int, str]:
    router = label.split()[0]
    return (ROUTER_ORDER.index(router) if router in ROUTER_ORDER else len(ROUTER_ORDER), label)


def _lines(rows: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """Router label -> its rows sorted by instances (one line each)."""
    present = [k for k in ROUTER_PARAMS if k in rows.columns]
    varying = [k for k in present if rows[k].dropna().nunique() > 1]
    labels = rows.apply(lambda r: router_label(r, varying), axis=1)
    out: dict[str, pd.DataFrame] = {}
    for label in sorted(set(labels), key=_router_rank):
        out[label] = rows[labels == label].sort_values("instances")
    return out


def _style(label: str, labels: Sequence[str], palette: Palette) -> dict[str, Any]:
    """The router's look (``palette``); the second, third... variant of one router (several
    parameter values) gets the next free marker and line style, in label order."""
    router = label.split()[0]
    look = palette.router(router)
    same = sorted((x for x in labels if x.split()[0] == router), key=_router_rank)
    k = same.index(label)
    if k:
        others = [m for m in MARKERS if m != look["marker"]]
        look.update(marker=others[(k - 1) % len(others)])
        look.update(linestyle=VARIANT_LINESTYLES[k % len(VARIANT_LINESTYLES)])
    return look


def _panels(rows: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """(title, rows) per trace, block size and policy; titles say what differs between the
    panels (a single panel: its trace and policy)."""
    keys = ["trace", "block_size", "policy"]
    groups = sorted(rows.groupby(keys, sort=True), key=lambda g: g[0])
    labels = trace_labels([str(t) for (t, _, _), _ in groups])
    fields = [
        {"trace": labels[str(t)], "block_size": f"block_size={int(b)}", "policy": str(p)}
        for (t, b, p), _ in groups
    ]
    if len(fields) == 1:
        titles = [f"{fields[0]['trace']}: {fields[0]['policy']}"]
    else:
        titles = titles_by_difference(fields)
    return [(t, g) for t, (_, g) in zip(titles, groups, strict=True)]


def _x_label(capacity: int) -> str:
    return f"Instances ({format_capacity(capacity, is_binary([capacity]))} blocks each)"


def _single_cache(results: pd.DataFrame, panel: pd.DataFrame, capacity: int) -> pd.Series:
    """Hit rate of one cache of ``instances * capacity`` blocks per instances count, from the
    one-instance points of the same trace, policy and block size (empty when absent)."""
    ones = cluster_rows(results)
    ones = ones[
        (ones["instances"] == 1)
        & (ones["trace"] == panel["trace"].iloc[0])
        & (ones["policy"] == panel["policy"].iloc[0])
        & (ones["block_size"] == panel["block_size"].iloc[0])
    ]
    by_capacity = ones.groupby("capacity")["overall_hit_rate"].first()
    out = {}
    for n in sorted(int(x) for x in panel["instances"].unique()):
        if n * capacity in by_capacity.index:
            out[n] = float(by_capacity[n * capacity])
    return pd.Series(out, dtype=float)


def _router_series(
    col: int, group: pd.DataFrame, column: str, scale: float, palette: Palette
) -> list[Series]:
    lines = _lines(group)
    return [
        Series(
            col,
            label,
            label,
            line["instances"].to_numpy(dtype=float),
            line[column].to_numpy(dtype=float) * scale,
            _style(label, list(lines), palette),
        )
        for label, line in lines.items()
    ]


@styled
def fig_cluster_hit_rate(
    results: pd.DataFrame,
    capacity: int | None = None,
    traces: pd.DataFrame | None = None,
    palette: Palette | None = None,
) -> Figure:
    capacity, at = _at_capacity(results, capacity)
    if at["instances"].nunique() < 2:
        raise SkipFigure("only one number of instances in the run")
    palette = palette or Palette.of(results)
    panels = _panels(at)
    singles = [_single_cache(results, g, capacity) for _, g in panels]
    with_share = any(len(s) > 1 for s in singles)
    n = len(panels)
    fig, axes = layout(n * (2 if with_share else 1), ncols=n, sharey="row")
    series: list[Series] = []
    shares: list[Series] = []
    ceilings: list[float | None] = []
    for col, ((_, group), single) in enumerate(zip(panels, singles, strict=True)):
        mine = _router_series(col, group, "overall_hit_rate", 100.0, palette)
        series += mine
        if len(single) > 1:
            reference = {"color": "black", "linestyle": "--", "linewidth": 0.8, "marker": None}
            x = single.index.to_numpy(dtype=float)
            y = single.to_numpy(dtype=float) * 100
            series.append(Series(col, SINGLE_LABEL, SINGLE_LABEL, x, y, reference))
            for s in mine:
                by_n = pd.Series(s.y / 100, index=s.x)
                share = (by_n / single.reindex(by_n.index.astype(int)).to_numpy()).dropna()
                x, y = share.index.to_numpy(dtype=float), share.to_numpy(dtype=float) * 100
                shares.append(Series(n + col, s.key, s.label, x, y, s.style))
        sha = str(group["trace_sha256"].iloc[0]) if "trace_sha256" in group.columns else ""
        c = ceiling_of(traces, sha, int(group["block_size"].iloc[0]))
        ceilings.append(None if c is None else c * 100)
    draw_series(axes, series + shares)
    for col, (title, group) in enumerate(panels):
        ax = axes[col]
        draw_ceiling(ax, ceilings[col])
        ax.set_title(title)
        instances_axis(ax, group["instances"].tolist(), _x_label(capacity))
        percent_axis(ax, "Token hit rate (%)", top(series, *ceilings))
        if with_share:
            share_ax = axes[n + col]
            share_ax.axhline(100.0, color="0.3", lw=0.5, zorder=1)
            instances_axis(share_ax, group["instances"].tolist(), _x_label(capacity))
            percent_axis(share_ax, "Share of one cache's hit rate (%)", max(100.0, top(shares)))
    return finish(fig, axes)


def _at_capacity(
    results: pd.DataFrame, capacity: int | None, needs: str | None = None
) -> tuple[int, pd.DataFrame]:
    """The cluster rows at ``capacity`` (the figure's default when None) and that capacity;
    with ``needs``, only rows where that load-model column is set. Raises SkipFigure when the
    run has none."""
    rows = cluster_rows(results)
    if rows.empty:
        raise SkipFigure("no cluster point (instances) in the run")
    if needs is not None:
        rows = _needs_load(rows, needs)
    capacity = _capacity(rows, capacity)
    return capacity, rows[rows["capacity"] == capacity]


def _needs_load(rows: pd.DataFrame, column: str) -> pd.DataFrame:
    if column not in rows.columns or rows[column].isna().all():
        raise SkipFigure(f"no {column} (the load model needs model=NAME)")
    return rows[rows[column].notna()]


@styled
def fig_cluster_ttft(
    results: pd.DataFrame,
    capacity: int | None = None,
    traces: pd.DataFrame | None = None,
    palette: Palette | None = None,
) -> Figure:
    """p50 est. TTFT in the first row of panels, p99 in the second, one y scale for both: the
    percentile is told by the row, so that each router keeps its colour, marker and line style
    of the run (a p50/p99 line style would take a variant's dotted line from it)."""
    capacity, at = _at_capacity(results, capacity, needs="est_ttft_p50_seconds")
    palette = palette or Palette.of(results)
    panels = _panels(at)
    n = len(panels)
    rows = (("est_ttft_p50_seconds", "p50"), ("est_ttft_p99_seconds", "p99"))
    most = max(len(_lines(group)) for _, group in panels)
    fig, axes = layout(2 * n, ncols=n, sharey=True, series=most)
    series: list[Series] = []
    for row, (column, _) in enumerate(rows):
        for col, (_, group) in enumerate(panels):
            series += _router_series(row * n + col, group, column, 1.0, palette)
    draw_series(axes, series)
    for row, (_, percentile) in enumerate(rows):
        for col, (title, group) in enumerate(panels):
            ax = axes[row * n + col]
            log_axis_plain(ax)
            ax.set_title(f"{title}, {percentile}")
            ax.set_ylabel(f"{percentile} est. TTFT (s)")
            instances_axis(ax, group["instances"].tolist(), _x_label(capacity))
    return finish(fig, axes)


@styled
def fig_cluster_load_imbalance(
    results: pd.DataFrame,
    capacity: int | None = None,
    traces: pd.DataFrame | None = None,
    palette: Palette | None = None,
) -> Figure:
    capacity, at = _at_capacity(results, capacity, needs="load_imbalance")
    palette = palette or Palette.of(results)
    panels = _panels(at)
    fig, axes = layout(len(panels), sharey=True)
    series: list[Series] = []
    for col, (_, group) in enumerate(panels):
        series += _router_series(col, group, "load_imbalance", 1.0, palette)
    draw_series(axes, series)
    lowest = min((float(np.nanmin(s.y)) for s in series if len(s.y)), default=1.0)
    for col, (title, group) in enumerate(panels):
        ax = axes[col]
        ax.axhline(1.0, color="0.3", lw=0.5, zorder=1)
        ax.set_title(title)
        ax.set_ylabel("Load imbalance (max / mean busy)")
        ax.set_ylim(bottom=min(0.95, 0.95 * lowest))
        instances_axis(ax, group["instances"].tolist(), _x_label(capacity))
    return finish(fig, axes)


def _kind(name: str, draw: Callable[..., Figure], order: int) -> FigureKind:
    """A cluster figure kind: it reads every row (cluster points are not single caches)."""
    return FigureKind(
        name,
        lambda data: draw(data.all_results, None, data.traces, data.palette),
        order,
        single_cache=False,
        applies=lambda data: not cluster_rows(data.all_results).empty,
    )


register(_kind("cluster_hit_rate", fig_cluster_hit_rate, 90))
register(_kind("cluster_ttft", fig_cluster_ttft, 91))
register(_kind("cluster_load_imbalance", fig_cluster_load_imbalance, 92))
