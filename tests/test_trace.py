"""Trace loading: the bundled trace, gzip/plain, blank lines, wide ids, the cache, oddities.

Expected values are derived here independently of the loader (stdlib ``gzip`` + ``json`` per
line, a dict for the dense remap), or written by hand.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from prefixsim import BUNDLED_TRACES, ParameterError, Trace, _trace_cache, load_trace, oddities
from prefixsim import trace as trace_module
from prefixsim.trace import _parse_fast, _parse_slow, bundled_trace_path

BUNDLED_SHA256 = "b8cbb061a85206d729d91cdc2981f43c9e0d99209dce588d3af5f7934408b9df"
ARRAY_FIELDS = (
    "timestamps",
    "input_lengths",
    "output_lengths",
    "offsets",
    "block_ids",
    "line_numbers",
)
DTYPES = {
    "timestamps": np.float64,
    "input_lengths": np.int64,
    "output_lengths": np.int64,
    "offsets": np.int64,
    "block_ids": np.int32,
    "line_numbers": np.int64,
}


@pytest.fixture(autouse=True)
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test gets its own cache directory: never the user's."""
    path = tmp_path / "cache"
    monkeypatch.setenv("PREFIXSIM_CACHE_DIR", str(path))
    return path


@pytest.fixture(scope="module")
def bundled_bytes() -> bytes:
    return gzip.decompress(bundled_trace_path("conversation").read_bytes())


@pytest.fixture(scope="module")
def bundled_requests(bundled_bytes: bytes) -> list[dict]:
    return [json.loads(line) for line in bundled_bytes.decode().splitlines() if line.strip()]


def assert_same_trace(a: Trace, b: Trace) -> None:
    """Same content (names may differ)."""
    assert a.sha256 == b.sha256
    assert a.n_blocks == b.n_blocks
    for name in ARRAY_FIELDS:
        x, y = getattr(a, name), getattr(b, name)
        assert x.dtype == y.dtype == DTYPES[name], name
        np.testing.assert_array_equal(x, y, err_msg=name)


def assert_same_fields(a: dict, b: dict) -> None:
    """Same parser output (``_parse_fast`` / ``_parse_slow`` dicts)."""
    assert a.keys() == b.keys()
    assert a["n_blocks"] == b["n_blocks"]
    for name in ARRAY_FIELDS:
        assert a[name].dtype == b[name].dtype == DTYPES[name], name
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)


def dense_by_first_use(hash_lists: list[list[int]]) -> tuple[list[int], int]:
    ids: dict[int, int] = {}
    flat = []
    for hash_ids in hash_lists:
        for h in hash_ids:
            if h not in ids:
                ids[h] = len(ids)
            flat.append(ids[h])
    return flat, len(ids)


def write(path: Path, text: str | bytes, *, compress: bool = False) -> Path:
    data = text.encode() if isinstance(text, str) else text
    path.write_bytes(gzip.compress(data) if compress else data)
    return path


def request(hash_ids: list[int], input_length: int = 1024, **extra: object) -> str:
    return json.dumps(
        {
            "timestamp": 0,
            "input_length": input_length,
            "output_length": 1,
            "hash_ids": hash_ids,
            **extra,
        }
    )


# -- the bundled trace -------------------------------------------------------------------------


def test_bundled_trace_summary() -> None:
    trace = load_trace("conversation", use_cache=False)
    assert trace.name == "conversation"
    assert trace.sha256 == BUNDLED_SHA256
    assert trace.n_requests == 12_031
    assert trace.n_accesses == 288_500
    assert trace.n_blocks == 182_790
    assert trace.input_lengths[0] == 6758
    np.testing.assert_array_equal(trace.request_blocks(0), np.arange(14))
    assert set(BUNDLED_TRACES) == {"conversation"}


