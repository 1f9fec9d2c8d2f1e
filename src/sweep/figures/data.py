"""What the figures read: a run directory's Parquet files, split into panels and series.

Files (see :mod:`sweep.store`)::

    results.parquet       required: one row per point
    traces.parquet        optional: the infinite-cache ceiling of each (trace, block_size)
    per_request.parquet   optional (save_per_request=false leaves it out): per-request hits
    requests.parquet      optional: each request's timestamp (ms since the trace's start)

A policy measured with several parameter combinations is drawn with its default parameters (the
registered ``Params`` defaults: S3FIFO ``small_ratio=0.1``, ``max_freq=3``, ``ghost_freq=0``)
when the run has them, else with its most frequent combination, named in the legend.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from prefixsim.errors import PrefixSimError

from ..config import POLICY_PARAM_KEYS
from .style import Palette, policy_order

log = logging.getLogger("sweep.plot")

RESULTS_FILE = "results.parquet"
PER_REQUEST_FILE = "per_request.parquet"
TRACES_FILE = "traces.parquet"
REQUESTS_FILE = "requests.parquet"
INPUT_FILES = (RESULTS_FILE, TRACES_FILE, PER_REQUEST_FILE, REQUESTS_FILE)
RESULT_COLUMNS = (
    "point_id",
    "trace",
    "trace_sha256",
    "policy",
    "capacity",
    "block_size",
    "overall_hit_rate",
    "final_cache_blocks",
)
DEFAULT_PARAMS: dict[str, Any] = {"small_ratio": 0.1, "max_freq": 3, "ghost_freq": 0}
"""Parameter defaults of a policy the registry does not know (S3FIFO's)."""


class PlotError(PrefixSimError):
    """A run directory or an option the figures cannot be drawn from (one line for the user)."""


CLUSTER_COLUMNS = frozenset(
    ("instances", "router", "overlap_weight", "seed", "vnodes", "key_blocks", "load_model",
     "load_hardware", "load_cache_tier", "decode_seconds_per_token", "est_ttft_p50_seconds",
     "est_ttft_p99_seconds", "est_queueing_delay_mean_seconds", "busy_seconds_max",
     "busy_seconds_mean", "load_imbalance")
)  # fmt: skip
"""Columns of cluster points only (null in a single cache's row)."""


def single_cache_rows(results: pd.DataFrame) -> pd.DataFrame:
    """The rows of single caches: not a hierarchy (``policy`` ``TIERS``, the tiers group) and
    not a cluster (``instances`` set). Results written before those existed are all single.
    The hierarchies' and clusters' own columns are left out (null in these rows; a third of
    the table's width, which every selection of rows would copy)."""
    keep = results["policy"] != "TIERS"
    if "instances" in results.columns:
        keep &= results["instances"].isna()
    rows = results if bool(keep.all()) else results[keep]
    columns = [
        c for c in rows.columns if not (c in CLUSTER_COLUMNS or c == "mode" or c.startswith("tier"))
    ]
    return rows if len(columns) == len(rows.columns) else rows[columns]


class SkipFigure(Exception):
    """A figure that is not drawn, with the reason (raised by the figure functions)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def scalar(value: Any) -> Any:
    """A Python scalar for a numpy or pandas one."""
    return value.item() if hasattr(value, "item") else value


def format_param(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def ids(values: Sequence[int]) -> str:
    return ", ".join(str(i) for i in values)


# --- panels: one per trace (and block size) -----------------------------------------------------


def trace_label(trace: str) -> str:
    """A bundled name as it is, a path by its file stem (``/data/a.jsonl.gz`` reads ``a``)."""
    name = Path(str(trace)).name
    for suffix in (".gz", ".jsonl", ".json"):
        name = name.removesuffix(suffix)
    return name or str(trace)


def trace_labels(traces: Sequence[str]) -> dict[str, str]:
    """Each trace (as typed) by :func:`trace_label`; traces whose labels collide are named by
    as many of their last path components as tell them apart (``x/a``, ``y/a``)."""
    distinct = list(dict.fromkeys(str(t) for t in traces))
    out = {t: trace_label(t) for t in distinct}
    for depth in range(2, 8):
        clash = [t for t in distinct if list(out.values()).count(out[t]) > 1]
        if not clash:
            break
        for t in clash:
            parts = Path(t).parts
            out[t] = "/".join([*parts[-depth:-1], trace_label(t)]) if len(parts) > 1 else t
    return out


@dataclass(frozen=True)
class Panel:
    """The rows of one trace (and block size)."""

    trace_sha256: str
    block_size: int
    title: str
    rows: pd.DataFrame
    trace: str = ""


def param_keys(df: pd.DataFrame) -> list[str]:
    return [k for k in POLICY_PARAM_KEYS if k in df.columns]


def titles_by_difference(fields: Sequence[dict[str, str]]) -> list[str]:
    """Panel titles from each panel's fields (name -> text, in order): the fields whose text
    differs between the panels, joined by ``", "``; a single panel gets all its fields."""
    if len(fields) <= 1:
        return [", ".join(v for v in f.values() if v) for f in fields]
    names = list(dict.fromkeys(k for f in fields for k in f))
    varying = [k for k in names if len({f.get(k, "") for f in fields}) > 1]
    return [", ".join(f[k] for k in varying if f.get(k)) for f in fields]


def hitless(df: pd.DataFrame) -> dict[tuple[str, int], str]:
    """``(trace_sha256, block_size) -> why`` for each trace and block size of ``df`` at which
    no point has a hit: no request has a full block (``block_accesses`` all 0), or no block
    is requested twice within reach of any cache of the run. Such a panel would be empty."""
    keys = ["trace_sha256", "block_size"]
    columns = [c for c in ("total_hit_tokens", "block_accesses") if c in df.columns]
    most = df[keys + columns].fillna(0).groupby(keys, sort=False).max()
    empty = most[most["total_hit_tokens"] <= 0]
    out = {}
    for (sha, bs), row in empty.iterrows():
        full_block = "block_accesses" in row and row["block_accesses"] > 0
        why = "no point has a hit" if full_block else "no request has a full block"
        out[(str(sha), int(bs))] = why
    return out


def hitless_reason(df: pd.DataFrame, empty: dict[tuple[str, int], str]) -> str:
    """One line saying which traces and block sizes have no hit and why."""
    labels = trace_labels(df["trace"].astype(str).unique())
    by_trace: dict[tuple[str, str], list[int]] = {}
    for (sha, bs), why in empty.items():
        trace = str(df.loc[df["trace_sha256"] == sha, "trace"].iloc[0])
        by_trace.setdefault((labels[trace], why), []).append(bs)
    parts = [
        f"{label} at block_size={', '.join(str(b) for b in sorted(sizes))}: {why}"
        for (label, why), sizes in by_trace.items()
    ]
    return "; ".join(parts) + " (every hit rate is 0)"


def panels(df: pd.DataFrame) -> list[Panel]:
    """``df`` split by (trace, block size), in the order the traces were typed (their first
    ``point_id``: the grid numbers points in that order), then by block size, leaving out
    those without a single hit (:func:`hitless`; :class:`SkipFigure` when none is left).
    Titles name what differs between the panels: the trace (:func:`trace_labels`), the block
    size (``block_size=64``); one panel is titled by its trace."""
    if df.empty:
        return []
    empty = hitless(df)
    first = df.groupby(["trace", "trace_sha256", "block_size"], sort=False)["point_id"].min()
    keys = first.reset_index()
    trace_first = keys.groupby(["trace", "trace_sha256"])["point_id"].transform("min")
    keys = keys.assign(order=trace_first).sort_values(["order", "block_size"])
    pairs = zip(keys["trace_sha256"], keys["block_size"], strict=True)
    keys = keys[[(str(s), int(b)) not in empty for s, b in pairs]]
    if keys.empty:
        raise SkipFigure(hitless_reason(df, empty))
    if empty:
        log.info("left out of the figures: %s", hitless_reason(df, empty))
    labels = trace_labels(keys["trace"].astype(str).tolist())
    fields = [
        {"trace": labels[str(t)], "block_size": f"block_size={int(b)}"}
        for t, b in zip(keys["trace"], keys["block_size"], strict=True)
    ]
    titles = titles_by_difference(fields)
    if len(titles) == 1:
        titles = [fields[0]["trace"]]
    seen: dict[str, int] = {}
    for t in titles:
        seen[t] = seen.get(t, 0) + 1
    out = []
    rows_of = df.groupby(["trace_sha256", "block_size"], sort=False)
    for (trace, sha, bs), title in zip(
        keys[["trace", "trace_sha256", "block_size"]].itertuples(index=False), titles, strict=True
    ):
        if seen[title] > 1:  # the same trace and block size with other content (a resumed run)
            title += f" [{str(sha)[:8]}]"
        rows = rows_of.get_group((sha, bs))
        out.append(Panel(str(sha), int(bs), title, rows, str(trace)))
    return out


# --- which parameters a policy is drawn with ----------------------------------------------------


def _values(column: pd.Series) -> list[Any]:
    """Python values of ``column``, ``None`` for null."""
    return [None if pd.isna(v) else scalar(v) for v in column.tolist()]


def _combos(df: pd.DataFrame, keys: Sequence[str]) -> pd.Series:
    """Each row's parameter values as a tuple (``None`` for null)."""
    columns = [_values(df[k]) for k in keys]
    tuples = list(zip(*columns, strict=True)) if columns else [() for _ in range(len(df))]
    return pd.Series(tuples, index=df.index, dtype=object)


def registry_defaults(policy: str) -> dict[str, Any]:
    """``policy``'s registered parameter defaults (the registry is imported only here: the
    figures of a run never need the kernels)."""
    import prefixsim

    try:
        spec = prefixsim.get_policy(policy)
    except PrefixSimError:
        return dict(DEFAULT_PARAMS)
    out = {}
    for f in dataclasses.fields(spec.params_type):
        if f.name in POLICY_PARAM_KEYS and f.default is not dataclasses.MISSING:
            out[f.name] = f.default
    return out


def same_value(a: Any, b: Any) -> bool:
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, float) or isinstance(b, float):
        return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=1e-12)
    return bool(a == b)


