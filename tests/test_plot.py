"""``python -m sweep.plot``: the figures of a finished run, drawn from its Parquet files.

The run directories here are written by the tests (results with the real ``RESULT_SCHEMA``, and
the small ``traces.parquet`` / ``requests.parquet`` the sweep will add), with hit rates chosen so
that every line and heatmap cell has a known value. No pixel comparisons: the tests look at the
figures' panels, lines, labels and data, and at the files being non-empty PNG and PDF.
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from matplotlib.axes import Axes
from matplotlib.figure import Figure

import prefixsim
from sweep import figures, plot
from sweep.figures import capacity, data, params, requests, small_ratio, style
from sweep.store import ALWAYS_COUNTED, COUNTER_COLUMNS, PER_REQUEST_SCHEMA, RESULT_SCHEMA

TRACES = {"alpha": "a" * 64, "beta": "b" * 64}
BLOCK_SIZE = 16
CAPACITIES = (256, 512, 1024)
PROMPTS = (0, 100, 200, 300)  # tokens of the 4 requests of every trace (one empty prompt)
TIMESTAMPS = (0.0, 1_000.0, 60_000.0, 120_000.0)  # ms
CEILING = 0.5
SINGLE_CACHE_MODULES = {"capacity", "small_ratio", "params", "requests"}
FIGURE_NAMES = tuple(
    k.name
    for k in figures.figure_kinds()
    if k.draw.__module__.rsplit(".", 1)[-1] in SINGLE_CACHE_MODULES
)
"""The figures of a single-cache run (the cost, tier and cluster kinds need other points)."""


def hit_rate(policy: str, capacity: int, sr: float, mf: int, gf: int) -> float:
    base = 0.1 * math.log2(capacity / 128)
    if policy == "LRU":
        return base - 0.005
    return base + 0.01 * sr + 0.001 * mf + 0.002 * gf


def make_results(
    policies: tuple[str, ...] = ("S3FIFO", "LRU"),
    capacities: tuple[int, ...] = CAPACITIES,
    small_ratios: tuple[float, ...] = (0.05, 0.1, 0.2),
    max_freqs: tuple[int, ...] = (3,),
    ghost_freqs: tuple[int, ...] = (0,),
    traces: tuple[str, ...] = tuple(TRACES),
    block_sizes: tuple[int, ...] = (BLOCK_SIZE,),
) -> pd.DataFrame:
    """A results table as ``pandas.read_parquet`` gives it (RESULT_SCHEMA, Int64 for the
    nullable integer columns)."""
    rows = []
    for trace, bs, policy, cap in itertools.product(traces, block_sizes, policies, capacities):
        # the S3FIFO keys (S3FIFO_LCS has its own parameters, not these)
        has_params = "max_freq" in prefixsim.get_policy(policy).params_type.field_names()
        combos = (
            [
                (sr, mf, gf)
                for sr, mf, gf in itertools.product(small_ratios, max_freqs, ghost_freqs)
                if gf <= mf
            ]
            if has_params
            else [(None, None, None)]
        )
        for sr, mf, gf in combos:
            rate = hit_rate(policy, cap, sr or 0.0, mf or 0, gf or 0)
            total = 600
            row = {
                "point_id": len(rows),
                "trace": trace,
                "trace_sha256": TRACES.get(trace) or hashlib.sha256(trace.encode()).hexdigest(),
                "policy": policy,
                "capacity": cap,
                "block_size": bs,
                "small_ratio": sr,
                "max_freq": mf,
                "ghost_freq": gf,
                "n_requests": len(PROMPTS),
                "total_prompt_tokens": total,
                "total_hit_tokens": round(rate * total),
                "overall_hit_rate": rate,
                "final_cache_blocks": cap if policy == "LRU" else cap * 3 // 4,
                "replay_seconds": 0.001,
                "point_key": f"key{len(rows)}",
            }
            for c in COUNTER_COLUMNS:
                row[c] = 0 if c in ALWAYS_COUNTED or has_params else None
            rows.append(row)
    df = pd.DataFrame(rows).reindex(columns=RESULT_SCHEMA.names)  # columns not set: null
    for f in RESULT_SCHEMA:
        if f.name not in df.columns:  # columns these figures do not use (the cost model's)
            df[f.name] = pd.Series([None] * len(df), dtype="object")
    for f in RESULT_SCHEMA:
        if f.nullable and pa.types.is_integer(f.type):
            df[f.name] = df[f.name].astype("Int64")
    df["small_ratio"] = df["small_ratio"].astype("float64")
    table = pa.Table.from_pandas(
        df[RESULT_SCHEMA.names], schema=RESULT_SCHEMA, preserve_index=False
    )
    return table.to_pandas()


def make_per_request(results: pd.DataFrame) -> pd.DataFrame:
    """4 requests per point; request r of a point with hit rate h hits min(prompt, r*h*200)."""
    rows = []
    for pid, rate in zip(results["point_id"], results["overall_hit_rate"], strict=True):
        for r, prompt in enumerate(PROMPTS):
            rows.append((pid, r, prompt, min(prompt, round(r * rate * 200))))
    return pd.DataFrame(rows, columns=["point_id", "request", "prompt_tokens", "hit_tokens"])


def make_traces(results: pd.DataFrame) -> pd.DataFrame:
    keys = results[["trace", "trace_sha256", "block_size"]].drop_duplicates()
    return keys.assign(
        n_requests=len(PROMPTS),
        total_prompt_tokens=sum(PROMPTS),
        ceiling_hit_tokens=int(CEILING * sum(PROMPTS)),
        ceiling_hit_rate=CEILING,
    ).reset_index(drop=True)


def make_requests(results: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame(
        [
            (sha, np.int32(r), TIMESTAMPS[r], PROMPTS[r])
            for sha in sorted(results["trace_sha256"].unique())
            for r in range(len(PROMPTS))
        ],
        columns=["trace_sha256", "request", "timestamp", "prompt_tokens"],
    ).astype({"request": "int32", "timestamp": "float64", "prompt_tokens": "int64"})


def write_run(
    path: Path,
    results: pd.DataFrame,
    per_request: bool = True,
    traces: bool = True,
    requests: bool = True,
) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    results.to_parquet(path / "results.parquet", index=False)
    if per_request:
        rows = make_per_request(results)
        for name in PER_REQUEST_SCHEMA.names:
            if name not in rows.columns:  # the cost model's columns: null without a model
                rows[name] = None
        table = pa.Table.from_pandas(rows, schema=PER_REQUEST_SCHEMA, preserve_index=False)
        pq.write_table(table, path / "per_request.parquet")
    if traces:
        make_traces(results).to_parquet(path / "traces.parquet", index=False)
    if requests:
        make_requests(results).to_parquet(path / "requests.parquet", index=False)
    return path


def panels(fig: Figure) -> list[Axes]:
    return [ax for ax in fig.axes if ax.get_label() != "<colorbar>"]


def labelled(ax: Axes) -> list:  # type: ignore[type-arg]
    """The lines of the series (the extra markers the style draws are labelled ``_...``)."""
    return [line for line in ax.get_lines() if not line.get_label().startswith("_")]


def policy_lines(ax: Axes) -> list:  # type: ignore[type-arg]
    return [line for line in labelled(ax) if line.get_gid() != style.CEILING_GID]


def legend_labels(fig: Figure) -> list[str]:
    return [t.get_text() for leg in fig.legends for t in leg.get_texts()]


# --- the full run: the command line once, its files checked by each figure's test ---------------


@pytest.fixture(scope="module")
def full() -> pd.DataFrame:
    """Everything varies: capacities, small_ratio, max_freq and ghost_freq; S3FIFO and LRU."""
    return make_results(max_freqs=(1, 3), ghost_freqs=(0, 1))


@pytest.fixture(scope="module")
def cli_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int]:
    """``python -m sweep.plot RUN_DIR`` (in this process: drawing every figure is the slow part
    of this file, so it is done once, on one trace; several traces are tested per figure)."""
    one_trace = make_results(max_freqs=(1, 3), ghost_freqs=(0, 1), traces=("alpha",))
    run = write_run(tmp_path_factory.mktemp("run"), one_trace)
    code = plot.main([str(run), "--format", "png,pdf"])
    return run / "figures", code


def test_cli_draws_every_figure_in_png_and_pdf(cli_run: tuple[Path, int]) -> None:
    out, code = cli_run
    assert code == 0
    assert sorted(p.name for p in out.iterdir()) == sorted(
        [".figures.json"] + [f"{name}.{fmt}" for name in FIGURE_NAMES for fmt in ("png", "pdf")]
    )


@pytest.mark.parametrize("name", FIGURE_NAMES)
def test_figure_files_are_png_and_pdf(cli_run: tuple[Path, int], name: str) -> None:
    out, _ = cli_run
    png, pdf = (out / f"{name}.png").read_bytes(), (out / f"{name}.pdf").read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 1000
    assert pdf.startswith(b"%PDF-") and len(pdf) > 1000


# --- each figure -------------------------------------------------------------------------------


def test_hit_rate_vs_capacity(full: pd.DataFrame) -> None:
    fig = capacity.fig_hit_rate_vs_capacity(full, make_traces(full))
    axes = panels(fig)
    assert [ax.get_title() for ax in axes] == ["alpha", "beta"]
    for ax in axes:
        assert ax.get_xlabel() == "Capacity (blocks)"
        assert ax.get_ylabel() == "Token hit rate (%)"
        assert ax.get_xscale() == "log"
        assert [child.get_xlabel() for child in ax.child_axes] == ["Capacity (tokens)"]
        lines = policy_lines(ax)
        assert len(lines) == 2
        assert len(labelled(ax)) == 3  # and the ceiling
        (ceiling,) = [line for line in ax.get_lines() if line.get_gid() == style.CEILING_GID]
        assert list(ceiling.get_ydata()) == [CEILING * 100] * 2
        s3fifo, lru = lines
        assert list(s3fifo.get_xdata()) == list(CAPACITIES)
        expected = [hit_rate("S3FIFO", c, 0.1, 3, 0) * 100 for c in CAPACITIES]
        np.testing.assert_allclose(s3fifo.get_ydata(), expected)
        assert s3fifo.get_color() == style.INDIGO  # the preferred looks: no other policy
        assert lru.get_marker() == "s"
    assert legend_labels(fig) == ["S3FIFO (defaults)", "LRU", "infinite cache"]


def test_hit_rate_vs_capacity_without_traces_file_or_defaults() -> None:
    df = make_results(small_ratios=(0.2, 0.3), traces=("alpha",))
    df = pd.concat([df, df[df.small_ratio == 0.3].iloc[:1]])  # 0.3 is the most frequent
    fig = capacity.fig_hit_rate_vs_capacity(df, None)
    (ax,) = panels(fig)
    assert len(labelled(ax)) == 2  # no ceiling line
    assert legend_labels(fig) == ["S3FIFO (small_ratio=0.3)", "LRU"]


def test_several_block_sizes_get_a_panel_each_and_no_token_axis() -> None:
    df = make_results(traces=("alpha",), block_sizes=(16, 32))
    fig = capacity.fig_hit_rate_vs_capacity(df)
    titles = [ax.get_title() for ax in panels(fig)]
    assert titles == ["block_size=16", "block_size=32"]  # what differs between the panels
    assert all(not ax.child_axes for ax in panels(fig))


def test_panels_say_what_differs_and_leave_out_panels_without_a_hit() -> None:
    df = make_results(traces=("/x/run/a.jsonl", "/y/run/a.jsonl"), block_sizes=(16, 64))
    df["block_accesses"] = 10
    titles = [p.title for p in data.panels(df)]
    # the same file stem in two folders: named by the folders that tell them apart
    assert titles == [
        "x/run/a, block_size=16",
        "x/run/a, block_size=64",
        "y/run/a, block_size=16",
        "y/run/a, block_size=64",
    ]
    empty = (df.block_size == 64) & (df.trace == "/y/run/a.jsonl")
    df.loc[empty, ["total_hit_tokens", "block_accesses"]] = 0
    assert len(data.panels(df)) == 3
    df.loc[df.block_size == 64, ["total_hit_tokens", "block_accesses"]] = 0
    df.loc[df.block_size == 16, "total_hit_tokens"] = 0
    with pytest.raises(figures.SkipFigure) as info:
        data.panels(df)
    assert info.value.reason == (
        "x/run/a at block_size=16: no point has a hit; x/run/a at block_size=64: no request "
        "has a full block; y/run/a at block_size=16: no point has a hit; y/run/a at "
        "block_size=64: no request has a full block (every hit rate is 0)"
    )


def test_small_ratio_tuning(full: pd.DataFrame) -> None:
    fig = small_ratio.fig_small_ratio_tuning(full)
    axes = panels(fig)
    assert len(axes) == 4  # (lines, heatmap) per trace
    assert len([ax for ax in fig.axes if ax.get_label() == "<colorbar>"]) == 2
    for line_ax, heat_ax in zip(axes[::2], axes[1::2], strict=True):
        assert line_ax.get_xlabel() == "small_ratio (fraction of capacity)"
        assert line_ax.get_ylabel() == "Token hit rate (%)"
        lines = labelled(line_ax)
        assert len(lines) == len(CAPACITIES)
        assert list(lines[0].get_xdata()) == [0.05, 0.1, 0.2]
        assert heat_ax.get_ylabel() == "Capacity (blocks)"
        assert heat_ax.get_title() == "S3FIFO gain over LRU (pp; framed: the best)"
        # the optimum of each capacity is starred: hit_rate() grows with small_ratio here
        stars = [ln for ln in line_ax.get_lines() if ln.get_marker() == "*"]
        drawn = [ln for ln in stars if ln.get_markevery() != []]  # markers drawn, not moved
        assert [[float(x) for x in ln.get_xdata()] for ln in drawn] == [[0.2]] * len(CAPACITIES)
        frames = [p for p in heat_ax.patches if not p.get_fill()]
        assert [p.get_x() + 0.5 for p in frames] == [2.0] * len(CAPACITIES)  # the 0.2 column
        assert not heat_ax.get_lines()
        (image,) = heat_ax.get_images()
        gain = np.asarray(image.get_array())
        expected = [[(0.005 + 0.01 * sr + 0.003) * 100 for sr in (0.05, 0.1, 0.2)]] * 3
        np.testing.assert_allclose(gain, expected)  # max_freq 3, ghost_freq 0 (the defaults)
        assert len(heat_ax.texts) == gain.size  # a small grid is annotated
        assert image.norm.vmin == -image.norm.vmax  # centred at 0
    assert "Capacity (blocks)" in [leg.get_title().get_text() for leg in fig.legends]


def test_small_ratio_tuning_without_lru(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="sweep.plot")
    fig = small_ratio.fig_small_ratio_tuning(make_results(policies=("S3FIFO",)))
    assert len(panels(fig)) == 2
    assert all(len(labelled(ax)) == 3 and not ax.get_images() for ax in panels(fig))
    assert "no LRU point" in caplog.text


def test_max_freq_effect_is_the_difference_from_the_default(full: pd.DataFrame) -> None:
    fig = params.fig_max_freq_effect(full)
    axes = panels(fig)
    assert len(axes) == 4  # per trace: one line per max_freq, one line per ghost_freq
    for ax in axes:
        assert ax.get_xlabel() == "Capacity (blocks)"
    assert [ax.get_ylabel() for ax in axes[:2]] == [
        "Hit rate - max_freq=3 (pp)",
        "Hit rate - ghost_freq=0 (pp)",
    ]
    mf, gf = (labelled(ax) for ax in axes[:2])
    assert [line.get_label() for line in mf] == ["max_freq=1", "max_freq=3 (reference)"]
    assert [line.get_label() for line in gf] == ["ghost_freq=0 (reference)", "ghost_freq=1"]
    # hit_rate() adds 0.001 per max_freq and 0.002 per ghost_freq: max_freq 1 is 2 * 0.001
    # below max_freq 3 (-0.2 pp), ghost_freq 1 is 0.002 above ghost_freq 0 (+0.2 pp), at every
    # capacity; the references are the zero lines
    np.testing.assert_allclose(mf[0].get_ydata(), [-0.2] * 3)
    np.testing.assert_allclose(mf[1].get_ydata(), [0.0] * 3, atol=1e-12)
    np.testing.assert_allclose(gf[1].get_ydata(), [0.2] * 3)
    assert list(mf[0].get_xdata()) == list(CAPACITIES)
    legend = legend_labels(fig)
    assert "max_freq=1" in legend and "ghost_freq=1" in legend


def test_max_freq_effect_one_panel_when_ghost_freq_fixed() -> None:
    fig = params.fig_max_freq_effect(make_results(max_freqs=(1, 2, 3), traces=("alpha",)))
    (ax,) = panels(fig)
    assert len(labelled(ax)) == 3


def test_max_freq_reference_is_the_smallest_value_without_the_default() -> None:
    fig = params.fig_max_freq_effect(make_results(max_freqs=(2, 5), traces=("alpha",)))
    (ax,) = panels(fig)
    assert ax.get_ylabel() == "Hit rate - max_freq=2 (pp)"
    np.testing.assert_allclose(labelled(ax)[1].get_ydata(), [0.3] * 3)  # 3 * 0.001


def test_occupancy(full: pd.DataFrame) -> None:
    fig = capacity.fig_occupancy(full)
    axes = panels(fig)
    assert len(axes) == 2
    for ax in axes:
        assert ax.get_ylabel() == "Final occupancy (% of capacity)"
        assert ax.get_xlabel() == "Capacity (blocks)"
        s3fifo, lru = labelled(ax)
        np.testing.assert_allclose(s3fifo.get_ydata(), [75, 75, 75])
        np.testing.assert_allclose(lru.get_ydata(), [100, 100, 100])


def test_default_points_are_default_params_at_median_capacity(full: pd.DataFrame) -> None:
    points = data.default_points(full)
    assert sorted(zip(points.trace, points.policy, strict=True)) == [
        ("alpha", "LRU"),
        ("alpha", "S3FIFO"),
        ("beta", "LRU"),
        ("beta", "S3FIFO"),
    ]
    assert set(points.capacity) == {512}
    s3 = points[points.policy == "S3FIFO"]
    assert set(s3.small_ratio) == {0.1} and set(s3.max_freq) == {3} and set(s3.ghost_freq) == {0}


def test_hit_ratio_cdf(full: pd.DataFrame) -> None:
    points = data.default_points(full)
    per_request = make_per_request(full)
    fig = requests.fig_hit_ratio_cdf(points, per_request)
    axes = panels(fig)
    assert [ax.get_title() for ax in axes] == ["alpha, 512 blocks", "beta, 512 blocks"]
    for ax in axes:
        assert ax.get_xlabel() == "Request hit ratio (% of prompt tokens)"
        assert ax.get_ylabel() == "CDF (fraction of requests)"
        lines = labelled(ax)
        assert len(lines) == 2
        for line in lines:
            y = np.asarray(line.get_ydata())
            assert y[0] == 0 and y[-1] == 1 and (np.diff(y) >= 0).all()
            # 3 requests count (the empty prompt does not): steps of 1/3
            assert set(np.round(y * 3, 9)) <= {0, 1, 2, 3}
    assert legend_labels(fig) == ["S3FIFO", "LRU"]


def test_hit_rate_over_time(full: pd.DataFrame) -> None:
    points = data.default_points(full)
    per_request = make_per_request(full)
    fig = requests.fig_hit_rate_over_time(points, per_request, make_requests(full))
    axes = panels(fig)
    assert len(axes) == 2
    for ax in axes:
        assert ax.get_xlabel() == "Time since trace start (s; 2 s bins)"
        assert ax.get_ylabel() == "Token hit rate (%)"
        assert len(labelled(ax)) == 2
    # alpha/S3FIFO: requests at 0 and 1 s share the first of 60 two-second bins, the others
    # fall in bins 30 and 59; the empty bins are left out
    point = points[(points.trace == "alpha") & (points.policy == "S3FIFO")].iloc[0]
    rows = per_request[per_request.point_id == point.point_id]
    line = labelled(axes[0])[0]
    np.testing.assert_allclose(line.get_xdata(), [1, 61, 119])  # bin centres (s)
    hits, prompt = rows.hit_tokens.to_numpy(), rows.prompt_tokens.to_numpy()
    np.testing.assert_allclose(
        line.get_ydata(),
        [hits[:2].sum() / prompt[:2].sum() * 100, hits[2] / prompt[2] * 100, hits[3] / 3],
    )


def test_chosen_points_label_what_differs(full: pd.DataFrame) -> None:
    chosen = full[
        (full.trace == "alpha") & (full.policy == "S3FIFO") & (full.max_freq == 3)
        & (full.ghost_freq == 0) & (full.capacity == 256) & full.small_ratio.isin([0.05, 0.2])
    ]  # fmt: skip
    fig = requests.fig_hit_ratio_cdf(chosen, make_per_request(full))
    (ax,) = panels(fig)
    assert [line.get_label() for line in labelled(ax)] == [
        "S3FIFO (small_ratio=0.05)",
        "S3FIFO (small_ratio=0.2)",
    ]
    assert [line.get_linestyle() for line in labelled(ax)] == ["-", "--"]


# --- skipped figures ---------------------------------------------------------------------------


def skip_reason(func, *args) -> str:  # type: ignore[no-untyped-def]
    with pytest.raises(figures.SkipFigure) as info:
        func(*args)
    return info.value.reason


def test_figures_whose_parameter_did_not_vary_are_skipped() -> None:
    one_cap = make_results(capacities=(512,), small_ratios=(0.1,))
    assert skip_reason(capacity.fig_hit_rate_vs_capacity, one_cap) == (
        "only one capacity in the run (512)"
    )
    assert skip_reason(capacity.fig_occupancy, one_cap) == "only one capacity in the run (512)"
    assert skip_reason(small_ratio.fig_small_ratio_tuning, one_cap) == (
        "only one small_ratio in the run (0.1)"
    )
    assert skip_reason(params.fig_max_freq_effect, one_cap) == (
        "only one max_freq in the run (3); only one ghost_freq in the run (0)"
    )
    lru_only = make_results(policies=("LRU",))
    assert (
        skip_reason(small_ratio.fig_small_ratio_tuning, lru_only) == "no S3FIFO points in the run"
    )
    assert skip_reason(params.fig_max_freq_effect, lru_only) == "no S3FIFO points in the run"


def test_per_request_figures_skipped_without_their_files(full: pd.DataFrame) -> None:
    points = data.default_points(full)
    per_request = make_per_request(full)
    reason = "per_request.parquet absent (the run had save_per_request=false)"
    assert skip_reason(requests.fig_hit_ratio_cdf, points, None) == reason
    assert skip_reason(requests.fig_hit_rate_over_time, points, None, make_requests(full)) == reason
    assert skip_reason(requests.fig_hit_rate_over_time, points, per_request, None) == (
        "requests.parquet absent (request timestamps are needed)"
    )
    empty = per_request[per_request.point_id < 0]
    assert skip_reason(requests.fig_hit_ratio_cdf, points, empty).startswith(
        "no per-request rows of the chosen points"
    )


def test_draw_figures_reports_and_logs_skips(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="sweep.plot")
    run = write_run(
        tmp_path / "run",
        make_results(capacities=(512,), traces=("alpha",)),
        per_request=False,
        requests=False,
    )
    report = plot.draw_figures(run, tmp_path / "figs", formats=["png"])
    assert report.drawn == ["small_ratio_tuning"]
    assert report.written == [tmp_path / "figs" / "small_ratio_tuning.png"]
    assert report.skipped == {
        "hit_rate_vs_capacity": "only one capacity in the run (512)",
        "max_freq_effect": "only one max_freq in the run (3); only one ghost_freq in the run (0)",
        "occupancy": "only one capacity in the run (512)",
        "hit_ratio_cdf": "per_request.parquet absent (the run had save_per_request=false)",
        "hit_rate_over_time": "requests.parquet absent (request timestamps are needed)",
    }
    for name, reason in report.skipped.items():
        assert f"skipped {name}: {reason}" in caplog.text
    assert "drew small_ratio_tuning" in caplog.text
    assert sorted(p.name for p in (tmp_path / "figs").iterdir()) == [
        ".figures.json",
        "small_ratio_tuning.png",
    ]


def test_explicit_points(tmp_path: Path, full: pd.DataFrame) -> None:
    run = write_run(tmp_path / "run", full, traces=False)
    ids = [int(i) for i in full.point_id[(full.policy == "LRU") & (full.trace == "beta")]]
    run_data = data.RunData(run, data.load_results(run), ids)
    assert list(run_data.points.point_id) == ids
    assert set(run_data.per_request.point_id) == set(ids)  # only the chosen points are read
    fig = requests.fig_hit_ratio_cdf(run_data.points, run_data.per_request)
    (ax,) = panels(fig)
    assert [line.get_label() for line in labelled(ax)] == [
        "LRU (256 blocks)",
        "LRU (512 blocks)",
        "LRU (1Ki blocks)",
    ]
    with pytest.raises(figures.PlotError, match=r"^points: no point 9999 in results.parquet$"):
        plot.draw_figures(run, points=[ids[0], 9999])


# --- errors -------------------------------------------------------------------------------------


def test_bad_run_directories(tmp_path: Path) -> None:
    with pytest.raises(figures.PlotError, match="no such directory") as info:
        plot.draw_figures(tmp_path / "missing")
    assert isinstance(info.value, prefixsim.PrefixSimError)
    with pytest.raises(figures.PlotError, match=r"no results\.parquet"):
        plot.draw_figures(tmp_path)
    (tmp_path / "results.parquet").write_text("not parquet")
    with pytest.raises(figures.PlotError, match="unreadable") as info:
        plot.draw_figures(tmp_path)
    assert "\n" not in str(info.value)


def test_bad_format(tmp_path: Path, full: pd.DataFrame) -> None:
    run = write_run(tmp_path / "run", full)
    with pytest.raises(figures.PlotError, match="invalid format 'xyz'"):
        plot.draw_figures(run, formats=["png", "xyz"])


def test_cli_missing_dir_exits_2_with_one_line(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "sweep.plot", str(tmp_path / "nope")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.splitlines() == [
        f"sweep.plot: error: {tmp_path / 'nope'}: no such directory"
    ]


def test_cli_bad_points_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = write_run(tmp_path / "run", make_results(traces=("alpha",)))
    assert plot.main([str(run), "--points", "12345"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "sweep.plot: error: points: no point 12345 in results.parquet"
    ]


# --- styles --------------------------------------------------------------------------------------


def test_a_runs_policies_get_distinct_looks() -> None:
    every = style.Palette(prefixsim.policy_names())
    looks = [every.policy(p) for p in prefixsim.policy_names()]
    assert len({look["color"] for look in looks}) == len(looks)  # all registered, all apart
    assert len({look["marker"] for look in looks}) == len(looks)
    assert every.policy("S3FIFO") == {"color": style.INDIGO, "marker": "o", "linestyle": "-"}
    # a prefix-aware variant: its base policy's colour when the run lacks the base policy,
    # another of the same family beside it
    assert style.Palette(["S3FIFO_LEAF"]).policy("S3FIFO_LEAF")["color"] == style.INDIGO
    assert every.policy("S3FIFO_LEAF")["color"] == style.BLUE
    assert every.policy("LRU_LEAF")["color"] != every.policy("LRU")["color"]
    # one look per name, whatever asks first; a policy the palette was not built with gets
    # the next free look
    run = style.Palette(["LRU", "S3FIFO"])
    assert run.policy("LRU") == run.policy("LRU") == every.policy("LRU")
    new = run.policy("SOME_NEW_POLICY")
    assert new["color"] not in {run.policy(p)["color"] for p in ("LRU", "S3FIFO")}
    assert run.policy("SOME_NEW_POLICY") == new
    # routers and tiers have looks of their own
    assert run.router("kv_aware") != run.router("round_robin")
    assert run.tier("hbm") != run.tier("dram") and run.tier("hbm") == run.tier("hbm")


def test_format_capacity() -> None:
    binary = [style.format_capacity(v, True) for v in (512, 1024, 1536, 16384, 4 * 1024**2)]
    assert binary == ["512", "1Ki", "1.5Ki", "16Ki", "4Mi"]
    decimal = [style.format_capacity(v, False) for v in (1000, 16000, 1500, 182790, 2e6)]
    # never 15.6K for 16,000 (16000/1024), never a rounded 183K for 182,790
    assert decimal == ["1K", "16K", "1.5K", "182.79K", "2M"]
    assert style.format_capacity(8 * 1024**3, True, "B") == "8GiB"


def test_capacity_grids_are_binary_or_decimal() -> None:
    assert style.is_binary([256, 512, 1024, 1536, 131072])
    assert not style.is_binary([1000, 2000, 16000])
    assert not style.is_binary([1024, 182790])  # not a multiple of 1024: decimal labels


def test_capacity_axis_ticks_follow_the_grid() -> None:
    from matplotlib.figure import Figure

    fig = Figure()
    ax = fig.subplots()
    ax.plot([1000, 200000], [0, 1])
    style.capacity_axis(ax, [1000, 1500, 16000, 200000], None)
    ticks = ax.xaxis.get_major_locator()()
    assert list(ticks) == [1000, 2000, 5000, 10000, 20000, 50000, 100000, 200000]
    labels = [ax.xaxis.get_major_formatter()(t, i) for i, t in enumerate(ticks)]
    assert labels == ["1K", "2K", "5K", "10K", "20K", "50K", "100K", "200K"]


def test_round_time_bins() -> None:
    # 60 bins at most: 2 min of trace -> 2 s bins; an hour -> 1 min; 61 min -> 2 min
    assert requests.bin_width_ms(120_000) == 2_000
    assert requests.bin_width_ms(3_600_000) == 60_000
    assert requests.bin_width_ms(3_660_000) == 120_000
    assert requests.format_width(120_000) == "2 min"
    assert requests.format_width(15_000) == "15 s"


def test_trace_labels() -> None:
    assert data.trace_label("conversation") == "conversation"
    assert data.trace_label("/data/my traces/toolagent_trace.jsonl.gz") == "toolagent_trace"
    assert data.trace_label("b.jsonl") == "b"


def test_unchanged_inputs_are_not_redrawn(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run", make_results(traces=("alpha",)))
    first = figures.draw_figures(run)
    assert first.drawn and not first.unchanged
    second = figures.draw_figures(run)
    assert second.written == [] and second.unchanged == first.drawn
    assert second.skipped == first.skipped
    (run / "results.parquet").touch()  # a resumed run that adds nothing: the same bytes
    assert figures.draw_figures(run).unchanged == first.drawn
    write_run(run, make_results(traces=("alpha",), capacities=(256, 512)))  # new results
    assert figures.draw_figures(run).drawn == first.drawn
    assert figures.draw_figures(run, force=True).drawn == first.drawn
    assert figures.draw_figures(run, formats=["png", "pdf"]).drawn == first.drawn


# --- the sweep's plot node -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("typed", "expected"),
    [
        ("plot=false", "plot.enabled=false"),
        ("plot=true", "plot.enabled=true"),
        ("plot.enabled=false", "plot.enabled=false"),
        ("plot.formats=[png,pdf]", "plot.formats=[png,pdf]"),
    ],
)
def test_plot_false_is_plot_enabled_false(typed: str, expected: str) -> None:
    from sweep.argv import rewrite_override

    assert rewrite_override(typed) == expected


def test_plot_node_composes() -> None:
    from sweep.config import PlotConfig, SweepConfig
    from test_sweep import compose

    assert compose().plot == PlotConfig(enabled=True, formats=["png"])
    assert compose("plot=false").plot.enabled is False
    assert compose("plot.formats=[png,pdf]").plot.formats == ["png", "pdf"]
    assert SweepConfig(plot=False).plot == PlotConfig(enabled=False)  # type: ignore[arg-type]
    with pytest.raises(prefixsim.ParameterError, match=r"plot\.formats='xyz'"):
        compose("plot.formats=[png,xyz]")
