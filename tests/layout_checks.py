"""Readability checks of a drawn figure, with matplotlib's own bounding boxes (no pixels).

:func:`problems` lists, in words, what makes a figure hard to read:

* a legend that overlaps an axes (its plotting area) or a text outside the legend;
* a text (title, axis label, tick label, legend entry, cell value) that sticks out of the
  figure or overlaps another text;
* a labelled line identical to another labelled line of the same axes (same x and y), so it is
  hidden under it, without a ``(= OTHER)`` note in its label.
"""

from __future__ import annotations

import contextlib
import itertools
from typing import Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure, SubFigure
from matplotlib.legend import Legend
from matplotlib.text import Text
from matplotlib.transforms import Bbox

TOLERANCE_PX = 0.5
"""Boxes that merely touch (antialiasing, rounding) do not count as overlapping."""


def _shrunk(box: Bbox) -> Bbox:
    return Bbox.from_extents(
        box.x0 + TOLERANCE_PX, box.y0 + TOLERANCE_PX, box.x1 - TOLERANCE_PX, box.y1 - TOLERANCE_PX
    )


def _overlap(a: Bbox, b: Bbox) -> bool:
    a, b = _shrunk(a), _shrunk(b)
    return a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1


def _shown(text: Text) -> bool:
    return bool(text.get_visible() and text.get_text().strip())


def _tick_labels(ax: Axes) -> list[Text]:
    """The tick labels matplotlib draws: those of ticks inside the view interval."""
    out = []
    for axis, index in ((ax.xaxis, 0), (ax.yaxis, 1)):
        if not axis.get_visible():
            continue
        lo, hi = sorted(axis.get_view_interval())
        span = hi - lo
        for label in axis.get_ticklabels(which="both"):
            pos = label.get_position()[index]
            if lo - 1e-9 * abs(span) <= pos <= hi + 1e-9 * abs(span) and _shown(label):
                out.append(label)
    return out


def _all_axes(fig: Figure) -> list[Axes]:
    axes: list[Axes] = []
    for ax in fig.get_axes():
        axes.append(ax)
        axes.extend(a for a in ax.child_axes if isinstance(a, Axes))
    return axes


def _containers(fig: Figure) -> list[Figure | SubFigure]:
    out: list[Figure | SubFigure] = [fig]
    for sub in fig.subfigs:
        out.extend(_containers(sub))  # type: ignore[arg-type]
    return out


def _legends(fig: Figure) -> list[Legend]:
    out = [leg for f in _containers(fig) for leg in f.legends]
    out += [ax.get_legend() for ax in _all_axes(fig) if ax.get_legend() is not None]
    return out


def texts(fig: Figure) -> list[tuple[str, Text]]:
    """Every drawn text of ``fig``, with a name for the messages."""
    out: list[tuple[str, Text]] = []
    for f in _containers(fig):
        for attr in ("_suptitle", "_supxlabel", "_supylabel"):
            t = getattr(f, attr, None)
            if t is not None and _shown(t):
                out.append((attr.strip("_"), t))
    for ax in _all_axes(fig):
        if not ax.axison:
            out.extend(("axes text", t) for t in ax.texts if _shown(t))
            continue
        name = ax.get_title() or ax.get_label() or "axes"
        for t in (ax.title, ax._left_title, ax._right_title):  # type: ignore[attr-defined]
            if _shown(t):
                out.append((f"title of {name}", t))
        for t in (ax.xaxis.label, ax.yaxis.label):
            if _shown(t):
                out.append((f"axis label of {name}", t))
        out.extend((f"tick label of {name}", t) for t in _tick_labels(ax))
        out.extend((f"text in {name}", t) for t in ax.texts if _shown(t))
    for leg in _legends(fig):
        out.extend(("legend entry", t) for t in leg.get_texts() if _shown(t))
        if _shown(leg.get_title()):
            out.append(("legend title", leg.get_title()))
    return out


def _label(t: Text) -> str:
    return repr(t.get_text())


def hidden_series(fig: Figure) -> list[str]:
    """Labelled lines identical to an earlier labelled line of their axes, without notice."""
    out = []
    for ax in _all_axes(fig):
        lines = [ln for ln in ax.get_lines() if not str(ln.get_label()).startswith("_")]
        for a, b in itertools.combinations(lines, 2):
            xa, ya = np.asarray(a.get_xdata(), float), np.asarray(a.get_ydata(), float)
            xb, yb = np.asarray(b.get_xdata(), float), np.asarray(b.get_ydata(), float)
            if xa.shape != xb.shape or ya.shape != yb.shape:
                continue
            same = np.allclose(xa, xb) and np.allclose(ya, yb, equal_nan=True)
            if same and "(= " not in str(b.get_label()):
                out.append(
                    f"{b.get_label()!r} is hidden under {a.get_label()!r} in "
                    f"{ax.get_title()!r} without notice"
                )
    return out


def draw(fig: Figure) -> Any:
    """Lay ``fig`` out as saving with ``bbox_inches="tight"`` does (two draws: the second
    lays out with the tick labels the first one chose), and return the renderer."""
    FigureCanvasAgg(fig)
    fig.draw_without_rendering()
    fig.draw_without_rendering()
    return fig.canvas.get_renderer()  # type: ignore[attr-defined]


def problems(fig: Figure, context: Any = None) -> list[str]:
    """Everything that makes ``fig`` hard to read (see the module docstring); [] when none.
    ``context`` (the figures' rc settings) is entered for the whole check, as saving does:
    matplotlib creates tick labels lazily, with the settings in force at that moment."""
    with context if context is not None else contextlib.nullcontext():
        return _problems(fig)


def _problems(fig: Figure) -> list[str]:
    renderer = draw(fig)
    found: list[str] = []
    page = fig.bbox
    named = [(name, t, t.get_window_extent(renderer)) for name, t in texts(fig)]
    for name, t, box in named:
        if (
            box.x0 < page.x0 - TOLERANCE_PX
            or box.y0 < page.y0 - TOLERANCE_PX
            or box.x1 > page.x1 + TOLERANCE_PX
            or box.y1 > page.y1 + TOLERANCE_PX
        ):
            found.append(f"{name} {_label(t)} is clipped by the figure edge")
    for (n1, t1, b1), (n2, t2, b2) in itertools.combinations(named, 2):
        if _overlap(b1, b2):
            found.append(f"{n1} {_label(t1)} overlaps {n2} {_label(t2)}")
    plotting_areas = [
        (ax.get_title() or ax.get_label(), ax.get_window_extent(renderer))
        for ax in fig.get_axes()
        if ax.axison
    ]
    for leg in _legends(fig):
        box = leg.get_window_extent(renderer)
        for name, area in plotting_areas:
            if _overlap(box, area):
                found.append(f"a legend overlaps the axes {name!r}")
        own = set(map(id, leg.get_texts())) | {id(leg.get_title())}
        for name, t, tbox in named:
            if id(t) not in own and _overlap(box, tbox):
                found.append(f"a legend overlaps {name} {_label(t)}")
    found.extend(hidden_series(fig))
    return found
