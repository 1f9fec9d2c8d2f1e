"""Axes of the figures: capacities and bytes (``16Ki``, ``64GiB``), percentages from 0, the
infinite-cache ceiling, plain numbers on log axes (``0.1``, ``10``, never ``10^1``)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

CEILING_GID = "ceiling"
"""``gid`` of the infinite-cache ceiling line (to tell it from the series)."""
CEILING_LABEL = "infinite cache"
HEADROOM = 1.05
"""A percent axis reaches this much above its highest value."""


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
    ``"Cache size (bytes)"`` and ``"B"``), ticks and labels by the grid's kind
    (:func:`is_binary`), with a second axis on top in tokens when ``block_size`` is set. A
    grid of one value gets a linear axis with that one tick."""
    caps = [float(c) for c in capacities]
    binary = is_binary(caps)
    lo, hi = min(caps), max(caps)
    if lo < hi:
        ax.set_xscale("log", base=2 if binary else 10)
    ax.xaxis.set_major_locator(FixedLocator(_ticks_or_values(lo, hi, binary, caps)))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: format_capacity(v, binary, unit)))
    ax.set_xlabel(label)
    if block_size is not None and lo < hi:
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


def bytes_axis(ax: Axes, sizes: Sequence[float]) -> None:
    """A capacity axis of cache sizes in bytes (``64GiB``; ``64GB`` for decimal sizes)."""
    capacity_axis(ax, sizes, None, label="Cache size (bytes)", unit="B")


def percent_axis(ax: Axes, label: str, top: float | None = None, bottom: float = 0.0) -> None:
    """A y axis of percentages labelled ``label`` from ``bottom`` (0 unless values fall below
    it) to a little above ``top`` (the highest value drawn; 1 when it is 0)."""
    ax.set_ylabel(label)
    if top is None or not math.isfinite(top):
        ax.set_ylim(bottom=bottom)
        return
    high = top * HEADROOM if top > 0 else 1.0
    low = bottom * HEADROOM if bottom < 0 else bottom
    ax.set_ylim(low, high)


def draw_ceiling(ax: Axes, percent: float | None) -> None:
    """The infinite-cache ceiling (the hit rate of a cache that never evicts, in %) as a dashed
    grey line under the series."""
    if percent is None or not math.isfinite(percent):
        return
    ax.axhline(
        percent,
        color="0.45",
        linestyle=(0, (5, 2)),
        linewidth=0.9,
        label=CEILING_LABEL,
        gid=CEILING_GID,
        zorder=1,
    )


def _plain(value: float, _: Any = None) -> str:
    if value >= 1:
        return f"{value:,.0f}" if value == round(value) else f"{value:,.3g}"
    return f"{value:.3g}"


def log_axis_plain(ax: Axes, which: str = "y") -> None:
    """A log axis whose decades read ``0.01``, ``1``, ``1,000`` (no ``10^3``)."""
    axis = ax.yaxis if which == "y" else ax.xaxis
    (ax.set_yscale if which == "y" else ax.set_xscale)("log")
    axis.set_major_formatter(FuncFormatter(_plain))
    axis.set_minor_formatter(FuncFormatter(lambda v, _: ""))


def instances_axis(ax: Axes, instances: Sequence[int], label: str = "Instances") -> None:
    """The number of instances of a cluster: log2 when it spans more than one value, a tick at
    each value."""
    ticks = sorted({int(x) for x in instances})
    if len(ticks) > 1 and min(ticks) >= 1:
        ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(FixedLocator([float(t) for t in ticks]))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.set_xlabel(label)
