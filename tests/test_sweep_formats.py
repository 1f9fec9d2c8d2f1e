"""The sweep on token and unchained traces: block_size is a real axis (one hash per size)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

import prefixsim
from prefixsim.formats import tokens as tokens_module
from sweep import ExecutorConfig, SweepConfig, run_sweep


@pytest.fixture()
def token_trace(tmp_path: Path) -> Path:
    # Three sessions of three turns, each turn extending the previous prompt.
    rows = []
    for s in range(3):
        prompt = [s] * 5
        for turn in range(3):
            prompt = prompt + list(range(100 * turn, 100 * turn + 7 + s))
            rows.append({"timestamp": len(rows), "token_ids": prompt, "session_id": s})
    path = tmp_path / "tokens.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_token_trace_is_hashed_once_per_block_size(
    tmp_path: Path, token_trace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[int] = []
    real = tokens_module.hash_tokens

    def counting(table: tokens_module.TokenTable, block_size: int, display: str) -> object:
        calls.append(block_size)
        return real(table, block_size, display)

    monkeypatch.setattr(tokens_module, "hash_tokens", counting)
    cfg = SweepConfig(
        trace=[str(token_trace)],
        policy=["S3FIFO", "LRU"],
        capacity=[4, 16],
        small_ratio=[0.25],
        block_size=[2, 4, 8],
        out_dir=str(tmp_path / "run"),
        executor=ExecutorConfig(n_jobs=1),
        plot=False,
        progress=False,
    )
    summary = run_sweep(cfg)
    assert summary.exit_code == 0
    assert sorted(calls) == [2, 4, 8]  # one parse and hash per block size (fresh cache dir)
    df = pd.read_parquet(tmp_path / "run" / "results.parquet")
    assert len(df) == 12 and df.trace_sha256.nunique() == 3
    for row in df.itertuples():
        trace = prefixsim.load_trace(token_trace, block_size=row.block_size)
        expected = prefixsim.replay(
            trace, row.policy, row.capacity, block_size=row.block_size, small_ratio=0.25
        )
        assert row.total_hit_tokens == expected.total_hit_tokens
        assert row.trace_sha256 == trace.sha256
    traces = pd.read_parquet(tmp_path / "run" / "traces.parquet")
    assert sorted(traces.block_size) == [2, 4, 8]  # each hashed trace at its own size only
    again = run_sweep(cfg)  # same keys: nothing to recompute
    assert again.computed == 0 and again.skipped == 12


def test_chain_option_reaches_the_loader(tmp_path: Path) -> None:
    # Unchained [10, 20] then [20] (see test_formats): chained, request 2 hits 0 tokens.
    rows = [
        {"timestamp": 0, "input_length": 32, "output_length": 1, "hash_ids": [10, 20]},
        {"timestamp": 1, "input_length": 16, "output_length": 1, "hash_ids": [20]},
    ]
    path = tmp_path / "m.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    totals = {}
    for chain in (False, True):
        cfg = SweepConfig(
            trace=[str(path)],
            policy=["LRU"],
            capacity=[8],
            block_size=[16],
            chain=chain,
            out_dir=str(tmp_path / f"run{chain}"),
            executor=ExecutorConfig(n_jobs=1),
            plot=False,
            progress=False,
        )
        assert run_sweep(cfg).exit_code == 0
        totals[chain] = int(pd.read_parquet(cfg.out_dir + "/results.parquet").total_hit_tokens[0])
    assert totals == {False: 16, True: 0}


def test_workers_use_memory_mapped_traces_without_copying(tmp_path: Path) -> None:
    # What a loky worker receives with mmap_mode="c": np.memmap arrays, writable
    # (copy-on-write). _local_trace must view them as plain ndarrays, not copy them.
    import dataclasses

    import numpy as np

    from sweep.run import _local_trace

    trace = prefixsim.load_trace("conversation")
    mapped = {}
    for f in dataclasses.fields(trace):
        a = getattr(trace, f.name)
        if isinstance(a, np.ndarray):
            path = tmp_path / f"{f.name}.npy"
            np.save(path, a)
            mapped[f.name] = np.load(path, mmap_mode="c")
    local = _local_trace(dataclasses.replace(trace, **mapped))
    for name, m in mapped.items():
        a = getattr(local, name)
        assert type(a) is np.ndarray and np.shares_memory(a, m), name
    assert prefixsim.replay(local, "S3FIFO", 4096).total_hit_tokens == (
        prefixsim.replay(trace, "S3FIFO", 4096).total_hit_tokens
    )


def test_a_trace_without_a_full_block_is_said_once_and_drawn_nowhere(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The README's one-liner: 5 tokens, no full block at any block size. One warning before
    anything runs; the figures leave every (empty) panel out and say why."""
    import logging

    from sweep.figures import draw_figures

    trace = tmp_path / "my_tokens.jsonl"
    trace.write_text('{"timestamp": 0, "token_ids": [1, 2, 3, 4, 5], "output_length": 9}\n')
    cfg = SweepConfig(
        trace=[str(trace)],
        capacity=[1024, 2048],
        block_size=[16, 64, 256, 512],
        out_dir=str(tmp_path / "run"),
        executor=ExecutorConfig(n_jobs=1),
        plot=False,
        progress=False,
    )
    caplog.set_level(logging.INFO)
    assert run_sweep(cfg).exit_code == 0
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [
        f"trace {trace}: no request has a full block at block_size=16, 64, 256, 512 (the "
        "longest prompt has 5 tokens): every hit rate will be 0"
    ]
    report = draw_figures(tmp_path / "run", formats=["png"])
    assert report.drawn == []
    reason = "my_tokens at block_size=16, 64, 256, 512: no request has a full block"
    assert report.skipped["hit_rate_vs_capacity"].startswith(reason)
    assert report.skipped["occupancy"].startswith(reason)