def test_bundled_trace_matches_plain_json_reading(
    bundled_bytes: bytes, bundled_requests: list[dict]
) -> None:
    trace = load_trace("conversation", use_cache=False)
    assert trace.sha256 == hashlib.sha256(bundled_bytes).hexdigest()
    reqs = bundled_requests
    flat, n_blocks = dense_by_first_use([r["hash_ids"] for r in reqs])
    assert trace.n_blocks == n_blocks
    np.testing.assert_array_equal(trace.block_ids, flat)
    np.testing.assert_array_equal(trace.timestamps, [float(r["timestamp"]) for r in reqs])
    np.testing.assert_array_equal(trace.input_lengths, [r["input_length"] for r in reqs])
    np.testing.assert_array_equal(trace.output_lengths, [r["output_length"] for r in reqs])
    np.testing.assert_array_equal(
        trace.offsets, np.cumsum([0] + [len(r["hash_ids"]) for r in reqs])
    )
    np.testing.assert_array_equal(trace.line_numbers, np.arange(1, len(reqs) + 1))
    for name in ARRAY_FIELDS:
        assert getattr(trace, name).dtype == DTYPES[name]


def test_bundled_trace_takes_the_fast_path_and_both_paths_agree(bundled_bytes: bytes) -> None:
    fast = _parse_fast(bundled_bytes)
    assert fast is not None, "the bundled trace must not need the slow path"
    assert_same_fields(fast, _parse_slow(bundled_bytes, "conversation"))


@pytest.mark.parametrize("block_size", [512, 300])
def test_bundled_trace_oddities_match_a_plain_loop(
    bundled_requests: list[dict], block_size: int
) -> None:
    expected = dict.fromkeys(
        [
            "duplicate_hash_in_request",
            "hash_ids_longer_than_input",
            "hash_ids_shorter_than_input",
            "zero_input_length",
            "empty_hash_ids",
        ],
        0,
    )
    for r in bundled_requests:
        ids, length = r["hash_ids"], r["input_length"]
        needed = (length + block_size - 1) // block_size
        expected["duplicate_hash_in_request"] += len(set(ids)) < len(ids)
        expected["hash_ids_longer_than_input"] += len(ids) > needed
        expected["hash_ids_shorter_than_input"] += len(ids) < needed
        expected["zero_input_length"] += length == 0
        expected["empty_hash_ids"] += not ids
    assert oddities(load_trace("conversation"), block_size) == expected


def test_bundled_name_is_shadowed_by_an_existing_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "conversation", request([7, 8]) + "\n")
    trace = load_trace("conversation")
    assert trace.name == "conversation"
    assert trace.n_requests == 1
    assert trace.sha256 != BUNDLED_SHA256


def test_bundled_name_wins_over_a_directory_of_that_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "conversation").mkdir()
    assert load_trace("conversation").sha256 == BUNDLED_SHA256


# -- file handling -----------------------------------------------------------------------------


def test_gzip_and_plain_give_the_same_trace(tmp_path: Path) -> None:
    text = "\n".join(request([i, i + 1, 2**40 + i]) for i in range(5)) + "\n"
    plain = write(tmp_path / "t.jsonl", text)
    gz = write(tmp_path / "t.jsonl.gz", text, compress=True)
    gz_no_suffix = write(tmp_path / "t.data", text, compress=True)  # detected by magic bytes
    traces = [load_trace(p, use_cache=False) for p in (plain, gz, gz_no_suffix)]
    for t in traces[1:]:
        assert_same_trace(traces[0], t)
    assert traces[0].sha256 == hashlib.sha256(text.encode()).hexdigest()
    assert [t.name for t in traces] == [str(plain), str(gz), str(gz_no_suffix)]


def test_name_is_the_path_as_given(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "t.jsonl", request([1]) + "\n")
    assert load_trace("t.jsonl").name == "t.jsonl"
    assert load_trace(Path("t.jsonl")).name == "t.jsonl"
    assert load_trace("./t.jsonl").name == "./t.jsonl"


def test_blank_lines_are_skipped_and_line_numbers_kept(tmp_path: Path) -> None:
    text = "\n".join(["", request([1]), "   ", "\t", request([2]), "", " " + request([1]) + "  "])
    text += "\n\n"
    trace = load_trace(write(tmp_path / "t.jsonl", text), use_cache=False)
    np.testing.assert_array_equal(trace.line_numbers, [2, 5, 7])
    np.testing.assert_array_equal(trace.block_ids, [0, 1, 0])
    assert trace.n_blocks == 2
    assert_same_fields(_parse_fast(text.encode()), _parse_slow(text.encode(), "t"))