@dataclass(frozen=True)
class Choice:
    """The parameter combination a policy is drawn with."""

    keys: tuple[str, ...]
    values: tuple[Any, ...]
    label: str
    note: str | None = None
    """Why it is not the default (for the log), or None."""


def choose_params(
    df: pd.DataFrame, policy: str, keys: Sequence[str] | None = None
) -> Choice | None:
    """The combination of ``keys`` (default: every parameter) to draw ``policy`` with: its
    default parameters when ``df`` has them, else its most frequent combination (ties: the
    first in sorted order). ``None`` when ``df`` has no row of ``policy``."""
    keys = tuple(param_keys(df) if keys is None else keys)
    rows = df[df["policy"] == policy]
    if rows.empty:
        return None
    counts: dict[tuple[Any, ...], int] = {}
    for c in _combos(rows, keys):
        counts[c] = counts.get(c, 0) + 1
    if len(counts) == 1:
        (only,) = counts
        return Choice(keys, only, policy)
    varying = [i for i, _ in enumerate(keys) if len({c[i] for c in counts}) > 1]
    defaults = registry_defaults(policy)
    for c in counts:
        if all(c[i] is None or same_value(c[i], defaults.get(keys[i])) for i in range(len(keys))):
            return Choice(keys, c, f"{policy} (defaults)")
    best = sorted(counts, key=lambda c: (-counts[c], [(v is None, v) for v in c]))[0]
    shown = ", ".join(f"{keys[i]}={format_param(best[i])}" for i in varying)
    return Choice(
        keys,
        best,
        f"{policy} ({shown})",
        note=f"{policy}: no point with the default parameters; drawn with the most frequent "
        f"combination ({shown})",
    )


