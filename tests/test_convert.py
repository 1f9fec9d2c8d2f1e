"""``python -m prefixsim.convert``: any format to a Mooncake trace with identical replays."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from prefixsim import load_trace, replay
from prefixsim.convert import main


def _write(path: Path, rows: list[dict[str, object]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    requests=st.lists(st.lists(st.integers(0, 3), max_size=40), min_size=1, max_size=15),
    block_size=st.integers(1, 6),
    stamps=st.lists(st.integers(0, 10**6) | st.floats(0, 1e6), min_size=15, max_size=15),
)
def test_tokens_to_mooncake_round_trip(
    tmp_path: Path, requests: list[list[int]], block_size: int, stamps: list[float]
) -> None:
    rows = [
        {"timestamp": stamps[i], "token_ids": r, "output_length": i} for i, r in enumerate(requests)
    ]
    src = _write(tmp_path / "t.jsonl", rows)
    out = tmp_path / "t.mooncake.jsonl.gz"
    if 0 < max(map(len, requests)) < block_size:  # every hash_ids empty: refused (issue 22)
        assert main([str(src), str(out), "--block-size", str(block_size)]) == 2
        return
    assert main([str(src), str(out), "--block-size", str(block_size)]) == 0
    original = load_trace(src, block_size=block_size, use_cache=False)
    converted = load_trace(out, use_cache=False)
    assert converted.block_size is None  # a plain Mooncake trace now
    for name in ("timestamps", "input_lengths", "output_lengths", "offsets", "block_ids"):
        assert np.array_equal(getattr(original, name), getattr(converted, name)), name
    for policy in ("S3FIFO", "LRU"):
        a = replay(original, policy, 6, block_size=block_size, small_ratio=0.34)
        b = replay(converted, policy, 6, block_size=block_size, small_ratio=0.34)
        assert a.hit_tokens.tolist() == b.hit_tokens.tolist()
        assert a.final_cache_blocks == b.final_cache_blocks


def test_chain_conversion_writes_chained_ids(tmp_path: Path) -> None:
    # Unchained [10, 20] then [20]: chained, the second request's block is a new block (2), so
    # the written ids are [0, 1] and [2].
    rows = [
        {"timestamp": 0, "input_length": 4, "output_length": 0, "hash_ids": [10, 20]},
        {"timestamp": 1, "input_length": 2, "output_length": 0, "hash_ids": [20]},
    ]
    src = _write(tmp_path / "m.jsonl", rows)
    out = tmp_path / "c.jsonl"
    assert main([str(src), str(out), "--chain"]) == 0
    written = [json.loads(line)["hash_ids"] for line in out.read_text().splitlines()]
    assert written == [[0, 1], [2]]
    assert out.read_bytes()[:1] == b"{"  # not gzip: OUT does not end in .gz


def test_errors_are_one_line_and_exit_2(tmp_path: Path) -> None:
    src = _write(tmp_path / "t.jsonl", [{"timestamp": 0, "token_ids": [1, 2]}])
    proc = subprocess.run(
        [sys.executable, "-m", "prefixsim.convert", str(src), str(tmp_path / "o.jsonl.gz")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "block_size" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("flag", ["tokens", "mooncake"])
def test_forced_format(tmp_path: Path, flag: str) -> None:
    src = _write(tmp_path / "t.jsonl", [{"timestamp": 0, "token_ids": [1, 2]}])
    code = main([str(src), str(tmp_path / "o.jsonl"), "--from", flag, "--block-size", "1"])
    assert code == (0 if flag == "tokens" else 2)


def test_lines_do_not_depend_on_the_batch() -> None:
    from prefixsim.convert import mooncake_lines

    trace = load_trace("conversation")
    assert list(mooncake_lines(trace, batch=7)) == list(mooncake_lines(trace))