def test_crlf_line_endings(tmp_path: Path) -> None:
    lf = request([1, 2]) + "\n" + request([2, 3]) + "\n"
    crlf = lf.replace("\n", "\r\n")
    a = load_trace(write(tmp_path / "lf.jsonl", lf), use_cache=False)
    b = load_trace(write(tmp_path / "crlf.jsonl", crlf), use_cache=False)
    for name in ARRAY_FIELDS:
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))


def test_a_utf8_byte_order_mark_is_accepted(tmp_path: Path) -> None:
    text = request([5, 6]) + "\n"
    trace = load_trace(write(tmp_path / "bom.jsonl", b"\xef\xbb\xbf" + text.encode()))
    np.testing.assert_array_equal(trace.block_ids, [0, 1])
    assert trace.sha256 == hashlib.sha256(b"\xef\xbb\xbf" + text.encode()).hexdigest()


def test_extra_keys_and_values_are_ignored(tmp_path: Path) -> None:
    text = (
        request([1, 2], extra={"nested": [1, None, True]}, note="café")
        + "\n"
        + request([2], extra=3.5)
        + "\n"
    )
    trace = load_trace(write(tmp_path / "t.jsonl", text), use_cache=False)
    np.testing.assert_array_equal(trace.block_ids, [0, 1, 1])
    assert_same_fields(_parse_fast(text.encode()), _parse_slow(text.encode(), "t"))


def test_empty_hash_ids_and_float_timestamps(tmp_path: Path) -> None:
    text = (
        '{"timestamp": 1.25, "input_length": 0, "output_length": 0, "hash_ids": []}\n'
        '{"timestamp": 3, "input_length": 5, "output_length": 2, "hash_ids": [9]}\n'
    )
    trace = load_trace(write(tmp_path / "t.jsonl", text), use_cache=False)
    np.testing.assert_array_equal(trace.timestamps, [1.25, 3.0])
    np.testing.assert_array_equal(trace.offsets, [0, 0, 1])
    np.testing.assert_array_equal(trace.block_ids, [0])


def test_negative_and_wider_than_64_bit_ids_stay_distinct(tmp_path: Path) -> None:
    ids = [2**64, 2**64 + 1, -(2**70), 0, -1, 2**64, 0, 2**70, -(2**70), 2**63, -(2**63) - 1]
    # Same low 64 bits, different high bits: must not collide.
    ids += [5, 5 + 2**64, 5 - 2**64, 5 + 2**65]
    text = request(ids[:6]) + "\n" + request(ids[6:]) + "\n"
    assert _parse_fast(text.encode()) is None  # beyond int64: the exact path only
    trace = load_trace(write(tmp_path / "big.jsonl", text), use_cache=False)
    expected, n_blocks = dense_by_first_use([ids])
    assert expected[:7] == [0, 1, 2, 3, 4, 0, 3]
    np.testing.assert_array_equal(trace.block_ids, expected)
    assert trace.n_blocks == n_blocks == len(set(ids)) == 12
    np.testing.assert_array_equal(trace.offsets, [0, 6, len(ids)])


def test_integers_longer_than_python_int_string_limit(tmp_path: Path) -> None:
    # More digits than int(str) accepts by default (sys.get_int_max_str_digits() is 4300).
    huge, huge_plus_1 = "1" + "0" * 5000, "1" + "0" * 4999 + "1"
    text = request([]).replace("[]", f"[{huge}, {huge_plus_1}, {huge}, 1]")
    trace = load_trace(write(tmp_path / "huge.jsonl", text), use_cache=False)
    np.testing.assert_array_equal(trace.block_ids, [0, 1, 0, 2])


def test_int64_limits_take_the_fast_path() -> None:
    ids = [2**63 - 1, -(2**63), 0, -1, 2**63 - 1]
    text = (request(ids) + "\n").encode()
    fast = _parse_fast(text)
    assert fast is not None
    assert_same_fields(fast, _parse_slow(text, "t"))
    np.testing.assert_array_equal(fast["block_ids"], [0, 1, 2, 3, 0])


def test_deep_nesting_in_an_ignored_key_takes_the_exact_path(tmp_path: Path) -> None:
    line = request([1])[:-1] + ', "x": ' + "[" * 300 + "]" * 300 + "}"
    assert _parse_fast(line.encode()) is None
    trace = load_trace(write(tmp_path / "deep.jsonl", line), use_cache=False)
    np.testing.assert_array_equal(trace.block_ids, [0])