def select(df: pd.DataFrame, policy: str, choice: Choice) -> pd.DataFrame:
    """The rows of ``policy`` with the parameters of ``choice``, by capacity."""
    rows = df[df["policy"] == policy]
    if rows.empty:
        return rows
    mask = _combos(rows, choice.keys).map(
        lambda c: all(same_value(a, b) for a, b in zip(c, choice.values, strict=True))
    )
    return rows[mask.astype(bool)].sort_values("capacity")


def choices(df: pd.DataFrame) -> dict[str, Choice]:
    """Each policy of ``df`` (in :func:`policy_order`) and the parameters it is drawn with."""
    out = {}
    for policy in policy_order(df["policy"].unique()):
        choice = choose_params(df, policy)
        if choice is not None:
            out[policy] = choice
            if choice.note:
                log.debug(choice.note)  # the legend says it too
    return out


def one_value(df: pd.DataFrame, column: str, what: str) -> str | None:
    """A skip reason when ``column`` has one value (or none) in ``df``."""
    values = df[column].dropna().unique()
    if len(values) > 1:
        return None
    if len(values) == 0:
        return f"no {what} in the run"
    return f"only one {what} in the run ({format_param(scalar(values[0]))})"


def policy_rows(results: pd.DataFrame, policy: str) -> pd.DataFrame:
    rows = results[results["policy"] == policy]
    if rows.empty:
        raise SkipFigure(f"no {policy} points in the run")
    return rows


