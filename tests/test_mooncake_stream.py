"""The streaming Mooncake parser reads exactly what the exact loader reads, or gives up."""

from __future__ import annotations

import gzip
import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import prefixsim
from prefixsim.errors import TraceError
from prefixsim.formats import mooncake_stream
from prefixsim.trace import _parse_slow

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


good_session = st.one_of(
    st.integers(-3, 5).map(str),  # few distinct: sessions recur
    st.integers(-(10**18) + 1, 10**18 - 1).map(str),  # up to 18 digits: the strict parser's
    st.sampled_from(['"a"', '"b"', '"7"', '"-0"', '""', '"\u00e9"', "null"]),
    st.text(
        st.characters(min_codepoint=0x20, exclude_categories=("Cs",), exclude_characters='"\\'),
        max_size=3,
    ).map(lambda t: json.dumps(t, ensure_ascii=False)),
)
odd_session = st.one_of(
    st.integers(-(10**20), 10**20).map(str),  # beyond 18 digits: the exact loader reads them
    st.text(max_size=3).map(json.dumps),  # escapes
    st.sampled_from(['"a\\"b"', '"\\u0061"', "01", "1.0", "1e3", "true", "[]", '"\t"', "nul"]),
)
session_value = st.integers(0, 12).flatmap(lambda k: odd_session if k == 0 else good_session)


@st.composite
def line(draw: st.DrawFn) -> str:
    keys = {
        "timestamp": draw(rarely_odd(good_ts)),
        "input_length": draw(rarely_odd(good_int)),
        "output_length": draw(rarely_odd(good_int)),
        "hash_ids": "["
        + draw(ws)
        + (draw(ws) + "," + draw(ws)).join(
            draw(st.lists(rarely_odd(st.integers(0, 50).map(str)), max_size=6))
        )
        + draw(ws)
        + "]",
    }
    if draw(st.booleans()):
        keys["session_id"] = draw(session_value)
    items = list(keys.items())
    order = draw(st.permutations(items))
    if "session_id" in keys and draw(st.integers(0, 20)) == 0:
        order = [*order, ("session_id", draw(session_value))]  # given twice
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
    body = data[3:] if bom else data
    in_memory = mooncake_stream.parse_body(body)
    try:
        exact = _parse_slow(body, "t")
    except TraceError:
        # never accepts what the exact parser refuses
        assert streamed is None and in_memory is None
        return
    assert (streamed is None) == (in_memory is None)
    if streamed is None:
        return
    fields, _sha = streamed
    assert_same_fields(fields, exact)
    assert_same_fields(in_memory, exact)


@st.composite
def session_file(draw: st.DrawFn) -> tuple[str, bool]:
    """Canonical request lines with session ids (absent, null, integers, strings); ``strict``:
    all of them, and the ids, in the strict parser's subset, which it must then read."""
    strict = draw(st.booleans())
    lines = []
    for i in range(draw(st.integers(1, 16))):
        # Ids past the first table (2**20 entries): it grows mid-line; far past (not strict):
        # too sparse for a direct table, the exact loader decides.
        big = st.sampled_from([2**20, 2**20 + 7, *([] if strict else [3 * 2**20, 2**40])])
        ids = draw(st.lists(st.integers(0, 30) | big, max_size=5))
        text = f'{{"timestamp": {i}, "input_length": 5, "output_length": 1, "hash_ids": {ids}'
        if draw(st.integers(0, 3)):
            value = draw(good_session if strict else session_value)
            text += f', "session_id": {value}'
        lines.append(text + "}")
    return "\n".join(lines) + "\n", strict


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(drawn=session_file(), gz=st.booleans())
def test_session_ids_streamed_as_the_exact_parser_numbers_them(
    drawn: tuple[str, bool], gz: bool, tmp_path_factory: pytest.TempPathFactory
) -> None:
    text, strict = drawn
    data = text.encode()
    path = tmp_path_factory.mktemp("s") / "t.jsonl"
    path.write_bytes(gzip.compress(data) if gz else data)
    streamed = mooncake_stream.parse(path)
    in_memory = mooncake_stream.parse_body(data)
    try:
        exact = _parse_slow(data, "t")
    except TraceError:
        assert streamed is None and in_memory is None
        return
    if strict:  # nothing outside the strict subset: it must not give up
        assert streamed is not None and in_memory is not None
    if streamed is not None:
        assert_same_fields(streamed[0], exact)
    if in_memory is not None:
        assert_same_fields(in_memory, exact)


