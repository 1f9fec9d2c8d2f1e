"""Figures of cluster points (issue 14), drawn from ``results.parquet`` rows only.

Self-contained: each ``fig_*`` function takes the results DataFrame and returns a matplotlib
:class:`~matplotlib.figure.Figure` (object-oriented API, no pyplot) or raises
:class:`SkipFigure` with the reason; :func:`draw_cluster_figures` writes them all into a folder.
Rows without ``instances`` (single-cache points) are ignored. One panel per trace and policy;
the per-instance ``capacity`` drawn is the one given, else the smallest of the cluster points.

``cluster_hit_rate``
    token hit rate against the number of instances, one line per router; dashed, a single cache
    holding the cluster's whole memory (the one-instance points at ``instances * capacity``,
    when the run has them); a second row of panels with each router's share of it.
``cluster_ttft``
    p50 (solid) and p99 (dashed) estimated TTFT against the number of instances, one colour per
    router (log axis). Skipped without the load model's columns.
``cluster_load_imbalance``
    max / mean busy time against the number of instances, one line per router. Skipped without
    the load model's columns.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import matplotlib as mpl
import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from .data import SkipFigure
from .registry import FigureKind, register

ROUTER_PARAMS = ("overlap_weight", "seed", "vnodes", "key_blocks")
_TAB10 = [mpl.colormaps["tab10"](i) for i in range(10)]
ROUTER_STYLES: dict[str, tuple[Any, str]] = {
    # fixed so that a router keeps its colour and marker in every figure of every run
    "round_robin": (_TAB10[0], "o"),
    "random": (_TAB10[1], "s"),
    "session": (_TAB10[2], "^"),
    "least_loaded": (_TAB10[3], "v"),
    "kv_aware": (_TAB10[4], "D"),
}
PANEL_W, PANEL_H = 2.4, 1.9


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


def _lines(rows: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """Router label -> its rows sorted by instances (one line each)."""
    present = [k for k in ROUTER_PARAMS if k in rows.columns]
    varying = [k for k in present if rows[k].dropna().nunique() > 1]
    labels = rows.apply(lambda r: router_label(r, varying), axis=1)
    out: dict[str, pd.DataFrame] = {}
    for label in sorted(set(labels), key=lambda s: (list(ROUTER_STYLES).index(s.split()[0]), s)):
        out[label] = rows[labels == label].sort_values("instances")
    return out


_VARIANTS: tuple[dict[str, Any], ...] = (
    {},
    {"ls": ":", "mfc": "none"},
    {"ls": "-.", "mfc": "white"},
    {"ls": (0, (5, 1))},
)


def _style(label: str, labels: Sequence[str]) -> dict[str, Any]:
    """The router's colour and marker; variants of one router (several parameter values)
    differ by line style and marker fill, in label order."""
    router = label.split()[0]
    colour, marker = ROUTER_STYLES.get(router, (_TAB10[(5 + len(router)) % 10], "x"))
    same = [x for x in labels if x.split()[0] == router]
    return {"color": colour, "marker": marker, **_VARIANTS[same.index(label) % len(_VARIANTS)]}


def _panels(rows: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    keys = ["trace", "policy"]
    groups = sorted(rows.groupby(keys, sort=True), key=lambda g: g[0])
    many = len(groups) > 1
    return [(f"{t} · {p}" if many else str(p), g) for (t, p), g in groups]


def _title(panel: str, capacity: int) -> str:
    return f"{panel}, {capacity:,} blocks each"


def _instances_axis(ax: Axes, rows: pd.DataFrame) -> None:
    ticks = sorted(int(x) for x in rows["instances"].unique())
    if len(ticks) > 1 and min(ticks) >= 1:
        ax.set_xscale("log", base=2)
    ax.set_xticks(ticks, [str(t) for t in ticks])
    ax.minorticks_off()
    ax.set_xlabel("instances")


def _figure(ncols: int, nrows: int = 1) -> tuple[Figure, np.ndarray]:
    fig = Figure(figsize=(PANEL_W * ncols, PANEL_H * nrows + 0.4), layout="constrained")
    axes = np.array(fig.subplots(nrows, ncols, squeeze=False))
    return fig, axes


def _legend(fig: Figure, axes: np.ndarray) -> None:
    handles, labels = [], []
    for ax in axes.flat:
        for h, lab in zip(*ax.get_legend_handles_labels(), strict=True):
            if lab not in labels:
                handles.append(h)
                labels.append(lab)
    fig.legend(handles, labels, loc="outside lower center", ncols=min(len(labels), 4), fontsize=7)


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


def fig_cluster_hit_rate(results: pd.DataFrame, capacity: int | None = None) -> Figure:
    capacity, at = _at_capacity(results, capacity)
    if at["instances"].nunique() < 2:
        raise SkipFigure("only one number of instances in the run")
    panels = _panels(at)
    singles = [_single_cache(results, g, capacity) for _, g in panels]
    with_share = any(len(s) > 1 for s in singles)
    fig, axes = _figure(len(panels), 2 if with_share else 1)
    for col, ((title, group), single) in enumerate(zip(panels, singles, strict=True)):
        ax = axes[0, col]
        lines = _lines(group)
        for label, line in lines.items():
            style = _style(label, list(lines))
            ax.plot(line["instances"], line["overall_hit_rate"], label=label, **style)
            if with_share and len(single) > 1:
                share = line.set_index("instances")["overall_hit_rate"] / single
                axes[1, col].plot(share.index, share.values, **style)
        if len(single) > 1:
            ax.plot(single.index, single.values, "k--", lw=0.8, label="one cache of all memory")
        ax.set_title(_title(title, capacity), fontsize=7)
        ax.set_ylabel("token hit rate")
        _instances_axis(ax, group)
        if with_share:
            axes[1, col].set_ylabel("share of one cache")
            axes[1, col].axhline(1.0, color="k", lw=0.5)
            _instances_axis(axes[1, col], group)
    _legend(fig, axes)
    return fig


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


def fig_cluster_ttft(results: pd.DataFrame, capacity: int | None = None) -> Figure:
    capacity, at = _at_capacity(results, capacity, needs="est_ttft_p50_seconds")
    panels = _panels(at)
    fig, axes = _figure(len(panels))
    for col, (title, group) in enumerate(panels):
        ax = axes[0, col]
        lines = _lines(group)
        for label, line in lines.items():
            style = {**_style(label, list(lines)), "ls": "-"}  # p50 solid, p99 dashed
            ax.plot(line["instances"], line["est_ttft_p50_seconds"], label=label, **style)
            style.update(ls="--", mfc="none")
            ax.plot(line["instances"], line["est_ttft_p99_seconds"], **style)
        ax.set_yscale("log")
        ax.set_title(_title(title, capacity), fontsize=7)
        ax.set_ylabel("est. TTFT (s)")
        _instances_axis(ax, group)
    # The line styles once, in the legend: p50 solid, p99 dashed.
    axes[0, 0].plot([], [], color="0.4", label="p50")
    axes[0, 0].plot([], [], color="0.4", ls="--", label="p99")
    _legend(fig, axes)
    return fig


def fig_cluster_load_imbalance(results: pd.DataFrame, capacity: int | None = None) -> Figure:
    capacity, at = _at_capacity(results, capacity, needs="load_imbalance")
    panels = _panels(at)
    fig, axes = _figure(len(panels))
    for col, (title, group) in enumerate(panels):
        ax = axes[0, col]
        lines = _lines(group)
        for label, line in lines.items():
            style = _style(label, list(lines))
            ax.plot(line["instances"], line["load_imbalance"], label=label, **style)
        ax.axhline(1.0, color="k", lw=0.5)
        ax.set_title(_title(title, capacity), fontsize=7)
        ax.set_ylabel("busy time max / mean")
        _instances_axis(ax, group)
    _legend(fig, axes)
    return fig


def _kind(name: str, draw: Callable[[pd.DataFrame], Figure], order: int) -> FigureKind:
    """A cluster figure kind: it reads every row (cluster points are not single caches)."""
    return FigureKind(
        name,
        lambda data: draw(data.all_results),
        order,
        single_cache=False,
        applies=lambda data: not cluster_rows(data.all_results).empty,
    )


register(_kind("cluster_hit_rate", fig_cluster_hit_rate, 90))
register(_kind("cluster_ttft", fig_cluster_ttft, 91))
register(_kind("cluster_load_imbalance", fig_cluster_load_imbalance, 92))