def fix_params(rows: pd.DataFrame, policy: str, keys: Sequence[str]) -> tuple[pd.DataFrame, str]:
    """``rows`` with the parameters ``keys`` at the default (or most frequent) values, and
    ``"key=value, ..."`` naming those that vary in ``rows`` (empty when none does)."""
    if not keys:
        return rows, ""
    choice = choose_params(rows, policy, keys)
    assert choice is not None
    if choice.note:
        log.debug(choice.note)
    shown = ", ".join(
        f"{k}={format_param(v)}"
        for k, v in zip(choice.keys, choice.values, strict=True)
        if rows[k].nunique() > 1
    )
    return select(rows, policy, choice), shown


def default_points(results: pd.DataFrame) -> pd.DataFrame:
    """For each trace, block size and policy, its default-parameter point (see
    :func:`choose_params`) at the run's median capacity (the lower middle one of an even count;
    the nearest capacity on a log scale when the policy lacks it)."""
    if results.empty:
        return results
    capacities = np.sort(results["capacity"].unique())
    median = float(capacities[(len(capacities) - 1) // 2])
    chosen = choices(results)
    picked = []
    for panel in panels(results):
        for policy, choice in chosen.items():
            rows = select(panel.rows, policy, choice)
            if rows.empty:
                continue
            distance = (np.log2(rows["capacity"].astype(float)) - math.log2(median)).abs()
            picked.append(rows.loc[distance.idxmin()])
    return pd.DataFrame(picked).reset_index(drop=True)


# --- reading ------------------------------------------------------------------------------------


def _read(path: Path, columns: Sequence[str] | None = None, **kw: Any) -> pd.DataFrame:
    try:
        return pd.read_parquet(path, columns=list(columns) if columns else None, **kw)
    except (OSError, ValueError, ImportError) as err:  # pyarrow's errors derive from these
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise PlotError(f"{path}: unreadable ({first})") from None


def read_optional(path: Path, needed: Sequence[str], **kw: Any) -> pd.DataFrame | None:
    if not path.exists():
        return None
    try:
        df = _read(path, **kw)
    except PlotError as err:
        log.warning("%s; not used", err)
        return None
    missing = [c for c in needed if c not in df.columns]
    if missing:
        log.warning("%s: no column %s; not used", path, ", ".join(missing))
        return None
    return df


def load_results(run_dir: Path) -> pd.DataFrame:
    if not run_dir.is_dir():
        what = "not a directory" if run_dir.exists() else "no such directory"
        raise PlotError(f"{run_dir}: {what}")
    path = run_dir / RESULTS_FILE
    if not path.is_file():
        raise PlotError(f"{run_dir}: no {RESULTS_FILE} (not the directory of a finished sweep)")
    df = _read(path)
    missing = [c for c in RESULT_COLUMNS if c not in df.columns]
    if missing:
        raise PlotError(f"{path}: no column {', '.join(missing)} (not a sweep's results)")
    for key in POLICY_PARAM_KEYS:
        if key not in df.columns:
            df[key] = pd.NA
    from ..semantics import figure_policies

    return figure_policies(df)  # a policy under an engine's semantics is a series of its own


def pick_points(results: pd.DataFrame, points: Sequence[int] | None) -> pd.DataFrame:
    if points is None:
        return default_points(results)
    wanted = [int(p) for p in points]
    known = set(results["point_id"].tolist())
    unknown = [p for p in wanted if p not in known]
    if unknown:
        raise PlotError(f"points: no point {ids(unknown)} in {RESULTS_FILE}")
    order = {p: i for i, p in enumerate(dict.fromkeys(wanted))}
    chosen = results[results["point_id"].isin(order)]
    return chosen.sort_values("point_id", key=lambda s: s.map(order)).reset_index(drop=True)


@dataclass
class RunData:
    """A run directory's tables, each read on first use (a figure kind reads what it needs).

    ``results`` holds the single-cache points only (:func:`single_cache_rows`), what the
    built-in figures draw; ``all_results`` every row, hierarchies and clusters included, for the
    figure kinds of those points."""

    run_dir: Path
    results: pd.DataFrame
    points_arg: Sequence[int] | None = None
    capacity_axis: str = "blocks"
    """``plot.capacity_axis``: ``blocks``, or ``bytes`` (``cache_bytes``, with a model)."""
    _cache: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._cache["all_results"] = self.results
        self.results = single_cache_rows(self.results)

    @property
    def all_results(self) -> pd.DataFrame:
        result: pd.DataFrame = self._cache["all_results"]
        return result

    def _once(self, key: str, make: Callable[[], Any]) -> Any:
        if key not in self._cache:
            self._cache[key] = make()
        return self._cache[key]

    def once(self, key: str, make: Callable[[], Any]) -> Any:
        """``make()``, made once per run for ``key`` (what several figures read, such as the
        split of the notes; built-in keys are the property names)."""
        return self._once(f"user:{key}", make)

    @property
    def palette(self) -> Palette:
        """The looks of the run's policies, routers and tiers, decided once from every row
        (:meth:`Palette.of`) and shared by every figure of the run."""
        result: Palette = self._once("palette", lambda: Palette.of(self.all_results))
        return result

    @property
    def traces(self) -> pd.DataFrame | None:
        def load() -> pd.DataFrame | None:
            df = read_optional(
                self.run_dir / TRACES_FILE, ["trace_sha256", "block_size", "ceiling_hit_rate"]
            )
            if df is None:
                log.info("%s absent: no infinite-cache ceiling drawn", TRACES_FILE)
            return df

        result: pd.DataFrame | None = self._once("traces", load)
        return result

    @property
    def points(self) -> pd.DataFrame:
        result: pd.DataFrame = self._once(
            "points", lambda: pick_points(self.results, self.points_arg)
        )
        return result

    @property
    def per_request(self) -> pd.DataFrame | None:
        def load() -> pd.DataFrame | None:
            wanted = [int(p) for p in self.points["point_id"]]
            if not wanted:
                return None
            return read_optional(
                self.run_dir / PER_REQUEST_FILE,
                ["point_id", "request", "prompt_tokens", "hit_tokens"],
                filters=[("point_id", "in", wanted)],
            )

        result: pd.DataFrame | None = self._once("per_request", load)
        return result

    @property
    def requests(self) -> pd.DataFrame | None:
        def load() -> pd.DataFrame | None:
            shas = sorted(set(self.points["trace_sha256"])) if not self.points.empty else []
            return read_optional(
                self.run_dir / REQUESTS_FILE,
                ["trace_sha256", "request", "timestamp"],
                filters=[("trace_sha256", "in", shas)] if shas else None,
            )

        result: pd.DataFrame | None = self._once("requests", load)
        return result