def assert_same_fields(fields: dict | None, exact: dict) -> None:
    assert fields is not None
    for name in ("timestamps", "input_lengths", "output_lengths", "offsets", "line_numbers"):
        assert np.array_equal(fields[name], exact[name]), name
    assert np.array_equal(fields["block_ids"], exact["block_ids"])
    assert fields["n_blocks"] == exact["n_blocks"]
    if exact["session_ids"] is None:
        assert fields["session_ids"] is None
    else:
        assert fields["session_ids"].dtype == np.int64
        assert fields["session_ids"].tolist() == exact["session_ids"].tolist()


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
    real = mooncake_stream._parse_file
    monkeypatch.setattr(
        mooncake_stream, "_parse_file", lambda p, **kw: calls.append(p) or real(p, **kw)
    )
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


def request(i: int, session: str | None) -> str:
    text = f'{{"timestamp": {i}, "input_length": 5, "output_length": 1, "hash_ids": [{i % 3}]'
    return text + (f', "session_id": {session}' if session is not None else "") + "}\n"


MIXED = ['"a"', "7", None, '"7"', "null", "7", '"a"', "-0", "0"]
# Numbered by first appearance, strings apart from integers, none and null -1:
# "a" -> 0, 7 -> 1, (none) -> -1, "7" -> 2, null -> -1, 7 -> 1, "a" -> 0, -0 is the integer 0
# -> 3, 0 -> 3.
MIXED_IDS = [0, 1, -1, 2, -1, 1, 0, 3, 3]