# -- fast path == exact path on valid input (Hypothesis) ---------------------------------------

int64s = st.integers(-(2**63), 2**63 - 1)
small_ids = st.integers(-50, 200)
json_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
)
extras = st.dictionaries(
    st.sampled_from(["extra", "note", "ts", "ids"]),
    st.recursive(json_scalars, lambda inner: st.lists(inner, max_size=3), max_leaves=5),
    max_size=2,
)
requests = st.fixed_dictionaries(
    {
        "timestamp": st.integers(-(2**80), 2**80)
        | st.floats(allow_nan=False, allow_infinity=False),
        "input_length": st.integers(0, 2**63 - 1),
        "output_length": st.integers(0, 2**63 - 1),
        "hash_ids": st.lists(small_ids | int64s, max_size=12),
    }
)


@st.composite
def jsonl_files(draw: st.DrawFn) -> tuple[bytes, list[dict], list[int]]:
    """Valid JSONL bytes, the requests written, and their 1-based line numbers."""
    reqs = draw(st.lists(requests, min_size=1, max_size=12))
    newline = draw(st.sampled_from(["\n", "\r\n"]))
    lines: list[str] = []
    line_numbers = []
    for r in reqs:
        lines.extend(draw(st.lists(st.sampled_from(["", " ", "\t", "\r"]), max_size=2)))
        obj = dict(r, **draw(extras))
        keys = draw(st.permutations(list(obj)))
        obj = {k: obj[k] for k in keys}
        separators = draw(st.sampled_from([(",", ":"), (", ", ": ")]))
        text = json.dumps(obj, separators=separators, ensure_ascii=draw(st.booleans()))
        lines.append(draw(st.sampled_from(["", " "])) + text + draw(st.sampled_from(["", " "])))
        line_numbers.append(len(lines))
    data = newline.join(lines) + draw(st.sampled_from(["", newline]))
    return data.encode(), reqs, line_numbers


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(jsonl_files())
def test_fast_path_equals_exact_path(case: tuple[bytes, list[dict], list[int]]) -> None:
    data, reqs, line_numbers = case
    slow = _parse_slow(data, "t")
    flat, n_blocks = dense_by_first_use([r["hash_ids"] for r in reqs])
    np.testing.assert_array_equal(slow["block_ids"], flat)
    assert slow["n_blocks"] == n_blocks
    np.testing.assert_array_equal(slow["line_numbers"], line_numbers)
    np.testing.assert_array_equal(slow["timestamps"], [float(r["timestamp"]) for r in reqs])
    np.testing.assert_array_equal(slow["input_lengths"], [r["input_length"] for r in reqs])
    np.testing.assert_array_equal(slow["output_lengths"], [r["output_length"] for r in reqs])
    fast = _parse_fast(data)
    if b"NaN" not in data and b"Inf" not in data:  # strings in extra keys may contain these
        assert fast is not None
    if fast is not None:
        assert_same_fields(fast, slow)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.lists(st.integers(0, 10**6) | int64s, max_size=30), min_size=1, max_size=8))
def test_dense_remap_is_first_appearance_order(hash_lists: list[list[int]]) -> None:
    data = "\n".join(request(ids) for ids in hash_lists).encode()
    fast = _parse_fast(data)
    assert fast is not None
    flat, n_blocks = dense_by_first_use(hash_lists)
    np.testing.assert_array_equal(fast["block_ids"], flat)
    assert fast["n_blocks"] == n_blocks


# -- cache -------------------------------------------------------------------------------------


class ParseCounter:
    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls = 0
        self._parse = trace_module._parse_jsonl
        monkeypatch.setattr(trace_module, "_parse_jsonl", self)

    def __call__(self, data: bytes, display: str) -> dict:
        self.calls += 1
        return self._parse(data, display)


@pytest.fixture
def parses(monkeypatch: pytest.MonkeyPatch) -> ParseCounter:
    return ParseCounter(monkeypatch)


