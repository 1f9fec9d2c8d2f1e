"""The one style layer every figure kind draws through: settings, looks, axes, series, legend.

A figure kind draws through these, so that a policy looks the same in every figure of a run,
no series is hidden unannounced, units and capacities read the same and legends never cover
data or leave the canvas:

* :func:`styled` builds a figure under ``style.mplstyle``;
* :class:`Palette` gives each policy, router and tier of a run one look (colour, marker, line
  style), decided once from the run's data (``RunData.palette``) and used by every figure:
  two policies of a run never share a colour, and a policy keeps its preferred look
  (:data:`POLICY_LOOKS`) unless another of the run holds it;
* :class:`~.series.Series` and :func:`~.series.draw_series` plot lines and append
  ``(= OTHER)`` to the label of a series identical to an earlier one;
* :mod:`.axes`: capacity and byte axes (``16Ki``, ``64GiB``), percent axes from 0, the
  infinite-cache ceiling, plain decade ticks on log axes;
* :mod:`.legend`: :func:`~.legend.layout` (one column wide for one panel, both columns above)
  and :func:`~.legend.finish`, which keeps every marker visible (a marker that falls on an
  earlier series' marker is drawn as a ring around it) and puts one legend above the panels.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import matplotlib as mpl
from matplotlib.figure import Figure

from .axes import (
    CEILING_GID,
    CEILING_LABEL,
    capacity_axis,
    draw_ceiling,
    format_capacity,
    is_binary,
    log_axis_plain,
    percent_axis,
)
from .legend import (
    DOUBLE_COLUMN_IN,
    LEGEND_ROW_IN,
    PANEL_HEIGHT_IN,
    SINGLE_COLUMN_IN,
    figure_legend,
    finish,
    layout,
    legend_columns,
    text_width_in,
)
from .series import (
    CONTEXT_GID,
    DENSE_POINTS,
    PART_PREFIX,
    Series,
    draw_series,
    duplicates,
    markevery,
    separate_markers,
)

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "CEILING_GID",
    "CEILING_LABEL",
    "CONTEXT_GID",
    "DENSE_POINTS",
    "DOUBLE_COLUMN_IN",
    "LEGEND_ROW_IN",
    "PANEL_HEIGHT_IN",
    "PART_PREFIX",
    "SINGLE_COLUMN_IN",
    "Look",
    "Palette",
    "Series",
    "capacity_axis",
    "draw_ceiling",
    "draw_series",
    "duplicates",
    "figure_legend",
    "finish",
    "format_capacity",
    "is_binary",
    "layout",
    "legend_columns",
    "log_axis_plain",
    "markevery",
    "percent_axis",
    "policy_order",
    "separate_markers",
    "sequential",
    "style_context",
    "styled",
    "text_width_in",
]

STYLE_FILE = Path(__file__).with_name("style.mplstyle")

# Paul Tol's "muted" scheme (colour-blind safe), black, and for larger runs some of his
# "vibrant" and "light" colours.
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
BLACK, ORANGE, BLUE, RED, GREY = "#000000", "#EE7733", "#0077BB", "#CC3311", "#777777"
POOL = (INDIGO, ROSE, GREEN, TEAL, OLIVE, WINE, PURPLE, BLACK, ORANGE, BLUE, RED, CYAN, SAND, GREY)
"""Colours in the order a run's policies without a preferred free colour take them."""
MARKERS = ("o", "s", "^", "v", "D", "P", "X", "*", ">", "<", "h", "d", "p", "H", "8")
LINESTYLES = ("-", "--", ":", "-.")


@dataclass(frozen=True)
class Look:
    """Colour, marker and line style of one series (a policy, a router)."""

    color: str
    marker: str
    linestyle: str

    def kw(self) -> dict[str, Any]:
        """The keyword arguments of ``Axes.plot``."""
        return {"color": self.color, "marker": self.marker, "linestyle": self.linestyle}


POLICY_LOOKS: dict[str, Look] = {
    # the look a policy keeps whenever no earlier policy of the run holds its colour or marker
    # (fixed here, not derived from the registry's order, so that a newly registered policy
    # never changes an existing one's look)
    "S3FIFO": Look(INDIGO, "o", "-"),
    "LRU": Look(ROSE, "s", "-"),
    "FIFO": Look(GREEN, "^", "-"),
    "CLOCK": Look(TEAL, "v", "-."),
    "SIEVE": Look(OLIVE, "D", "-"),
    "LFU": Look(WINE, "P", "-."),
    "ARC": Look(PURPLE, "X", "-"),
    "BELADY": Look(BLACK, "*", ":"),
    "LRU_TAIL_FIRST": Look(ROSE, ">", ":"),
    "LRU_LEAF": Look(ROSE, "<", "--"),
    "S3FIFO_LEAF": Look(INDIGO, "h", "--"),
    "S3FIFO_LCS": Look(INDIGO, "d", ":"),  # libCacheSim's S3FIFO
    "RADIX": Look(ROSE, "p", "-."),  # SGLang's radix cache
}
FAMILY_COLOURS: dict[str, tuple[str, ...]] = {
    # a variant takes its base policy's colour when the run lacks the base policy, else a
    # colour of the same family
    "LRU_TAIL_FIRST": (ROSE, ORANGE, RED),
    "LRU_LEAF": (ROSE, RED, ORANGE),
    "RADIX": (ROSE, RED, ORANGE),
    "S3FIFO_LEAF": (INDIGO, BLUE, CYAN),
    "S3FIFO_LCS": (INDIGO, CYAN, BLUE),
}
ROUTER_LOOKS: dict[str, Look] = {
    # routers are drawn in figures of their own: colours apart from the first policies'
    "round_robin": Look(TEAL, "o", "-"),
    "random": Look(OLIVE, "s", "-"),
    "session": Look(ORANGE, "^", "-"),
    "least_loaded": Look(WINE, "v", "-"),
    "kv_aware": Look(BLUE, "D", "-"),
}
TIER_COLOURS = ("#77AADD", "#EE8866", "#44BB99", "#BBCC33")
"""Fills of the tiers (Tol's "light" scheme), fastest first."""


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


