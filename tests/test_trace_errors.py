"""Every kind of bad trace file raises TraceError naming the file, the line and the field."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from prefixsim import PrefixSimError, TraceError, load_trace

GOOD = '{"timestamp": 0, "input_length": 1024, "output_length": 7, "hash_ids": [1, 2]}'


@pytest.fixture(autouse=True)
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "cache"
    monkeypatch.setenv("PREFIXSIM_CACHE_DIR", str(path))
    return path


def with_field(name: str, raw_value: str) -> str:
    """GOOD with ``name`` set to the literal JSON text ``raw_value``."""
    obj = json.loads(GOOD)
    obj[name] = "__VALUE__"
    return json.dumps(obj).replace('"__VALUE__"', raw_value)


def without_field(name: str) -> str:
    obj = json.loads(GOOD)
    del obj[name]
    return json.dumps(obj)


# (file content, line, field, message fragments): the bad line is always preceded by good and
# blank lines so the reported line number is checked.
CASES = {
    "invalid JSON": ('{"timestamp": 0, "input_length": 5', 3, None, ["invalid JSON"]),
    "trailing comma": (GOOD[:-1] + ",}", 3, None, ["invalid JSON"]),
    "two objects on one line": (GOOD + " " + GOOD, 3, None, ["invalid JSON", "Extra data"]),
    "object split over two lines": (
        GOOD.replace(', "hash_ids"', ',\n"hash_ids"'),
        3,
        None,
        ["invalid JSON"],
    ),
    "not an object: list": ("[1, 2]", 3, None, ["expected a JSON object", "a list"]),
    "not an object: number": ("5", 3, None, ["expected a JSON object", "5 (an integer)"]),
    "not an object: null": ("null", 3, None, ["expected a JSON object", "got null"]),
    "NaN": (with_field("timestamp", "NaN"), 3, None, ["NaN is not a JSON number"]),
    "Infinity in an ignored key": (
        GOOD[:-1] + ', "x": -Infinity}',
        3,
        None,
        ["-Infinity is not a JSON number"],
    ),
    "Inf in an ignored key": (GOOD[:-1] + ', "x": Inf}', 3, None, ["invalid JSON"]),
    "deep nesting": (
        GOOD[:-1] + ', "x": ' + "[" * 100_000 + "]" * 100_000 + "}",
        3,
        None,
        ["nested too deeply"],
    ),
    "duplicate key": (GOOD[:-1] + ', "input_length": 5}', 3, "input_length", ["more than once"]),
    **{
        f"missing {name}": (without_field(name), 3, name, ["missing", "expected"])
        for name in ("timestamp", "input_length", "output_length", "hash_ids")
    },
    "timestamp true": (with_field("timestamp", "true"), 3, "timestamp", ["true (a boolean)"]),
    "timestamp string": (with_field("timestamp", '"0"'), 3, "timestamp", ['"0" (a string)']),
    "timestamp null": (with_field("timestamp", "null"), 3, "timestamp", ["got null"]),
    "timestamp too large": (with_field("timestamp", "1e400"), 3, "timestamp", ["too large"]),
    "timestamp huge integer": (
        with_field("timestamp", "1" + "0" * 400),
        3,
        "timestamp",
        ["too large"],
    ),
    "hash_ids not a list": (
        with_field("hash_ids", "5"),
        3,
        "hash_ids",
        ["expected a list of integers", "5 (an integer)"],
    ),
    "hash_ids an object": (with_field("hash_ids", "{}"), 3, "hash_ids", ["an object"]),
    "hash_ids null": (with_field("hash_ids", "null"), 3, "hash_ids", ["got null"]),
    "hash_ids with a string": (
        with_field("hash_ids", '[1, "2"]'),
        3,
        "hash_ids",
        ['element 1 is "2" (a string)'],
    ),
    "hash_ids with a float": (
        with_field("hash_ids", "[1, 2.0]"),
        3,
        "hash_ids",
        ["element 1 is 2.0", "not an integer"],
    ),
    "hash_ids with an exponent": (
        with_field("hash_ids", "[1e3]"),
        3,
        "hash_ids",
        ["element 0 is 1000.0"],
    ),
    "hash_ids with true": (
        with_field("hash_ids", "[0, 1, 2, true]"),
        3,
        "hash_ids",
        ["expected a list of integers, element 3 is true (a boolean)"],
    ),
    "hash_ids with null": (
        with_field("hash_ids", "[0, null]"),
        3,
        "hash_ids",
        ["element 1 is null"],
    ),
    "hash_ids nested list": (
        with_field("hash_ids", "[[1]]"),
        3,
        "hash_ids",
        ["element 0 is a list"],
    ),
    "input_length -1": (with_field("input_length", "-1"), 3, "input_length", ["-1 (negative)"]),
    "input_length 1.5": (with_field("input_length", "1.5"), 3, "input_length", ["1.5"]),
    "input_length 3.0": (with_field("input_length", "3.0"), 3, "input_length", ["3.0", "not an"]),
    "input_length 1e3": (with_field("input_length", "1e3"), 3, "input_length", ["1000.0"]),
    "input_length true": (with_field("input_length", "true"), 3, "input_length", ["true"]),
    "input_length false": (with_field("input_length", "false"), 3, "input_length", ["false"]),
    "input_length string": (with_field("input_length", '"12"'), 3, "input_length", ['"12"']),
    "input_length null": (with_field("input_length", "null"), 3, "input_length", ["null"]),
    "input_length 2**64": (
        with_field("input_length", str(2**64)),
        3,
        "input_length",
        [str(2**64), "larger than 2**63 - 1"],
    ),
    "output_length -1": (with_field("output_length", "-1"), 3, "output_length", ["negative"]),
    "output_length true": (with_field("output_length", "true"), 3, "output_length", ["boolean"]),
}


@pytest.mark.parametrize("compress", [False, True], ids=["plain", "gzip"])
@pytest.mark.parametrize(("bad_line", "line", "field", "fragments"), CASES.values(), ids=CASES)
def test_bad_line(
    tmp_path: Path,
    bad_line: str,
    line: int,
    field: str | None,
    fragments: list[str],
    compress: bool,
) -> None:
    data = (GOOD + "\n\n" + bad_line + "\n" + GOOD + "\n").encode()
    path = tmp_path / "bad.jsonl"
    path.write_bytes(gzip.compress(data) if compress else data)
    with pytest.raises(TraceError) as info:
        load_trace(path)
    err = info.value
    assert err.path == str(path)
    assert err.line == line
    assert err.field == field
    for fragment in fragments:
        assert fragment in err.message
    assert "expected" in err.message
    where = f"{path}:{line}: " + ("" if field is None else f"{field}: ")
    assert str(err) == where + err.message


def test_invalid_utf8(tmp_path: Path) -> None:
    path = tmp_path / "latin1.jsonl"
    path.write_bytes((GOOD + "\n").encode() + GOOD[:-1].encode() + b', "note": "caf\xe9"}\n')
    with pytest.raises(TraceError, match="not valid UTF-8") as info:
        load_trace(path)
    assert (info.value.line, info.value.field) == (2, None)


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        pytest.param(b"", "the file is empty", id="empty"),
        pytest.param(b"\n  \n\t\r\n\n", "only blank lines", id="blank-lines"),
        pytest.param(gzip.compress(b""), "the file is empty", id="empty-gzip"),
    ],
)
def test_no_requests(tmp_path: Path, content: bytes, fragment: str) -> None:
    path = tmp_path / "empty.jsonl"
    path.write_bytes(content)
    with pytest.raises(TraceError) as info:
        load_trace(path)
    err = info.value
    assert (err.path, err.line, err.field) == (str(path), None, None)
    assert "no requests" in err.message
    assert fragment in err.message
    assert str(err) == f"{path}: {err.message}"


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda gz: gz[: len(gz) // 2], id="truncated"),
        pytest.param(lambda gz: gz[:-8] + bytes(8), id="bad-crc"),
        pytest.param(lambda gz: gz[:12] + bytes(40) + gz[52:], id="corrupt-stream"),
        pytest.param(lambda gz: gz[:2], id="magic-only"),
    ],
)
def test_damaged_gzip(tmp_path: Path, damage) -> None:
    path = tmp_path / "t.jsonl.gz"
    path.write_bytes(damage(gzip.compress(((GOOD + "\n") * 200).encode())))
    with pytest.raises(TraceError, match="gzip") as info:
        load_trace(path)
    err = info.value
    assert (err.path, err.line, err.field) == (str(path), None, None)
    assert "expected a complete gzip stream" in err.message


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nope.jsonl"
    with pytest.raises(TraceError, match="no such file") as info:
        load_trace(path)
    err = info.value
    assert (err.path, err.line, err.field) == (str(path), None, None)
    assert "conversation" in err.message  # tells which bundled names exist


def test_missing_file_keeps_the_name_as_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(TraceError) as info:
        load_trace("conversaton.jsonl")
    assert info.value.path == "conversaton.jsonl"


def test_directory(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="is a directory") as info:
        load_trace(tmp_path)
    assert (info.value.path, info.value.line, info.value.field) == (str(tmp_path), None, None)


def test_errors_are_not_cached(tmp_path: Path, cache_dir: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(GOOD + "\n" + with_field("input_length", "-1") + "\n")
    for _ in range(2):
        with pytest.raises(TraceError, match="negative"):
            load_trace(path)
    assert not cache_dir.exists() or not any(cache_dir.iterdir())


def test_trace_error_is_a_user_error() -> None:
    err = TraceError("f.jsonl", "bad", line=3, field="hash_ids")
    assert isinstance(err, PrefixSimError)
    assert isinstance(err, ValueError)
    assert str(err) == "f.jsonl:3: hash_ids: bad"
