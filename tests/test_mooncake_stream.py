"""The streaming Mooncake parser reads exactly what the exact loader reads, or gives up."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import prefixsim
from prefixsim.errors import TraceError
from prefixsim.formats import mooncake_stream
from prefixsim.trace import _parse_jsonl

ws = st.sampled_from(["", " ", "  ", "\t"])
good_int = st.integers(0, 10**6).map(str)
good_ts = good_int | st.floats(0, 1e7, allow_nan=False).map(lambda x: json.dumps(round(x, 3)))
odd = st.one_of(
    st.integers(-(10**18), 10**19).map(str),
    st.floats(-1e300, 1e300, allow_nan=False).map(json.dumps),
    st.sampled_from(["01", "1e3", "1.", "-0", "1.5E2", '"7"', "true", "null", "3.0", "[]"]),
)


def rarely_odd(good: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    """Mostly valid values, sometimes one the strict parser or the format may refuse."""
    return st.integers(0, 40).flatmap(lambda k: odd if k == 0 else good)


@st.composite
def line(draw: st.DrawFn) -> str:
    keys = {
        "timestamp": draw(rarely_odd(good_ts)),
        "input_length": draw(rarely_odd(good_int)),
        "output_length": draw(rarely_odd(good_int)),
        "hash_ids": "["
        + ("," + draw(ws)).join(draw(st.lists(rarely_odd(st.integers(0, 50).map(str)), max_size=6)))
        + "]",
    }
    items = list(keys.items())
    order = draw(st.permutations(items))
    if draw(st.integers(0, 30)) == 0:
        order = order[:-1]  # a missing key
    if draw(st.integers(0, 30)) == 0:
        order = [*order, ("extra", "1")]
    body = ("," + draw(ws)).join(f'"{k}"{draw(ws)}:{draw(ws)}{v}' for k, v in order)
    return draw(ws) + "{" + body + "}" + draw(st.sampled_from(["", " ", "\r"]))


files = st.lists(line() | st.sampled_from(["", " ", "\r"]), min_size=1, max_size=12).map(
    lambda lines: "\n".join(lines)
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=files, bom=st.booleans(), gz=st.booleans())
def test_stream_equals_exact_parser_or_gives_up(
    text: str, bom: bool, gz: bool, tmp_path_factory: pytest.TempPathFactory
) -> None:
    data = (b"\xef\xbb\xbf" if bom else b"") + text.encode()
    path = tmp_path_factory.mktemp("s") / "t.jsonl"
    path.write_bytes(gzip.compress(data) if gz else data)
    streamed = mooncake_stream.parse(path)
    try:
        exact = _parse_jsonl(data, "t")
    except TraceError:
        assert streamed is None  # never accepts what the exact parser refuses
        return
    if streamed is None:
        return
    fields, _sha = streamed
    for name in ("timestamps", "input_lengths", "output_lengths", "offsets", "line_numbers"):
        assert np.array_equal(fields[name], exact[name]), name
    assert np.array_equal(fields["block_ids"], exact["block_ids"])
    assert fields["n_blocks"] == exact["n_blocks"]


def test_canonical_lines_are_streamed(tmp_path: Path) -> None:
    text = (
        '{"timestamp": 2289.25, "input_length": 7930, "output_length": 305, "hash_ids": [5, 6]}\n'
        "\r\n"
        '{"hash_ids":[5,7],"output_length":0,"input_length":1024,"timestamp":-0}\r\n'
    )
    path = tmp_path / "t.jsonl"
    path.write_text(text)
    parsed = mooncake_stream.parse(path)
    assert parsed is not None
    fields, sha = parsed
    assert fields["timestamps"].tolist() == [2289.25, 0.0]
    assert fields["block_ids"].tolist() == [0, 1, 0, 2]
    assert fields["line_numbers"].tolist() == [1, 3]
    assert sha == prefixsim.load_trace(path, use_cache=False).sha256


def test_load_trace_streams_large_files_and_matches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(mooncake_stream, "STREAM_MIN_BYTES", 0)
    calls: list[Path] = []
    real = mooncake_stream.parse
    monkeypatch.setattr(mooncake_stream, "parse", lambda p, s=None: calls.append(p) or real(p, s))
    src = prefixsim.trace.bundled_trace_path("conversation")
    path = tmp_path / "c.jsonl.gz"
    path.write_bytes(src.read_bytes())
    streamed = prefixsim.load_trace(path, use_cache=False)
    assert calls == [path]
    monkeypatch.setattr(mooncake_stream, "STREAM_MIN_BYTES", 1 << 62)
    ordinary = prefixsim.load_trace(path, use_cache=False)
    assert streamed.sha256 == ordinary.sha256
    for name in ("timestamps", "input_lengths", "output_lengths", "offsets", "block_ids"):
        assert np.array_equal(getattr(streamed, name), getattr(ordinary, name)), name


def test_plain_file_with_cache_keeps_the_content_sha(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(mooncake_stream, "STREAM_MIN_BYTES", 0)
    path = tmp_path / "c.jsonl"
    path.write_bytes(
        gzip.decompress(prefixsim.trace.bundled_trace_path("conversation").read_bytes())
    )
    first = prefixsim.load_trace(path)  # streamed, then cached
    again = prefixsim.load_trace(path)  # from the cache
    bundled = prefixsim.load_trace("conversation")
    assert first.sha256 == again.sha256 == bundled.sha256
    assert np.array_equal(again.block_ids, bundled.block_ids)
