"""``python -m sweep.figures RUN_DIR`` (also ``python -m sweep.plot``): draw a run's figures."""

from __future__ import annotations

import argparse
import contextlib
import logging
import sys
from collections.abc import Iterator, Sequence

from . import DEFAULT_FORMATS, draw_figures
from .data import PlotError

log = logging.getLogger("sweep.plot")


def _id_list(text: str) -> list[int]:
    try:
        ids = [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected point ids separated by commas, got {text!r}"
        ) from None
    if not ids:
        raise argparse.ArgumentTypeError("expected at least one point id")
    return ids


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m sweep.plot",
        description="Draw the figures of a finished sweep from its Parquet files.",
    )
    p.add_argument("run_dir", help="the run directory (holds results.parquet)")
    p.add_argument("--out", help="where the figures go (default: RUN_DIR/figures)")
    p.add_argument(
        "--format",
        default=",".join(DEFAULT_FORMATS),
        help="comma-separated file formats, e.g. png,pdf (default: png)",
    )
    p.add_argument(
        "--points",
        type=_id_list,
        help="point ids (comma-separated) of the per-request figures (default: each policy's "
        "default-parameter point at the median capacity)",
    )
    p.add_argument(
        "--capacity-axis",
        choices=("blocks", "bytes"),
        default="blocks",
        help="capacity axes in blocks, or in bytes (cache_bytes: runs with a model)",
    )
    p.add_argument("--force", action="store_true", help="redraw even if the inputs did not change")
    return p


@contextlib.contextmanager
def _cli_logging() -> Iterator[None]:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("sweep.plot: %(message)s"))
    previous = log.level
    log.addHandler(handler)
    if log.getEffectiveLevel() > logging.INFO:
        log.setLevel(logging.INFO)
    try:
        yield
    finally:
        log.removeHandler(handler)
        log.setLevel(previous)


def main(argv: Sequence[str] | None = None) -> int:
    """0 done (figures may be skipped), 2 bad input."""
    args = _parser().parse_args(argv)
    formats = [f for f in args.format.split(",") if f.strip()]
    with _cli_logging():
        try:
            report = draw_figures(
                args.run_dir,
                args.out,
                formats=formats,
                points=args.points,
                force=args.force,
                capacity_axis=args.capacity_axis,
            )
        except PlotError as err:
            print(f"sweep.plot: error: {err}", file=sys.stderr)
            return 2
        log.info(
            "%d figure(s) in %s; %d skipped%s",
            len(report.drawn),
            report.out_dir,
            len(report.skipped),
            f"; {len(report.unchanged)} unchanged" if report.unchanged else "",
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
