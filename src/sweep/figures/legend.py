"""Figure size, panels and the one legend above them.

:func:`layout` makes the panels (one column wide for one panel, both columns above);
:func:`finish` ends every figure: markers kept visible (:func:`~.series.separate_markers`),
then one legend above the panels, in as many columns as fit the figure's width (estimated
from the labels' advance widths, the way matplotlib fills the columns), in rows of its own:
the figure grows by the legend's height, so the panels keep their size.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from matplotlib.artist import Artist
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from .series import separate_markers

SINGLE_COLUMN_IN = 3.4
"""Width of a single-column figure of a two-column paper (inches)."""
DOUBLE_COLUMN_IN = 7.0
"""Width of a figure spanning both columns (inches)."""
PANEL_HEIGHT_IN = 2.1
LEGEND_ROW_IN = 0.17
"""Height of one legend row at 7 pt (inches)."""
ENTRY_PAD_IN = 0.5
"""Width of a legend entry's handle (2.6 em), its padding (0.8 em) and the column spacing
(1 em) at 7 pt, with room to spare (inches)."""
MARGIN_IN = 0.1
NARROW_SERIES = 6
"""A single panel of more series than this spans both columns (and is
:data:`WIDE_PANEL_HEIGHT` times taller): the markers of near-equal series need room to stand
side by side."""
WIDE_PANEL_HEIGHT = 1.35
"""Room left beside the legend at the figure's edges (inches)."""


def layout(
    n_panels: int,
    ncols: int | None = None,
    panel_height: float = PANEL_HEIGHT_IN,
    sharey: bool | str = False,
    series: int = 0,
) -> tuple[Figure, list[Axes]]:
    """A figure of ``n_panels`` panels: one column wide for one panel of at most
    :data:`NARROW_SERIES` series (``series``: the most of any panel), both columns otherwise;
    ``sharey``: one y scale for all panels (panels of one quantity), or ``"row"`` per row."""
    if ncols is None:
        ncols = 1 if n_panels == 1 else (2 if n_panels in (2, 4) else 3)
    ncols = max(1, min(ncols, n_panels))
    nrows = math.ceil(n_panels / ncols)
    width = SINGLE_COLUMN_IN if ncols == 1 else DOUBLE_COLUMN_IN
    if ncols == 1 and series > NARROW_SERIES:
        width, panel_height = DOUBLE_COLUMN_IN, panel_height * WIDE_PANEL_HEIGHT
    fig = Figure(figsize=(width, panel_height * nrows + 0.3), layout="constrained")
    grid = fig.subplots(nrows, ncols, squeeze=False, sharey=sharey)  # type: ignore[arg-type]
    axes = list(np.asarray(grid).ravel())
    for ax in axes[n_panels:]:
        fig.delaxes(ax)
    if sharey:
        for ax in axes[:n_panels]:
            ax.yaxis.set_tick_params(labelleft=True)  # every panel keeps its numbers
    return fig, axes[:n_panels]


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


def _columns(labels: Sequence[str], ncol: int) -> list[Sequence[str]]:
    """The labels of each column as matplotlib's legend fills them: column by column, the
    first ``len % ncol`` columns one entry longer."""
    rows, large = divmod(len(labels), ncol)
    out, start = [], 0
    for c in range(ncol):
        n = rows + (1 if c < large else 0)
        out.append(labels[start : start + n])
        start += n
    return [col for col in out if col]


def legend_width_in(labels: Sequence[str], ncol: int, title: str | None = None) -> float:
    """Estimated width of a legend of ``labels`` in ``ncol`` columns (inches)."""
    columns = _columns(labels, ncol)
    width = sum(ENTRY_PAD_IN + max(text_width_in(t) for t in col) for col in columns)
    return max(width, text_width_in(title) if title else 0.0)


def legend_columns(
    labels: Sequence[str], width_in: float, most: int = 8, title: str | None = None
) -> int:
    """The most columns (at most ``most``) whose estimated width fits in ``width_in``."""
    for ncol in range(min(most, len(labels)), 1, -1):
        if legend_width_in(labels, ncol, title) <= width_in - MARGIN_IN:
            return ncol
    return 1


def figure_legend(
    fig: Figure,
    axes: Sequence[Axes],
    title: str | None = None,
    extra: Sequence[tuple[Artist, str]] = (),
) -> None:
    """One legend above the panels (each label once; ``extra`` handles, such as a line-style
    key, after the series), in rows of its own: the figure grows by the legend's height, so
    the panels keep their size however many series there are."""
    seen: dict[str, Any] = {}
    for ax in axes:
        handles, labels = ax.get_legend_handles_labels()
        for h, label in zip(handles, labels, strict=True):
            seen.setdefault(label, _proxy(h))
    for h, label in extra:
        seen.setdefault(label, h)
    if not seen:
        return
    w, h = fig.get_size_inches()
    widest = max(text_width_in(t) for t in seen) + ENTRY_PAD_IN + MARGIN_IN
    if widest > w:  # a label longer than the figure: widen the figure rather than clip it
        w = widest
    ncol = legend_columns(list(seen), w, title=title)
    rows = math.ceil(len(seen) / ncol) + (1 if title else 0)
    fig.set_size_inches(w, h + rows * LEGEND_ROW_IN + 0.05)
    fig.legend(
        list(seen.values()),
        list(seen),
        loc="outside upper center",
        ncol=ncol,
        title=title,
    )


def _proxy(handle: Any) -> Any:
    """A legend handle that draws like ``handle``: a line's copy marks its one legend point
    whatever points the line itself marks (:func:`~.series.separate_markers` moves them)."""
    if not isinstance(handle, Line2D):
        return handle
    proxy = Line2D([], [])
    proxy.update_from(handle)
    proxy.set_markevery(None)
    return proxy


def finish(
    fig: Figure,
    axes: Sequence[Axes],
    title: str | None = None,
    extra: Sequence[tuple[Artist, str]] = (),
) -> Figure:
    """End a figure once its limits are set: every marker kept visible in each panel
    (:func:`~.series.separate_markers`), then the legend above the panels
    (:func:`figure_legend`). Returns ``fig``."""
    for ax in axes:
        _ = (ax.get_xlim(), ax.get_ylim())  # apply pending autoscaling: rings need the limits
        separate_markers(ax)
    figure_legend(fig, axes, title, extra)
    return fig
