"""Shared drawing helpers of every figure kind: style, series, capacity axes, legends, layout.

A new figure kind should draw through these, so that a policy looks the same in every figure,
identical series are announced, capacities read the same and legends never cover data:

* :func:`styled` builds a figure under ``style.mplstyle``;
* :func:`policy_style` / :data:`POLICY_STYLES` give each policy one colour, marker and line
  style (colour-blind-safe colours; a prefix-aware variant shares its base policy's colour);
* :class:`Series` and :func:`draw_series` plot lines and append ``(= OTHER)`` to the label of
  a series identical to an earlier one (and ring its markers), so none is hidden unannounced;
* :func:`capacity_axis` and :func:`format_capacity` label capacities by the grid's kind:
  binary grids read ``16Ki``, decimal ones ``16K``;
* :func:`layout` and :func:`figure_legend` put one legend above the panels in rows of its own
  and grow the figure to fit it.
"""

from __future__ import annotations

import functools
import hashlib
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import matplotlib as mpl
import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

STYLE_FILE = Path(__file__).with_name("style.mplstyle")
SINGLE_COLUMN_IN = 3.4
"""Width of a single-column figure of a two-column paper (inches)."""
DOUBLE_COLUMN_IN = 7.0
"""Width of a figure spanning both columns (inches)."""
PANEL_HEIGHT_IN = 2.1
LEGEND_ROW_IN = 0.17
"""Height of one legend row at 7 pt (inches)."""
DENSE_POINTS = 16
"""A series with more points than this gets a marker on about every ``n / 8``-th point only."""
CEILING_GID = "ceiling"
"""``gid`` of the infinite-cache ceiling line (to tell it from the policies' lines)."""
CONTEXT_GID = "context"
"""``gid`` of the grey context lines of a small multiple (the other series, unlabelled)."""

# Paul Tol's "muted" scheme (colour-blind safe) and black.
INDIGO, ROSE, GREEN, TEAL, OLIVE, WINE, PURPLE, SAND, CYAN = (
    "#332288",
    "#CC6677",
    "#117733",
    "#44AA99",
    "#999933",
    "#882255",
    "#AA4499",
    "#DDCC77",
    "#88CCEE",
)
POLICY_STYLES: dict[str, tuple[str, str, str]] = {
    # name: (colour, marker, line style); fixed here (not derived from the registry's order) so
    # that a newly registered policy never changes an existing one's look. A prefix-aware
    # variant keeps its base policy's colour with another marker and line style.
    "S3FIFO": (INDIGO, "o", "-"),
    "LRU": (ROSE, "s", "-"),
    "FIFO": (GREEN, "^", "-"),
    "CLOCK": (TEAL, "v", "-."),
    "SIEVE": (OLIVE, "D", "-"),
    "LFU": (WINE, "P", "-."),
    "ARC": (PURPLE, "X", "-"),
    "BELADY": ("black", "*", ":"),
    "LRU_TAIL_FIRST": (ROSE, ">", ":"),
    "LRU_LEAF": (ROSE, "<", "--"),
    "S3FIFO_LEAF": (INDIGO, "h", "--"),
    "S3FIFO_LCS": (INDIGO, "d", ":"),  # libCacheSim's S3FIFO: the spec S3FIFO's colour
    "RADIX": (ROSE, "p", "-."),  # SGLang's radix cache: the LRU family's colour
}
PREFIX_AWARE: frozenset[str] = frozenset({"LRU_TAIL_FIRST", "LRU_LEAF", "S3FIFO_LEAF", "RADIX"})
_FALLBACK_COLOURS = [SAND, CYAN, "#555555", "#BBBBBB"]
_FALLBACK_MARKERS = ["d", "p", "H", "8", "1", "2", "3", "4"]
_FALLBACK_LINESTYLES = ["-", "--", ":", "-."]
LINESTYLES = ["-", "--", ":", "-."]
MARKERS = ["o", "s", "^", "v", "D", "P", "X", "<", ">", "h"]


