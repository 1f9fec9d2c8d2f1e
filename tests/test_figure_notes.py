"""The notes beside a figure in the run's log (:mod:`sweep.figures.findings`): facts the figure's
reading depends on, found in the run's own results. The tables are written here with known
values: which policy ends part empty, where it falls below another, which two are equal in
every counter, where small_ratio is best."""

from __future__ import annotations

import logging
from pathlib import Path

import pandas as pd
import pytest

from sweep.figures import draw_figures, findings
from test_plot import make_results, write_run

CAPS = (256, 512, 1024, 2048, 4096)


def table() -> pd.DataFrame:
    """S3FIFO, LRU, FIFO at 256..4Ki blocks. S3FIFO ends 40% and 50% full at 256 and 512,
    80% at 4Ki, full elsewhere; LRU and FIFO always full. Hit rates: S3FIFO above FIFO up to
    1Ki, below it from 2Ki on."""
    df = make_results(
        policies=("S3FIFO", "LRU", "FIFO"), capacities=CAPS, small_ratios=(0.1,), traces=("t",)
    )
    s3 = df.policy == "S3FIFO"
    df.loc[s3, "final_cache_blocks"] = [102, 256, 1024, 2048, 3277]
    df.loc[~s3, "final_cache_blocks"] = df.loc[~s3, "capacity"]
    df.loc[s3, "overall_hit_rate"] = [0.10, 0.12, 0.15, 0.17, 0.19]
    df.loc[df.policy == "FIFO", "overall_hit_rate"] = [0.08, 0.10, 0.14, 0.18, 0.22]
    df.loc[df.policy == "LRU", "overall_hit_rate"] = [0.09, 0.11, 0.16, 0.20, 0.24]
    df["total_hit_tokens"] = (df["overall_hit_rate"] * 600).round().astype("int64")
    for c in ("block_accesses", "block_hits", "evictions"):
        df[c] = (df["capacity"] + df["policy"].map({"S3FIFO": 1, "LRU": 2, "FIFO": 3})).astype(
            "int64"
        )
    return df


def test_underfull_names_the_capacities_the_shares_and_the_reason() -> None:
    (note,) = findings.underfull(table())
    assert note.startswith(
        "S3FIFO ends 40-50% full at 256-512 blocks and 80% full at 4Ki blocks, where LRU ends "
        "full (the specification's S3FIFO moves a block to its main queue only when"
    )


def test_falls_below_from_the_first_capacity_it_stays_below() -> None:
    assert findings.falls_below(table()) == [
        "S3FIFO falls below FIFO from 2Ki blocks on, where it ends 80% full at 4Ki blocks "
        "(occupancy)"
    ]
    df = table()
    df.loc[(df.policy == "S3FIFO") & (df.capacity == 4096), "overall_hit_rate"] = 0.3
    assert findings.falls_below(df) == []  # above FIFO again at the largest capacity


def test_identical_only_in_every_counter() -> None:
    df = table()
    assert findings.identical(df) == []
    lru = df[df.policy == "LRU"]
    df.loc[df.policy == "FIFO", ["overall_hit_rate", "total_hit_tokens"]] = lru[
        ["overall_hit_rate", "total_hit_tokens"]
    ].to_numpy()
    assert findings.identical(df) == []  # the same hit rates, not the same evictions
    for c in ("block_accesses", "block_hits", "evictions"):
        df.loc[df.policy == "FIFO", c] = lru[c].to_numpy()
    assert findings.identical(df) == [
        "FIFO equals LRU in every counter at every capacity of this run (a property of the "
        "trace: the two policies differ in general)"
    ]


def test_best_small_ratio_and_an_optimum_at_the_end_of_the_range() -> None:
    df = make_results(
        policies=("S3FIFO",), capacities=(1024, 2048), small_ratios=(0.1, 0.3, 0.5), traces=("t",)
    )
    rate = {(1024, 0.1): 0.1, (1024, 0.3): 0.2, (1024, 0.5): 0.15}
    rate |= {(2048, 0.1): 0.1, (2048, 0.3): 0.2, (2048, 0.5): 0.3}
    df["overall_hit_rate"] = [
        rate[(c, r)] for c, r in zip(df.capacity, df.small_ratio, strict=True)
    ]
    assert findings.best_small_ratio(df) == [
        "best small_ratio: 0.3 at 1Ki, 0.5 at 2Ki blocks; at 2Ki blocks the best is an end of "
        "the ratios swept: widen them"
    ]


def test_the_log_line_of_the_figure_says_them(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="sweep.plot")
    report = draw_figures(write_run(tmp_path / "run", table()), formats=["png"])
    line = next(r.getMessage() for r in caplog.records if "drew occupancy" in r.getMessage())
    assert line.endswith("occupancy.png; note: " + findings.underfull(table())[0])
    assert report.notes["occupancy"] == findings.underfull(table())
    assert report.notes["hit_rate_vs_capacity"] == findings.falls_below(table())
    again = draw_figures(tmp_path / "run", formats=["png"])  # nothing redrawn: kept
    assert again.unchanged and again.notes == report.notes
