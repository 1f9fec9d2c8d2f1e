"""Paper figures of a finished sweep, drawn from its Parquet files only (no replay is redone).

Command line::

    python -m sweep.plot RUN_DIR [--out DIR] [--format png,pdf] [--points ID,ID,...]

From Python (the sweep calls this at the end of a run)::

    from sweep.plot import draw_figures
    report = draw_figures("outputs/2025-06-01/14-03-22")
    report.written, report.skipped

Files read from the run directory (see :mod:`sweep.store`)::

    results.parquet       required: one row per point
    traces.parquet        optional: the infinite-cache ceiling of each (trace, block_size)
    per_request.parquet   optional (save_per_request=false leaves it out): per-request hits
    requests.parquet      optional: each request's timestamp (ms since the trace's start)

Figures (``OUT/NAME.png`` at 200 dpi for screens, ``OUT/NAME.pdf`` for papers), one panel per
trace (per trace and block size when the run has several block sizes):

``hit_rate_vs_capacity``
    token hit rate against capacity (log2 axis in blocks; a second axis in tokens when the run
    has one block size), one line per policy, the infinite-cache ceiling dashed. Skipped when
    the run has one capacity.
``small_ratio_tuning``
    S3FIFO's hit rate against ``small_ratio``, one line per capacity, beside a heatmap of its
    gain over LRU (percentage points) at the same trace, capacity and block size. Skipped when
    the run has one ``small_ratio`` (or no S3FIFO point); without LRU points at those
    capacities only the first panel is drawn.
``max_freq_effect``
    S3FIFO's hit rate against capacity, one line per ``max_freq``; a second panel with one line
    per ``ghost_freq`` when it varies. Skipped when both have one value.
``occupancy``
    final resident blocks as a share of the capacity, one line per policy. Skipped when the run
    has one capacity.
``hit_ratio_cdf``
    CDF of per-request hit ratios (requests with an empty prompt left out) of the chosen points.
    Skipped without ``per_request.parquet``.
``hit_rate_over_time``
    token hit rate of the chosen points in 60 equal time bins. Skipped without
    ``per_request.parquet`` or ``requests.parquet``.

A policy measured with several parameter combinations is drawn with its default parameters
(the registered ``Params`` defaults: S3FIFO ``small_ratio=0.1``, ``max_freq=3``,
``ghost_freq=0``) when the run has them, else with its most frequent combination, named in the
legend. The *chosen points* (``points``) default to each policy's default-parameter point at
the run's median capacity, per trace and block size.

Every policy has one colour and marker in every figure of every run (:func:`policy_style`).
Counts of blocks and tokens use binary multiples (1K = 1024, 1M = 1024**2). Figures are built
with matplotlib's object-oriented API (:class:`matplotlib.figure.Figure`, no pyplot, no global
backend switch); each figure function takes DataFrames and returns a ``Figure`` or raises
:class:`SkipFigure`, and :func:`draw_figures` is the only place that writes files.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import hashlib
import logging
import math
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import matplotlib as mpl
import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.backend_bases import FigureCanvasBase
from matplotlib.colors import Colormap
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogLocator, NullLocator

import prefixsim

from .config import POLICY_PARAM_KEYS

log = logging.getLogger("sweep.plot")

RESULTS_FILE = "results.parquet"
PER_REQUEST_FILE = "per_request.parquet"
TRACES_FILE = "traces.parquet"
REQUESTS_FILE = "requests.parquet"
FIGURES_DIR = "figures"

FIGURE_NAMES: tuple[str, ...] = (
    "hit_rate_vs_capacity",
    "small_ratio_tuning",
    "max_freq_effect",
    "occupancy",
    "hit_ratio_cdf",
    "hit_rate_over_time",
)
DEFAULT_FORMATS: tuple[str, ...] = ("png", "pdf")
PNG_DPI = 200

SINGLE_COLUMN_IN = 3.4
"""Width of a single-column figure of a two-column paper (inches)."""
DOUBLE_COLUMN_IN = 7.0
"""Width of a figure spanning both columns (inches)."""
PANEL_HEIGHT_IN = 2.1
TIME_BINS = 60
CDF_GRID = 1001
"""Points at which a CDF is evaluated (a 0.1 % grid of the hit ratio): a figure of a trace with
millions of requests stays small."""
ANNOTATE_MAX_CELLS = 48
"""Heatmaps with at most this many cells get their values written in the cells."""

STYLE: dict[Any, Any] = {
    "font.size": 8,
    "axes.titlesize": 8,
    "axes.labelsize": 8,
    "xtick.labelsize": 7,
    "ytick.labelsize": 7,
    "legend.fontsize": 7,
    "legend.title_fontsize": 7,
    "axes.linewidth": 0.6,
    "axes.grid": True,
    "grid.linewidth": 0.4,
    "grid.alpha": 0.5,
    "xtick.major.width": 0.6,
    "ytick.major.width": 0.6,
    "xtick.major.size": 2.5,
    "ytick.major.size": 2.5,
    "lines.linewidth": 1.0,
    "lines.markersize": 3.5,
    "legend.handlelength": 1.8,
    "legend.columnspacing": 1.0,
    "figure.dpi": 100,
    "savefig.dpi": PNG_DPI,
    "pdf.fonttype": 42,  # TrueType in PDFs (editable, accepted by publishers), not Type 3
    "ps.fonttype": 42,
    "svg.fonttype": "none",
}
"""Matplotlib settings of every figure: sizes for a two-column paper."""

DEFAULT_PARAMS: dict[str, Any] = {"small_ratio": 0.1, "max_freq": 3, "ghost_freq": 0}
"""Parameter defaults of a policy the registry does not know (S3FIFO's)."""

_TAB10 = [mpl.colormaps["tab10"](i) for i in range(10)]
POLICY_STYLES: dict[str, tuple[Any, str]] = {
    # name: (colour, marker); fixed here (not derived from the registry's order) so that a newly
    # registered policy never changes the colour of an existing one. Add new policies here.
    "S3FIFO": (_TAB10[0], "o"),
    "LRU": (_TAB10[1], "s"),
    "FIFO": (_TAB10[2], "^"),
    "CLOCK": (_TAB10[3], "v"),
    "SIEVE": (_TAB10[4], "D"),
    "LFU": (_TAB10[5], "P"),
    "ARC": (_TAB10[6], "X"),
    "LRU_LEAF": (_TAB10[7], "<"),
    "LRU_TAIL_FIRST": (_TAB10[8], ">"),
    "S3FIFO_LEAF": (_TAB10[9], "h"),
    "BELADY": ("black", "*"),
}
_FALLBACK_COLOURS = [mpl.colormaps["Dark2"](i) for i in range(8)]
_FALLBACK_MARKERS = ["d", "p", "H", "8", "1", "2", "3", "4"]
_LINESTYLES = ["-", "--", ":", "-."]
CEILING_GID = "ceiling"
"""``gid`` of the infinite-cache ceiling line (to tell it from the policies' lines)."""


class PlotError(prefixsim.PrefixSimError):
    """A run directory or an option the figures cannot be drawn from (one line for the user)."""


class SkipFigure(Exception):
    """A figure that is not drawn, with the reason (raised by the figure functions)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass
class FigureReport:
    """What :func:`draw_figures` did."""

    out_dir: Path
    written: list[Path] = field(default_factory=list)
    """Every file written, in order."""
    skipped: dict[str, str] = field(default_factory=dict)
    """Figure name -> why it was not drawn."""
    drawn: list[str] = field(default_factory=list)
    """Names of the figures drawn."""


# --- style ---------------------------------------------------------------------------------------


def policy_style(policy: str) -> dict[str, Any]:
    """``color`` and ``marker`` of ``policy``: fixed for the known policies, derived from a hash
    of the name (the same in every run) for any other."""
    if policy in POLICY_STYLES:
        colour, marker = POLICY_STYLES[policy]
    else:
        h = int.from_bytes(hashlib.sha256(policy.encode()).digest()[:8], "big")
        colour = _FALLBACK_COLOURS[h % len(_FALLBACK_COLOURS)]
        marker = _FALLBACK_MARKERS[(h // len(_FALLBACK_COLOURS)) % len(_FALLBACK_MARKERS)]
    return {"color": colour, "marker": marker}


def _policy_order(policies: Any) -> list[str]:
    """Known policies in the order of :data:`POLICY_STYLES`, then the others sorted."""
    known = list(POLICY_STYLES)
    names = {str(p) for p in policies}
    return [p for p in known if p in names] + sorted(names - set(known))


def _style_context() -> contextlib.AbstractContextManager[Any]:
    return mpl.rc_context(STYLE)


def _styled(func: Callable[..., Figure]) -> Callable[..., Figure]:
    """Build the figure under :data:`STYLE` (artists read the settings when created)."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Figure:
        with _style_context():
            return func(*args, **kwargs)

    return wrapper


def _sequential(n: int) -> list[Any]:
    """``n`` colours of an ordered parameter (viridis, without its palest yellows)."""
    cmap: Colormap = mpl.colormaps["viridis"]
    if n == 1:
        return [cmap(0.0)]
    return [cmap(0.85 * i / (n - 1)) for i in range(n)]


def format_count(value: float) -> str:
    """``512``, ``1K``, ``1.5K``, ``4M``: binary multiples (1K = 1024)."""
    v = float(value)
    for unit, scale in (("G", 1024.0**3), ("M", 1024.0**2), ("K", 1024.0)):
        if abs(v) >= scale:
            return f"{v / scale:.3g}{unit}"
    return f"{v:.4g}"


def _scalar(value: Any) -> Any:
    """A Python scalar for a numpy or pandas one."""
    return value.item() if hasattr(value, "item") else value


def _format_param(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


# --- layout --------------------------------------------------------------------------------------


def _layout(n_panels: int, ncols: int | None = None) -> tuple[Figure, list[Axes]]:
    """A figure of ``n_panels`` panels: one column wide for one panel, both columns above."""
    if ncols is None:
        ncols = 1 if n_panels == 1 else (2 if n_panels in (2, 4) else 3)
    nrows = math.ceil(n_panels / ncols)
    width = SINGLE_COLUMN_IN if ncols == 1 else DOUBLE_COLUMN_IN
    fig = Figure(figsize=(width, PANEL_HEIGHT_IN * nrows + 0.35), layout="constrained")
    axes = list(np.asarray(fig.subplots(nrows, ncols, squeeze=False)).ravel())
    for ax in axes[n_panels:]:
        fig.delaxes(ax)
    return fig, axes[:n_panels]


def _legend(fig: Figure, axes: Sequence[Axes], title: str | None = None) -> None:
    """One legend above the panels, with each label once."""
    seen: dict[str, Any] = {}
    for ax in axes:
        handles, labels = ax.get_legend_handles_labels()
        for h, label in zip(handles, labels, strict=True):
            seen.setdefault(label, h)
    if not seen:
        return
    # entries per row so that the legend is no wider than the figure (at 7 pt, a character is
    # about 0.05 in; the handle and the spacing take about 0.4 in)
    entry_in = 0.4 + 0.052 * max(len(label) for label in seen)
    per_row = max(1, min(8, int(fig.get_figwidth() // entry_in)))
    fig.legend(
        list(seen.values()),
        list(seen),
        loc="outside upper center",
        ncol=min(len(seen), per_row),
        frameon=False,
        title=title,
    )


def _capacity_axis(ax: Axes, block_size: int | None) -> None:
    """Log2 x axis in blocks, with a second axis on top in tokens when ``block_size`` is set."""
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(LogLocator(base=2))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: format_count(v)))
    ax.set_xlabel("Capacity (blocks)")
    if block_size is not None:
        bs = float(block_size)

        def to_tokens(blocks: Any) -> Any:
            return np.asarray(blocks, dtype=float) * bs

        def to_blocks(tokens: Any) -> Any:
            return np.asarray(tokens, dtype=float) / bs

        top = ax.secondary_xaxis("top", functions=(to_tokens, to_blocks))
        top.xaxis.set_major_locator(LogLocator(base=2))
        top.xaxis.set_minor_locator(NullLocator())
        top.xaxis.set_major_formatter(FuncFormatter(lambda v, _: format_count(v)))
        top.set_xlabel("Capacity (tokens)")


# --- data helpers --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Panel:
    """The rows of one trace (and block size)."""

    trace_sha256: str
    block_size: int
    title: str
    rows: pd.DataFrame


def _param_keys(df: pd.DataFrame) -> list[str]:
    return [k for k in POLICY_PARAM_KEYS if k in df.columns]


def _panels(df: pd.DataFrame) -> list[Panel]:
    """``df`` split by (trace, block size), ordered by trace name; titles name the trace (and
    the block size when the run has several, the hash prefix when two traces share a name)."""
    if df.empty:
        return []
    keys = df[["trace", "trace_sha256", "block_size"]].drop_duplicates()
    names = keys.drop_duplicates(["trace", "trace_sha256"])["trace"]
    ambiguous = set(names[names.duplicated()])
    several_sizes = df["block_size"].nunique() > 1
    out = []
    for trace, sha, bs in sorted(keys.itertuples(index=False), key=lambda k: (k[0], k[2], k[1])):
        title = str(trace)
        if trace in ambiguous:
            title += f" [{str(sha)[:8]}]"
        if several_sizes:
            title += f", {int(bs)}-token blocks"
        rows = df[(df["trace_sha256"] == sha) & (df["block_size"] == bs)]
        out.append(Panel(str(sha), int(bs), title, rows))
    return out


def _values(column: pd.Series) -> list[Any]:
    """Python values of ``column``, ``None`` for null."""
    return [None if pd.isna(v) else _scalar(v) for v in column.tolist()]


def _combos(df: pd.DataFrame, keys: Sequence[str]) -> pd.Series:
    """Each row's parameter values as a tuple (``None`` for null)."""
    columns = [_values(df[k]) for k in keys]
    tuples = list(zip(*columns, strict=True)) if columns else [() for _ in range(len(df))]
    return pd.Series(tuples, index=df.index, dtype=object)


def _registry_defaults(policy: str) -> dict[str, Any]:
    try:
        spec = prefixsim.get_policy(policy)
    except prefixsim.PrefixSimError:
        return dict(DEFAULT_PARAMS)
    out = {}
    for f in dataclasses.fields(spec.params_type):
        if f.name in POLICY_PARAM_KEYS and f.default is not dataclasses.MISSING:
            out[f.name] = f.default
    return out


def _same(a: Any, b: Any) -> bool:
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, float) or isinstance(b, float):
        return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=1e-12)
    return bool(a == b)


@dataclass(frozen=True)
class Choice:
    """The parameter combination a policy is drawn with."""

    keys: tuple[str, ...]
    values: tuple[Any, ...]
    label: str
    note: str | None = None
    """Why it is not the default (for the log), or None."""


def choose_params(
    df: pd.DataFrame, policy: str, keys: Sequence[str] | None = None
) -> Choice | None:
    """The combination of ``keys`` (default: every parameter) to draw ``policy`` with: its
    default parameters when ``df`` has them, else its most frequent combination (ties: the
    first in sorted order). ``None`` when ``df`` has no row of ``policy``."""
    keys = tuple(_param_keys(df) if keys is None else keys)
    rows = df[df["policy"] == policy]
    if rows.empty:
        return None
    combos = _combos(rows, keys)
    counts: dict[tuple[Any, ...], int] = {}
    for c in combos:
        counts[c] = counts.get(c, 0) + 1
    if len(counts) == 1:
        (only,) = counts
        return Choice(keys, only, policy)
    varying = [i for i, _ in enumerate(keys) if len({c[i] for c in counts}) > 1]
    defaults = _registry_defaults(policy)
    for c in counts:
        if all(c[i] is None or _same(c[i], defaults.get(keys[i])) for i in range(len(keys))):
            return Choice(keys, c, f"{policy} (defaults)")
    best = sorted(counts, key=lambda c: (-counts[c], [(v is None, v) for v in c]))[0]
    shown = ", ".join(f"{keys[i]}={_format_param(best[i])}" for i in varying)
    return Choice(
        keys,
        best,
        f"{policy} ({shown})",
        note=f"{policy}: no point with the default parameters; drawn with the most frequent "
        f"combination ({shown})",
    )


def _select(df: pd.DataFrame, policy: str, choice: Choice) -> pd.DataFrame:
    rows = df[df["policy"] == policy]
    if rows.empty:
        return rows
    mask = _combos(rows, choice.keys).map(
        lambda c: all(_same(a, b) for a, b in zip(c, choice.values, strict=True))
    )
    return rows[mask.astype(bool)].sort_values("capacity")


def _choices(df: pd.DataFrame) -> dict[str, Choice]:
    out = {}
    for policy in _policy_order(df["policy"].unique()):
        choice = choose_params(df, policy)
        if choice is not None:
            out[policy] = choice
            if choice.note:
                log.debug(choice.note)  # the legend says it too
    return out


def _one_value(df: pd.DataFrame, column: str, what: str) -> str | None:
    """A skip reason when ``column`` has one value (or none) in ``df``."""
    values = df[column].dropna().unique()
    if len(values) > 1:
        return None
    if len(values) == 0:
        return f"no {what} in the run"
    return f"only one {what} in the run ({_format_param(_scalar(values[0]))})"


def _s3fifo_rows(results: pd.DataFrame, policy: str) -> pd.DataFrame:
    rows = results[results["policy"] == policy]
    if rows.empty:
        raise SkipFigure(f"no {policy} points in the run")
    return rows


def _fix_params(rows: pd.DataFrame, policy: str, keys: Sequence[str]) -> tuple[pd.DataFrame, str]:
    """``rows`` with the parameters ``keys`` at the default (or most frequent) values, and
    ``"key=value, ..."`` naming those that vary in ``rows`` (empty when none does)."""
    if not keys:
        return rows, ""
    choice = choose_params(rows, policy, keys)
    assert choice is not None
    if choice.note:
        log.debug(choice.note)
    shown = ", ".join(
        f"{k}={_format_param(v)}"
        for k, v in zip(choice.keys, choice.values, strict=True)
        if rows[k].nunique() > 1
    )
    return _select(rows, policy, choice), shown


# --- figures -------------------------------------------------------------------------------------


@_styled
def fig_hit_rate_vs_capacity(results: pd.DataFrame, traces: pd.DataFrame | None = None) -> Figure:
    """Token hit rate against capacity, one line per policy, one panel per trace; the
    infinite-cache ceiling of ``traces`` (traces.parquet) as a dashed line."""
    reason = _one_value(results, "capacity", "capacity")
    if reason:
        raise SkipFigure(reason)
    panels = _panels(results)
    choices = _choices(results)
    one_size = results["block_size"].nunique() == 1
    fig, axes = _layout(len(panels))
    for ax, panel in zip(axes, panels, strict=True):
        for policy, choice in choices.items():
            rows = _select(panel.rows, policy, choice)
            if rows.empty:
                continue
            ax.plot(
                rows["capacity"],
                rows["overall_hit_rate"] * 100,
                label=choice.label,
                **policy_style(policy),
            )
        ceiling = _ceiling(traces, panel)
        if ceiling is not None:
            ax.axhline(
                ceiling * 100,
                color="0.35",
                linestyle="--",
                linewidth=0.8,
                label="infinite cache",
                gid=CEILING_GID,
            )
        _capacity_axis(ax, panel.block_size if one_size else None)
        ax.set_ylabel("Token hit rate (%)")
        ax.set_ylim(bottom=0)
        ax.set_title(panel.title)
    _legend(fig, axes)
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


@_styled
def fig_small_ratio_tuning(results: pd.DataFrame, policy: str = "S3FIFO") -> Figure:
    """``policy``'s hit rate against small_ratio (one line per capacity) and a heatmap of its
    gain over LRU at the same trace, block size and capacity (percentage points)."""
    rows = _s3fifo_rows(results, policy)
    others = [k for k in _param_keys(rows) if k != "small_ratio"]
    rows, fixed = _fix_params(rows, policy, others)
    reason = _one_value(rows, "small_ratio", "small_ratio")
    if reason:
        raise SkipFigure(reason)
    lru_all = results[results["policy"] == "LRU"]
    panels = _panels(rows)
    gains = [_gain_grid(panel, lru_all) for panel in panels]
    with_heatmap = any(g is not None for g in gains)
    if not with_heatmap:
        log.info(
            "small_ratio_tuning: no LRU point at the %s capacities; the heatmap of the gain "
            "over LRU is left out",
            policy,
        )
    capacities = sorted(rows["capacity"].unique())
    colours = dict(zip(capacities, _sequential(len(capacities)), strict=True))
    markers = ["o", "s", "^", "v", "D", "P", "X", "<", ">", "h"]
    ncols = 2 if with_heatmap else (1 if len(panels) == 1 else 2)
    n_axes = 2 * len(panels) if with_heatmap else len(panels)
    fig, axes = _layout(n_axes, ncols=ncols)
    line_axes = axes[::2] if with_heatmap else axes
    for i, panel in enumerate(panels):
        ax = line_axes[i]
        for j, cap in enumerate(capacities):
            sub = panel.rows[panel.rows["capacity"] == cap].sort_values("small_ratio")
            if sub.empty:
                continue
            ax.plot(
                sub["small_ratio"],
                sub["overall_hit_rate"] * 100,
                color=colours[cap],
                marker=markers[j % len(markers)],
                label=format_count(cap),
            )
        ax.set_xlabel("small_ratio (fraction of capacity)")
        ax.set_ylabel("Token hit rate (%)")
        ax.set_title(f"{panel.title}: {policy}" + (f" ({fixed})" if fixed else ""))
        if with_heatmap:
            _heatmap(fig, axes[2 * i + 1], gains[i], _gain_bound(gains), panel, policy)
    _legend(fig, line_axes, title="Capacity (blocks)")
    return fig


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
    grid = (
        pd.DataFrame({"capacity": rows["capacity"], "small_ratio": rows["small_ratio"], "g": gain})
        .pivot_table(index="capacity", columns="small_ratio", values="g", aggfunc="mean")
        .sort_index()
        .sort_index(axis=1)
    )
    return grid


def _gain_bound(grids: Sequence[pd.DataFrame | None]) -> float:
    """The colour scale's half-range: the largest gain in any panel (the same in all)."""
    values = [g.to_numpy(dtype=float) for g in grids if g is not None]
    finite = np.concatenate([v[np.isfinite(v)] for v in values]) if values else np.zeros(0)
    bound = float(np.abs(finite).max()) if finite.size else 0.0
    return bound if bound > 0 else 1.0


def _heatmap(
    fig: Figure, ax: Axes, grid: pd.DataFrame | None, bound: float, panel: Panel, policy: str
) -> None:
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
    col_step = max(1, math.ceil(n_cols / 8))
    row_step = max(1, math.ceil(n_rows / 10))
    ax.set_xticks(range(0, n_cols, col_step))
    ax.set_xticklabels([_format_param(float(v)) for v in grid.columns[::col_step]])
    ax.set_yticks(range(0, n_rows, row_step))
    ax.set_yticklabels([format_count(v) for v in grid.index[::row_step]])
    ax.tick_params(length=0)
    ax.set_xlabel("small_ratio (fraction of capacity)")
    ax.set_ylabel("Capacity (blocks)")
    ax.set_title(f"{panel.title}: {policy} gain over LRU")
    if n_rows * n_cols <= ANNOTATE_MAX_CELLS:
        for (r, c), v in np.ndenumerate(values):
            if np.isfinite(v):
                ax.text(
                    c,
                    r,
                    f"{v:+.1f}",
                    ha="center",
                    va="center",
                    fontsize=6,
                    color="white" if abs(v) > 0.6 * bound else "black",
                )
    bar = fig.colorbar(image, ax=ax, shrink=0.9, pad=0.02)
    bar.set_label("Gain over LRU (pp)")
    bar.outline.set_linewidth(0.4)


@_styled
def fig_max_freq_effect(results: pd.DataFrame, policy: str = "S3FIFO") -> Figure:
    """``policy``'s hit rate against capacity, one line per max_freq (a panel per trace); one
    more panel per trace, with one line per ghost_freq, when ghost_freq varies."""
    rows = _s3fifo_rows(results, policy)
    keys = _param_keys(rows)
    drawn: list[str] = []
    for varied in ("max_freq", "ghost_freq"):
        if varied in keys:
            fixed, _ = _fix_params(rows, policy, [k for k in keys if k != varied])
            if _one_value(fixed, varied, varied) is None:
                drawn.append(varied)
    if not drawn:
        mf = _one_value(rows, "max_freq", "max_freq") if "max_freq" in keys else "no max_freq"
        gf = _one_value(rows, "ghost_freq", "ghost_freq") if "ghost_freq" in keys else ""
        raise SkipFigure("; ".join(r for r in (mf, gf) if r))
    panels = _panels(rows)
    one_size = rows["block_size"].nunique() == 1
    fig, axes = _layout(len(panels) * len(drawn), ncols=len(drawn) if len(drawn) > 1 else None)
    markers = ["o", "s", "^", "v", "D", "P", "X", "<", ">", "h"]
    for i, panel in enumerate(panels):
        for j, varied in enumerate(drawn):
            ax = axes[i * len(drawn) + j]
            fixed, shown = _fix_params(panel.rows, policy, [k for k in keys if k != varied])
            values = sorted(int(v) for v in rows[varied].dropna().unique())
            colours = _sequential(len(values))
            for k, value in enumerate(values):
                sub = fixed[fixed[varied].eq(value).fillna(False).astype(bool)]
                sub = sub.sort_values("capacity")
                if sub.empty:
                    continue
                ax.plot(
                    sub["capacity"],
                    sub["overall_hit_rate"] * 100,
                    color=colours[k],
                    marker=markers[k % len(markers)],
                    label=f"{varied}={value}",
                )
            _capacity_axis(ax, panel.block_size if one_size else None)
            ax.set_ylabel("Token hit rate (%)")
            ax.set_title(f"{panel.title}: {policy}")
            ax.legend(loc="best", frameon=False, title=shown or None)
    return fig


@_styled
def fig_occupancy(results: pd.DataFrame) -> Figure:
    """Final resident blocks as a share of the capacity, one line per policy."""
    reason = _one_value(results, "capacity", "capacity")
    if reason:
        raise SkipFigure(reason)
    panels = _panels(results)
    choices = _choices(results)
    fig, axes = _layout(len(panels))
    for ax, panel in zip(axes, panels, strict=True):
        for policy, choice in choices.items():
            rows = _select(panel.rows, policy, choice)
            if rows.empty:
                continue
            ax.plot(
                rows["capacity"],
                rows["final_cache_blocks"] / rows["capacity"] * 100,
                label=choice.label,
                **policy_style(policy),
            )
        _capacity_axis(ax, None)
        ax.set_ylabel("Final occupancy (% of capacity)")
        ax.set_ylim(0, 105)
        ax.set_title(panel.title)
    _legend(fig, axes)
    return fig


def default_points(results: pd.DataFrame) -> pd.DataFrame:
    """For each trace, block size and policy, its default-parameter point (see
    :func:`choose_params`) at the run's median capacity (the lower middle one of an even count;
    the nearest capacity on a log scale when the policy lacks it)."""
    if results.empty:
        return results
    capacities = np.sort(results["capacity"].unique())
    median = float(capacities[(len(capacities) - 1) // 2])
    choices = _choices(results)
    picked = []
    for panel in _panels(results):
        for policy, choice in choices.items():
            rows = _select(panel.rows, policy, choice)
            if rows.empty:
                continue
            distance = (np.log2(rows["capacity"].astype(float)) - math.log2(median)).abs()
            picked.append(rows.loc[distance.idxmin()])
    return pd.DataFrame(picked).reset_index(drop=True)


def _point_labels(points: pd.DataFrame) -> dict[int, str]:
    """Legend label of each point: its policy, plus what tells it from the others."""
    keys = _param_keys(points)
    several_caps = points["capacity"].nunique() > 1
    labels = {}
    for _, row in points.iterrows():
        same = points[points["policy"] == row["policy"]]
        extra = [
            f"{k}={_format_param(_scalar(row[k]))}"
            for k in keys
            if same[k].nunique() > 1 and not pd.isna(row[k])
        ]
        if several_caps:
            extra.append(f"{format_count(row['capacity'])} blocks")
        label = str(row["policy"])
        if extra:
            label += f" ({', '.join(extra)})"
        labels[int(row["point_id"])] = label
    return labels


def _point_panels(points: pd.DataFrame) -> list[Panel]:
    """Chosen points by trace; the panel title names their capacity when they share one."""
    out = []
    for panel in _panels(points):
        caps = panel.rows["capacity"].unique()
        title = panel.title
        if len(caps) == 1:
            title += f", {format_count(caps[0])} blocks"
        out.append(dataclasses.replace(panel, title=title))
    return out


def _point_styles(points: pd.DataFrame) -> dict[int, dict[str, Any]]:
    """Policy colour and marker; a policy's second, third... point gets another line style."""
    out = {}
    seen: dict[tuple[str, str, int], int] = {}
    for _, row in points.iterrows():
        key = (str(row["policy"]), str(row["trace_sha256"]), int(row["block_size"]))
        n = seen.get(key, 0)
        seen[key] = n + 1
        out[int(row["point_id"])] = {
            **policy_style(str(row["policy"])),
            "linestyle": _LINESTYLES[n % len(_LINESTYLES)],
        }
    return out


def _check_points(points: pd.DataFrame, per_request: pd.DataFrame | None) -> pd.DataFrame:
    if per_request is None:
        raise SkipFigure(f"{PER_REQUEST_FILE} absent (the run had save_per_request=false)")
    if points.empty:
        raise SkipFigure("no points chosen")
    have = set(per_request["point_id"].unique().tolist())
    missing = [int(p) for p in points["point_id"] if int(p) not in have]
    if len(missing) == len(points):
        raise SkipFigure(f"no per-request rows of the chosen points ({_ids(missing)})")
    if missing:
        log.info("no per-request rows of point(s) %s; left out", _ids(missing))
    return points[points["point_id"].isin(have)]


def _ids(ids: Sequence[int]) -> str:
    return ", ".join(str(i) for i in ids)


@_styled
def fig_hit_ratio_cdf(points: pd.DataFrame, per_request: pd.DataFrame | None) -> Figure:
    """CDF of the per-request hit ratio (hit_tokens / prompt_tokens; empty prompts left out) of
    each chosen point (rows of results.parquet), one panel per trace."""
    points = _check_points(points, per_request)
    assert per_request is not None
    labels = _point_labels(points)
    styles = _point_styles(points)
    panels = _point_panels(points)
    fig, axes = _layout(len(panels))
    grid = np.linspace(0.0, 1.0, CDF_GRID)
    for ax, panel in zip(axes, panels, strict=True):
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
            style = styles[int(pid)]
            ax.plot(
                np.concatenate([[0.0], grid]) * 100,
                np.concatenate([[0.0], cdf]),
                drawstyle="steps-post",
                markevery=(CDF_GRID // 20, CDF_GRID // 10),
                label=labels[int(pid)],
                **style,
            )
        ax.set_xlim(0, 100)
        ax.set_ylim(0, 1.02)
        ax.set_xlabel("Request hit ratio (% of prompt tokens)")
        ax.set_ylabel("CDF (fraction of requests)")
        ax.set_title(panel.title)
    _legend(fig, axes)
    return fig


def _time_unit(span_ms: float) -> tuple[float, str]:
    if span_ms <= 120_000:
        return 1_000.0, "s"
    if span_ms <= 120 * 60_000:
        return 60_000.0, "min"
    return 3_600_000.0, "h"


@_styled
def fig_hit_rate_over_time(
    points: pd.DataFrame,
    per_request: pd.DataFrame | None,
    requests: pd.DataFrame | None,
    n_bins: int = TIME_BINS,
) -> Figure:
    """Token hit rate of each chosen point in ``n_bins`` equal bins of request time (sum of hit
    tokens / sum of prompt tokens per bin), one panel per trace."""
    if requests is None:
        raise SkipFigure(f"{REQUESTS_FILE} absent (request timestamps are needed)")
    points = _check_points(points, per_request)
    assert per_request is not None
    traced = set(requests["trace_sha256"].unique())
    untimed = points[~points["trace_sha256"].isin(traced)]
    if len(untimed) == len(points):
        raise SkipFigure(f"{REQUESTS_FILE} has no request of the chosen points' traces")
    if not untimed.empty:
        log.info("no timestamps of trace(s) %s; left out", ", ".join(untimed["trace"].unique()))
        points = points[points["trace_sha256"].isin(traced)]
    labels = _point_labels(points)
    styles = _point_styles(points)
    panels = _point_panels(points)
    fig, axes = _layout(len(panels))
    for ax, panel in zip(axes, panels, strict=True):
        times = requests[requests["trace_sha256"] == panel.trace_sha256][["request", "timestamp"]]
        t0, t1 = float(times["timestamp"].min()), float(times["timestamp"].max())
        span = t1 - t0
        scale, unit = _time_unit(span)
        width = span / n_bins if span > 0 else 1.0
        centres = (t0 + (np.arange(n_bins) + 0.5) * width - t0) / scale
        for pid in panel.rows["point_id"]:
            rows = per_request[per_request["point_id"] == pid].merge(times, on="request")
            b = np.clip(((rows["timestamp"].to_numpy() - t0) / width).astype(np.int64), 0, None)
            b = np.minimum(b, n_bins - 1)
            prompt = np.bincount(b, rows["prompt_tokens"].to_numpy(float), minlength=n_bins)
            hits = np.bincount(b, rows["hit_tokens"].to_numpy(float), minlength=n_bins)
            busy = prompt > 0  # bins without prompt tokens are left out (the line joins them)
            style = styles[int(pid)]
            ax.plot(
                centres[busy],
                hits[busy] / prompt[busy] * 100,
                label=labels[int(pid)],
                markevery=max(1, n_bins // 10),
                **style,
            )
        ax.set_xlim(0, max(span, 1.0) / scale)
        ax.set_ylim(bottom=0)
        ax.set_xlabel(f"Time since trace start ({unit}; {format_bin(width, scale, unit)} bins)")
        ax.set_ylabel("Token hit rate (%)")
        ax.set_title(panel.title)
    _legend(fig, axes)
    return fig


def format_bin(width_ms: float, scale: float, unit: str) -> str:
    return f"{width_ms / scale:.2g} {unit}"


# --- reading and writing ------------------------------------------------------------------------

RESULT_COLUMNS = (
    "point_id",
    "trace",
    "trace_sha256",
    "policy",
    "capacity",
    "block_size",
    "overall_hit_rate",
    "final_cache_blocks",
)


def _read(path: Path, columns: Sequence[str] | None = None, **kw: Any) -> pd.DataFrame:
    try:
        return pd.read_parquet(path, columns=list(columns) if columns else None, **kw)
    except (OSError, ValueError, ImportError) as err:  # pyarrow's errors derive from these
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise PlotError(f"{path}: unreadable ({first})") from None


def _read_optional(path: Path, needed: Sequence[str], **kw: Any) -> pd.DataFrame | None:
    if not path.exists():
        return None
    try:
        df = _read(path, **kw)
    except PlotError as err:
        log.warning("%s; not used", err)
        return None
    missing = [c for c in needed if c not in df.columns]
    if missing:
        log.warning("%s: no column %s; not used", path, ", ".join(missing))
        return None
    return df


def load_results(run_dir: Path) -> pd.DataFrame:
    if not run_dir.is_dir():
        what = "not a directory" if run_dir.exists() else "no such directory"
        raise PlotError(f"{run_dir}: {what}")
    path = run_dir / RESULTS_FILE
    if not path.is_file():
        raise PlotError(f"{run_dir}: no {RESULTS_FILE} (not the directory of a finished sweep)")
    df = _read(path)
    missing = [c for c in RESULT_COLUMNS if c not in df.columns]
    if missing:
        raise PlotError(f"{path}: no column {', '.join(missing)} (not a sweep's results)")
    for key in POLICY_PARAM_KEYS:
        if key not in df.columns:
            df[key] = pd.NA
    return df


def _pick_points(results: pd.DataFrame, points: Sequence[int] | None) -> pd.DataFrame:
    if points is None:
        return default_points(results)
    wanted = [int(p) for p in points]
    known = set(results["point_id"].tolist())
    unknown = [p for p in wanted if p not in known]
    if unknown:
        raise PlotError(f"points: no point {_ids(unknown)} in {RESULTS_FILE}")
    order = {p: i for i, p in enumerate(dict.fromkeys(wanted))}
    chosen = results[results["point_id"].isin(order)]
    return chosen.sort_values("point_id", key=lambda s: s.map(order)).reset_index(drop=True)


def _check_formats(formats: Sequence[str]) -> tuple[str, ...]:
    supported = FigureCanvasBase.get_supported_filetypes()
    out = []
    for f in formats:
        f = f.strip().lower().lstrip(".")
        if f not in supported:
            allowed = ", ".join(sorted(supported))
            raise PlotError(f"invalid format {f!r}: expected one of {allowed}")
        if f not in out:
            out.append(f)
    if not out:
        raise PlotError("no output format given")
    return tuple(out)


def save_figure(fig: Figure, out_dir: Path, name: str, formats: Sequence[str]) -> list[Path]:
    """Write ``fig`` as ``out_dir/name.<format>`` for each format (each file atomically)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    with _style_context():
        for fmt in formats:
            path = out_dir / f"{name}.{fmt}"
            tmp = out_dir / f".{name}.{fmt}.{os.getpid()}.tmp"
            kw: dict[str, Any] = {"format": fmt, "bbox_inches": "tight", "pad_inches": 0.02}
            if fmt == "png":
                kw["dpi"] = PNG_DPI
            if fmt == "pdf":
                kw["metadata"] = {"CreationDate": None}  # identical bytes for identical figures
            try:
                fig.savefig(tmp, **kw)
                os.replace(tmp, path)
            except BaseException:
                with contextlib.suppress(OSError):
                    tmp.unlink()
                raise
            written.append(path)
    return written


@dataclass
class _RunData:
    run_dir: Path
    results: pd.DataFrame
    points_arg: Sequence[int] | None
    _cache: dict[str, Any] = field(default_factory=dict)

    def _once(self, key: str, make: Callable[[], Any]) -> Any:
        if key not in self._cache:
            self._cache[key] = make()
        return self._cache[key]

    @property
    def traces(self) -> pd.DataFrame | None:
        def load() -> pd.DataFrame | None:
            df = _read_optional(
                self.run_dir / TRACES_FILE, ["trace_sha256", "block_size", "ceiling_hit_rate"]
            )
            if df is None:
                log.info("%s absent: no infinite-cache ceiling drawn", TRACES_FILE)
            return df

        result: pd.DataFrame | None = self._once("traces", load)
        return result

    @property
    def points(self) -> pd.DataFrame:
        result: pd.DataFrame = self._once(
            "points", lambda: _pick_points(self.results, self.points_arg)
        )
        return result

    @property
    def per_request(self) -> pd.DataFrame | None:
        def load() -> pd.DataFrame | None:
            ids = [int(p) for p in self.points["point_id"]]
            if not ids:
                return None
            return _read_optional(
                self.run_dir / PER_REQUEST_FILE,
                ["point_id", "request", "prompt_tokens", "hit_tokens"],
                filters=[("point_id", "in", ids)],
            )

        result: pd.DataFrame | None = self._once("per_request", load)
        return result

    @property
    def requests(self) -> pd.DataFrame | None:
        def load() -> pd.DataFrame | None:
            shas = sorted(set(self.points["trace_sha256"])) if not self.points.empty else []
            return _read_optional(
                self.run_dir / REQUESTS_FILE,
                ["trace_sha256", "request", "timestamp"],
                filters=[("trace_sha256", "in", shas)] if shas else None,
            )

        result: pd.DataFrame | None = self._once("requests", load)
        return result


_FIGURES: dict[str, Callable[[_RunData], Figure]] = {
    "hit_rate_vs_capacity": lambda d: fig_hit_rate_vs_capacity(d.results, d.traces),
    "small_ratio_tuning": lambda d: fig_small_ratio_tuning(d.results),
    "max_freq_effect": lambda d: fig_max_freq_effect(d.results),
    "occupancy": lambda d: fig_occupancy(d.results),
    "hit_ratio_cdf": lambda d: fig_hit_ratio_cdf(d.points, d.per_request),
    "hit_rate_over_time": lambda d: fig_hit_rate_over_time(d.points, d.per_request, d.requests),
}


def draw_figures(
    run_dir: str | os.PathLike[str],
    out_dir: str | os.PathLike[str] | None = None,
    formats: Sequence[str] = DEFAULT_FORMATS,
    points: Sequence[int] | None = None,
) -> FigureReport:
    """Draw every figure of the run in ``run_dir`` into ``out_dir`` (default
    ``run_dir/figures``), one file per format; figures whose parameter did not vary, or whose
    input file is absent, are skipped. ``points`` (point ids) are the points of the per-request
    figures (default: see :func:`default_points`). Raises :class:`PlotError` on a missing run
    directory or results file, an unknown point id or format."""
    run = Path(os.path.abspath(run_dir))
    results = load_results(run)
    fmts = _check_formats(formats)
    out = Path(os.path.abspath(out_dir)) if out_dir is not None else run / FIGURES_DIR
    data = _RunData(run, results, points)
    if points is not None:
        _ = data.points  # an unknown id is an error even when the figures needing it are skipped
    report = FigureReport(out)
    if results.empty:
        for name in FIGURE_NAMES:
            report.skipped[name] = f"{RESULTS_FILE} has no rows"
            log.info("skipped %s: %s", name, report.skipped[name])
        return report
    for name in FIGURE_NAMES:
        try:
            fig = _FIGURES[name](data)
        except SkipFigure as skip:
            report.skipped[name] = skip.reason
            log.info("skipped %s: %s", name, skip.reason)
            continue
        try:
            paths = save_figure(fig, out, name, fmts)
        except OSError as err:
            raise PlotError(f"{out}: cannot write the figures ({err.strerror or err})") from None
        fig.clear()  # no pyplot: nothing else holds the figure
        report.written.extend(paths)
        report.drawn.append(name)
        log.info("drew %s: %s", name, ", ".join(str(p) for p in paths))
    return report


# --- command line -------------------------------------------------------------------------------


def _id_list(text: str) -> list[int]:
    try:
        ids = [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected point ids separated by commas, got {text!r}"
        ) from None
    if not ids:
        raise argparse.ArgumentTypeError("expected at least one point id")
    return ids


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m sweep.plot",
        description="Draw the figures of a finished sweep from its Parquet files.",
    )
    p.add_argument("run_dir", help="the run directory (holds results.parquet)")
    p.add_argument("--out", help="where the figures go (default: RUN_DIR/figures)")
    p.add_argument(
        "--format",
        default=",".join(DEFAULT_FORMATS),
        help="comma-separated file formats (default: png,pdf)",
    )
    p.add_argument(
        "--points",
        type=_id_list,
        help="point ids (comma-separated) of the per-request figures (default: each policy's "
        "default-parameter point at the median capacity)",
    )
    return p


@contextlib.contextmanager
def _cli_logging() -> Iterator[None]:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("sweep.plot: %(message)s"))
    previous = log.level
    log.addHandler(handler)
    if log.getEffectiveLevel() > logging.INFO:
        log.setLevel(logging.INFO)
    try:
        yield
    finally:
        log.removeHandler(handler)
        log.setLevel(previous)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m sweep.plot``: 0 done (figures may be skipped), 2 bad input."""
    args = _parser().parse_args(argv)
    formats = [f for f in args.format.split(",") if f.strip()]
    with _cli_logging():
        try:
            report = draw_figures(args.run_dir, args.out, formats=formats, points=args.points)
        except prefixsim.PrefixSimError as err:
            print(f"sweep.plot: error: {err}", file=sys.stderr)
            return 2
        log.info(
            "%d figure(s) in %s; %d skipped",
            len(report.drawn),
            report.out_dir,
            len(report.skipped),
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
