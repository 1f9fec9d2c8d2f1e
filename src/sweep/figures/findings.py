"""What a figure's reading depends on, found in the run's own data and said where the run's log
lists the figure (``drew occupancy: PATH; note: ...``).

A figure shows numbers; some readings of them rest on a fact the figure does not show. These
functions find such facts in the results, so that the log says them for this run and trace,
never a text written for another trace:

* :func:`underfull`: a policy that ends with part of its cache empty where another ends full
  (the specification's S3FIFO: a block reaches its main queue only when accessed again);
* :func:`falls_below`: such a policy's hit rate under a simpler full policy's from some
  capacity on;
* :func:`identical`: two policies equal in every counter at every point of the run (a
  property of the trace: the policies differ elsewhere);
* :func:`best_small_ratio`: each capacity's best ``small_ratio``, and whether it lies at an end
  of the ratios swept (the optimum may lie beyond).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..config import POLICY_PARAM_KEYS
from .axes import format_capacity, is_binary
from .data import SkipFigure, choices, panels, select, single_cache_rows, trace_labels

FULL = 0.99
"""A cache at least this full at the end of the trace is full."""
UNDERFULL = 0.9
"""A cache less full than this, where another policy's is full, is said to be underfull."""
WHY_UNDERFULL = {
    "S3FIFO": "the specification's S3FIFO moves a block to its main queue only when it is "
    "accessed again in the small queue or the ghost, so the main queue need not fill",
}
WHY_UNDERFULL["S3FIFO_LEAF"] = WHY_UNDERFULL["S3FIFO"]
SIMPLER = ("FIFO", "LRU")
"""The policies another is compared with, first found first."""
NOT_RESULTS = frozenset(("point_id", "replay_seconds", *POLICY_PARAM_KEYS))
"""Numeric columns of a row that are not what its replay found (every other one is compared
to call two policies equal: hit tokens, final occupancy, every counter, the cost columns)."""


def _runs(values: Sequence[float], grid: Sequence[float]) -> list[tuple[float, float]]:
    """``values`` (a subset of ``grid``) as contiguous runs of ``grid``: [(first, last)]."""
    order = {v: i for i, v in enumerate(sorted(grid))}
    out: list[tuple[float, float]] = []
    for v in sorted(values):
        if out and order[v] == order[out[-1][1]] + 1:
            out[-1] = (out[-1][0], v)
        else:
            out.append((v, v))
    return out


def _where(lo: float, hi: float, x: str, binary: bool) -> str:
    """``256-1Ki blocks`` (``x="capacity"``) or ``64GiB-1TiB`` (``x="cache_bytes"``)."""
    unit = "B" if x == "cache_bytes" else ""
    a, b = format_capacity(lo, binary, unit), format_capacity(hi, binary, unit)
    return (a if lo == hi else f"{a}-{b}") + ("" if unit else " blocks")


def _percent_span(values: Sequence[float]) -> str:
    lo, hi = round(min(values) * 100), round(max(values) * 100)
    return f"{lo}%" if lo == hi else f"{lo}-{hi}%"


@dataclass(frozen=True)
class Drawn:
    """A run's single-cache rows split as the figures draw them (:func:`split`): what every
    note reads, split once per figure's x axis."""

    x: str
    rows: list[tuple[str, str, pd.DataFrame]]
    """(panel prefix, policy, rows indexed by ``x``, with ``full`` the share of the capacity
    resident at the end)."""


def split(results: pd.DataFrame, x: str = "capacity") -> Drawn:
    """Each panel and policy of ``results`` as the figures draw them (:func:`~.data.choices`),
    indexed by ``x`` (``capacity`` or ``cache_bytes``); the prefix names the trace and block
    size when the run has several panels."""
    single = single_cache_rows(results)
    if x not in single.columns or single[x].isna().any() or single[x].nunique() < 2:
        return Drawn(x, [])
    try:
        panel_list = panels(single)
    except SkipFigure:  # every panel empty: nothing to say
        return Drawn(x, [])
    chosen = choices(single)
    labels = trace_labels([p.trace for p in panel_list])
    several = len(panel_list) > 1
    out = []
    for panel in panel_list:
        prefix = f"{labels[panel.trace]}, block_size={panel.block_size}: " if several else ""
        for policy, choice in chosen.items():
            rows = select(panel.rows, policy, choice)
            if not rows.empty:
                full = rows["final_cache_blocks"] / rows["capacity"].astype(float)
                out.append((prefix, policy, rows.assign(full=full).set_index(x).sort_index()))
    return Drawn(x, out)


