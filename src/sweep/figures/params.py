"""``max_freq_effect``: the effect of S3FIFO's ``max_freq`` (and ``ghost_freq`` when it varies)
across capacities, drawn as the difference from the default value in percentage points.

The effect of these parameters is a fraction of a point on a hit rate of tens of percent: on an
absolute axis the lines lie on top of each other. Each line is therefore ``hit rate(value) -
hit rate(reference)`` at the same trace, block size and capacity, where the reference is the
registered default (``max_freq=3``, ``ghost_freq=0``) or, when the run lacks it, the smallest
value; the reference is the zero line.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from .axes import capacity_axis
from .data import (
    RunData,
    SkipFigure,
    fix_params,
    one_value,
    panels,
    param_keys,
    policy_rows,
    registry_defaults,
    titles_by_difference,
    trace_labels,
)
from .legend import finish, layout
from .registry import FigureKind, register
from .series import Series, draw_series
from .style import MARKERS, sequential, styled


def _reference(values: list[int], policy: str, varied: str) -> int:
    default = registry_defaults(policy).get(varied)
    return int(default) if default is not None and int(default) in values else values[0]


@styled
def fig_max_freq_effect(results: pd.DataFrame, policy: str = "S3FIFO") -> Figure:
    """``policy``'s hit rate minus its hit rate at the reference ``max_freq`` (pp) against
    capacity, one line per max_freq (a panel per trace); one more panel per trace, with one line
    per ghost_freq, when ghost_freq varies."""
    rows = policy_rows(results, policy)
    keys = param_keys(rows)
    drawn: list[str] = []
    for varied in ("max_freq", "ghost_freq"):
        if varied in keys:
            fixed, _ = fix_params(rows, policy, [k for k in keys if k != varied])
            if one_value(fixed, varied, varied) is None:
                drawn.append(varied)
    if not drawn:
        mf = one_value(rows, "max_freq", "max_freq") if "max_freq" in keys else "no max_freq"
        gf = one_value(rows, "ghost_freq", "ghost_freq") if "ghost_freq" in keys else ""
        raise SkipFigure("; ".join(r for r in (mf, gf) if r))
    panel_list = panels(rows)
    fig, axes = layout(len(panel_list) * len(drawn), ncols=len(drawn))
    series: list[Series] = []
    fields = []
    labels = trace_labels([p.trace for p in panel_list])
    for i, panel in enumerate(panel_list):
        for j, varied in enumerate(drawn):
            n = i * len(drawn) + j
            fixed, shown = fix_params(panel.rows, policy, [k for k in keys if k != varied])
            values = sorted(int(v) for v in rows[varied].dropna().unique())
            ref = _reference(values, policy, varied)
            base = fixed[fixed[varied].eq(ref).fillna(False).astype(bool)]
            base_rate = base.groupby("capacity")["overall_hit_rate"].mean()
            colours = sequential(len(values))
            for k, value in enumerate(values):
                sub = fixed[fixed[varied].eq(value).fillna(False).astype(bool)]
                sub = sub[sub["capacity"].isin(base_rate.index)].sort_values("capacity")
                if sub.empty:
                    continue
                diff = (sub["overall_hit_rate"] - sub["capacity"].map(base_rate)) * 100
                label = f"{varied}={value}" + (" (reference)" if value == ref else "")
                style = {"color": colours[k], "marker": MARKERS[k % len(MARKERS)]}
                if value == ref:
                    style.update(color="0.3", linestyle="--", marker=None)
                series.append(
                    Series(
                        n,
                        f"{varied}={value}",
                        label,
                        sub["capacity"].to_numpy(dtype=float),
                        diff.to_numpy(dtype=float),
                        style,
                    )
                )
            axes[n].set_ylabel(f"Hit rate - {varied}={ref} (pp)")
            capacity_axis(axes[n], panel.rows["capacity"].tolist(), None)
            fields.append(
                {
                    "trace": labels[panel.trace],
                    "block_size": f"block_size={panel.block_size}",
                    "what": varied + (f" ({shown})" if shown else ""),
                }
            )
    draw_series(axes, series)
    if len(fields) == 1:
        titles = [f"{fields[0]['trace']}: {fields[0]['what']}"]
    else:
        titles = titles_by_difference(fields)
    for n, (ax, title) in enumerate(zip(axes, titles, strict=True)):
        effects = [s.y for s in series if s.panel == n and "(reference)" not in s.label]
        ax.set_title(f"{title}\n{effect_range(effects)}")
        ax.axhline(0, color="0.3", linewidth=0.6, zorder=0)
        _symmetric_margin(ax)
    return finish(fig, axes, title=policy)


def effect_range(effects: list[np.ndarray]) -> str:
    """What the panel's lines span, stated (``every effect from -0.0047 to +0.044 pp``): the
    effects of these parameters are small, and the axis alone would make them look large."""
    values = np.concatenate(effects) if effects else np.zeros(0)
    values = values[np.isfinite(values)]
    if values.size == 0 or not np.any(values):
        return "no effect at any capacity"
    lo, hi = float(values.min()), float(values.max())
    return f"every effect from {_signed(lo)} to {_signed(hi)} pp"


def _signed(value: float) -> str:
    return "0" if value == 0 else f"{value:+.2g}"


def _symmetric_margin(ax: Axes) -> None:
    """Keep zero inside the y range with a little room on each side."""
    lo, hi = ax.get_ylim()
    span = max(hi - lo, 0.02)
    ax.set_ylim(min(lo, -0.05 * span), max(hi, 0.05 * span))


def _draw(data: RunData) -> Figure:
    return fig_max_freq_effect(data.results)


register(FigureKind("max_freq_effect", _draw, order=30))