@functools.cache
def style_params() -> Any:
    """The settings of ``style.mplstyle`` (read once; an ``RcParams``)."""
    return mpl.rc_params_from_file(str(STYLE_FILE), use_default_template=False)


def style_context() -> Any:
    return mpl.rc_context(style_params())


def styled(func: Callable[..., Figure]) -> Callable[..., Figure]:
    """Build the figure under the style (artists read the settings when created)."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Figure:
        with style_context():
            return func(*args, **kwargs)

    return wrapper


def policy_style(policy: str) -> dict[str, Any]:
    """``color``, ``marker`` and ``linestyle`` of ``policy``: fixed for the known policies,
    derived from a hash of the name (the same in every run) for any other."""
    if policy in POLICY_STYLES:
        colour, marker, linestyle = POLICY_STYLES[policy]
    else:
        h = int.from_bytes(hashlib.sha256(policy.encode()).digest()[:8], "big")
        colour = _FALLBACK_COLOURS[h % len(_FALLBACK_COLOURS)]
        h //= len(_FALLBACK_COLOURS)
        marker = _FALLBACK_MARKERS[h % len(_FALLBACK_MARKERS)]
        linestyle = _FALLBACK_LINESTYLES[(h // len(_FALLBACK_MARKERS)) % 4]
    return {"color": colour, "marker": marker, "linestyle": linestyle}


def policy_order(policies: Any) -> list[str]:
    """Known policies in the order of :data:`POLICY_STYLES`, then the others sorted."""
    names = {str(p) for p in policies}
    return [p for p in POLICY_STYLES if p in names] + sorted(names - set(POLICY_STYLES))


def sequential(n: int) -> list[Any]:
    """``n`` colours of an ordered parameter (viridis, without its palest yellows)."""
    cmap = mpl.colormaps["viridis"]
    if n == 1:
        return [cmap(0.0)]
    return [cmap(0.85 * i / (n - 1)) for i in range(n)]


# --- capacities ---------------------------------------------------------------------------------


def is_binary(values: Sequence[float]) -> bool:
    """Whether a grid of counts is binary: every value is a power of two or, from 1024 on, a
    multiple of 512 (``1536`` reads ``1.5Ki``; ``16000`` is not, and makes its grid decimal)."""
    for v in values:
        n = int(v)
        if n <= 0 or n != v:
            return False
        if n & (n - 1) and (n < 1024 or n % 512):
            return False
    return True


def format_capacity(value: float, binary: bool, unit: str = "") -> str:
    """``16Ki`` (binary: 1Ki = 1024) or ``16K`` (decimal: 1K = 1000), then ``unit`` (``16KiB``
    with ``unit="B"``), at most 3 significant digits and never rounded to a wrong-looking
    value: a value without a short exact form keeps its digits (``182,790`` reads
    ``182.79K``)."""
    v = float(value)
    if binary:
        prefixes = (("Ti", 1024.0**4), ("Gi", 1024.0**3), ("Mi", 1024.0**2), ("Ki", 1024.0))
    else:
        prefixes = (("T", 1e12), ("G", 1e9), ("M", 1e6), ("K", 1e3))
    for prefix, scale in prefixes:
        if abs(v) >= scale:
            q = v / scale
            text = f"{q:.3g}"
            if float(text) * scale != v:  # 15.625K must not read 15.6K
                text = f"{q:.6g}"
            return f"{text}{prefix}{unit}"
    return f"{v:.6g}{unit}"


def _log_ticks(lo: float, hi: float, binary: bool) -> list[float]:
    """Tick values from ``lo`` to ``hi``: powers of two (binary) or 1-2-5 decades (decimal),
    thinned to at most about 8."""
    if lo <= 0 or hi <= 0:
        return []
    if binary:
        ticks = [2.0**k for k in range(math.floor(math.log2(lo)), math.ceil(math.log2(hi)) + 1)]
    else:
        ticks = [
            m * 10.0**k
            for k in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1)
            for m in (1, 2, 5)
        ]
    ticks = [t for t in ticks if lo * (1 - 1e-9) <= t <= hi * (1 + 1e-9)]
    if not binary and len(ticks) > 8:
        ticks = [t for t in ticks if f"{t:g}".startswith("1")]  # decades only
    return ticks[:: max(1, math.ceil(len(ticks) / 8))]


def _ticks_or_values(lo: float, hi: float, binary: bool, values: Sequence[float]) -> list[float]:
    """:func:`_log_ticks`, or the values themselves (at most 6) when no round tick falls in a
    narrow range."""
    ticks = _log_ticks(lo, hi, binary)
    if len(ticks) >= 2:
        return ticks
    distinct = sorted(set(values))
    return distinct[:: max(1, math.ceil(len(distinct) / 6))]


def capacity_axis(
    ax: Axes,
    capacities: Sequence[float],
    block_size: int | None,
    label: str = "Capacity (blocks)",
    unit: str = "",
) -> None:
    """Log x axis of ``capacities`` (blocks, or any count: ``label`` and ``unit`` name it, e.g.
    ``"Capacity (bytes)"`` and ``"B"``), ticks and labels by the grid's kind
    (:func:`is_binary`), with a second axis on top in tokens when ``block_size`` is set."""
    caps = [float(c) for c in capacities]
    binary = is_binary(caps)
    lo, hi = min(caps), max(caps)
    ax.set_xscale("log", base=2 if binary else 10)
    ax.xaxis.set_major_locator(FixedLocator(_ticks_or_values(lo, hi, binary, caps)))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: format_capacity(v, binary, unit)))
    ax.set_xlabel(label)
    if block_size is not None:
        bs = float(block_size)
        tokens_binary = binary and is_binary([bs])

        def to_tokens(blocks: Any) -> Any:
            return np.asarray(blocks, dtype=float) * bs

        def to_blocks(tokens: Any) -> Any:
            return np.asarray(tokens, dtype=float) / bs

        top = ax.secondary_xaxis("top", functions=(to_tokens, to_blocks))
        top.xaxis.set_major_locator(
            FixedLocator(_ticks_or_values(lo * bs, hi * bs, tokens_binary, [c * bs for c in caps]))
        )
        top.xaxis.set_minor_locator(NullLocator())
        top.xaxis.set_major_formatter(FuncFormatter(lambda v, _: format_capacity(v, tokens_binary)))
        top.set_xlabel("Capacity (tokens)")


# --- series -------------------------------------------------------------------------------------


@dataclass
class Series:
    """One line of one panel: ``key`` names the series across panels (a policy, a point)."""

    panel: int
    key: str
    label: str
    x: np.ndarray
    y: np.ndarray
    style: dict[str, Any] = field(default_factory=dict)


def markevery(n: int) -> int | None:
    """Markers on every point of a short series, on about 8 of a dense one."""
    return None if n <= DENSE_POINTS else max(1, n // 8)


def duplicates(series: Sequence[Series]) -> dict[str, str]:
    """``key -> earlier key`` for each series identical to an earlier one in every panel where
    it is drawn (same x and y), so that it would be hidden under it."""
    by_key: dict[str, dict[int, Series]] = {}
    for s in series:
        by_key.setdefault(s.key, {})[s.panel] = s
    keys = list(by_key)
    out: dict[str, str] = {}
    for i, key in enumerate(keys):
        for earlier in keys[:i]:
            if earlier in out:
                continue
            mine, theirs = by_key[key], by_key[earlier]
            if all(p in theirs and _same_line(s, theirs[p]) for p, s in mine.items()):
                out[key] = earlier
                break
    return out


def _same_line(a: Series, b: Series) -> bool:
    return (
        a.x.shape == b.x.shape
        and a.y.shape == b.y.shape
        and bool(np.allclose(a.x, b.x, rtol=0, atol=1e-12))
        and bool(np.allclose(a.y, b.y, rtol=1e-9, atol=1e-9, equal_nan=True))
    )


def draw_series(axes: Sequence[Axes], series: Sequence[Series], markers: bool = True) -> None:
    """Plot every series on its panel. A series identical to an earlier one is labelled
    ``LABEL (= EARLIER)`` and drawn with hollow, larger markers, so both stay visible."""
    same = duplicates(series)
    labels = {s.key: s.label for s in series}
    for s in series:
        style = dict(s.style)
        if not markers:
            style["marker"] = None
        elif style.get("marker"):
            style.setdefault("markevery", markevery(len(s.x)))
        label = s.label
        if s.key in same:
            label = f"{s.label} (= {labels[same[s.key]]})"
            if style.get("marker"):
                style.update(markerfacecolor="none", markersize=6, markeredgewidth=0.8)
            style.setdefault("zorder", 3)
        axes[s.panel].plot(s.x, s.y, label=label, **style)


# --- layout and legend --------------------------------------------------------------------------


def layout(
    n_panels: int, ncols: int | None = None, panel_height: float = PANEL_HEIGHT_IN
) -> tuple[Figure, list[Axes]]:
    """A figure of ``n_panels`` panels: one column wide for one panel, both columns above."""
    if ncols is None:
        ncols = 1 if n_panels == 1 else (2 if n_panels in (2, 4) else 3)
    ncols = max(1, min(ncols, n_panels))
    nrows = math.ceil(n_panels / ncols)
    width = SINGLE_COLUMN_IN if ncols == 1 else DOUBLE_COLUMN_IN
    fig = Figure(figsize=(width, panel_height * nrows + 0.3), layout="constrained")
    axes = list(np.asarray(fig.subplots(nrows, ncols, squeeze=False)).ravel())
    for ax in axes[n_panels:]:
        fig.delaxes(ax)
    return fig, axes[:n_panels]


ENTRY_PAD_IN = 0.5
"""Width of a legend entry's handle, its padding and the column spacing (inches)."""


