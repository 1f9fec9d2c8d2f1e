"""Readability checks of a drawn figure, with matplotlib's own bounding boxes (no pixels).

:func:`problems` lists, in words, what makes a figure hard to read:

* a legend that overlaps an axes (its plotting area) or a text outside the legend;
* a text (title, axis label, tick label, legend entry, cell value) that sticks out of the
  figure or overlaps another text;
* a labelled line identical to another labelled line of the same axes (same x and y), so it is
  hidden under it, without a ``(= OTHER)`` note in its label;
* a series of which no pixel, or one of whose markers, is left visible by the lines drawn over
  it (:func:`covered`: the lines are rendered once more, each in a colour of its own, so every
  pixel says which series is on top there), unless its label announces it ``(= OTHER)``;
* what breaks the one style of the figures (:func:`style_problems`): a legend inside an axes
  or below the panels, rotated tick labels, powers (``2^13``) or brackets (``[blocks]``) in
  labels, a hit rate not in percent, a rate's y axis not from 0, a hit rate against capacity
  without the infinite-cache ceiling, panels of one quantity (one y label) on different y
  scales.

:func:`run_problems` checks the figures of one run together: a series (a policy, a router, a
point) drawn in one colour and line style in every figure, one marker wherever it has markers,
and two policies never in one colour.
"""

from __future__ import annotations

import contextlib
import itertools
from typing import Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import to_rgba
from matplotlib.figure import Figure, SubFigure
from matplotlib.legend import Legend
from matplotlib.lines import Line2D, _mark_every_path
from matplotlib.path import Path
from matplotlib.text import Text
from matplotlib.transforms import Bbox, IdentityTransform

TOLERANCE_PX = 0.5
"""Boxes that merely touch (antialiasing, rounding) do not count as overlapping."""
MIN_VISIBLE_PX = 3
"""A series or a marker with fewer pixels of its own on top is hidden (at the figure's dpi)."""
PART_PREFIX = "_part of "
"""Label of an unlabelled artist that belongs to the series named after it (extra markers)."""
CEILING_LABEL = "infinite cache"


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


def series_name(line: Line2D) -> str | None:
    """The series a line belongs to: its label, the name after :data:`PART_PREFIX`, or None
    (an unlabelled helper line: a grid line, a reference line, grey context)."""
    label = str(line.get_label())
    if label.startswith(PART_PREFIX):
        return label[len(PART_PREFIX) :]
    if label.startswith("_") or not line.get_visible():
        return None
    return label


def _directions(n: int) -> np.ndarray:
    """``n`` unit vectors of RGB space, all components positive, at least 15 degrees from the
    grey diagonal and spread apart (a Fibonacci lattice of the sphere, thinned)."""
    m = 4000
    k = np.arange(m) + 0.5
    z = 1 - 2 * k / m
    phi = np.pi * (3 - np.sqrt(5)) * k
    pts = np.column_stack([np.sqrt(1 - z**2) * np.cos(phi), np.sqrt(1 - z**2) * np.sin(phi), z])
    diagonal = np.ones(3) / np.sqrt(3)
    keep = (pts > 0.05).all(axis=1) & (pts @ diagonal < np.cos(np.radians(15)))
    pts = pts[keep]
    return pts[np.linspace(0, len(pts) - 1, n).round().astype(int)]


ID_DEPTH = 200.0
"""How far (0-255) below white each ID colour lies along its direction."""
ID_COS = np.cos(np.radians(1.5))
"""A pixel is an ID colour's when its direction from white is this close to the colour's: an
antialiased blend of the colour with white keeps the direction, any other blend does not."""


def _id_colours(n: int) -> np.ndarray:
    """``n`` colours (0-1 RGB), each along a direction of its own from white
    (:func:`_directions`)."""
    d = _directions(n)
    return 1 - ID_DEPTH / 255 * d / d.max(axis=1, keepdims=True)


def _owners(image: np.ndarray, colours: np.ndarray) -> np.ndarray:
    """For each pixel, the index of the ID colour it shows (a blend of that colour with
    white covering at least a third of the pixel), or -1."""
    v = 255.0 - image.reshape(-1, 3).astype(float)
    dirs = 255.0 - colours * 255.0
    depth = np.linalg.norm(dirs, axis=1)
    out = np.full(len(v), -1)
    norm = np.linalg.norm(v, axis=1)
    candidates = np.flatnonzero(norm > 20)
    cos = (v[candidates] @ (dirs / depth[:, None]).T) / norm[candidates, None]
    best = cos.argmax(axis=1)
    ok = (cos[np.arange(len(best)), best] > ID_COS) & (norm[candidates] > depth[best] / 3)
    out[candidates[ok]] = best[ok]
    return out.reshape(image.shape[:2])