def _drawn(results: pd.DataFrame | Drawn, x: str) -> Drawn:
    return results if isinstance(results, Drawn) else split(results, x)


def _underfull_at(drawn: list[tuple[str, str, pd.DataFrame]]) -> dict[tuple[str, str], list]:
    """(prefix, policy) -> the x values where it ends less than :data:`UNDERFULL` full while
    another policy of the panel ends full; and the first such other policy (key ``witness``)."""
    out: dict[tuple[str, str], list] = {}
    for prefix, policy, rows in drawn:
        full_elsewhere: dict[str, set[float]] = {}
        for p2, other, rows2 in drawn:
            if p2 == prefix and other != policy:
                full_elsewhere[other] = set(rows2.index[rows2["full"] >= FULL])
        low = [c for c in rows.index if rows.at[c, "full"] < UNDERFULL]
        shown = [c for c in low if any(c in caps for caps in full_elsewhere.values())]
        if shown:
            witness = next(o for o, caps in full_elsewhere.items() if set(shown) & caps)
            out[(prefix, policy)] = [shown, witness]
    return out


def underfull(results: pd.DataFrame | Drawn, x: str = "capacity") -> list[str]:
    """Policies ending less than :data:`UNDERFULL` full at capacities where another policy of
    the run ends full: ``S3FIFO ends 35-36% full at 256-512 blocks, where LRU ends full (the
    specification's S3FIFO ...)``."""
    d = _drawn(results, x)
    drawn, x = d.rows, d.x
    found = _underfull_at(drawn)
    out = []
    explained: set[str] = set()
    for prefix, policy, rows in drawn:
        if (prefix, policy) not in found:
            continue
        shown, witness = found[(prefix, policy)]
        grid = [float(c) for c in rows.index]
        binary = is_binary(grid)
        parts = [
            f"{_percent_span(rows.loc[a:b, 'full'].tolist())} full at {_where(a, b, x, binary)}"
            for a, b in _runs([float(c) for c in shown], grid)
        ]
        text = f"{prefix}{policy} ends {' and '.join(parts)}, where {witness} ends full"
        why = WHY_UNDERFULL.get(policy)
        if why and why not in explained:
            text += f" ({why})"
            explained.add(why)
        out.append(text)
    return out


def falls_below(results: pd.DataFrame | Drawn, x: str = "capacity") -> list[str]:
    """An underfull policy whose hit rate is below a simpler full policy's (:data:`SIMPLER`)
    at every capacity from some capacity on: ``S3FIFO falls below FIFO from 16Ki blocks on;
    it ends 43-76% full at 64Ki-128Ki blocks there (occupancy)``."""
    d = _drawn(results, x)
    drawn, x = d.rows, d.x
    found = _underfull_at(drawn)
    out = []
    for prefix, policy, rows in drawn:
        if (prefix, policy) not in found or policy in SIMPLER:
            continue
        for simple in SIMPLER:
            other = next((r for p, q, r in drawn if p == prefix and q == simple), None)
            if other is None:
                continue
            caps = sorted(set(rows.index) & set(other.index))
            below = [
                c for c in caps if rows.at[c, "overall_hit_rate"] < other.at[c, "overall_hit_rate"]
            ]
            if not below or below[-1] != caps[-1]:
                break
            start = caps[-1]
            for c in reversed(caps):
                if c not in below:
                    break
                start = c
            binary = is_binary([float(c) for c in caps])
            if start == caps[0]:
                text = f"{prefix}{policy} is below {simple} at every capacity"
            else:
                where = _where(start, start, x, binary)
                text = f"{prefix}{policy} falls below {simple} from {where} on"
            there = [c for c in found[(prefix, policy)][0] if c >= start]
            if there:
                spans = " and ".join(
                    f"{_percent_span(rows.loc[a:b, 'full'].tolist())} full at "
                    f"{_where(a, b, x, binary)}"
                    for a, b in _runs([float(c) for c in there], [float(c) for c in rows.index])
                )
                text += f", where it ends {spans} (occupancy)"
            out.append(text)
            break
    return out


