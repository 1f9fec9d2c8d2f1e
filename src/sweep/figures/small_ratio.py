"""``small_ratio_tuning``: S3FIFO's hit rate against ``small_ratio`` (one line per capacity)
beside a heatmap of its gain over LRU at the same trace, capacity and block size."""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Rectangle
from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

from . import findings
from .axes import format_capacity, is_binary, percent_axis
from .data import (
    Panel,
    RunData,
    SkipFigure,
    fix_params,
    format_param,
    one_value,
    panels,
    param_keys,
    policy_rows,
)
from .legend import finish, layout
from .registry import FigureKind, register
from .series import markevery
from .style import MARKERS, sequential, styled

log = logging.getLogger("sweep.plot")

ANNOTATE_MAX_CELLS = 100
"""Heatmaps with at most this many cells get their values written in the cells."""
LOG_SPAN = 10.0
"""The line panel's x axis is logarithmic when the ratios span more than this factor."""


@styled
def fig_small_ratio_tuning(results: pd.DataFrame, policy: str = "S3FIFO") -> Figure:
    """``policy``'s hit rate against small_ratio (one line per capacity) and a heatmap of its
    gain over LRU at the same trace, block size and capacity (percentage points)."""
    rows = policy_rows(results, policy)
    others = [k for k in param_keys(rows) if k != "small_ratio"]
    rows, fixed = fix_params(rows, policy, others)
    reason = one_value(rows, "small_ratio", "small_ratio")
    if reason:
        raise SkipFigure(reason)
    lru_all = results[results["policy"] == "LRU"]
    panel_list = panels(rows)
    gains = [_gain_grid(panel, lru_all) for panel in panel_list]
    with_heatmap = any(g is not None for g in gains)
    if not with_heatmap:
        log.info(
            "small_ratio_tuning: no LRU point at the %s capacities; the heatmap of the gain "
            "over LRU is left out",
            policy,
        )
    capacities = sorted(rows["capacity"].unique())
    binary = is_binary([float(c) for c in capacities])
    colours = dict(zip(capacities, sequential(len(capacities)), strict=True))
    ncols = 2 if with_heatmap else (1 if len(panel_list) == 1 else 2)
    n_axes = 2 * len(panel_list) if with_heatmap else len(panel_list)
    fig, axes = layout(n_axes, ncols=ncols)
    line_axes = axes[::2] if with_heatmap else axes
    ratios = sorted(float(r) for r in rows["small_ratio"].dropna().unique())
    highest = float(rows["overall_hit_rate"].max()) * 100
    for i, panel in enumerate(panel_list):
        ax = line_axes[i]
        for j, cap in enumerate(capacities):
            sub = panel.rows[panel.rows["capacity"] == cap].sort_values("small_ratio")
            if sub.empty:
                continue
            label = format_capacity(cap, binary)
            rate = sub["overall_hit_rate"].to_numpy(dtype=float) * 100
            ax.plot(
                sub["small_ratio"],
                rate,
                color=colours[cap],
                marker=MARKERS[j % len(MARKERS)],
                markevery=markevery(len(sub)),
                label=label,
            )
            best = int(np.argmax(rate))  # the first of equal maxima: the smallest ratio
            ax.plot(
                [float(sub["small_ratio"].iloc[best])],
                [rate[best]],
                linestyle="none",
                marker="*",
                markersize=BEST_MARKER_PT,
                markerfacecolor="white",
                markeredgecolor=colours[cap],
                markeredgewidth=1.0,
                label=f"_best of {label}",  # an annotation: above every marker, never moved
                zorder=4,
            )
        _ratio_axis(ax, ratios)
        percent_axis(ax, "Token hit rate (%)", highest)
        ax.set_title(f"{panel.title}: {policy}" + (f" ({fixed})" if fixed else ""))
        if with_heatmap:
            _heatmap(fig, axes[2 * i + 1], gains[i], _gain_bound(gains), policy, binary)
    star = Line2D(
        [], [], linestyle="none", marker="*", markersize=BEST_MARKER_PT, color="0.3",
        markerfacecolor="white",
    )  # fmt: skip
    return finish(fig, line_axes, title="Capacity (blocks)", extra=[(star, BEST_LABEL)])


BEST_MARKER_PT = 8.0
BEST_LABEL = "best small_ratio"