def _marker_centres(line: Line2D) -> np.ndarray:
    """Display coordinates of the markers matplotlib draws for ``line`` (its ``markevery``;
    markers ignore the draw style)."""
    if line.get_marker() in (None, "None", "none", "", " ") or line.get_markersize() <= 0:
        return np.zeros((0, 2))
    xy = line.get_transform().transform(np.asarray(line.get_xydata(), float))
    xy = xy[np.isfinite(xy).all(axis=1)]
    every = line.get_markevery()
    if every is None or len(xy) == 0:
        return xy
    path = _mark_every_path(every, Path(xy), IdentityTransform(), line.axes)
    return np.asarray(path.vertices)


def _render_ids(
    fig: Figure, lines: list[tuple[Axes, Line2D, str]], colour_of: dict[tuple[int, str], Any]
) -> np.ndarray:
    """``fig`` drawn with every series' lines in its ID colour (``colour_of[(id(ax), name)]``),
    fills, images and grid lines hidden; the RGB image. The figure is left as it was."""
    saved = []
    for ax, line, name in lines:
        raw = (line._color, line._markerfacecolor, line._markeredgecolor)  # type: ignore[attr-defined]
        saved.append((line, raw, line.get_alpha()))
        rgb = colour_of[(id(ax), name)]
        line.set_color(rgb)
        line.set_markeredgecolor(rgb)
        if str(line.get_markerfacecolor()).lower() != "none":
            line.set_markerfacecolor(rgb)
        line.set_alpha(None)
    shown = [a for ax in _all_axes(fig) for a in (*ax.collections, *ax.images) if a.get_visible()]
    shown += [  # grid lines lie under the series, and a series on one would blend with it
        t.gridline
        for ax in _all_axes(fig)
        for axis in (ax.xaxis, ax.yaxis)
        for t in (*axis.get_major_ticks(), *axis.get_minor_ticks())
        if t.gridline.get_visible()
    ]
    for a in shown:
        a.set_visible(False)
    try:
        fig.canvas.draw()
        return np.asarray(fig.canvas.buffer_rgba())[..., :3].copy()  # type: ignore[attr-defined]
    finally:
        for line, (colour, face, edge), alpha in saved:
            line.set_color(colour)
            line.set_markerfacecolor(face)
            line.set_markeredgecolor(edge)
            line.set_alpha(alpha)
        for a in shown:
            a.set_visible(True)


def covered(fig: Figure) -> list[str]:
    """Series (labelled lines of an axes, with their parts) entirely hidden under the lines
    drawn over them, and markers of a series hidden so, at the figure's dpi. Every line is
    drawn once more in a colour of its own (:func:`_id_colours`), fills, images and grid
    lines left out, the rest as it is; a pixel of that colour (or of its blend with white at
    an edge) is a pixel of the series on top. A series announced ``(= OTHER)`` may be hidden."""
    lines: list[tuple[Axes, Line2D, str]] = []
    for ax in _all_axes(fig):
        for line in ax.get_lines():
            name = series_name(line)
            if name is not None:
                lines.append((ax, line, name))
    if not lines:
        return []
    keys = list(dict.fromkeys((id(ax), name) for ax, _, name in lines))
    colours = _id_colours(len(keys))
    image = _render_ids(fig, lines, {key: tuple(colours[k]) for k, key in enumerate(keys)})
    owners = _owners(image, colours)
    height = image.shape[0]
    found = []
    for key in keys:
        ax = next(a for a, _, n in lines if (id(a), n) == key)
        name = key[1]
        if "(= " in name:
            continue
        mine = owners == keys.index(key)
        title = ax.get_title() or ax.get_label()
        if int(mine.sum()) < MIN_VISIBLE_PX:
            found.append(f"{name!r} is hidden under other series in {title!r} without notice")
            continue
        box = ax.get_window_extent()
        spots: dict[tuple[int, int], float] = {}  # marker places of the series -> radius
        for a, line, n in lines:
            if (id(a), n) != key:
                continue
            radius = line.get_markersize() / 2 * fig.dpi / 72
            for x, y in _marker_centres(line):
                if box.x0 <= x <= box.x1 and box.y0 <= y <= box.y1:
                    spot = (round(x * 2), round(y * 2))  # half-pixel places
                    spots[spot] = max(spots.get(spot, 0.0), radius)
        total = len(spots)
        hidden = sum(
            1
            for (x2, y2), radius in spots.items()
            if _pixels_near(mine, height - y2 / 2, x2 / 2, radius) < 2
        )
        if hidden:
            found.append(
                f"{hidden} of {total} markers of {name!r} in {title!r} are hidden under other "
                "series"
            )
    return found


