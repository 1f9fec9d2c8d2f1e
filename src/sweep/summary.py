"""What a sweep reports: its summary (points planned, skipped, computed, failed) and exit
status, its progress bar and its figures."""

from __future__ import annotations

import logging
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger("sweep")

EXIT_OK, EXIT_FAILED_POINTS, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


@dataclass
class Failure:
    point_id: int
    point: str
    """The point's parameters, ``trace=... policy=... capacity=...``."""
    error: str


@dataclass
class SweepSummary:
    out_dir: Path
    planned: int
    """Points of this grid."""
    skipped: int
    """Points of this grid already in the run directory (not recomputed)."""
    computed: int
    failures: list[Failure] = field(default_factory=list)
    interrupted: bool = False
    rows: int = 0
    """Rows of results.parquet (every point computed in the run directory so far)."""
    error: str | None = None
    """Why the sweep stopped early (a killed worker, a lost Dask cluster), if it did."""
    discarded: bool = False
    """Interrupted before any point finished: the run folder this run made was removed."""
    seconds: float = 0.0

    @property
    def exit_code(self) -> int:
        if self.interrupted:
            return EXIT_INTERRUPTED
        return EXIT_FAILED_POINTS if self.failures or self.error else EXIT_OK

    @property
    def results_path(self) -> Path:
        return self.out_dir / "results.parquet"


def progress_bar(total: int, enabled: bool) -> Any:
    """The sweep's progress bar (tqdm, on stderr, shown after a second)."""
    from tqdm import tqdm

    return tqdm(
        total=total,
        desc="sweep",
        unit="pt",
        delay=1.0,
        disable=None if enabled else True,
        file=sys.stderr,
        dynamic_ncols=True,
        smoothing=0.1,
    )


def draw_figures_logged(run_dir: Path, formats: list[str], capacity_axis: str) -> None:
    """The run's figures; a plotting problem is logged, never lost results or a failed sweep."""
    from .figures import draw_figures

    t = time.perf_counter()
    try:
        report = draw_figures(run_dir, formats=formats, capacity_axis=capacity_axis)
    except Exception as err:  # the numbers are written; say what went wrong and how to retry
        log.error(
            "figures failed (%s: %s); the results are complete; retry: python -m sweep.plot %s",
            type(err).__name__,
            err,
            run_dir,
        )
        return
    log.info(
        "figures: %d in %s (%.1f s)%s",
        len(report.drawn),
        run_dir / "figures",
        time.perf_counter() - t,
        f"; {len(report.unchanged)} unchanged (same results)" if report.unchanged else "",
    )
