"""Per-request figures of the chosen points: ``hit_ratio_cdf`` and ``hit_rate_over_time``.

With up to :data:`SMALL_MULTIPLES_ABOVE` points per trace, each trace is one panel with one line
per point. With more, the lines would be a tangle: each point gets a small panel of its own,
drawn in its colour over the other points of its trace in light grey (small multiples).
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from . import findings
from .axes import format_capacity, is_binary, percent_axis
from .capacity import drawn
from .data import (
    PER_REQUEST_FILE,
    REQUESTS_FILE,
    Panel,
    RunData,
    SkipFigure,
    format_param,
    ids,
    panels,
    param_keys,
    scalar,
)
from .legend import DOUBLE_COLUMN_IN, LEGEND_ROW_IN, finish, layout
from .registry import FigureKind, register
from .series import CONTEXT_GID, Series, draw_series, duplicates
from .style import LINESTYLES, Palette, styled

log = logging.getLogger("sweep.plot")

CDF_GRID = 1001
"""Points at which a CDF is evaluated (a 0.1 % grid of the hit ratio): a figure of a trace with
millions of requests stays small."""
TARGET_BINS = 60
"""Hit rate over time uses the smallest round bin width giving at most this many bins."""
ROUND_WIDTHS_MS = (1, 2, 5, 10, 20, 50, 100, 200, 500,
                   1_000, 2_000, 5_000, 10_000, 15_000, 30_000,
                   60_000, 120_000, 300_000, 600_000, 900_000, 1_800_000,
                   3_600_000, 7_200_000, 10_800_000, 21_600_000, 43_200_000,
                   86_400_000, 172_800_000, 604_800_000)  # fmt: skip
"""Bin widths (ms): 1, 2, 5, 10, 20, 50, 100, 200, 500 ms (a trace of a few seconds, or of a
few requests a millisecond apart, still gets bins of its own); 1, 2, 5, 10, 15, 30 s; 1, 2, 5,
10, 15, 30 min; 1, 2, 3, 6, 12 h; 1, 2, 7 d."""
SMALL_MULTIPLES_ABOVE = 5
SMALL_PANEL_IN = (DOUBLE_COLUMN_IN / 4, 1.45)
"""Width and height of one small multiple (four per row across both columns)."""


# --- the chosen points --------------------------------------------------------------------------


def point_labels(points: pd.DataFrame) -> dict[int, str]:
    """Legend label of each point: its policy, plus what tells it from the others."""
    keys = param_keys(points)
    several_caps = points["capacity"].nunique() > 1
    binary = is_binary([float(c) for c in points["capacity"]])
    labels = {}
    for _, row in points.iterrows():
        same = points[points["policy"] == row["policy"]]
        extra = [
            f"{k}={format_param(scalar(row[k]))}"
            for k in keys
            if same[k].nunique() > 1 and not pd.isna(row[k])
        ]
        if several_caps:
            extra.append(f"{format_capacity(row['capacity'], binary)} blocks")
        label = str(row["policy"])
        if extra:
            label += f" ({', '.join(extra)})"
        labels[int(row["point_id"])] = label
    return labels


def point_panels(points: pd.DataFrame) -> list[Panel]:
    """Chosen points by trace; the panel title names their capacity when they share one."""
    out = []
    binary = is_binary([float(c) for c in points["capacity"]])
    for panel in panels(points):
        caps = panel.rows["capacity"].unique()
        title = panel.title
        if len(caps) == 1:
            title += f", {format_capacity(caps[0], binary)} blocks"
        out.append(dataclasses.replace(panel, title=title))
    return out


def point_styles(points: pd.DataFrame, palette: Palette) -> dict[int, dict[str, Any]]:
    """The policy's colour, marker and line style (``palette``); a policy's second, third...
    point of a trace gets the next line style."""
    out = {}
    seen: dict[tuple[str, str, int], int] = {}
    for _, row in points.iterrows():
        key = (str(row["policy"]), str(row["trace_sha256"]), int(row["block_size"]))
        n = seen.get(key, 0)
        seen[key] = n + 1
        style = palette.policy(row["policy"])
        if n:
            style["linestyle"] = LINESTYLES[n % len(LINESTYLES)]
        out[int(row["point_id"])] = style
    return out


def check_points(points: pd.DataFrame, per_request: pd.DataFrame | None) -> pd.DataFrame:
    if per_request is None:
        raise SkipFigure(f"{PER_REQUEST_FILE} absent (the run had save_per_request=false)")
    if points.empty:
        raise SkipFigure("no points chosen")
    have = set(per_request["point_id"].unique().tolist())
    missing = [int(p) for p in points["point_id"] if int(p) not in have]
    if len(missing) == len(points):
        raise SkipFigure(f"no per-request rows of the chosen points ({ids(missing)})")
    if missing:
        log.info("no per-request rows of point(s) %s; left out", ids(missing))
    return points[points["point_id"].isin(have)]


# --- drawing: one panel per trace, or small multiples --------------------------------------------


def _draw_points(
    series: list[Series],
    panel_list: Sequence[Panel],
    decorate: Any,
    markers: bool,
) -> Figure:
    """``series`` (``panel`` = index in ``panel_list``) as one panel per trace, or as small
    multiples when a trace has more than :data:`SMALL_MULTIPLES_ABOVE` points. ``decorate(ax, i)``
    sets the limits and labels of an axes of panel ``i``."""
    per_panel = [sum(1 for s in series if s.panel == i) for i in range(len(panel_list))]
    if max(per_panel, default=0) <= SMALL_MULTIPLES_ABOVE:
        fig, axes = layout(len(panel_list))
        draw_series(axes, series, markers=markers)
        for i, (ax, panel) in enumerate(zip(axes, panel_list, strict=True)):
            decorate(ax, i)
            ax.set_title(panel.title)
        return finish(fig, axes)
    return _small_multiples(series, panel_list, decorate)


def _small_multiples(series: list[Series], panel_list: Sequence[Panel], decorate: Any) -> Figure:
    ncols = 4
    rows_per_trace = [
        math.ceil(sum(1 for s in series if s.panel == i) / ncols) for i in range(len(panel_list))
    ]
    nrows = sum(rows_per_trace)
    width, height = SMALL_PANEL_IN
    fig = Figure(
        figsize=(width * ncols, height * nrows + LEGEND_ROW_IN * len(panel_list) + 0.2),
        layout="constrained",
    )
    sub = fig.subfigures(len(panel_list), 1, height_ratios=rows_per_trace, squeeze=False)
    same = duplicates(series)
    labels = {(s.panel, s.key): s.label for s in series}
    for i, panel in enumerate(panel_list):
        mine = [s for s in series if s.panel == i]
        grid = sub[i][0].subplots(rows_per_trace[i], ncols, squeeze=False, sharex=True, sharey=True)
        axes = list(np.asarray(grid).ravel())
        for ax in axes[len(mine) :]:
            ax.set_axis_off()
        for ax, s in zip(axes, mine, strict=False):
            for other in mine:
                if other is not s:
                    ax.plot(other.x, other.y, color="0.82", linewidth=0.7, gid=CONTEXT_GID)
            # one coloured line per panel, without markers (a series of one point keeps its
            # marker: a line of one point draws nothing), in the series' line style of the run
            style = {k: v for k, v in s.style.items() if k != "marker" or len(s.x) == 1}
            ax.plot(s.x, s.y, label=s.label, linewidth=1.2, zorder=3, **style)
            decorate(ax, i)
            title = s.label
            if s.key in same and (i, same[s.key]) in labels:
                title += f" (= {labels[(i, same[s.key])]})"
            ax.set_title(title)
        # one x and one y label per trace, not one per small panel
        sub[i][0].supxlabel(axes[0].get_xlabel(), fontsize=8)
        sub[i][0].supylabel(axes[0].get_ylabel(), fontsize=8)
        for ax in axes:
            ax.set_xlabel("")
            ax.set_ylabel("")
        sub[i][0].suptitle(f"{panel.title} (grey: the other policies)", fontsize=8)
    return fig


# --- the CDF -------------------------------------------------------------------------------------


@styled
def fig_hit_ratio_cdf(
    points: pd.DataFrame, per_request: pd.DataFrame | None, palette: Palette | None = None
) -> Figure:
    """CDF of the per-request hit ratio (hit_tokens / prompt_tokens; empty prompts left out) of
    each chosen point (rows of results.parquet), one panel per trace."""
    points = check_points(points, per_request)
    assert per_request is not None
    palette = palette or Palette.of(points)
    labels, styles = point_labels(points), point_styles(points, palette)
    panel_list = point_panels(points)
    grid = np.linspace(0.0, 1.0, CDF_GRID)
    series = []
    for i, panel in enumerate(panel_list):
        for pid in panel.rows["point_id"]:
            rows = per_request[per_request["point_id"] == pid]
            prompt = rows["prompt_tokens"].to_numpy(dtype=float)
            hits = rows["hit_tokens"].to_numpy(dtype=float)
            keep = prompt > 0
            if not keep.any():
                log.info("point %d: every request has an empty prompt; left out", pid)
                continue
            ratio = np.sort(np.clip(hits[keep] / prompt[keep], 0.0, 1.0))
            cdf = np.searchsorted(ratio, grid, side="right") / len(ratio)
            style = {**styles[int(pid)], "drawstyle": "steps-post"}
            x = np.concatenate([[0.0], grid]) * 100
            y = np.concatenate([[0.0], cdf])
            series.append(Series(i, labels[int(pid)], labels[int(pid)], x, y, style))

    def decorate(ax: Axes, _: int) -> None:
        ax.set_xlim(0, 100)
        ax.set_ylim(0, 1.02)
        ax.set_xlabel("Request hit ratio (% of prompt tokens)")
        ax.set_ylabel("CDF (fraction of requests)")

    return _draw_points(series, panel_list, decorate, markers=True)


# --- hit rate over time -------------------------------------------------------------------------


def bin_width_ms(span_ms: float, target: int = TARGET_BINS) -> float:
    """The smallest round width (:data:`ROUND_WIDTHS_MS`) giving at most ``target`` bins."""
    for width in ROUND_WIDTHS_MS:
        if span_ms / width <= target:
            return float(width)
    return ROUND_WIDTHS_MS[-1] * float(math.ceil(span_ms / (ROUND_WIDTHS_MS[-1] * target)))


def format_width(width_ms: float) -> str:
    """``5 ms``, ``30 s``, ``2 min``, ``6 h``, ``1 d``."""
    if width_ms < 1000:
        return f"{width_ms:g} ms"
    s = width_ms / 1000.0
    for unit, scale in (("d", 86400.0), ("h", 3600.0), ("min", 60.0)):
        if s >= scale and s % scale == 0:
            return f"{s / scale:g} {unit}"
    return f"{s:g} s"


def time_unit(span_ms: float) -> tuple[float, str]:
    """The x axis' unit (ms per unit, name) for a trace of ``span_ms``: tick labels of a few
    digits (a trace of milliseconds in seconds would read 0.00025, 0.00050, ...)."""
    if span_ms < 1_000:
        return 1.0, "ms"
    if span_ms <= 120_000:
        return 1_000.0, "s"
    if span_ms <= 120 * 60_000:
        return 60_000.0, "min"
    return 3_600_000.0, "h"


def _timed(points: pd.DataFrame, requests: pd.DataFrame) -> pd.DataFrame:
    traced = set(requests["trace_sha256"].unique())
    untimed = points[~points["trace_sha256"].isin(traced)]
    if len(untimed) == len(points):
        raise SkipFigure(f"{REQUESTS_FILE} has no request of the chosen points' traces")
    if not untimed.empty:
        log.info("no timestamps of trace(s) %s; left out", ", ".join(untimed["trace"].unique()))
    return points[points["trace_sha256"].isin(traced)]


@styled
def fig_hit_rate_over_time(
    points: pd.DataFrame,
    per_request: pd.DataFrame | None,
    requests: pd.DataFrame | None,
    target_bins: int = TARGET_BINS,
    palette: Palette | None = None,
) -> Figure:
    """Token hit rate of each chosen point in bins of request time of a round width (sum of hit
    tokens / sum of prompt tokens per bin; a bin without prompt tokens is left out, and the
    line joins its neighbours), one panel per trace, every panel on one y scale. Lines carry
    no markers, except a point's single busy bin (a trace whose requests all fall in one bin):
    a line of one point would not be drawn at all."""
    if requests is None:
        raise SkipFigure(f"{REQUESTS_FILE} absent (request timestamps are needed)")
    points = check_points(points, per_request)
    assert per_request is not None
    points = _timed(points, requests)
    palette = palette or Palette.of(points)
    labels, styles = point_labels(points), point_styles(points, palette)
    panel_list = point_panels(points)
    series: list[Series] = []
    axis: dict[int, tuple[int, float, str, float]] = {}
    for i, panel in enumerate(panel_list):
        times = requests[requests["trace_sha256"] == panel.trace_sha256][["request", "timestamp"]]
        t0, t1 = float(times["timestamp"].min()), float(times["timestamp"].max())
        span = t1 - t0
        scale, unit = time_unit(span)
        width = bin_width_ms(span, target_bins)
        n_bins = max(1, math.ceil(span / width))
        centres = (np.arange(n_bins) + 0.5) * width / scale
        axis[i] = (n_bins, scale, unit, width)
        for pid in panel.rows["point_id"]:
            rows = per_request[per_request["point_id"] == pid].merge(times, on="request")
            b = np.clip(((rows["timestamp"].to_numpy() - t0) / width).astype(np.int64), 0, None)
            b = np.minimum(b, n_bins - 1)  # the last request (at t1) closes the last bin
            prompt = np.bincount(b, rows["prompt_tokens"].to_numpy(float), minlength=n_bins)
            hits = np.bincount(b, rows["hit_tokens"].to_numpy(float), minlength=n_bins)
            busy = prompt > 0
            label = labels[int(pid)]
            x, y = centres[busy], hits[busy] / prompt[busy] * 100
            series.append(Series(i, label, label, x, y, styles[int(pid)]))

    # one y scale for every panel: the same height is the same hit rate in each
    highest = max((float(np.max(s.y)) for s in series if len(s.y)), default=0.0)

    def decorate(ax: Axes, i: int) -> None:
        n_bins, scale, unit, width = axis[i]
        ax.set_xlim(0, n_bins * width / scale)  # every bin, the last one whole
        percent_axis(ax, "Token hit rate (%)", highest)
        ax.set_xlabel(f"Time since trace start ({unit}; {format_width(width)} bins)")

    return _draw_points(series, panel_list, decorate, markers=False)


def _draw_cdf(data: RunData) -> Figure:
    return fig_hit_ratio_cdf(data.points, data.per_request, data.palette)


def _draw_over_time(data: RunData) -> Figure:
    return fig_hit_rate_over_time(
        data.points, data.per_request, data.requests, palette=data.palette
    )


def _notes(data: RunData) -> list[str]:
    """Policies equal in every counter (their chosen points are announced ``(= OTHER)``)."""
    chosen = set(data.points["policy"]) if not data.points.empty else set()
    same = findings.identical(drawn(data, "capacity"))
    return [n for n in same if n.split(" ", 1)[0] in chosen]


register(FigureKind("hit_ratio_cdf", _draw_cdf, order=50, notes=_notes))
register(FigureKind("hit_rate_over_time", _draw_over_time, order=60, notes=_notes))
