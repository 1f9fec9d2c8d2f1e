"""Series of the figures and the rules that keep every one of them in sight.

* :func:`draw_series` plots :class:`Series` on their panels; a series identical to an earlier
  one in every panel where it is drawn (same x and y) is labelled ``LABEL (= EARLIER)``: it
  cannot be seen apart, so it is announced (and its markers drawn open, around the other's).
  Dense series get markers on about eight points,
  at a phase of their own in each panel (markers of near-identical lines fall apart).
* :func:`separate_markers` (called by :func:`~.legend.finish` once the axes' limits are set):
  markers of several series that touch are set side by side, one marker width apart, each
  at its own height, above the lines, so every series shows at every point, whichever is
  drawn last.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.lines import Line2D

DENSE_POINTS = 16
"""A series with more points than this gets a marker on about every ``n / 8``-th point only."""
CONTEXT_GID = "context"
"""``gid`` of the grey context lines of a small multiple (the other series, unlabelled)."""
PART_PREFIX = "_part of "
"""Label of an artist drawn for the series named after it (its rings, its p99 line): left
out of the legend, counted as that series by the layout checks."""
RING_EDGE_PT = 0.8
NEAR = 1.0
"""Markers whose centres are closer than this share of the sum of their radii touch."""
SAME_RING_PT = 6.0
"""Markers of a series announced ``(= OTHER)``: open, of this size, around the other's."""
SAME = " (= "


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


def draw_series(
    axes: Sequence[Axes], series: Sequence[Series], markers: bool = True
) -> dict[str, str]:
    """Plot every series on its panel; a series identical to an earlier one is labelled
    ``LABEL (= EARLIER)``. Dense series (more than :data:`DENSE_POINTS` points) get markers on
    about 8 points, the ``j``-th of ``k`` dense series of a panel from ``(2j + 1) / 2k`` of a
    step on, so that the markers of near-identical dense lines fall apart. Without
    ``markers``, a series of a single point keeps its marker (it is all there is to see).
    Returns each series' label as drawn (by key)."""
    same = duplicates(series)
    labels = {s.key: s.label for s in series}
    drawn: dict[str, str] = {}
    dense: dict[int, list[str]] = {}
    for s in series:
        if markevery(len(s.x)) is not None:
            dense.setdefault(s.panel, []).append(s.key)
    for s in series:
        style = dict(s.style)
        if not markers and len(s.x) != 1:  # a line of one point draws nothing: its marker
            style["marker"] = None
        elif style.get("marker") and "markevery" not in style:
            step = markevery(len(s.x))
            if step is not None:
                mates = dense[s.panel]
                # phases step/2k, 3step/2k, ...: never the first point (often on an axis
                # corner, where half a marker is clipped)
                phase = step * (2 * mates.index(s.key) + 1) // (2 * len(mates))
                style["markevery"] = (phase, step)
        label = s.label
        if s.key in same:
            label = f"{s.label}{SAME}{labels[same[s.key]]})"
            if style.get("marker"):  # open and larger: the other's markers show inside
                style.update(markerfacecolor="none", markersize=SAME_RING_PT)
                style.update(markeredgewidth=RING_EDGE_PT)
            style.setdefault("zorder", 1.9)  # under the series it equals: that one shows whole
        axes[s.panel].plot(s.x, s.y, label=label, **style)
        drawn[s.key] = label
    return drawn


# --- markers on markers --------------------------------------------------------------------------


def _has_markers(line: Line2D) -> bool:
    marker = line.get_marker()
    return marker not in (None, "None", "none", "", " ") and line.get_markersize() > 0


def _components(touch: np.ndarray) -> np.ndarray:
    """The connected component of each node of the symmetric adjacency matrix ``touch``,
    numbered by its first node."""
    group = np.arange(len(touch))
    for a, b in zip(*np.nonzero(np.triu(touch)), strict=True):
        ga, gb = group[a], group[b]
        if ga != gb:
            group[group == max(ga, gb)] = min(ga, gb)
    return group