@pytest.mark.parametrize("streamed", [True, False], ids=["streamed", "in-memory"])
@pytest.mark.parametrize(
    ("sessions", "expected"),
    [
        (MIXED, MIXED_IDS),
        (["12", "10", "12", "999999999999999999"], [0, 1, 0, 2]),  # integers only
        (['"x"', '"\u00e9t\u00e9"', '"x"', '""'], [0, 1, 0, 2]),  # strings only, UTF-8
        ([None, "null", None], None),  # no request has one: None
        (['"a"', '"\\u0061"', "1" + "0" * 30], [0, 0, 1]),  # an escape, a huge integer: exact
    ],
    ids=["mixed", "integers", "strings", "none", "exact-loader"],
)
def test_session_ids_hand_cases(
    sessions: list[str | None],
    expected: list[int] | None,
    streamed: bool,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    path = tmp_path / "s.jsonl"
    path.write_text("".join(request(i, s) for i, s in enumerate(sessions)))
    monkeypatch.setattr(mooncake_stream, "STREAM_MIN_BYTES", 0 if streamed else 1 << 62)
    trace = prefixsim.load_trace(path, use_cache=False)
    if expected is None:
        assert trace.session_ids is None
    else:
        assert trace.session_ids is not None
        assert trace.session_ids.tolist() == expected
    assert trace.block_ids.tolist() == [0, 1, 2, 0, 1, 2, 0, 1, 2][: len(sessions)]


def test_strict_parser_reads_the_session_files_the_exact_one_would(tmp_path: Path) -> None:
    """The subset the compiled parser reads itself (no fallback to the exact parser)."""
    body = "".join(request(i, s) for i, s in enumerate(MIXED)).encode()
    fields = mooncake_stream.parse_body(body)
    assert fields is not None
    assert fields["session_ids"].tolist() == MIXED_IDS
    path = tmp_path / "s.jsonl.gz"
    path.write_bytes(gzip.compress(body))
    parsed = mooncake_stream.parse(path)
    assert parsed is not None
    assert parsed[0]["session_ids"].tolist() == MIXED_IDS


@pytest.mark.parametrize("bad", ['"a\\u0000"', '"\\ud800"', "true", "1.5", '"\\x"', "[1]"], ids=str)
def test_session_values_outside_the_subset_are_left_to_the_exact_parser(bad: str) -> None:
    body = (request(0, '"a"') + request(1, bad)).encode()
    assert mooncake_stream.parse_body(body) is None


def test_invalid_utf8_in_a_session_string_is_left_to_the_exact_parser() -> None:
    body = request(0, '"a"').encode() + request(1, '"b\xff"').encode("latin-1")
    assert mooncake_stream.parse_body(body) is None
    with pytest.raises(TraceError, match="not valid UTF-8"):
        _parse_slow(body, "t")


def test_the_id_table_grows_mid_line_and_numbers_by_first_appearance() -> None:
    # Line 1 meets 2**20 + 5 after numbering 7 and 2 (the table has 2**20 entries at first):
    # the line is read again after the table grows, and finds 7 and 2 numbered already.
    # Dense ids by first appearance: 7 -> 0, 2 -> 1, 2**20 + 5 -> 2, 5 -> 3, 2**20 + 9 -> 4.
    body = (
        request_ids(0, [7, 2, 2**20 + 5, 2]) + request_ids(1, [5, 2**20 + 9, 7, 2**20 + 5])
    ).encode()
    fields = mooncake_stream.parse_body(body)
    assert fields is not None
    assert fields["block_ids"].tolist() == [0, 1, 2, 1, 3, 4, 0, 2]
    assert fields["n_blocks"] == 5
    assert fields["offsets"].tolist() == [0, 4, 8]


def request_ids(i: int, ids: list[int]) -> str:
    return f'{{"timestamp": {i}, "input_length": 5, "output_length": 1, "hash_ids": {ids}}}\n'


def test_sparse_ids_are_left_to_the_exact_parser() -> None:
    # 2**31 - 1 does not fit a dense int32 table; 10**12 would need a table of 4 TB; 2**22
    # with 2 ids is past 8 * (ids) + 2**20 (here at most 8 * 50 bytes + 2**20).
    for big in (2**31 - 1, 10**12, 2**22):
        assert mooncake_stream.parse_body(request_ids(0, [1, big]).encode()) is None


@pytest.mark.parametrize("chunk", [4, 7, 64, 1000])
@pytest.mark.parametrize("gz", [False, True], ids=["plain", "gzip"])
@pytest.mark.parametrize("bom", [False, True], ids=["", "bom"])
def test_pieces_of_any_size_give_the_same_arrays(
    chunk: int, gz: bool, bom: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Lines longer than a piece (the buffer grows), carried line ends, a last line without a
    newline, blank lines: the result is the exact parser's whatever the piece size."""
    sessions = [None, '"s1"', "3", '"\u00e9"', "null", "3", '"s1"']
    body = "".join(
        request_ids(i, list(range(i, 3 * i))).replace("}\n", "")
        + (f', "session_id": {sessions[i % 7]}' if sessions[i % 7] else "")
        + "}\n"
        + ("\n \r\n" if i % 5 == 0 else "")
        for i in range(40)
    ).encode()[:-1]  # no newline after the last line
    exact = _parse_slow(body, "t")
    data = (b"\xef\xbb\xbf" if bom else b"") + body
    path = tmp_path / "t.jsonl"
    path.write_bytes(gzip.compress(data) if gz else data)
    monkeypatch.setattr(mooncake_stream, "CHUNK", chunk)
    parsed = mooncake_stream.parse(path)
    assert parsed is not None
    assert_same_fields(parsed[0], exact)
    assert parsed[1] == hashlib.sha256(data).hexdigest()
    assert_same_fields(mooncake_stream.parse_body(body), exact)
