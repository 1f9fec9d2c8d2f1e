"""The ordinary reader of Mooncake FAST'25 JSONL (``hash_ids``), for files held in memory.

:func:`_parse_jsonl` parses with pyarrow when the file looks ordinary (through
:func:`.jsonl.read_json_screened`), with the compiled strict parser of :mod:`.mooncake_stream`
when it has session ids, and falls back to an exact line-by-line parser (stdlib :mod:`json`)
whenever those fail, could have altered a value, or could have accepted something that is not
one valid request per line; the exact parser is the reference and either reports the first bad
line or yields the same fields. Block hashes are remapped to dense ids in order of first
appearance (:func:`_dense_ids`).
"""

from __future__ import annotations

import codecs
import math
from typing import Any

import numpy as np

from .._exact import INT64_MAX
from ..errors import TraceError
from . import mooncake_stream
from .jsonl import (
    _as_numpy,
    _decode_line,
    _describe,
    _int_text,
    _Lines,
    _non_blank_lines,
    read_json_screened,
)
from .mooncake_stream import _dense_ids
from .sessions import SESSION_KEY, check_session_id, dense_session_ids

_FIELDS = ("timestamp", "input_length", "output_length", "hash_ids")
_EXPECTED = {
    "timestamp": "a finite number (arrival time, ms)",
    "input_length": "a non-negative integer (prompt tokens)",
    "output_length": "a non-negative integer (output tokens)",
    "hash_ids": "a list of integers (block hashes)",
}


def _parse_jsonl(data: bytes, display: str) -> dict[str, Any]:
    """The :class:`Trace` fields but ``name`` and ``sha256`` from uncompressed JSONL bytes."""
    body = data[len(codecs.BOM_UTF8) :] if data.startswith(codecs.BOM_UTF8) else data
    # Session ids: pyarrow would need a typed column for a string-or-integer field, so files
    # with the key take the compiled strict parser (which reads them) before the exact one.
    if SESSION_KEY in body:
        fields = mooncake_stream.parse_body(body)
        return fields if fields is not None else _parse_slow(body, display)
    lines = _non_blank_lines(body)
    fields = _parse_fast(body, lines)
    return fields if fields is not None else _parse_slow(body, display, lines)


def _columns(
    timestamps: Any,
    input_lengths: Any,
    output_lengths: Any,
    lengths: Any,
    block_ids: np.ndarray,
    n_blocks: int,
    line_numbers: Any,
) -> dict[str, Any]:
    """The parsed fields as owned arrays of the :class:`Trace` dtypes (``lengths``: ids per
    request; array-likes are copied, so pyarrow-backed views do not outlive the parse)."""
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, dtype=np.int64, out=offsets[1:])
    return {
        "timestamps": np.array(timestamps, dtype=np.float64),
        "input_lengths": np.array(input_lengths, dtype=np.int64),
        "output_lengths": np.array(output_lengths, dtype=np.int64),
        "offsets": offsets,
        "block_ids": np.asarray(block_ids, dtype=np.int32),
        "n_blocks": int(n_blocks),
        "line_numbers": np.array(line_numbers, dtype=np.int64),
        "session_ids": None,  # the exact parser fills it in when the file has session ids
    }


# -- fast path: pyarrow ------------------------------------------------------------------------


def _parse_fast(body: bytes, lines: _Lines | None = None) -> dict[str, Any] | None:
    """Parse with pyarrow (:func:`.jsonl.read_json_screened`), or None if the exact path must
    decide: besides what the screen refuses, missing keys and nulls, negative lengths and
    non-finite timestamps."""
    kinds = ("float64", "int64", "int64", "list<int64>")
    read = read_json_screened(body, list(zip(_FIELDS, kinds, strict=True)), lines)
    if read is None:
        return None
    table, lines = read
    line_numbers = lines.numbers
    columns = [table.column(name) for name in _FIELDS]
    if any(column.null_count for column in columns):
        return None  # missing keys or explicit nulls
    hash_ids = columns[3].combine_chunks()
    if hash_ids.values.null_count:
        return None
    timestamps, input_lengths, output_lengths = (
        _as_numpy(c.combine_chunks(), np.float64 if i == 0 else np.int64)
        for i, c in enumerate(columns[:3])
    )
    if (input_lengths < 0).any() or (output_lengths < 0).any():
        return None
    if not np.isfinite(timestamps).all():
        return None
    # Not ListArray.flatten(): it imports pyarrow.compute (~50 ms) on first use.
    offsets = _as_numpy(hash_ids.offsets, np.int32)
    flat_ids = _as_numpy(hash_ids.values, np.int64)[offsets[0] : offsets[-1]]
    block_ids, n_blocks = _dense_ids(flat_ids)
    return _columns(
        timestamps,
        input_lengths,
        output_lengths,
        np.diff(offsets),
        block_ids,
        n_blocks,
        line_numbers,
    )


