"""What a sweep reports: its summary (points planned, skipped, computed, failed) and exit
status."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

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
    seconds: float = 0.0

    @property
    def exit_code(self) -> int:
        if self.interrupted:
            return EXIT_INTERRUPTED
        return EXIT_FAILED_POINTS if self.failures or self.error else EXIT_OK

    @property
    def results_path(self) -> Path:
        return self.out_dir / "results.parquet"