def _pixels_near(mask: np.ndarray, row: float, col: float, radius: float) -> int:
    """Pixels set in ``mask`` within ``radius`` of (``row``, ``col``) (image coordinates)."""
    r0, c0 = max(0, int(row - radius)), max(0, int(col - radius))
    window = mask[r0 : int(row + radius) + 1, c0 : int(col + radius) + 1]
    yy, xx = np.mgrid[r0 : r0 + window.shape[0], c0 : c0 + window.shape[1]]
    disc = (yy + 0.5 - row) ** 2 + (xx + 0.5 - col) ** 2 <= radius**2
    return int((window & disc).sum())


_RATE_WORDS = ("hit rate", "saved", "share")


def style_problems(fig: Figure) -> list[str]:
    """What breaks the figures' one style (see the module docstring); [] when nothing."""
    found = []
    panels = [ax for ax in fig.get_axes() if ax.axison and ax.get_label() != "<colorbar>"]
    tops = [ax.get_window_extent().y1 for ax in panels]
    for leg in _legends(fig):
        if leg.axes is not None and leg in [ax.get_legend() for ax in _all_axes(fig)]:
            found.append(f"a legend inside the axes {leg.axes.get_title()!r}")
        elif tops and leg.get_window_extent().y0 < max(tops) - TOLERANCE_PX:
            found.append("a legend below the top of the panels")
    for ax in _all_axes(fig):
        if not ax.axison:
            continue
        title = ax.get_title() or ax.get_label()
        for label in _tick_labels(ax):
            if label.get_rotation() % 360:
                found.append(f"tick label {_label(label)} of {title!r} is rotated")
            if "^" in label.get_text() or "$" in label.get_text():
                found.append(f"tick label {_label(label)} of {title!r} is a power")
        ylabel, xlabel = ax.get_ylabel(), ax.get_xlabel()
        for text in (ylabel, xlabel):
            if "[" in text or "$" in text or "^" in text:
                found.append(f"axis label {text!r} of {title!r}: brackets or powers")
        low = ylabel.lower()
        if "hit rate" in low and "(%)" not in ylabel and "(pp)" not in ylabel:
            found.append(f"the hit rate of {title!r} is not in % ({ylabel!r})")
        difference = "(pp)" in ylabel or " - " in ylabel or "gain" in low
        rate = any(w in low for w in _RATE_WORDS) and not difference
        if rate and ax.get_yscale() == "linear" and abs(ax.get_ylim()[0]) > 1e-12:
            found.append(f"the y axis of {title!r} ({ylabel!r}) does not start at 0")
        against_capacity = "capacity (" in xlabel.lower() or "cache size" in xlabel.lower()
        if "hit rate" in low and not difference and against_capacity:
            labels = [str(ln.get_label()) for ln in ax.get_lines()]
            if CEILING_LABEL not in labels and "ceiling" not in [
                ln.get_gid() for ln in ax.get_lines()
            ]:
                found.append(f"no infinite-cache ceiling in {title!r}")
    return found


def scale_problems(fig: Figure) -> list[str]:
    """Panels of one quantity (the same y label and y scale) whose y limits differ: read side
    by side, the same height must mean the same value."""
    limits: dict[tuple[str, str], dict[tuple[float, float], str]] = {}
    for ax in fig.get_axes():
        if not ax.axison or not ax.get_ylabel():
            continue
        lo, hi = ax.get_ylim()
        key = (ax.get_ylabel(), ax.get_yscale())
        limits.setdefault(key, {}).setdefault((round(lo, 9), round(hi, 9)), ax.get_title())
    return [
        f"panels of {label!r} on {len(seen)} y scales: "
        + ", ".join(f"{t!r} {lo:g} to {hi:g}" for (lo, hi), t in seen.items())
        for (label, _), seen in limits.items()
        if len(seen) > 1
    ]


