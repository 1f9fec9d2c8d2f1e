"""Figure ``tier_split``: hit tokens split by tier against the size of the lower tier.

One panel per hierarchy setting other than the swept tier's capacity (mode, policies, the
other tiers' capacities), in a row; in each, the token hit rate of every tier (its
``tier{t}_hit_tokens / total_prompt_tokens``) stacked from the fastest tier up, against the
capacity of the *swept tier*: the slowest tier whose capacity takes several values in the run
(else the slowest tier). The top of the stack is the hierarchy's overall hit rate.

Self-contained (the coordinator wires it into the figure registry): :func:`tier_split_figure`
builds the figure from a results DataFrame (``pandas.read_parquet`` of ``results.parquet``)
or raises :class:`NoTierPoints`; :func:`draw_tier_split` writes ``OUT/tier_split.png`` and
``.pdf`` and returns the paths.
"""

from __future__ import annotations

import pandas as pd
from matplotlib.figure import Figure

from .data import SkipFigure
from .registry import FigureKind, register

NAME = "tier_split"
MAX_TIERS = 4
PANEL_WIDTH_IN = 3.3
PANEL_HEIGHT_IN = 2.4
TIER_COLOURS = ("#1b6ca8", "#f28e2b", "#59a14f", "#b07aa1")  # fastest first


class NoTierPoints(SkipFigure):
    """The run has no hierarchy points (``policy == "TIERS"``): the figure is skipped."""


def _n_tiers(rows: pd.DataFrame) -> int:
    return max(t + 1 for t in range(MAX_TIERS) if rows[f"tier{t}_policy"].notna().any())


def swept_tier(rows: pd.DataFrame) -> int:
    """The slowest tier whose capacity varies in ``rows`` (else the slowest tier)."""
    n = _n_tiers(rows)
    for t in reversed(range(n)):
        if rows[f"tier{t}_capacity"].nunique() > 1:
            return t
    return n - 1


def _panel_key(row: pd.Series, n: int, swept: int) -> str:
    parts = [str(row["mode"])]
    for t in range(n):
        if pd.isna(row[f"tier{t}_policy"]):
            continue
        label = f"{row[f'tier{t}_name']}: {row[f'tier{t}_policy']}"
        if t != swept:
            label += f" {int(row[f'tier{t}_capacity']):,}"
        parts.append(label)
    return "; ".join(parts)


def tier_split_figure(results: pd.DataFrame) -> Figure:
    """The figure, from a results table; :class:`NoTierPoints` when it has no hierarchy."""
    if "policy" not in results or not (results["policy"] == "TIERS").any():
        raise NoTierPoints("no hierarchy points in the run (tiers=...)")
    rows = results[results["policy"] == "TIERS"]
    n = _n_tiers(rows)
    swept = swept_tier(rows)
    # One panel per trace, block size and hierarchy setting other than the swept capacity.
    keyed = rows.assign(
        _panel=[
            f"{r.trace}, {r.block_size} tokens/block\n{_panel_key(r, n, swept)}"
            for r in rows.itertuples(index=False)
            for r in [pd.Series(r._asdict())]
        ]
    )
    panels = list(dict.fromkeys(keyed["_panel"]))
    fig = Figure(
        figsize=(PANEL_WIDTH_IN * len(panels), PANEL_HEIGHT_IN + 0.6), layout="constrained"
    )
    axes = fig.subplots(1, len(panels), squeeze=False, sharey=True)[0]
    for ax, panel in zip(axes, panels, strict=True):
        group = keyed[keyed["_panel"] == panel].sort_values(f"tier{swept}_capacity")
        x = group[f"tier{swept}_capacity"].astype(float).to_numpy()
        total = group["total_prompt_tokens"].astype(float).to_numpy()
        shares = [group[f"tier{t}_hit_tokens"].astype(float).to_numpy() / total for t in range(n)]
        labels = [
            f"tier {t}: {group[f'tier{t}_name'].iloc[0]} ({group[f'tier{t}_policy'].iloc[0]})"
            for t in range(n)
        ]
        ax.stackplot(x, shares, labels=labels, colors=TIER_COLOURS[:n], alpha=0.85)
        ax.plot(x, sum(shares), color="black", linewidth=0.8, marker=".", markersize=3)
        if len(x) > 1 and x.min() > 0 and x.max() / x.min() >= 8:
            ax.set_xscale("log", base=2)
        ax.set_title(panel, fontsize=7)
        ax.set_xlabel(f"tier {swept} ({group[f'tier{swept}_name'].iloc[0]}) capacity [blocks]")
        ax.grid(alpha=0.3, linewidth=0.5)
        ax.tick_params(labelsize=7)
    axes[0].set_ylabel("token hit rate, by tier")
    axes[0].legend(loc="upper left", fontsize=6, frameon=False)
    return fig


register(
    FigureKind(
        NAME,
        lambda data: tier_split_figure(data.all_results),
        order=85,
        single_cache=False,
        applies=lambda data: bool((data.all_results["policy"] == "TIERS").any()),
    )
)