def policy_order(policies: Iterable[Any]) -> list[str]:
    """Known policies in the order of :data:`POLICY_LOOKS`, then the others sorted."""
    names = {str(p) for p in policies}
    return [p for p in POLICY_LOOKS if p in names] + sorted(names - set(POLICY_LOOKS))


def _order(names: Iterable[Any], known: dict[str, Look]) -> list[str]:
    unique = {str(n) for n in names}
    return [n for n in known if n in unique] + sorted(unique - set(known))


class _Looks:
    """Looks handed out in order: each name takes its preferred colour and marker when no
    earlier name holds them, else the first free ones (then the pools again, in turn)."""

    def __init__(
        self,
        preferred: dict[str, Look],
        families: dict[str, tuple[str, ...]],
        names: Iterable[str],
    ) -> None:
        self._preferred, self._families = preferred, families
        self._looks: dict[str, Look] = {}
        for name in names:
            self.get(name)

    def get(self, name: str) -> Look:
        if name in self._looks:
            return self._looks[name]
        used_colours = {look.color for look in self._looks.values()}
        used_markers = {look.marker for look in self._looks.values()}
        n = len(self._looks)
        pref = self._preferred.get(name)
        family = self._families.get(name, (pref.color,) if pref else ())
        colour = next((c for c in (*family, *POOL) if c not in used_colours), POOL[n % len(POOL)])
        markers = ((pref.marker,) if pref else ()) + MARKERS
        marker = next((m for m in markers if m not in used_markers), MARKERS[n % len(MARKERS)])
        linestyle = pref.linestyle if pref else LINESTYLES[n % len(LINESTYLES)]
        self._looks[name] = Look(colour, marker, linestyle)
        return self._looks[name]


class Palette:
    """The looks of one run: every policy, router and tier of the run gets one, decided once
    from the run's data (:meth:`of`), so that a policy is drawn alike in every figure of the
    run. A name the palette was not built with gets the next free look when first asked for."""

    def __init__(
        self,
        policies: Iterable[Any] = (),
        routers: Iterable[Any] = (),
        tiers: Iterable[Any] = (),
    ) -> None:
        self._policies = _Looks(POLICY_LOOKS, FAMILY_COLOURS, policy_order(policies))
        self._routers = _Looks(ROUTER_LOOKS, {}, _order(routers, ROUTER_LOOKS))
        self._tiers: dict[str, str] = {}
        for name in dict.fromkeys(str(t) for t in tiers):
            self.tier(name)

    @classmethod
    def of(cls, results: pd.DataFrame) -> Palette:
        """The palette of a run's ``results.parquet`` (every row: single caches, hierarchies
        and clusters; ``TIERS`` is not a policy)."""
        policies = [p for p in results["policy"].dropna().unique() if p != "TIERS"]
        routers = results["router"].dropna().unique() if "router" in results.columns else []
        tiers: list[Any] = []
        for t in range(8):
            column = f"tier{t}_name"
            if column in results.columns:
                tiers.extend(results[column].dropna().unique())
        return cls(policies, routers, tiers)

    def policy(self, name: Any) -> dict[str, Any]:
        """``color``, ``marker`` and ``linestyle`` of the policy ``name``."""
        return self._policies.get(str(name)).kw()

    def router(self, name: Any) -> dict[str, Any]:
        return self._routers.get(str(name)).kw()

    def tier(self, name: Any) -> str:
        """The fill colour of the tier ``name`` (in the order the tiers were first seen)."""
        key = str(name)
        if key not in self._tiers:
            self._tiers[key] = TIER_COLOURS[len(self._tiers) % len(TIER_COLOURS)]
        return self._tiers[key]


def sequential(n: int) -> list[Any]:
    """``n`` colours of an ordered parameter (viridis, without its palest yellows)."""
    cmap = mpl.colormaps["viridis"]
    if n == 1:
        return [cmap(0.0)]
    return [cmap(0.85 * i / (n - 1)) for i in range(n)]
