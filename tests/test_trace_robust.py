"""A hostile world on the engine side (issue 10): totals that would overflow int64, altered
cache entries, files that are not regular files, and files made of blank lines.

Every expected number is derived by hand in a comment, never read from the code under test.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import prefixsim
from prefixsim import TraceError, _trace_cache, load_trace
from prefixsim import trace as trace_module

INT64_MAX = 2**63 - 1


@pytest.fixture(autouse=True)
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "cache"
    monkeypatch.setenv("PREFIXSIM_CACHE_DIR", str(path))
    return path


def line(input_length: int, hash_ids: list[int], ts: int = 0) -> str:
    return (
        f'{{"timestamp": {ts}, "input_length": {input_length}, "output_length": 1, '
        f'"hash_ids": {hash_ids}}}\n'
    )


def run_cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(Path(prefixsim.__file__).resolve().parents[1])}
    return subprocess.run(
        [sys.executable, "-m", "prefixsim", *args, "--no-per-request"],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        check=False,
    )


# --- totals are exact or the trace is refused --------------------------------------------------


@given(hnp.arrays(np.int64, st.integers(0, 300), elements=st.integers(-(2**63), INT64_MAX)))
def test_exact_sum_is_pythons_sum(values: np.ndarray) -> None:
    from prefixsim._exact import exact_sum

    assert exact_sum(values) == sum(values.tolist())


@pytest.mark.parametrize(
    "result_type",
    [prefixsim.ReplayResult, prefixsim.TieredResult, prefixsim.ClusterResult, prefixsim.Ceiling],
)
def test_every_result_sums_its_tokens_exactly(result_type: type) -> None:
    # Two requests of 2**62 tokens each, all hits: the totals are 2**63, one past int64, which
    # ndarray.sum() wraps to -2**63. Only hit_tokens and prompt_tokens are read by the totals.
    result = object.__new__(result_type)
    tokens = np.array([2**62, 2**62], np.int64)
    object.__setattr__(result, "hit_tokens", tokens)
    object.__setattr__(result, "prompt_tokens", tokens.copy())
    assert result.n_requests == 2
    assert result.total_hit_tokens == 2**63
    assert result.total_prompt_tokens == 2**63
    assert result.overall_hit_rate == 1.0
    assert result.totals() == (2**63, 2**63, 1.0)
    # a zero-token trace has a hit rate of 0.0, not a ZeroDivisionError
    object.__setattr__(result, "hit_tokens", np.zeros(2, np.int64))
    object.__setattr__(result, "prompt_tokens", np.zeros(2, np.int64))
    assert result.totals() == (0, 0, 0.0)


# Two requests share blocks [1, 2]; their input_length values sum to exactly 2**63 - 1
# (2**62 + 2**62 - 1), the largest total that fits. With block_size 2**31 - 1 and room for both
# blocks, the second request hits k = 2 blocks: min(2 * (2**31 - 1), 2**62 - 1) = 2**32 - 2.
BOUNDARY = line(2**62, [1, 2]) + line(2**62 - 1, [1, 2], ts=1)


@pytest.mark.parametrize("slow_path", [False, True], ids=["pyarrow", "exact-parser"])
def test_a_total_of_exactly_int64_max_is_exact(tmp_path: Path, slow_path: bool) -> None:
    text = BOUNDARY
    if slow_path:  # a hash id beyond int64 is legal and sends the file to the exact parser
        text += line(0, [2**70], ts=2)
    path = tmp_path / "boundary.jsonl"
    path.write_text(text)
    trace = load_trace(path)
    assert trace.total_prompt_tokens == INT64_MAX
    for result in (
        prefixsim.replay(trace, "LRU", 4, block_size=2**31 - 1),
        prefixsim.replay(trace, "S3FIFO", 20, block_size=2**31 - 1),
        prefixsim.lru_curve(trace, [4], block_size=2**31 - 1).result(4),
    ):
        assert result.total_prompt_tokens == INT64_MAX
        assert result.total_hit_tokens == 2**32 - 2
        assert result.overall_hit_rate == (2**32 - 2) / INT64_MAX
    assert prefixsim.ceiling(trace, 2**31 - 1).total_hit_tokens == 2**32 - 2


@pytest.mark.parametrize("slow_path", [False, True], ids=["pyarrow", "exact-parser"])
def test_a_total_past_int64_is_refused_at_the_line_that_overflows(
    tmp_path: Path, slow_path: bool
) -> None:
    # 5e18 + 5e18 = 1e19 > 2**63 - 1 (about 9.22e18): the running total overflows at line 3
    # (line 2 is blank), where int64 arithmetic used to wrap to -8446744073709551616.
    text = line(5 * 10**18, [1]) + "\n" + line(5 * 10**18, [1], ts=1)
    if slow_path:
        text += line(0, [2**70], ts=2)
    path = tmp_path / "big.jsonl"
    path.write_text(text)
    with pytest.raises(TraceError) as info:
        load_trace(path)
    assert (info.value.line, info.value.field) == (3, "input_length")
    assert "2**63 - 1" in str(info.value)


def test_a_built_trace_past_int64_is_refused_too() -> None:
    from conftest import make_trace

    make_trace([(INT64_MAX, [1]), (0, [1])])  # the largest total: accepted
    with pytest.raises(TraceError, match="input_length"):
        make_trace([(INT64_MAX, [1]), (1, [1])])


def test_the_cli_refuses_an_overflowing_total_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "big.jsonl"
    path.write_text(line(5 * 10**18, [1]) + line(5 * 10**18, [1], ts=1))
    done = run_cli(str(path))
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.count("\n") == 1
    assert f"{path}:2: input_length:" in done.stderr


# --- the trace cache verifies what it returns ----------------------------------------------------


def test_an_altered_but_well_formed_cache_entry_is_reparsed(
    tmp_path: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(line(100, [1, 2]) + line(200, [2, 3], ts=1))
    expected = load_trace(path)
    (entry,) = cache_dir.glob("*.npz")
    with np.load(entry) as npz:
        fields = dict(npz)
    fields["input_lengths"] = np.array([100, 999], np.int64)  # still a consistent trace
    with entry.open("wb") as f:
        np.savez(f, **fields)
    parses = []
    real = trace_module._parse_jsonl
    monkeypatch.setattr(trace_module, "_parse_jsonl", lambda *a: parses.append(1) or real(*a))
    again = load_trace(path)
    assert parses == [1]
    np.testing.assert_array_equal(again.input_lengths, expected.input_lengths)  # [100, 200]


def test_a_fifo_at_a_cache_entry_path_is_ignored(tmp_path: Path, cache_dir: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(line(100, [1, 2]))
    cache_dir.mkdir()
    os.mkfifo(_trace_cache.cache_path(hashlib.sha256(path.read_bytes()).hexdigest()))
    done = run_cli(str(path))  # in a subprocess: a hang fails on the timeout, not forever
    assert done.returncode == 0, done.stderr
    assert '"total_prompt_tokens": 100' in done.stdout


# --- only regular files are read ---------------------------------------------------------------


@pytest.mark.parametrize("kind", ["fifo", "/dev/zero", "/dev/urandom"])
def test_what_is_not_a_regular_file_is_refused_without_reading(tmp_path: Path, kind: str) -> None:
    if kind == "fifo":
        target = tmp_path / "pipe"
        os.mkfifo(target)
        what = "a named pipe"
    else:
        target = Path(kind)
        what = "a character device"
    done = run_cli(str(target), timeout=60)
    assert done.returncode == 2
    assert done.stderr == (
        f"prefixsim: error: {target}: is not a regular file ({what}); expected a JSONL trace "
        "file (Mooncake, token or chat; plain or gzip)\n"
    )


# --- blank lines cost what their bytes cost ------------------------------------------------------


@pytest.mark.parametrize("last", ["", line(7, [1])], ids=["only-blank", "then-a-request"])
def test_blank_lines_take_less_memory_than_their_bytes(last: str) -> None:
    body = b"\n" * 24_000_000 + last.encode()  # 24 MB, 24 million blank lines
    tracemalloc.start()
    try:
        if last:
            fields = trace_module._parse_jsonl(body, "blank.jsonl")
            # the request is on line 24,000,001 (every "\n" ends one blank line)
            assert fields["line_numbers"].tolist() == [24_000_001]
        else:
            with pytest.raises(TraceError, match="has only blank lines"):
                trace_module._parse_jsonl(body, "blank.jsonl")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # Splitting into lines used about 40 bytes per blank line (about 1 GB here); the chunked
    # scan's window (prefixsim.trace._SCAN_CHUNK bytes, a few arrays of 8 bytes per line in it)
    # is bounded whatever the file's size: about 11 MB.
    assert peak < 16 * 2**20
