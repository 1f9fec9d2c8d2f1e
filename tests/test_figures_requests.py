"""``hit_rate_over_time`` on traces the README makes: a few requests milliseconds apart, all of a
trace's requests in one bin, traces of different hit rates side by side (issue 21: the README's
token sweep drew four empty panels with crowded ticks, each on its own y scale)."""

from __future__ import annotations

import numpy as np
import pytest
from matplotlib.figure import Figure

from layout_checks import problems
from sweep.figures import data, requests
from sweep.figures.style import style_context
from test_plot import labelled, make_per_request, make_requests, make_results, panels


def over_time(timestamps: tuple[float, ...], beta_share: float = 1.0) -> Figure:
    """The figure of S3FIFO and LRU on traces alpha and beta whose 4 requests arrive at
    ``timestamps`` (ms); beta's hits are ``beta_share`` of alpha's."""
    results = make_results()
    points = data.default_points(results)
    per_request = make_per_request(results)
    beta = set(results.loc[results["trace"] == "beta", "point_id"])
    at_beta = per_request["point_id"].isin(beta)
    per_request.loc[at_beta, "hit_tokens"] = (
        per_request.loc[at_beta, "hit_tokens"] * beta_share
    ).round()
    times = make_requests(results)
    times["timestamp"] = np.tile(np.asarray(timestamps, float), len(times) // len(timestamps))
    return requests.fig_hit_rate_over_time(points, per_request, times)


def test_bins_and_units_below_a_second() -> None:
    # 60 bins at most: 2 ms -> 1 ms bins, 25 s -> 500 ms, 2 min -> 2 s (as before)
    assert requests.bin_width_ms(0) == requests.bin_width_ms(2) == 1
    assert requests.bin_width_ms(25_000) == 500
    assert requests.bin_width_ms(120_000) == 2_000
    assert requests.format_width(5) == "5 ms"
    assert requests.format_width(1_000) == "1 s"
    assert requests.time_unit(2) == (1.0, "ms")
    assert requests.time_unit(1_000) == (1_000.0, "s")


def test_a_trace_of_milliseconds_is_drawn_in_milliseconds() -> None:
    # as the README's my_tokens.jsonl: requests at 0, 1 and 2 ms (the empty prompt at 0 too)
    fig = over_time((0.0, 0.0, 1.0, 2.0))
    for ax in panels(fig):
        assert ax.get_xlabel() == "Time since trace start (ms; 1 ms bins)"
        assert ax.get_xlim() == (0.0, 2.0)
        for line in labelled(ax):
            np.testing.assert_allclose(line.get_xdata(), [0.5, 1.5])  # bin centres (ms)
    assert problems(fig, style_context()) == []


def test_one_bin_is_a_marker_per_point() -> None:
    # every request at one moment: one bin, and a line of one point draws nothing
    fig = over_time((5.0, 5.0, 5.0, 5.0))
    for ax in panels(fig):
        lines = labelled(ax)
        assert [len(line.get_xdata()) for line in lines] == [1, 1]
        assert all(line.get_marker() not in (None, "None", "") for line in lines)
    assert problems(fig, style_context()) == []


def test_panels_share_one_y_scale() -> None:
    fig = over_time((0.0, 1_000.0, 60_000.0, 120_000.0), beta_share=0.5)
    axes = panels(fig)
    highs = [max(max(line.get_ydata()) for line in labelled(ax)) for ax in axes]
    assert highs[1] == pytest.approx(highs[0] / 2, rel=0.05)  # beta hits half as often
    assert len({ax.get_ylim() for ax in axes}) == 1
    assert problems(fig, style_context()) == []


def test_a_trace_of_milliseconds_in_small_multiples() -> None:
    # more than five points a trace: small panels, each point one marker when it has one bin
    results = make_results(policies=("S3FIFO", "LRU", "FIFO", "CLOCK", "SIEVE", "LFU"))
    points = data.default_points(results)
    times = make_requests(results).assign(timestamp=3.0)
    fig = requests.fig_hit_rate_over_time(points, make_per_request(results), times)
    coloured = [ln for ax in fig.axes for ln in labelled(ax)]
    assert len(coloured) == 12 and all(len(ln.get_xdata()) == 1 for ln in coloured)
    assert all(ln.get_marker() not in (None, "None", "") for ln in coloured)
    assert problems(fig, style_context()) == []


def test_small_multiples_keep_each_policys_line_style() -> None:
    # a policy's line style is its own in every figure of a run: CLOCK and LFU dash-dotted
    # (they were solid in the small multiples, dash-dotted in hit_rate_vs_capacity)
    results = make_results(policies=("S3FIFO", "LRU", "FIFO", "CLOCK", "SIEVE", "LFU"))
    points = data.default_points(results)
    fig = requests.fig_hit_ratio_cdf(points, make_per_request(results))
    styles = {str(ln.get_label()).split(" ")[0]: ln.get_linestyle() for ax in fig.axes
              for ln in labelled(ax)}  # fmt: skip
    assert styles["CLOCK"] == styles["LFU"] == "-."
    assert styles["S3FIFO"] == "-"
