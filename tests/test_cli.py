"""``python -m prefixsim``: the report, and one-line errors with exit status 2."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from prefixsim import replay
from prefixsim.cli import main


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "prefixsim", *args], capture_output=True, text=True, check=False
    )


def test_module_prints_the_report_for_the_bundled_trace() -> None:
    proc = run("conversation", "--capacity", "2048", "--no-per-request")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    expected = replay("conversation", "S3FIFO", 2048)
    assert report["total_hit_tokens"] == expected.total_hit_tokens
    assert report["final_cache_blocks"] == expected.final_cache_blocks
    assert report["cache_capacity_blocks"] == 2048
    assert report["small_ratio"] == 0.1 and report["max_freq"] == 3 and report["ghost_freq"] == 0
    assert "per_request" not in report


def test_output_file_and_per_request(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text(
        '{"timestamp": 0, "input_length": 700, "output_length": 1, "hash_ids": [5, 6]}\n'
        "\n"
        '{"timestamp": 1, "input_length": 700, "output_length": 1, "hash_ids": [5, 6]}\n'
    )
    out = tmp_path / "report.json"
    code = main([str(trace), "--policy", "LRU", "--capacity", "4", "--oddities", "-o", str(out)])
    assert code == 0
    report = json.loads(out.read_text())
    # Second request: both blocks resident, min(2 * 512, 700) = 700.
    assert report["per_request"] == [
        {"hit_tokens": 0, "prompt_tokens": 700},
        {"hit_tokens": 700, "prompt_tokens": 700},
    ]
    assert report["policy"] == "LRU" and "small_ratio" not in report
    assert report["oddities"]["hash_ids_longer_than_input"] == 0


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_output_file_mode_follows_the_umask(tmp_path: Path, umask: int) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": 7, "output_length": 1, "hash_ids": [5]}\n')
    out = tmp_path / "report.json"
    previous = os.umask(umask)
    try:
        assert main([str(trace), "--policy", "LRU", "--capacity", "4", "-o", str(out)]) == 0
    finally:
        os.umask(previous)
    # as open(path, "w") would create it: 0666 without the umask's bits (0644 for 022)
    assert out.stat().st_mode & 0o777 == 0o666 & ~umask


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b'{"timestamp": 0, "input_length": 1, "output_length": 1, "hash_ids": [1]}\n{oops\n',
         ":2: "),
        (b'{"timestamp": 0, "input_length": true, "output_length": 1, "hash_ids": [1]}\n',
         ":1: input_length"),
        (b"", "no requests"),
        # mtime=0: the gzip header holds the time, and xdist's workers must collect equal ids
        (gzip.compress(b'{"timestamp": 0, "input_length": 1}\n' * 50, mtime=0)[:40], "gzip"),
    ],
    ids=["bad-json", "bool-length", "empty", "truncated-gzip"],
)  # fmt: skip
def test_bad_trace_is_one_line_exit_2(tmp_path: Path, content: bytes, expected: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_bytes(content)
    proc = run(str(path))
    assert proc.returncode == 2
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    assert str(path) in lines[0] and expected in lines[0]


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--capacity", "0"], "capacity=0"),
        (["--small-ratio", "1.5"], "small_ratio=1.5"),
        (["--policy", "MRU"], "expected one of ARC, BELADY, CLOCK, FIFO, LFU, LRU,"),
        (["--ghost-freq", "5"], "ghost_freq=5"),
    ],
)
def test_bad_parameter_is_one_line_exit_2(args: list[str], expected: str) -> None:
    proc = run("conversation", *args)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert expected in proc.stderr


def test_missing_file_exit_2(tmp_path: Path) -> None:
    proc = run(str(tmp_path / "nope.jsonl"))
    assert proc.returncode == 2
    assert "nope.jsonl" in proc.stderr and "Traceback" not in proc.stderr