# -- exact path: stdlib json, line by line -----------------------------------------------------


def _parse_slow(body: bytes, display: str, lines: _Lines | None = None) -> dict[str, Any]:
    """Exact reference parser: the first invalid line raises :class:`TraceError`."""
    timestamps: list[float] = []
    input_lengths: list[int] = []
    output_lengths: list[int] = []
    lengths: list[int] = []
    hash_ids: list[int] = []
    line_numbers: list[int] = []
    sessions: list[tuple[str, Any] | None] = []
    if lines is None:
        lines = _non_blank_lines(body)
    spans = zip(lines.numbers.tolist(), lines.starts.tolist(), lines.ends.tolist(), strict=True)
    for line_number, start, end in spans:
        obj = _decode_line(body[start:end], display, line_number)
        ts, n_in, n_out, ids = _check_request(obj, display, line_number)
        sessions.append(check_session_id(obj, display, line_number))
        timestamps.append(ts)
        input_lengths.append(n_in)
        output_lengths.append(n_out)
        lengths.append(len(ids))
        hash_ids.extend(ids)
        line_numbers.append(line_number)
    if not line_numbers:
        what = "is empty" if not body else "has only blank lines"
        raise TraceError(
            display, f"no requests: the file {what}; expected one JSON object per line"
        )
    # Exact Python ints as keys: any size, no collision. dict keeps first-insertion order.
    first_seen = dict.fromkeys(hash_ids)
    dense = dict(zip(first_seen, range(len(first_seen)), strict=True))
    block_ids = np.fromiter(map(dense.__getitem__, hash_ids), dtype=np.int32, count=len(hash_ids))
    fields = _columns(
        timestamps, input_lengths, output_lengths, lengths, block_ids, len(dense), line_numbers
    )
    fields["session_ids"] = dense_session_ids(sessions)
    return fields


def _check_request(obj: Any, display: str, line: int) -> tuple[float, int, int, list[int]]:
    """The four fields of one decoded line, checked; raises :class:`TraceError`."""
    if not isinstance(obj, dict):
        raise TraceError(
            display,
            f"expected a JSON object (one request per line), got {_describe(obj)}",
            line=line,
        )
    duplicates: frozenset[str] = getattr(obj, "duplicates", frozenset())
    for name in _FIELDS:
        if name not in obj:
            raise TraceError(display, f"missing; expected {_EXPECTED[name]}", line=line, field=name)
        if name in duplicates:
            raise TraceError(
                display, "key given more than once; expected it once", line=line, field=name
            )

    def fail(name: str, got: str) -> TraceError:
        return TraceError(display, f"expected {_EXPECTED[name]}, got {got}", line=line, field=name)

    ts = obj["timestamp"]
    if type(ts) is int:
        try:
            ts = float(ts)
        except OverflowError:
            raise fail("timestamp", "an integer too large for a 64-bit float") from None
    elif type(ts) is not float:
        raise fail("timestamp", _describe(ts))
    if not math.isfinite(ts):
        raise fail("timestamp", "a number too large for a 64-bit float")

    counts = []
    for name in ("input_length", "output_length"):
        value = obj[name]
        if type(value) is not int:
            raise fail(name, _describe(value))
        if value < 0:
            raise fail(name, f"{_int_text(value)} (negative)")
        if value > INT64_MAX:
            raise fail(name, f"{_int_text(value)} (larger than 2**63 - 1)")
        counts.append(value)

    ids = obj["hash_ids"]
    if type(ids) is not list:
        raise fail("hash_ids", _describe(ids))
    if not set(map(type, ids)) <= {int}:
        i, bad = next((i, h) for i, h in enumerate(ids) if type(h) is not int)
        raise TraceError(
            display,
            f"expected a list of integers, element {i} is {_describe(bad)}",
            line=line,
            field="hash_ids",
        )
    return ts, counts[0], counts[1], ids