def _ratio_axis(ax: Axes, ratios: Sequence[float]) -> None:
    ax.set_xlabel("small_ratio (fraction of capacity)")
    positive = [r for r in ratios if r > 0]
    if len(positive) == len(ratios) and positive and max(positive) / min(positive) > LOG_SPAN:
        ax.set_xscale("log")
        decades = [
            m * 10.0**k for k in range(math.floor(math.log10(min(positive))), 1) for m in (1, 2, 5)
        ]
        ticks = [t for t in decades if min(positive) * 0.999 <= t <= max(positive) * 1.001]
        ax.xaxis.set_major_locator(FixedLocator(ticks))
        ax.xaxis.set_minor_locator(NullLocator())
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))


def _gain_grid(panel: Panel, lru_all: pd.DataFrame) -> pd.DataFrame | None:
    """capacity x small_ratio gain over LRU (pp), or None without LRU at these capacities."""
    lru = lru_all[
        (lru_all["trace_sha256"] == panel.trace_sha256)
        & (lru_all["block_size"] == panel.block_size)
    ]
    lru_rate = lru.groupby("capacity")["overall_hit_rate"].mean()
    rows = panel.rows[panel.rows["capacity"].isin(lru_rate.index)]
    if rows.empty:
        return None
    gain = (rows["overall_hit_rate"] - rows["capacity"].map(lru_rate)) * 100
    return (
        pd.DataFrame({"capacity": rows["capacity"], "small_ratio": rows["small_ratio"], "g": gain})
        .pivot_table(index="capacity", columns="small_ratio", values="g", aggfunc="mean")
        .sort_index()
        .sort_index(axis=1)
    )


def _gain_bound(grids: Sequence[pd.DataFrame | None]) -> float:
    """The colour scale's half-range: the largest gain in any panel (the same in all)."""
    values = [g.to_numpy(dtype=float) for g in grids if g is not None]
    finite = np.concatenate([v[np.isfinite(v)] for v in values]) if values else np.zeros(0)
    bound = float(np.abs(finite).max()) if finite.size else 0.0
    return bound if bound > 0 else 1.0


def _heatmap(
    fig: Figure,
    ax: Axes,
    grid: pd.DataFrame | None,
    bound: float,
    policy: str,
    binary: bool,
) -> None:
    """The gain grid on a diverging colour map centred at 0 (blue: better than LRU); each
    capacity's best small_ratio (its highest gain) framed."""
    if grid is None:
        ax.set_axis_off()
        ax.text(0.5, 0.5, "no LRU point at these capacities", ha="center", va="center")
        return
    values = grid.to_numpy(dtype=float)
    image = ax.imshow(
        np.ma.masked_invalid(values),
        cmap="RdBu",
        vmin=-bound,
        vmax=bound,
        aspect="auto",
        origin="lower",
        interpolation="nearest",
    )
    ax.grid(False)
    n_rows, n_cols = values.shape
    col_step = max(1, math.ceil(n_cols / 7))
    row_step = max(1, math.ceil(n_rows / 10))
    ax.set_xticks(range(0, n_cols, col_step))
    ax.set_xticklabels([format_param(float(v)) for v in grid.columns[::col_step]])
    ax.set_yticks(range(0, n_rows, row_step))
    ax.set_yticklabels([format_capacity(v, binary) for v in grid.index[::row_step]])
    ax.tick_params(length=0)
    ax.set_xlabel("small_ratio (fraction of capacity)")
    ax.set_ylabel("Capacity (blocks)")
    ax.set_title(f"{policy} gain over LRU (pp; framed: the best)")
    for r, row in enumerate(values):
        if np.isfinite(row).any():
            c = int(np.nanargmax(row))
            frame = Rectangle((c - 0.5, r - 0.5), 1, 1, fill=False, edgecolor="black", lw=1.0)
            ax.add_patch(frame)
    if n_rows * n_cols <= ANNOTATE_MAX_CELLS:
        size = 6 if n_cols <= 8 else 5
        for (r, c), v in np.ndenumerate(values):
            if np.isfinite(v):
                ax.text(
                    c,
                    r,
                    f"{v:+.1f}" if abs(v) < 9.95 else f"{v:+.0f}",
                    ha="center",
                    va="center",
                    fontsize=size,
                    color="white" if abs(v) > 0.6 * bound else "black",
                )
    bar = fig.colorbar(image, ax=ax, shrink=0.9, pad=0.02)
    bar.set_label("Gain over LRU (pp)")
    bar.outline.set_linewidth(0.4)


def _draw(data: RunData) -> Figure:
    return fig_small_ratio_tuning(data.results)


register(
    FigureKind(
        "small_ratio_tuning",
        _draw,
        order=20,
        notes=lambda data: findings.best_small_ratio(data.results),
    )
)