@pytest.fixture
def trace_file(tmp_path: Path) -> Path:
    text = "\n".join(request([i % 3, i, 2**50 + i], input_length=100 + i) for i in range(20))
    return write(tmp_path / "t.jsonl.gz", text + "\n", compress=True)


def test_second_load_comes_from_the_cache(
    trace_file: Path, parses: ParseCounter, cache_dir: Path
) -> None:
    first = load_trace(trace_file)
    assert parses.calls == 1
    assert len(list(cache_dir.glob("*.npz"))) == 1
    second = load_trace(trace_file)
    assert parses.calls == 1
    assert_same_trace(first, second)
    assert second.name == str(trace_file)


def test_renamed_or_touched_file_still_hits(
    trace_file: Path, parses: ParseCounter, tmp_path: Path
) -> None:
    load_trace(trace_file)
    moved = trace_file.rename(tmp_path / "renamed.bin")
    trace = load_trace(moved)
    assert parses.calls == 1
    assert trace.name == str(moved)  # the name comes from this call, not from the cache
    os.utime(moved, (1_000_000, 1_000_000))
    moved.write_bytes(moved.read_bytes())  # rewritten, same content
    load_trace(moved)
    assert parses.calls == 1


def test_changing_one_byte_misses(trace_file: Path, parses: ParseCounter, tmp_path: Path) -> None:
    text = gzip.decompress(trace_file.read_bytes())
    plain = write(tmp_path / "t.jsonl", text)
    load_trace(plain)
    changed = write(
        tmp_path / "t2.jsonl", text.replace(b'"output_length": 1', b'"output_length": 2', 1)
    )
    trace = load_trace(changed)
    assert parses.calls == 2
    assert trace.output_lengths[0] == 2


def test_gzip_and_plain_copies_have_separate_entries_but_the_same_sha256(
    trace_file: Path, tmp_path: Path, cache_dir: Path
) -> None:
    plain = write(tmp_path / "t.jsonl", gzip.decompress(trace_file.read_bytes()))
    a, b = load_trace(trace_file), load_trace(plain)
    assert_same_trace(a, b)
    assert len(list(cache_dir.glob("*.npz"))) == 2  # keyed by raw bytes


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda p: p.write_bytes(b"not a zip file"), id="garbage"),
        pytest.param(lambda p: p.write_bytes(p.read_bytes()[:200]), id="truncated"),
        pytest.param(lambda p: p.write_bytes(b""), id="empty"),
    ],
)
def test_a_corrupt_cache_file_is_ignored_and_rewritten(
    damage, trace_file: Path, parses: ParseCounter, cache_dir: Path
) -> None:
    expected = load_trace(trace_file)
    (entry,) = cache_dir.glob("*.npz")
    damage(entry)
    assert_same_trace(load_trace(trace_file), expected)
    assert parses.calls == 2
    assert_same_trace(load_trace(trace_file), expected)  # rewritten: hits again
    assert parses.calls == 2


def test_an_inconsistent_cache_entry_is_ignored(
    trace_file: Path, parses: ParseCounter, cache_dir: Path
) -> None:
    expected = load_trace(trace_file)
    (entry,) = cache_dir.glob("*.npz")
    with np.load(entry) as npz:
        fields = dict(npz)
    fields["block_ids"] = fields["block_ids"] + fields["n_blocks"]  # out of range
    with entry.open("wb") as f:
        np.savez(f, **fields)
    assert_same_trace(load_trace(trace_file), expected)
    assert parses.calls == 2


