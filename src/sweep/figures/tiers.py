"""Figure ``tier_split``: hit tokens split by tier against the size of the lower tier.

One panel per hierarchy setting other than the swept tier's capacity (trace, block size, mode,
policies, the other tiers' capacities), in a row, on one y scale; in each, the token hit rate
of every tier (its ``tier{t}_hit_tokens / total_prompt_tokens``, in %) stacked from the fastest
tier up, against the capacity of the *swept tier*: the slowest tier whose capacity takes
several values in the run (else the slowest tier). The top of the stack, drawn as a line, is
the hierarchy's overall hit rate; the infinite-cache ceiling is drawn over it. Panels are
titled by what differs between them; what they share is the legend's title.
"""

from __future__ import annotations

import pandas as pd
from matplotlib.figure import Figure

from .axes import capacity_axis, draw_ceiling, format_capacity, is_binary, percent_axis
from .capacity import ceiling_of
from .data import SkipFigure, titles_by_difference
from .legend import finish, layout
from .registry import FigureKind, register
from .style import Palette, styled

NAME = "tier_split"
MAX_TIERS = 4
TOTAL_LABEL = "all tiers"


class NoTierPoints(SkipFigure):
    """The run has no hierarchy points (``policy == "TIERS"``): the figure is skipped."""


def _n_tiers(rows: pd.DataFrame) -> int:
    return max(
        t + 1
        for t in range(MAX_TIERS)
        if f"tier{t}_policy" in rows.columns and rows[f"tier{t}_policy"].notna().any()
    )


def swept_tier(rows: pd.DataFrame) -> int:
    """The slowest tier whose capacity varies in ``rows`` (else the slowest tier)."""
    n = _n_tiers(rows)
    for t in reversed(range(n)):
        if rows[f"tier{t}_capacity"].nunique() > 1:
            return t
    return n - 1


def _fields(row: pd.Series, n: int, swept: int) -> dict[str, str]:
    """What names a panel: trace, block size, mode and each tier's policy (and capacity, but
    the swept tier's)."""
    out = {
        "trace": str(row["trace"]),
        "block_size": f"block_size={int(row['block_size'])}",
        "mode": str(row["mode"]),
    }
    for t in range(n):
        if pd.isna(row[f"tier{t}_policy"]):
            continue
        label = f"{row[f'tier{t}_name']}: {row[f'tier{t}_policy']}"
        if t != swept:
            capacity = int(row[f"tier{t}_capacity"])
            label += f" {format_capacity(capacity, is_binary([capacity]))}"
        out[f"tier{t}"] = label
    return out


@styled
def tier_split_figure(
    results: pd.DataFrame, traces: pd.DataFrame | None = None, palette: Palette | None = None
) -> Figure:
    """The figure, from a results table; :class:`NoTierPoints` when it has no hierarchy."""
    if "policy" not in results or not (results["policy"] == "TIERS").any():
        raise NoTierPoints("no hierarchy points in the run (tiers=...)")
    palette = palette or Palette.of(results)
    rows = results[results["policy"] == "TIERS"]
    n = _n_tiers(rows)
    swept = swept_tier(rows)
    keys = [
        tuple(_fields(row, n, swept).items()) for _, row in rows.iterrows()
    ]  # one panel per distinct setting, in the order of the rows
    keyed = rows.assign(_panel=[str(k) for k in keys])
    order = list(dict.fromkeys(keyed["_panel"]))
    fields = [dict(keys[keyed["_panel"].tolist().index(p)]) for p in order]
    if len(fields) == 1:
        f = fields[0]
        rest = [v for k, v in f.items() if k not in ("trace", "block_size")]
        titles = [f"{f['trace']}, {f['block_size']}\n{'; '.join(rest)}"]
    else:
        titles = titles_by_difference(fields)
    common = ", ".join(v for k, v in fields[0].items() if all(f.get(k) == v for f in fields))
    fig, axes = layout(len(order), ncols=min(len(order), 3), sharey=True)
    highest = 0.0
    ceilings: list[float | None] = []
    for ax, panel, title in zip(axes, order, titles, strict=True):
        group = keyed[keyed["_panel"] == panel].sort_values(f"tier{swept}_capacity")
        x = group[f"tier{swept}_capacity"].astype(float).to_numpy()
        total = group["total_prompt_tokens"].astype(float).to_numpy()
        shares = [
            group[f"tier{t}_hit_tokens"].astype(float).to_numpy() / total * 100 for t in range(n)
        ]
        names = [str(group[f"tier{t}_name"].iloc[0]) for t in range(n)]
        ax.stackplot(
            x,
            shares,
            labels=[f"{name} (tier {t})" for t, name in enumerate(names)],
            colors=[palette.tier(name) for name in names],
            alpha=0.9,
        )
        overall = sum(shares)
        ax.plot(x, overall, color="black", linewidth=0.9, marker="o", label=TOTAL_LABEL)
        highest = max(highest, float(overall.max()))
        c = ceiling_of(traces, str(group["trace_sha256"].iloc[0]), int(group["block_size"].iloc[0]))
        ceilings.append(None if c is None else c * 100)
        draw_ceiling(ax, ceilings[-1])
        capacity_axis(ax, x.tolist(), None, label=f"{names[swept]} capacity (blocks)")
        ax.set_title(title)
    for ax in axes:
        percent_axis(ax, "Token hit rate (%), by tier", max([highest, *filter(None, ceilings)]))
    # what every panel shares heads the legend (a figure title would collide with it)
    return finish(fig, axes, title=common if len(order) > 1 and common else None)


register(
    FigureKind(
        NAME,
        lambda data: tier_split_figure(data.all_results, data.traces, data.palette),
        order=85,
        single_cache=False,
        applies=lambda data: bool((data.all_results["policy"] == "TIERS").any()),
    )
)
