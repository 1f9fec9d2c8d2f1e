"""The run directory's tables: sorted as documented, and the same bytes however the run went.

``results.parquet`` is sorted by ``point_id``; ``per_request.parquet`` by ``point_id`` then
``request``. An interrupted-and-resumed run writes byte-identical files to an uninterrupted run
(``results.parquet`` apart from its ``replay_seconds`` column, a measured time).
"""

from __future__ import annotations

import dataclasses
import importlib
import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import prefixsim
import sweep.store
from conftest import bundled_head
from sweep import Backend, ExecutorConfig, SweepConfig, run_sweep
from sweep.store import TIMING_COLUMNS, RunDir

# Four LRU points per block size make one LRU-curve batch each (automatic batching), and with
# two block sizes their point ids interleave (the grid is ordered capacity, then block_size):
# the batch of block size 256 holds ids 8, 10, 12, 14 and that of 512 holds 9, 11, 13, 15.
GRID = {
    "policy": ["S3FIFO", "LRU"],
    "capacity": [16, 64, 256, 1024],
    "block_size": [256, 512],
}


@pytest.fixture(scope="module")
def small_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The first 400 requests of the bundled trace, as a plain JSONL file."""
    return bundled_head(tmp_path_factory.mktemp("traces"), 400)


def _config(out: Path, trace: Path, batch_size: int | None) -> SweepConfig:
    return SweepConfig(
        trace=[str(trace)],
        out_dir=str(out),
        progress=False,
        plot=False,
        executor=ExecutorConfig(n_jobs=1, batch_size=batch_size),
        **GRID,  # type: ignore[arg-type]
    )


def _assert_sorted(out: Path) -> None:
    ids = pq.read_table(out / "results.parquet").column("point_id").to_numpy()
    assert (np.diff(ids) > 0).all()
    pr = pq.read_table(out / "per_request.parquet")
    pid = pr.column("point_id").to_numpy()
    req = pr.column("request").to_numpy()
    step = np.diff(pid)
    # point ids never decrease; within a point, requests count 0, 1, 2, ...
    assert (step >= 0).all()
    assert ((step > 0) | (np.diff(req) == 1)).all()
    assert set(np.unique(pid)) == set(ids.tolist())


@pytest.mark.parametrize("batch_size", [None, 3])
def test_interrupted_and_resumed_files_are_byte_identical(
    tmp_path: Path, small_trace: Path, monkeypatch: pytest.MonkeyPatch, batch_size: int | None
) -> None:
    # several row groups in per_request.parquet (400 requests x 16 points = 6,400 rows), so
    # resuming merges old row groups with new parts across group boundaries
    monkeypatch.setattr(sweep.store, "PER_REQUEST_ROW_GROUP", 1000)
    ref = tmp_path / "ref"
    assert run_sweep(_config(ref, small_trace, batch_size)).exit_code == 0
    _assert_sorted(ref)

    real_write = RunDir.write_part
    calls = []

    def write_then_interrupt(self, table):  # type: ignore[no-untyped-def]
        path = real_write(self, table)
        calls.append(path)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return path

    out = tmp_path / "out"
    monkeypatch.setattr(RunDir, "write_part", write_then_interrupt)
    first = run_sweep(_config(out, small_trace, batch_size))
    assert first.interrupted and 0 < first.computed < first.planned
    _assert_sorted(out)
    monkeypatch.setattr(RunDir, "write_part", real_write)
    second = run_sweep(_config(out, small_trace, batch_size))
    assert second.exit_code == 0 and second.skipped == first.computed
    _assert_sorted(out)

    assert (out / "per_request.parquet").read_bytes() == (ref / "per_request.parquet").read_bytes()
    got, want = (pq.read_table(d / "results.parquet") for d in (out, ref))
    assert got.drop_columns(list(TIMING_COLUMNS)).equals(
        want.drop_columns(list(TIMING_COLUMNS)), check_metadata=True
    )
    assert pq.ParquetFile(out / "results.parquet").metadata.num_row_groups == 1


@pytest.mark.parametrize(
    ("executor", "failing"),
    [
        (ExecutorConfig(n_jobs=1), False),
        (ExecutorConfig(n_jobs=2, batch_size=1, backend=Backend.threading), False),
        (ExecutorConfig(n_jobs=2, batch_size=3, backend=Backend.threading), True),
    ],
)
def test_per_request_rows_streamed_as_points_finish_are_the_merged_file(
    tmp_path: Path,
    small_trace: Path,
    monkeypatch: pytest.MonkeyPatch,
    executor: ExecutorConfig,
    failing: bool,
) -> None:
    # A new run directory gets per_request.parquet written as the points finish (in any order,
    # the LRU curve batches' ids interleaved, a failed point among them), not merged from the
    # part files at the end; the file must be the very bytes the merge writes.
    monkeypatch.setattr(sweep.store, "PER_REQUEST_ROW_GROUP", 1000)  # several row groups
    if failing:
        real = prefixsim.replay_params

        def flaky(trace, params, block_size, **kw):  # type: ignore[no-untyped-def]
            failing_point = params.policy == "S3FIFO" and params.capacity == 64
            if failing_point and block_size == 512 and trace.n_requests > 1:  # not in planning
                raise MemoryError("simulated")
            return real(trace, params, block_size, **kw)

        monkeypatch.setattr(prefixsim, "replay_params", flaky)
    cfg = dataclasses.replace(_config(tmp_path / "merged", small_trace, None), executor=executor)
    can_stream = RunDir.can_stream_per_request
    monkeypatch.setattr(RunDir, "can_stream_per_request", lambda self: False)
    merged = run_sweep(cfg)
    monkeypatch.setattr(RunDir, "can_stream_per_request", can_stream)

    def not_at_the_end(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise AssertionError("per_request.parquet merged at the end, not streamed")

    consolidate = importlib.import_module("sweep.store.consolidate")
    monkeypatch.setattr(consolidate, "write_per_request", not_at_the_end)
    streamed = run_sweep(dataclasses.replace(cfg, out_dir=str(tmp_path / "streamed")))

    assert len(merged.failures) == len(streamed.failures) == (1 if failing else 0)
    _assert_sorted(tmp_path / "streamed")
    got, want = (tmp_path / d / "per_request.parquet" for d in ("streamed", "merged"))
    assert got.read_bytes() == want.read_bytes()
    assert pq.ParquetFile(got).num_row_groups > 1
    assert not list(tmp_path.glob("streamed/**/.*.tmp"))


@pytest.mark.parametrize(
    "executor",
    [ExecutorConfig(n_jobs=1), ExecutorConfig(n_jobs=2, batch_size=2, backend=Backend.threading)],
    ids=["in-process", "threads"],
)
def test_inputs_written_while_replaying_or_after_an_interrupt_are_the_same_bytes(
    tmp_path: Path, small_trace: Path, monkeypatch: pytest.MonkeyPatch, executor: ExecutorConfig
) -> None:
    # The inputs are written once the first batches replay (sweep.app._while_replaying); a
    # run stopped before that writes them on its way out, the same bytes, and the next run
    # finishes as an uninterrupted one would.
    import sweep.app as app

    def cfg(name: str) -> SweepConfig:
        c = _config(tmp_path / name, small_trace, None)
        return dataclasses.replace(c, executor=executor)

    ref = run_sweep(cfg("ref"))
    assert ref.exit_code == 0

    def stopped(run):  # type: ignore[no-untyped-def]
        assert not (run.run_dir.path / "traces.parquet").exists()  # not written before
        raise KeyboardInterrupt

    monkeypatch.setattr(app, "_while_replaying", stopped)
    (tmp_path / "out").mkdir()  # not this run's: kept though nothing finished (sweep.lifecycle)
    first = run_sweep(cfg("out"))
    assert first.interrupted and first.computed == 0
    out = tmp_path / "out"
    assert json.loads((out / "manifest.json").read_text())["status"] == "interrupted"
    _assert_same_inputs(out, tmp_path / "ref")
    monkeypatch.undo()
    second = run_sweep(cfg("out"))
    assert second.exit_code == 0 and second.computed == second.planned
    _assert_same_inputs(out, tmp_path / "ref")
    got, want = (d / "per_request.parquet" for d in (out, ref.out_dir))
    assert got.read_bytes() == want.read_bytes()


def _assert_same_inputs(out: Path, ref: Path) -> None:
    for name in ("traces.parquet", "requests.parquet"):
        assert (out / name).read_bytes() == (ref / name).read_bytes(), name
    # config.yaml: the same but for out_dir
    got = (out / "config.yaml").read_text().replace(str(out), str(ref))
    assert got == (ref / "config.yaml").read_text()


def test_a_failed_input_write_while_replaying_stops_the_sweep_in_one_line(
    tmp_path: Path, small_trace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import errno
    import os

    from sweep import StoreError

    def full(self, traces, block_sizes):  # type: ignore[no-untyped-def]
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self.traces))

    monkeypatch.setattr(RunDir, "save_trace_tables", full)
    out = tmp_path / "out"
    cfg = dataclasses.replace(
        _config(out, small_trace, None),
        executor=ExecutorConfig(n_jobs=2, batch_size=2, backend=Backend.threading),
    )
    with pytest.raises(StoreError, match="no space left on the device") as info:
        run_sweep(cfg)
    assert "\n" not in str(info.value) and str(info.value).startswith(f"out_dir={str(out)!r}")
    doc = json.loads((out / "manifest.json").read_text())
    assert doc["status"] == "failed" and "no space left" in doc["error"]
    assert not list(out.glob("**/.*.tmp"))
    monkeypatch.undo()
    again = run_sweep(cfg)
    assert again.exit_code == 0 and again.skipped + again.computed == again.planned
    _assert_sorted(out)


@given(
    n_requests=st.integers(1, 9),
    segments=st.lists(st.integers(1, 5), min_size=1, max_size=6),
    row_group=st.integers(1, 40),
    seed=st.integers(0, 2**32 - 1),
)
@settings(max_examples=200, deadline=None)
def test_rows_built_straight_into_row_groups_are_the_cut_segment_rows(
    n_requests: int, segments: list[int], row_group: int, seed: int
) -> None:
    # The stream's RowGroupBuilder (the fast path) against _Segment.rows re-cut by
    # RowGroupCutter (the merge's path): the same row groups, table for table.
    import pyarrow as pa

    from sweep.store.per_request import RowGroupBuilder, RowGroupCutter, _Segment
    from sweep.store.schemas import PER_REQUEST_SCHEMA

    rng = np.random.default_rng(seed)
    prompt = rng.integers(0, 10_000, n_requests).astype(np.int64)
    cutter, builder = RowGroupCutter(row_group), RowGroupBuilder(row_group)
    want: list[pa.Table] = []
    got: list[pa.Table] = []
    first = 0
    for k in segments:
        ids = np.arange(first, first + k, dtype=np.int64)
        first += k + int(rng.integers(0, 3))  # gaps between segments, as old points make
        hits = [rng.integers(0, 10_000, n_requests).astype(np.int64) for _ in range(k)]
        table = pa.table(
            {
                "point_id": ids,
                "trace_sha256": ["t"] * k,
                "hit_tokens": pa.array([h.tolist() for h in hits], pa.list_(pa.int64())),
            }
        )
        segment = _Segment(int(ids[0]), table)
        want += cutter.push(segment.rows(lambda sha: prompt, PER_REQUEST_SCHEMA))
        got += builder.push(segment, lambda sha: prompt)
    want += [t for t in [cutter.rest()] if t is not None]
    got += [t for t in [builder.rest()] if t is not None]
    assert [t.num_rows for t in got] == [t.num_rows for t in want]
    for g, w in zip(got, want, strict=True):
        assert g.equals(w, check_metadata=True)
        assert all(c.num_chunks == 1 for c in g.columns)