def _marker_indices(every: Any, n: int) -> list[int]:
    """The indices of the points ``markevery`` marks (None, an int, ``(start, step)``, a
    list of indices or a boolean mask; other forms mark every point)."""
    if every is None:
        return list(range(n))
    if isinstance(every, (int, np.integer)) and not isinstance(every, bool):
        return list(range(0, n, int(every)))
    if isinstance(every, tuple) and all(isinstance(v, (int, np.integer)) for v in every):
        start, step = every
        return list(range(int(start), n, int(step)))
    values = np.asarray(every)
    if values.dtype == bool and len(values) == n:
        return [int(i) for i in np.flatnonzero(values)]
    if values.dtype.kind in "iu":
        return [int(i) for i in values if 0 <= i < n]
    return list(range(n))


def _series_of(line: Line2D) -> str | None:
    """The series ``line`` draws: its label, or the name after :data:`PART_PREFIX`."""
    label = str(line.get_label())
    if label.startswith(PART_PREFIX):
        return label[len(PART_PREFIX) :]
    return None if label.startswith("_") else label


def separate_markers(ax: Axes) -> None:
    """Keep every marker of ``ax``'s series visible. With two series or more, every marker is
    drawn above every line (a line crossing a marker would hide it); markers of different
    series that touch (centres closer than the sum of their radii, directly or through
    others) are set side by side, one marker width apart and centred on where they were, each
    at its own height, in drawing order (the lines still pass through the exact values). The
    markers leave their line's ``markevery`` and are drawn as markers of their own, labelled
    ``_part of LABEL``. Series announced ``(= OTHER)`` are left where they are (open, under
    the other's markers). Call it once the axes' limits are final: it measures distances in
    display units."""
    lines = [
        line
        for line in sorted(ax.get_lines(), key=lambda ln: ln.get_zorder())
        if _has_markers(line) and _series_of(line) is not None and SAME not in str(line.get_label())
    ]
    names = list(dict.fromkeys(_series_of(line) for line in lines))
    if len(names) < 2:
        return
    px_per_pt = ax.figure.dpi / 72
    line_of, index, centre, radius = [], [], [], []
    for k, line in enumerate(lines):
        centres = line.get_transform().transform(np.asarray(line.get_xydata(), dtype=float))
        for i in _marker_indices(line.get_markevery(), len(centres)):
            if np.isfinite(centres[i]).all():
                line_of.append(k)
                index.append(i)
                centre.append(centres[i])
                radius.append(float(line.get_markersize()) / 2 * px_per_pt)
    xy, r = np.array(centre), np.array(radius)
    owner = np.array([names.index(_series_of(lines[k])) for k in line_of])
    distance = np.hypot(*(xy[:, None, :] - xy[None, :, :]).transpose(2, 0, 1))
    touch = (distance < NEAR * (r[:, None] + r[None, :])) & (owner[:, None] != owner[None, :])
    group = _components(touch)
    place = xy.copy()
    for g in np.unique(group):
        members = np.flatnonzero(group == g)  # in drawing order
        if len(members) < 2:
            continue
        width = 2 * float(r[members].max())
        middle = float(xy[members, 0].mean())
        place[members, 0] = middle + (np.arange(len(members)) - (len(members) - 1) / 2) * width
    data = ax.transData.inverted().transform(place)
    moved = np.any(place != xy, axis=1)
    top = max(line.get_zorder() for line in ax.get_lines()) + 0.1
    for k, line in enumerate(lines):
        mine = [m for m, owner_line in enumerate(line_of) if owner_line == k]
        if not mine:
            continue
        exact = np.asarray(line.get_xydata(), dtype=float)[[index[m] for m in mine]]
        at = np.where(moved[mine][:, None], data[mine], exact)  # unmoved: the exact values
        line.set_markevery([])
        ax.plot(
            at[:, 0],
            at[:, 1],
            linestyle="none",
            color=line.get_color(),
            marker=line.get_marker(),
            markersize=line.get_markersize(),
            markerfacecolor=line.get_markerfacecolor(),
            markeredgecolor=line.get_markeredgecolor(),
            markeredgewidth=line.get_markeredgewidth(),
            label=f"{PART_PREFIX}{_series_of(line)}",
            zorder=top,
            clip_on=line.get_clip_on(),
        )
