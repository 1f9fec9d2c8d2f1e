"""Figures of the cost model: hit rate and prefill work saved against the cache size in bytes.

Each ``fig_*`` function takes the run's ``results.parquet`` as a DataFrame (and optionally
``traces.parquet`` and the run's :class:`~.style.Palette`) and returns a
:class:`~matplotlib.figure.Figure`, or raises :class:`SkipCostFigure` with the reason when the
run has no model (its cost columns are null) or a single cache size. Sizes go on a log axis
labelled in binary units (``64GiB``, ``1TiB``) from ``cache_bytes``; every estimated quantity
is labelled ``est.`` with the hardware and cache tier it assumes (docs/cost-model.md).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from prefixsim.units import format_size

from . import findings
from .axes import bytes_axis, draw_ceiling, percent_axis
from .capacity import ceiling_of, drawn, top
from .data import (
    RunData,
    SkipFigure,
    choices,
    hitless,
    hitless_reason,
    select,
    titles_by_difference,
)
from .legend import finish, layout
from .registry import FigureKind, register
from .series import Series, draw_series
from .style import Palette, styled

PANEL_KEYS = ("trace", "model", "kv_dtype", "block_size")
"""One panel per trace, model, KV dtype and block size (a figure per hit-rate question)."""


class SkipCostFigure(SkipFigure):
    """The run cannot show this figure (the message says why)."""


def _has_model(results: pd.DataFrame) -> bool:
    return "model" in results.columns and bool(results["model"].notna().any())


def cost_rows(results: pd.DataFrame) -> pd.DataFrame:
    """The points that have the cost columns (a model was given), sorted by cache size."""
    if "cache_bytes" not in results.columns or "model" not in results.columns:
        raise SkipCostFigure("results without cost columns (written before the cost model)")
    rows = results[results["model"].notna() & results["cache_bytes"].notna()]
    if rows.empty:
        raise SkipCostFigure("no model in the run (model=NAME adds the cost columns)")
    if rows["cache_bytes"].nunique() < 2:
        raise SkipCostFigure("one cache size in the run")
    empty = hitless(rows)
    keep = [
        (str(s), int(b)) not in empty
        for s, b in zip(rows["trace_sha256"], rows["block_size"], strict=True)
    ]
    if not any(keep):
        raise SkipCostFigure(hitless_reason(rows, empty))
    rows = rows[keep].copy()
    rows["cache_bytes"] = rows["cache_bytes"].astype("int64")
    return rows.sort_values("cache_bytes")


def _panels(rows: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """(title, rows) of each trace, model, KV dtype and block size; titles say what differs,
    a single panel all of it."""
    groups = list(rows.groupby(list(PANEL_KEYS), sort=True))
    fields = []
    for key, group in groups:
        panel = dict(zip(PANEL_KEYS, key, strict=True))
        per_block = format_size(int(group["kv_bytes_per_block"].iloc[0]))
        fields.append(
            {
                "trace": str(panel["trace"]),
                "model": str(panel["model"]),
                "kv": f"{panel['kv_dtype']} KV",
                "block_size": f"{panel['block_size']}-token blocks of {per_block}",
            }
        )
    if len(fields) == 1:
        f = fields[0]
        titles = [f"{f['trace']}: {f['model']}\n{f['kv']}, {f['block_size']}"]
    else:
        titles = titles_by_difference(fields)
    return [(t, g) for t, (_, g) in zip(titles, groups, strict=True)]


def _policy_series(
    panel: int, rows: pd.DataFrame, y: pd.Series, palette: Palette, all_rows: pd.DataFrame
) -> list[Series]:
    """One series per policy of ``rows`` (with the parameters :func:`choices` draws it with):
    ``y`` (aligned with ``rows``) against ``cache_bytes``."""
    out = []
    for policy, choice in choices(all_rows).items():
        sub = select(rows, policy, choice)
        if sub.empty:
            continue
        sub = sub.sort_values("cache_bytes")
        out.append(
            Series(
                panel,
                policy,
                choice.label,
                sub["cache_bytes"].to_numpy(dtype=float),
                y.loc[sub.index].to_numpy(dtype=float),
                palette.policy(policy),
            )
        )
    return out


@styled
def fig_hit_rate_vs_cache_size(
    results: pd.DataFrame, traces: pd.DataFrame | None = None, palette: Palette | None = None
) -> Figure:
    """Token hit rate (%) against the cache size in bytes, one line per policy, with the
    infinite-cache ceiling of ``traces`` (traces.parquet) when given."""
    rows = cost_rows(results)
    palette = palette or Palette.of(results)
    panels = _panels(rows)
    fig, axes = layout(len(panels), sharey=True)
    series: list[Series] = []
    for i, (_, group) in enumerate(panels):
        series += _policy_series(i, group, group["overall_hit_rate"] * 100, palette, rows)
    draw_series(axes, series)
    ceilings = []
    for ax, (title, group) in zip(axes, panels, strict=True):
        c = ceiling_of(traces, str(group["trace_sha256"].iloc[0]), int(group["block_size"].iloc[0]))
        ceilings.append(None if c is None else c * 100)
        draw_ceiling(ax, ceilings[-1])
        bytes_axis(ax, group["cache_bytes"].tolist())
        ax.set_title(title)
    for ax in axes:
        percent_axis(ax, "Token hit rate (%)", top(series, *ceilings))
    return finish(fig, axes)


def _est_title(rows: pd.DataFrame) -> str:
    hw = ", ".join(sorted(set(rows["hardware"].astype(str))))
    tier = ", ".join(sorted(set(rows["cache_tier"].astype(str))))
    return f"est. (a model): {hw},\ncached blocks in {tier}"


@styled
def fig_prefill_saved_vs_cache_size(
    results: pd.DataFrame, traces: pd.DataFrame | None = None, palette: Palette | None = None
) -> Figure:
    """Prefill work saved against the cache size in bytes: FLOPs saved (exact, share of the
    no-cache FLOPs) and, with hardware, the est. prefill time saved (share of the est. no-cache
    prefill time, transfer of the reused blocks included). ``traces`` is not used (the
    signature of every figure)."""
    rows = cost_rows(results)
    palette = palette or Palette.of(results)
    has_est = bool(rows["est_ttft_saved_seconds"].notna().any())
    panels = _panels(rows)
    n_cols = 2 if has_est else 1
    fig, axes = layout(len(panels) * n_cols, ncols=n_cols)
    series: list[Series] = []
    est_axes = []
    for i, (title, group) in enumerate(panels):
        ax = axes[i * n_cols]
        flops = 100.0 * group["prefill_flops_saved"] / group["prefill_flops"]
        series += _policy_series(i * n_cols, group, flops, palette, rows)
        bytes_axis(ax, group["cache_bytes"].tolist())
        ax.set_title(title)
        if has_est:
            est = group[group["est_ttft_saved_seconds"].notna()]
            share = 100.0 * est["est_ttft_saved_seconds"] / est["est_prefill_seconds_no_cache"]
            series += _policy_series(i * n_cols + 1, est, share, palette, rows)
            ax = axes[i * n_cols + 1]
            bytes_axis(ax, est["cache_bytes"].tolist())
            ax.axhline(0.0, color="0.4", lw=0.6)
            ax.set_title(_est_title(est))
            est_axes.append(ax)
    draw_series(axes, series)
    for n, ax in enumerate(axes):
        mine = [s for s in series if s.panel == n]
        low = min((float(np.nanmin(s.y)) for s in mine if len(s.y)), default=0.0)
        label = "est. prefill time saved (%)" if ax in est_axes else "Prefill FLOPs saved (%)"
        percent_axis(ax, label, top(mine), bottom=min(0.0, low))
    return finish(fig, axes)


def _kind(name: str, draw: Any, order: int, notes: Any = None) -> FigureKind:
    return FigureKind(
        name,
        lambda data: draw(data.results, data.traces, data.palette),
        order=order,
        applies=lambda data: _has_model(data.results),
        notes=notes,
    )


def _notes(data: RunData) -> list[str]:
    d = drawn(data, "cache_bytes")
    return findings.identical(d) + findings.falls_below(d)


register(_kind("hit_rate_vs_cache_size", fig_hit_rate_vs_cache_size, 80, _notes))
register(_kind("prefill_saved_vs_cache_size", fig_prefill_saved_vs_cache_size, 81, _notes))
