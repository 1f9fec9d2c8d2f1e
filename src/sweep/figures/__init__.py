"""Paper figures of a finished sweep, drawn from its Parquet files only (no replay is redone).

Command line (``python -m sweep.plot`` is the same)::

    python -m sweep.figures RUN_DIR [--out DIR] [--format png,pdf] [--points ID,...] [--force]

From Python (the sweep calls this at the end of a run, with ``plot.formats``)::

    from sweep.figures import draw_figures
    report = draw_figures("outputs/2025-06-01/14-03-22", formats=["png"])
    report.written, report.skipped, report.unchanged

Built-in figure kinds (``OUT/NAME.png`` at 200 dpi; ``OUT/NAME.pdf`` when asked for), one panel
per trace (and block size when the run has several), traces in the order they were typed:

``hit_rate_vs_capacity`` (:mod:`.capacity`)
    token hit rate against capacity (in tokens on a second axis when the run has one block
    size), one line per policy, the infinite-cache ceiling dashed grey. Skipped with one
    capacity.
``small_ratio_tuning`` (:mod:`.small_ratio`)
    S3FIFO's hit rate against ``small_ratio``, one line per capacity (log x axis when the
    ratios span more than 10x), each capacity's best starred, beside a heatmap of its gain
    over LRU (percentage points, diverging colours centred at 0, the best cells framed,
    values in the cells of small grids).
``max_freq_effect`` (:mod:`.params`)
    S3FIFO's hit rate minus its hit rate at the default ``max_freq`` (pp) against capacity;
    a second panel for ``ghost_freq`` when it varies; each title states the effects' range.
``occupancy`` (:mod:`.capacity`)
    final resident blocks as a share of the capacity, one line per policy.
``hit_ratio_cdf``, ``hit_rate_over_time`` (:mod:`.requests`)
    per-request figures of the chosen points (``points``; default: each policy's
    default-parameter point at the median capacity): the CDF of the hit ratio, and the hit
    rate in round time bins (1, 2, 5, 10, 15, 30 s or min, ...); small multiples past 5 points
    per trace.
``hit_rate_vs_cache_size``, ``prefill_saved_vs_cache_size`` (:mod:`.cost`)
    with a model: hit rate, and prefill FLOPs and est. time saved, against the cache in bytes.
``tier_split`` (:mod:`.tiers`)
    hierarchies (``policy`` ``TIERS``): each tier's share of the token hit rate, stacked,
    against the swept tier's capacity.
``cluster_hit_rate``, ``cluster_ttft``, ``cluster_load_imbalance`` (:mod:`.cluster`)
    clusters: hit rate (and share of one cache of all the memory), p50/p99 est. TTFT and load
    imbalance against the number of instances, one line per router.

The single-cache kinds draw ``RunData.results`` (hierarchy and cluster rows left out); the
others read ``RunData.all_results`` and are passed over (``FigureKind.applies``) in a run
without their kind of points. Every kind draws with the run's ``RunData.palette`` (one look
per policy, router and tier for the whole run); a kind's ``notes`` (:mod:`.findings`) are
logged on the line that lists it.

Adding a figure kind
--------------------
A figure kind is a function ``draw(data: RunData) -> Figure`` registered with a name::

    from sweep.figures import FigureKind, RunData, SkipFigure, register
    from sweep.figures.style import (
        Series, capacity_axis, draw_series, finish, layout, percent_axis, styled,
    )

    @styled                                   # builds under style.mplstyle
    def my_figure(data: RunData) -> Figure:
        results = data.results                # data.traces, .points, .per_request, .requests
        if ...:
            raise SkipFigure("why it is not drawn")   # logged; the other figures go on
        fig, axes = layout(n_panels, sharey=True)     # one column for one panel, both above
        look = data.palette.policy(policy)    # the policy's colour, marker, line style
        draw_series(axes, [Series(panel, key, label, x, y, look), ...])
        capacity_axis(axes[0], capacities, block_size)
        percent_axis(axes[0], "Token hit rate (%)", highest)  # from 0
        return finish(fig, axes)  # markers kept visible; one legend above the panels

    register(FigureKind("my_figure", my_figure, order=70))

:func:`draw_figures` draws every registered kind (the module that registers it must be
imported first). The style layer (:mod:`.style`, which gathers :mod:`.axes`, :mod:`.series`
and :mod:`.legend`): :class:`~.style.Palette` (one look per policy, router and tier of a run),
:class:`~.series.Series` / :func:`~.series.draw_series` (identical series are announced
``LABEL (= OTHER)``), :func:`~.axes.capacity_axis` / :func:`~.axes.format_capacity` (``16Ki``
for binary grids, ``16K`` for decimal ones), :func:`~.axes.percent_axis`,
:func:`~.axes.draw_ceiling`, :func:`~.legend.layout`, :func:`~.legend.finish`; :mod:`.data`:
:func:`~.data.panels` (one per trace and block size, titled by what differs),
:func:`~.data.choices` (the parameters each policy is drawn with). Figures use matplotlib's
object-oriented API (no pyplot, no global backend); :func:`draw_figures` is the only place
that writes files.

Drawing is skipped when nothing changed: ``OUT/.figures.json`` records a digest of the input
files (their content; size and modification time past 64 MiB), the options and the figure code;
a second call with the same digest writes nothing (``force=True`` redraws).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .data import INPUT_FILES, RESULTS_FILE, PlotError, RunData, SkipFigure, load_results
from .registry import FigureKind, figure_kinds, register

__all__ = [
    "DEFAULT_FORMATS",
    "FigureKind",
    "FigureReport",
    "PlotError",
    "RunData",
    "SkipFigure",
    "draw_figures",
    "figure_kinds",
    "register",
]

log = logging.getLogger("sweep.plot")

FIGURES_DIR = "figures"
DEFAULT_FORMATS: tuple[str, ...] = ("png",)
"""PNG only: a PDF costs about as much again to write; ask for it with ``plot.formats``."""
PNG_DPI = 200
STAMP_FILE = ".figures.json"
HASH_CONTENT_BYTES = 64 * 1024**2
"""Input files up to this size are identified by their content (sha256, ~50 ms at the limit)."""


@dataclass
class FigureReport:
    """What :func:`draw_figures` did."""

    out_dir: Path
    written: list[Path] = field(default_factory=list)
    """Every file written, in order."""
    skipped: dict[str, str] = field(default_factory=dict)
    """Figure name -> why it was not drawn."""
    drawn: list[str] = field(default_factory=list)
    """Names of the figures drawn."""
    unchanged: list[str] = field(default_factory=list)
    """Names of the figures not redrawn because their inputs did not change."""
    notes: dict[str, list[str]] = field(default_factory=dict)
    """Figure name -> the facts of the run its reading depends on (:mod:`.findings`)."""


def check_formats(formats: Sequence[str]) -> tuple[str, ...]:
    from matplotlib.backend_bases import FigureCanvasBase

    supported = FigureCanvasBase.get_supported_filetypes()
    out = []
    for f in formats:
        f = f.strip().lower().lstrip(".")
        if f not in supported:
            allowed = ", ".join(sorted(supported))
            raise PlotError(f"invalid format {f!r}: expected one of {allowed}")
        if f not in out:
            out.append(f)
    if not out:
        raise PlotError("no output format given")
    return tuple(out)


def save_figure(fig: Any, out_dir: Path, name: str, formats: Sequence[str]) -> list[Path]:
    """Write ``fig`` as ``out_dir/name.<format>`` for each format (each file atomically)."""
    from .style import style_context

    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    with style_context():
        for fmt in formats:
            path = out_dir / f"{name}.{fmt}"
            tmp = out_dir / f".{name}.{fmt}.{os.getpid()}.tmp"
            # no bbox_inches="tight": the constrained layout already keeps every artist inside
            # the figure (tests/test_figure_layout.py checks it), and "tight" costs a second
            # full draw of every figure
            kw: dict[str, Any] = {"format": fmt}
            if fmt == "png":
                kw["dpi"] = PNG_DPI
            if fmt == "pdf":
                kw["metadata"] = {"CreationDate": None}  # identical bytes for identical figures
            try:
                fig.savefig(tmp, **kw)
                os.replace(tmp, path)
                # the layout is in inches and points, the same in every format: laid out once
                # for the first file, it is kept for the others (the constrained layout is
                # the costliest step of a save)
                fig.set_layout_engine("none")
            except BaseException:
                with contextlib.suppress(OSError):
                    tmp.unlink()
                raise
            written.append(path)
    return written


def _digest(run: Path, kinds: Sequence[FigureKind], formats: Sequence[str], points: Any) -> str:
    """What the figures depend on: the input files (their content up to
    :data:`HASH_CONTENT_BYTES`, else their size and modification time: a resumed run that adds
    nothing rewrites the same bytes), the options, and the figure code (a code change redraws)."""
    parts: list[Any] = [list(formats), None if points is None else [int(p) for p in points]]
    for name in INPUT_FILES:
        with contextlib.suppress(OSError):
            path = run / name
            st = path.stat()
            if st.st_size <= HASH_CONTENT_BYTES:
                parts.append([name, hashlib.sha256(path.read_bytes()).hexdigest()])
            else:
                parts.append([name, st.st_size, st.st_mtime_ns])
    # the figure code: every file of this package (the style layer included, whichever of
    # its modules this process imported) and the module of every kind registered elsewhere
    sources = {str(p) for p in Path(__file__).parent.glob("*.py")}
    for k in kinds:
        source = getattr(sys.modules.get(k.draw.__module__), "__file__", None)
        if source is not None:
            sources.add(str(source))
    for source in sorted(sources):
        with contextlib.suppress(OSError):
            st = Path(source).stat()
            parts.append([Path(source).name, st.st_size, st.st_mtime_ns])
    parts.append([k.name for k in kinds])
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()


def _unchanged(out: Path, digest: str) -> dict[str, Any] | None:
    """The previous drawing's record when its digest matches and its files are all there."""
    try:
        stamp = json.loads((out / STAMP_FILE).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(stamp, dict) or stamp.get("digest") != digest:
        return None
    if not all((out / f).is_file() for f in stamp.get("files", [])):
        return None
    return stamp


def draw_figures(
    run_dir: str | os.PathLike[str],
    out_dir: str | os.PathLike[str] | None = None,
    formats: Sequence[str] = DEFAULT_FORMATS,
    points: Sequence[int] | None = None,
    force: bool = False,
    capacity_axis: str = "blocks",
) -> FigureReport:
    """Draw every registered figure kind of the run in ``run_dir`` into ``out_dir`` (default
    ``run_dir/figures``), one file per format; figures whose parameter did not vary, or whose
    input file is absent, are skipped, and nothing is redrawn when nothing changed since the last
    call (unless ``force``). ``points`` (point ids) are the points of the per-request figures;
    ``capacity_axis="bytes"`` puts the cache in bytes on the capacity axes (with a model).
    Raises :class:`PlotError` on a missing run directory or results file, an unknown point id or
    format."""
    run = Path(os.path.abspath(run_dir))
    results = load_results(run)
    fmts = check_formats(formats)
    out = Path(os.path.abspath(out_dir)) if out_dir is not None else run / FIGURES_DIR
    if capacity_axis not in ("blocks", "bytes"):
        raise PlotError(f"invalid capacity axis {capacity_axis!r}: expected blocks or bytes")
    # .results: single caches; .all_results: every row
    data = RunData(run, results, points, capacity_axis)
    if points is not None:
        _ = data.points  # an unknown id is an error even when the figures needing it are skipped
    report = FigureReport(out)
    kinds = figure_kinds()
    if results.empty:
        for kind in kinds:
            report.skipped[kind.name] = f"{RESULTS_FILE} has no rows"
            log.info("skipped %s: %s", kind.name, report.skipped[kind.name])
        return report
    digest = _digest(run, kinds, [*fmts, f"capacity_axis={capacity_axis}"], points)
    stamp = None if force else _unchanged(out, digest)
    if stamp is not None:
        report.unchanged = list(stamp.get("drawn", []))
        report.skipped = dict(stamp.get("skipped", {}))
        report.notes = dict(stamp.get("notes", {}))
        log.info("figures unchanged (same inputs as when drawn): %s", out)
        return report
    kinds = [k for k in kinds if k.applies is None or k.applies(data)]
    for kind in kinds:
        if kind.single_cache and data.results.empty:
            report.skipped[kind.name] = "no single-cache points (only hierarchies or clusters)"
            log.info("skipped %s: %s", kind.name, report.skipped[kind.name])
            continue
        try:
            fig = kind.draw(data)
        except SkipFigure as skip:
            report.skipped[kind.name] = skip.reason
            log.info("skipped %s: %s", kind.name, skip.reason)
            continue
        try:
            paths = save_figure(fig, out, kind.name, fmts)
        except OSError as err:
            raise PlotError(f"{out}: cannot write the figures ({err.strerror or err})") from None
        fig.clear()  # no pyplot: nothing else holds the figure
        report.written.extend(paths)
        report.drawn.append(kind.name)
        notes = kind.notes(data) if kind.notes is not None else []
        if notes:
            report.notes[kind.name] = notes
        said = "".join(f"; note: {n}" for n in notes)
        log.info("drew %s: %s%s", kind.name, ", ".join(str(p) for p in paths), said)
    record = {
        "digest": digest,
        "drawn": report.drawn,
        "skipped": report.skipped,
        "notes": report.notes,
        "files": [p.name for p in report.written],
    }
    with contextlib.suppress(OSError):
        out.mkdir(parents=True, exist_ok=True)
        (out / STAMP_FILE).write_text(json.dumps(record, indent=1) + "\n")
    return report
