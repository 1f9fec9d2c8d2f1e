"""The figures read well at 1 policy and at 11: no legend over the data, no clipped or
overlapping text, no series hidden under another without notice (:mod:`layout_checks`). The
bundled experiments and the README's commands themselves: test_figures_of_runs.py.

The runs are written by the tests (the all-policies experiment's shape: every registered policy
at ten capacities, S3FIFO also at several ``small_ratio`` and ``max_freq``), with identical
series on purpose: in the real all-policies run LFU equals SIEVE, LRU_LEAF equals
LRU_TAIL_FIRST and, in occupancy, S3FIFO_LEAF equals S3FIFO and every other policy equals LRU.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from matplotlib.figure import Figure

import prefixsim
from layout_checks import problems, run_problems, scale_problems
from sweep.figures import RunData, SkipFigure, figure_kinds
from sweep.figures.data import load_results
from sweep.figures.style import style_context
from test_plot import make_results, write_run

ALL_POLICIES = tuple(prefixsim.policy_names())
CAPACITIES = (256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072)
FACTOR = {  # hit rate relative to LRU; equal factors give identical series
    "S3FIFO": 0.8,
    "LRU": 1.0,
    "FIFO": 0.9,
    "CLOCK": 0.97,
    "SIEVE": 0.7,
    "LFU": 0.7,
    "ARC": 1.02,
    "BELADY": 2.0,
    "LRU_TAIL_FIRST": 1.01,
    "LRU_LEAF": 1.01,
    "S3FIFO_LEAF": 0.78,
}


def all_policies_results(policies: tuple[str, ...], traces: tuple[str, ...]) -> pd.DataFrame:
    df = make_results(
        policies=policies,
        capacities=CAPACITIES,
        small_ratios=(0.05, 0.1, 0.2, 0.4),
        max_freqs=(1, 3),
        traces=traces,
    )
    base = np.log2(df["capacity"] / 128) / np.log2(2048)  # 0.1 to 1
    factor = df["policy"].map(FACTOR).fillna(1.0)
    tweak = df["small_ratio"].fillna(0.1) * 0.02 + df["max_freq"].astype("float").fillna(3) * 1e-3
    df["overall_hit_rate"] = (0.37 * base * factor / 2.0 + tweak).clip(upper=0.37)
    s3 = df["policy"].str.startswith("S3FIFO")
    low = np.where(df["capacity"] < 2048, 0.35, 1.0)
    df["final_cache_blocks"] = np.where(s3, df["capacity"] * low, df["capacity"]).astype("int64")
    return df


def figures_of(run: Path) -> dict[str, Figure]:
    data = RunData(run, load_results(run))
    out = {}
    for kind in figure_kinds():
        try:
            out[kind.name] = kind.draw(data)
        except SkipFigure:
            continue
    return out


@pytest.mark.parametrize(
    ("policies", "traces"),
    [
        (ALL_POLICIES, ("conversation",)),
        (("S3FIFO",), ("conversation",)),
        (("S3FIFO", "LRU"), ("conversation", "/data/traces/toolagent_trace.jsonl.gz")),
    ],
    ids=["11-policies", "1-policy", "2-traces"],
)
def test_figures_read_well(
    tmp_path: Path, policies: tuple[str, ...], traces: tuple[str, ...]
) -> None:
    results = all_policies_results(policies, traces)
    run = write_run(tmp_path / "run", results)
    figures = figures_of(run)
    assert set(figures) >= {"hit_rate_vs_capacity", "small_ratio_tuning", "max_freq_effect"}
    found = {name: problems(fig, style_context()) for name, fig in figures.items()}
    assert {name: p for name, p in found.items() if p} == {}


def test_identical_series_are_announced(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run", all_policies_results(ALL_POLICIES, ("conversation",)))
    figures = figures_of(run)
    labels = [t.get_text() for leg in figures["hit_rate_vs_capacity"].legends for t in leg.texts]
    assert "LFU (= SIEVE)" in labels
    assert "LRU_LEAF (= LRU_TAIL_FIRST)" in labels
    occupancy = [t.get_text() for leg in figures["occupancy"].legends for t in leg.texts]
    assert "S3FIFO_LEAF (defaults) (= S3FIFO (defaults))" in occupancy
    assert "FIFO (= LRU)" in occupancy


def test_the_checks_catch_a_legend_on_the_data_and_a_hidden_series() -> None:
    """The checks can fail: a legend inside the axes over the lines, a hidden line, and tick
    labels crowded into each other."""
    fig = Figure(figsize=(3.4, 2.0))
    ax = fig.subplots()
    ax.plot([1, 2, 3], [1, 2, 3], label="A")
    ax.plot([1, 2, 3], [1, 2, 3], label="B")
    ax.legend(loc="center")
    ax.set_xticks(np.linspace(1, 3, 40))
    found = problems(fig)
    assert any(p.startswith("a legend overlaps the axes") for p in found)
    assert "'B' is hidden under 'A' in '' without notice" in found
    assert any("tick label" in p and "overlaps tick label" in p for p in found)


def test_the_checks_catch_covered_series_and_broken_style() -> None:
    """The pixel check finds a series under another (not identical: a thicker line over it),
    a marker under another's, and the style checks what the one style forbids."""
    fig = Figure(figsize=(3.4, 2.0))
    ax = fig.subplots()
    x = np.array([1024.0, 2048.0, 4096.0])
    ax.plot(x, [0.1, 0.2, 0.3], color="C0", marker="o", label="under")
    ax.plot(x, [0.1, 0.2, 0.3001], color="C1", linewidth=4, marker="s", markersize=8, label="over")
    ax.plot(x, [0.3, 0.2, 0.25], color="C2", marker="o", label="one marker under")
    ax.plot([2048.0], [0.2], color="C3", marker="s", markersize=9, label="big")
    ax.set_xscale("log", base=2)
    ax.set_ylim(0.05, 0.35)
    ax.set_xlabel("capacity [blocks]")
    ax.set_ylabel("token hit rate")
    for label in ax.get_xticklabels():
        label.set_rotation(30)
    ax.legend()
    found = problems(fig)
    assert "'under' is hidden under other series in '' without notice" in found
    assert "1 of 3 markers of 'one marker under' in '' are hidden under other series" in found
    assert "the hit rate of '' is not in % ('token hit rate')" in found
    assert any(p.startswith("axis label 'capacity [blocks]'") for p in found)
    assert any("is rotated" in p for p in found)
    assert any("is a power" in p for p in found)  # 2^10 .. 2^12
    assert "a legend inside the axes ''" in found
    assert "the y axis of '' ('token hit rate') does not start at 0" in found