Look = tuple[tuple[float, ...], str | None, str | None]
"""A series' look in one figure: colour (RGBA), line style, marker (None: not drawn)."""


def _same_note(label: str) -> str:
    """A series' label without its ``(= OTHER)`` notice (it is the same series)."""
    return label.split(" (= ", 1)[0]


def _line_style(line: Line2D) -> str | None:
    """``-``, or the style's name and its dashes (matplotlib names every dash tuple ``--``),
    or None for markers without a line."""
    name = str(line.get_linestyle())
    if name in ("None", "none", "", " "):
        return None
    dashes = line._unscaled_dash_pattern[1]  # type: ignore[attr-defined]
    return name if dashes is None else f"{name} {tuple(round(float(d), 2) for d in dashes)}"


def looks_by_series(fig: Figure) -> dict[str, set[Look]]:
    """The looks (colour, line style or None, marker or None) each series is drawn in: its
    labelled lines, by label (without an ``(= OTHER)`` notice), in every axes of ``fig``; the lines
    drawn for a series' other parts (``_part of``: its p99, its moved markers) are left out."""
    out: dict[str, set[Look]] = {}
    for ax in _all_axes(fig):
        for line in ax.get_lines():
            label = str(line.get_label())
            if label.startswith("_") or not line.get_visible():
                continue
            colour = tuple(round(c, 4) for c in to_rgba(line.get_color()))
            marker = line.get_marker()
            shown = None if marker in (None, "None", "none", "", " ") else str(marker)
            look = (colour, _line_style(line), shown)
            out.setdefault(_same_note(label), set()).add(look)
    return out


def run_problems(figures: dict[str, Figure], policies: Any) -> list[str]:
    """What breaks the one style across the figures of one run (``figures`` by name): a series
    in two colours, two line styles or two markers (a figure drawn without markers, or with
    markers only, does not count for them), a policy in two colours, two policies in one
    colour."""
    found = []
    looks: dict[str, dict[Look, list[str]]] = {}
    for name, fig in figures.items():
        for label, drawn in looks_by_series(fig).items():
            for look in drawn:
                looks.setdefault(label, {}).setdefault(look, []).append(name)
    for label, where_drawn in looks.items():
        for what, part in (("colours", 0), ("line styles", 1), ("markers", 2)):
            values: dict[Any, list[str]] = {}
            for look, names in where_drawn.items():
                if look[part] is not None:
                    values.setdefault(look[part], []).extend(names)
            if len(values) > 1:
                where = "; ".join(f"{v} in {', '.join(sorted(set(n)))}" for v, n in values.items())
                found.append(f"{label!r} is drawn in {len(values)} {what}: {where}")
    colours: dict[str, set[tuple[float, ...]]] = {}
    for fig in figures.values():
        for policy, seen_colours in colours_by_policy(fig, policies).items():
            colours.setdefault(policy, set()).update(seen_colours)
    for policy, c in colours.items():
        if len(c) > 1:
            found.append(f"policy {policy!r} is drawn in {len(c)} colours")
    owners: dict[tuple[float, ...], list[str]] = {}
    for policy, c in colours.items():
        for colour in c:
            owners.setdefault(colour, []).append(policy)
    found.extend(
        f"policies {sorted(p)} share the colour {colour}"
        for colour, p in owners.items()
        if len(p) > 1
    )
    return found


def colours_by_policy(fig: Figure, policies: Any) -> dict[str, set[tuple[float, ...]]]:
    """The colours each policy's series are drawn in (labelled lines whose label starts with
    a policy's name, in every axes of ``fig``)."""
    names = sorted((str(p) for p in policies), key=len, reverse=True)
    out: dict[str, set[tuple[float, ...]]] = {}
    for ax in _all_axes(fig):
        for line in ax.get_lines():
            label = series_name(line)
            if label is None:
                continue
            word = label.split(" ")[0]
            if word in names:
                out.setdefault(word, set()).add(
                    tuple(round(c, 4) for c in to_rgba(line.get_color()))
                )
    return out


def draw(fig: Figure) -> Any:
    """Draw ``fig`` as saving it does (one draw: its layout engine places the artists, then
    they are drawn), keep that layout for the checks' own drawing (:func:`covered`), and
    return the renderer."""
    FigureCanvasAgg(fig)
    fig.canvas.draw()
    fig.set_layout_engine("none")
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
    found.extend(covered(fig))
    found.extend(style_problems(fig))
    found.extend(scale_problems(fig))
    return found