_NARROW = frozenset("fijlrtI ()[].,:;'!|-")
_MEDIUM = frozenset("_cksvxyz")
_WIDE = frozenset("mwMW=+%")


def text_width_in(text: str, size: float = 7.0) -> float:
    """Width of ``text`` at ``size`` points in DejaVu Sans (matplotlib's default font), in
    inches, from its advance widths in em: about 0.33 for narrow characters, 0.9 for wide ones,
    0.53 for ``_`` and some lower-case letters, 0.68 for other capitals, 0.62 for the rest. It
    errs up to 10 % wide, never narrow, for labels, and needs no renderer (a TextPath per label
    costs 15 ms)."""
    em = 0.0
    for c in text:
        if c in _NARROW:
            em += 0.33
        elif c in _WIDE:
            em += 0.9
        elif c in _MEDIUM:
            em += 0.53
        elif c.isupper():
            em += 0.68
        else:
            em += 0.62
    return em * size / 72


def legend_columns(labels: Sequence[str], width_in: float, most: int = 8) -> int:
    """The most columns (at most ``most``) whose estimated width fits in ``width_in``; the
    legend fills column by column, so each column is as wide as its longest label."""
    for ncol in range(min(most, len(labels)), 1, -1):
        nrows = math.ceil(len(labels) / ncol)
        columns = [labels[i : i + nrows] for i in range(0, len(labels), nrows)]
        need = sum(ENTRY_PAD_IN + max(text_width_in(t) for t in col) for col in columns)
        if need <= width_in - 0.1:
            return ncol
    return 1


def figure_legend(fig: Figure, axes: Sequence[Axes], title: str | None = None) -> None:
    """One legend above the panels (each label once), in rows of its own: the figure grows by
    the legend's height, so the panels keep their size however many series there are."""
    seen: dict[str, Any] = {}
    for ax in axes:
        handles, labels = ax.get_legend_handles_labels()
        for h, label in zip(handles, labels, strict=True):
            seen.setdefault(label, h)
    if not seen:
        return
    ncol = legend_columns(list(seen), fig.get_figwidth())
    rows = math.ceil(len(seen) / ncol) + (1 if title else 0)
    w, h = fig.get_size_inches()
    fig.set_size_inches(w, h + rows * LEGEND_ROW_IN + 0.05)
    fig.legend(
        list(seen.values()),
        list(seen),
        loc="outside upper center",
        ncol=ncol,
        title=title,
    )