def test_a_new_format_version_misses(
    trace_file: Path, parses: ParseCounter, cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    load_trace(trace_file)
    monkeypatch.setattr(_trace_cache, "FORMAT_VERSION", "some-other-version")
    load_trace(trace_file)
    assert parses.calls == 2
    assert len(list(cache_dir.glob("*.npz"))) == 2


def test_an_entry_stored_for_other_bytes_is_ignored(
    trace_file: Path, parses: ParseCounter, tmp_path: Path
) -> None:
    load_trace(trace_file)
    other = write(tmp_path / "other.jsonl", request([42]) + "\n")
    other_key = hashlib.sha256(other.read_bytes()).hexdigest()
    shutil.copyfile(
        _trace_cache.cache_path(hashlib.sha256(trace_file.read_bytes()).hexdigest()),
        _trace_cache.cache_path(other_key),
    )  # an entry under the wrong name
    trace = load_trace(other)
    assert parses.calls == 2
    assert trace.n_requests == 1


def test_unwritable_cache_dir_is_not_an_error(
    trace_file: Path, parses: ParseCounter, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = write(tmp_path / "a-file", "")
    monkeypatch.setenv("PREFIXSIM_CACHE_DIR", str(blocker / "cache"))  # under a regular file
    a = load_trace(trace_file)
    b = load_trace(trace_file)
    assert_same_trace(a, b)
    assert parses.calls == 2


def test_use_cache_false_neither_reads_nor_writes(
    trace_file: Path, parses: ParseCounter, cache_dir: Path
) -> None:
    load_trace(trace_file, use_cache=False)
    assert not cache_dir.exists() or not any(cache_dir.iterdir())
    load_trace(trace_file)
    load_trace(trace_file, use_cache=False)
    assert parses.calls == 3


def test_no_temporary_files_are_left_behind(trace_file: Path, cache_dir: Path) -> None:
    load_trace(trace_file)
    assert [p.suffix for p in cache_dir.iterdir()] == [".npz"]


def test_cache_dir_resolution(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PREFIXSIM_CACHE_DIR", str(tmp_path / "explicit"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert _trace_cache.cache_dir() == tmp_path / "explicit"
    monkeypatch.delenv("PREFIXSIM_CACHE_DIR")
    assert _trace_cache.cache_dir() == tmp_path / "xdg" / "prefixsim" / "traces"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert _trace_cache.cache_dir() == tmp_path / "home" / ".cache" / "prefixsim" / "traces"


def test_cached_bundled_trace_equals_parsed(parses: ParseCounter) -> None:
    parsed = load_trace("conversation")
    cached = load_trace("conversation")
    assert parses.calls == 1
    assert cached.name == "conversation"
    assert_same_trace(parsed, cached)


# -- oddities ----------------------------------------------------------------------------------


def test_oddities_on_a_small_trace(tmp_path: Path) -> None:
    lines = [
        request([1, 2], input_length=1024),  # exactly ceil(1024 / 512) = 2: no oddity
        request([1, 2, 1], input_length=1100),  # duplicate; 3 == ceil(1100 / 512)
        request([3, 4, 5], input_length=512),  # longer than input
        request([3], input_length=513),  # shorter than input
        request([], input_length=0),  # empty ids and zero input (0 == ceil(0 / 512))
        request([], input_length=10),  # empty and shorter
        request([6], input_length=0),  # zero input, longer
        request([7, 7, 7, 8, 8], input_length=512 * 5),  # one request with two duplicates
    ]
    trace = load_trace(write(tmp_path / "odd.jsonl", "\n".join(lines)))
    assert oddities(trace, 512) == {
        "duplicate_hash_in_request": 2,
        "hash_ids_longer_than_input": 2,
        "hash_ids_shorter_than_input": 2,
        "zero_input_length": 2,
        "empty_hash_ids": 2,
    }
    assert oddities(trace, 1)["hash_ids_shorter_than_input"] == 6


@pytest.mark.parametrize("block_size", [0, -512, True, 1.5, "512"])
def test_oddities_rejects_bad_block_size(tmp_path: Path, block_size: object) -> None:
    trace = load_trace(write(tmp_path / "t.jsonl", request([1])))
    with pytest.raises(ParameterError, match="block_size"):
        oddities(trace, block_size)  # type: ignore[arg-type]


def test_fast_path_imports_neither_pandas_nor_pyarrow_compute(tmp_path: Path) -> None:
    """Either import costs more than the whole parse of the bundled trace (50-250 ms)."""
    import subprocess
    import sys

    script = (
        "import sys, prefixsim.trace as t\n"
        "before = {m for m in ('pandas', 'pyarrow.compute') if m in sys.modules}\n"
        "assert t._parse_fast(open(sys.argv[1], 'rb').read()) is not None\n"
        "print(sorted({m for m in ('pandas', 'pyarrow.compute') if m in sys.modules} - before))\n"
    )
    path = write(tmp_path / "t.jsonl", request([1, 2]) + "\n" + request([]) + "\n")
    out = subprocess.run(
        [sys.executable, "-c", script, str(path)], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"