def identical(results: pd.DataFrame | Drawn, x: str = "capacity") -> list[str]:
    """Pairs of policies equal in every counter at every point the run has of both: ``LFU
    equals SIEVE in every counter at every capacity: a property of this trace (the two
    policies differ on others)``."""
    d = _drawn(results, x)
    drawn = d.rows
    columns = [
        c
        for c in (drawn[0][2].columns if drawn else [])
        if c not in NOT_RESULTS and pd.api.types.is_numeric_dtype(drawn[0][2][c])
    ]
    by_policy: dict[str, dict[str, pd.DataFrame]] = {}
    for prefix, policy, rows in drawn:
        by_policy.setdefault(policy, {})[prefix] = rows
    policies = list(by_policy)
    out = []
    paired: set[str] = set()
    for i, later in enumerate(policies):
        for earlier in policies[:i]:
            if earlier in paired:
                continue
            a, b = by_policy[earlier], by_policy[later]
            if a.keys() == b.keys() and all(_same(a[k], b[k], columns) for k in a):
                out.append(
                    f"{later} equals {earlier} in every counter at every capacity of this run "
                    "(a property of the trace: the two policies differ in general)"
                )
                paired.add(later)
                break
    return out


def _same(a: pd.DataFrame, b: pd.DataFrame, columns: Sequence[str]) -> bool:
    if list(a.index) != list(b.index):
        return False
    for c in columns:
        x, y = a[c], b[c]
        if x.isna().all() or y.isna().all():
            continue  # a counter one of the two policies does not keep
        if not np.array_equal(x.to_numpy(dtype=float), y.to_numpy(dtype=float), equal_nan=True):
            return False
    return True


def best_small_ratio(results: pd.DataFrame, policy: str = "S3FIFO") -> list[str]:
    """Each capacity's best ``small_ratio`` (``best small_ratio: 0.6 at 16Ki blocks, ...``) and
    the capacities whose best lies at an end of the ratios swept there."""
    from .data import fix_params, param_keys

    rows = single_cache_rows(results)
    rows = rows[rows["policy"] == policy]
    if rows.empty or rows["small_ratio"].nunique() < 2:
        return []
    rows, _ = fix_params(rows, policy, [k for k in param_keys(rows) if k != "small_ratio"])
    best = best_ratios(rows)
    several = best["trace_sha256"].nunique() > 1 or best["block_size"].nunique() > 1
    labels = trace_labels(best["trace"].astype(str).unique())
    binary = is_binary([float(c) for c in best["capacity"]])
    out = []
    for (trace, bs), group in best.groupby(["trace", "block_size"], sort=False):
        prefix = f"{labels[str(trace)]}, block_size={bs}: " if several else ""
        each = ", ".join(
            f"{r.small_ratio:g} at {format_capacity(r.capacity, binary)}"
            for r in group.itertuples(index=False)
        )
        text = f"{prefix}best small_ratio: {each} blocks"
        edge = group[group["at_edge"]]
        if not edge.empty:
            caps = ", ".join(format_capacity(c, binary) for c in edge["capacity"])
            text += f"; at {caps} blocks the best is an end of the ratios swept: widen them"
        out.append(text)
    return out


def best_ratios(rows: pd.DataFrame) -> pd.DataFrame:
    """Per trace, block size and capacity of ``rows`` (one policy, its other parameters
    fixed): the small_ratio of the highest hit rate (the smallest of equal ones), that hit
    rate, and whether it lies at an end of the ratios swept there."""
    out = []
    for (sha, bs, cap), sub in rows.groupby(["trace_sha256", "block_size", "capacity"]):
        sub = sub.sort_values("small_ratio")
        rate = sub["overall_hit_rate"].to_numpy(dtype=float)
        best = int(np.argmax(rate))
        out.append(
            {
                "trace_sha256": sha,
                "trace": sub["trace"].iloc[0],
                "block_size": bs,
                "capacity": cap,
                "small_ratio": float(sub["small_ratio"].iloc[best]),
                "hit_rate": float(rate[best]),
                "at_edge": len(sub) > 2 and best in (0, len(sub) - 1) and rate[best] > rate.min(),
            }
        )
    return pd.DataFrame(out)