def test_trace_panels_follow_the_typed_order_and_use_file_stems(tmp_path: Path) -> None:
    typed = ("/data/zeta.jsonl", "alpha")  # typed zeta first; alphabetical order would swap them
    run = write_run(tmp_path / "run", all_policies_results(("LRU",), typed))
    fig = figures_of(run)["hit_rate_vs_capacity"]
    assert [ax.get_title() for ax in fig.axes if ax.get_title()] == ["zeta", "alpha"]


def test_coinciding_markers_stay_visible(tmp_path: Path) -> None:
    """The user's command: S3FIFO and LRU both end 100% full at two of three capacities; both
    markers must show there (the last drawn hid the first), and both CDFs' markers."""
    df = make_results(capacities=(1024, 2048, 4096), small_ratios=(0.1,), traces=("alpha",))
    df.loc[df.policy == "S3FIFO", "final_cache_blocks"] = [850, 2048, 4096]
    df.loc[df.policy == "LRU", "final_cache_blocks"] = [1024, 2048, 4096]
    run = write_run(tmp_path / "run", df)
    figures = figures_of(run)
    for name in ("occupancy", "hit_ratio_cdf"):
        assert problems(figures[name], style_context()) == [], name


def test_the_checks_catch_panels_of_one_quantity_on_two_scales() -> None:
    fig = Figure(figsize=(7.0, 2.0))
    left, right, other = fig.subplots(1, 3)
    for ax, top in ((left, 40.0), (right, 60.0), (other, 5.0)):
        ax.plot([1, 2], [0, top / 2], label="A")
        ax.set_ylim(0, top)
    left.set_ylabel("Token hit rate (%)")
    right.set_ylabel("Token hit rate (%)")
    other.set_ylabel("Load imbalance")  # another quantity: its own scale
    left.set_title("a")
    right.set_title("b")
    assert scale_problems(fig) == [
        "panels of 'Token hit rate (%)' on 2 y scales: 'a' 0 to 40, 'b' 0 to 60"
    ]
    right.set_ylim(0, 40)
    assert scale_problems(fig) == []


def _one_line(**style: Any) -> Figure:
    fig = Figure(figsize=(3.4, 2.0))
    fig.subplots().plot([1, 2, 3], [1, 2, 3], label=style.pop("label", "S3FIFO"), **style)
    return fig


def test_the_run_checks_catch_a_series_drawn_two_ways() -> None:
    """One series (a policy, a router variant) in one colour, line style and marker in every
    figure of a run; two policies never in one colour. Parts (``_part of``), ``(= OTHER)``
    notices, figures without markers and markers without lines do not count as another look."""
    base = {"color": "#332288", "marker": "o", "linestyle": "-"}
    same = {
        "a": _one_line(**base),
        "b": _one_line(**{**base, "marker": None}),  # no markers in this figure
        "c": _one_line(**{**base, "label": "S3FIFO (= LRU)"}),
        "d": _one_line(**{**base, "linestyle": "none"}),  # markers only
    }
    same["a"].axes[0].plot([1], [1], color="#332288", linestyle="--", label="_part of S3FIFO")
    assert run_problems(same, {"S3FIFO"}) == []
    dotted = _one_line(**{**base, "linestyle": ":"})
    dashes = _one_line(**{**base, "linestyle": (0, (5, 1))})
    square = _one_line(**{**base, "marker": "s"})
    rose = _one_line(**{**base, "color": "#CC6677"})
    assert run_problems({"a": same["a"], "dotted": dotted}, {"S3FIFO"}) == [
        "'S3FIFO' is drawn in 2 line styles: - in a; : (1.0, 1.65) in dotted"
    ]
    assert len(run_problems({"dashed": _one_line(**{**base, "linestyle": "--"}), "t": dashes},
                            {"S3FIFO"})) == 1  # fmt: skip
    assert run_problems({"a": same["a"], "square": square}, {"S3FIFO"}) == [
        "'S3FIFO' is drawn in 2 markers: o in a; s in square"
    ]
    found = run_problems({"a": same["a"], "rose": rose}, {"S3FIFO"})
    assert found[0].startswith("'S3FIFO' is drawn in 2 colours")
    assert "policy 'S3FIFO' is drawn in 2 colours" in found
    lru = _one_line(**{**base, "label": "LRU"})
    assert run_problems({"a": same["a"], "lru": lru}, {"S3FIFO", "LRU"}) == [
        "policies ['LRU', 'S3FIFO'] share the colour (0.2, 0.1333, 0.5333, 1.0)"
    ]
