"""JSONL reading shared by the trace formats: the scan for non-blank lines, the screened pyarrow
reader and the exact line decoder.

Every format parses a file two ways: fast (pyarrow, or the compiled Mooncake parser) when the
file looks ordinary, and exactly (stdlib :mod:`json`, line by line) otherwise. The fast path
must never accept what the exact one refuses nor read a value differently, so
:func:`read_json_screened` runs pyarrow only on bodies it cannot misread (valid UTF-8, no
``NaN``/``Inf``, one object per line) and checks its row count; :func:`_decode_line` is the exact
decoder (duplicate keys marked, non-finite constants refused, integers of any size).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import numpy as np

from ..errors import TraceError

_JSON_WS = b" \t\r"  # JSON whitespace other than the newline that ends a line
_MAX_OPEN_PER_LINE = 256
"""Lines with more ``{``/``[`` than this take the exact path (pyarrow accepts any nesting depth
in ignored keys, stdlib json stops near the recursion limit)."""


_SCAN_CHUNK = 1 << 18
"""Bytes scanned at a time by :func:`_non_blank_lines`: its temporary arrays (about 8 bytes per
line of a chunk) stay bounded however many blank lines the file has."""


@dataclass(frozen=True)
class _Lines:
    """The non-blank lines of a body (blank: only spaces, tabs and carriage returns)."""

    numbers: np.ndarray  # int64, 1-based line numbers
    starts: np.ndarray  # int64, offset of each line's first byte
    ends: np.ndarray  # int64, offset one past its last byte (its newline, or the end)
    longest: int
    """Length of the longest line of the body, blank or not."""
    max_open: int
    """Most ``{`` and ``[`` on one line."""


def _non_blank_lines(body: bytes) -> _Lines:
    """Find the non-blank lines, a chunk of whole lines at a time, so that blank lines cost time
    and memory in proportion to their bytes (only non-blank lines are kept)."""
    arr = np.frombuffer(body, dtype=np.uint8)
    n = len(arr)
    numbers, starts, ends = [], [], []
    longest = max_open = 0
    pos, first_line = 0, 1
    while pos < n:
        stop = min(n, pos + _SCAN_CHUNK)
        if stop < n:  # end the chunk after a newline (or after the line that is longer)
            cut = body.rfind(b"\n", pos, stop)
            if cut < 0:
                cut = body.find(b"\n", stop)
            stop = n if cut < 0 else cut + 1
        chunk = arr[pos:stop]
        newlines = np.flatnonzero(chunk == 0x0A)
        line_starts = np.concatenate(([0], newlines + 1))
        line_ends = np.concatenate((newlines, [len(chunk)]))
        if chunk[-1] == 0x0A:  # the empty "line" after the last newline starts the next chunk
            line_starts, line_ends = line_starts[:-1], line_ends[:-1]
        longest = max(longest, int((line_ends - line_starts).max()))
        # Each segment [start_i, start_i+1) is a line plus its newline: never empty, as
        # ufunc.reduceat needs.
        ws = (chunk == 0x20) | (chunk == 0x09) | (chunk == 0x0D) | (chunk == 0x0A)
        keep = np.flatnonzero(~np.logical_and.reduceat(ws, line_starts))
        opening = (chunk == 0x7B) | (chunk == 0x5B)
        if np.count_nonzero(opening) > _MAX_OPEN_PER_LINE:  # else no line can have more
            per_line = np.add.reduceat(opening, line_starts, dtype=np.int64)
            max_open = max(max_open, int(per_line.max()))
        numbers.append(first_line + keep)
        starts.append(pos + line_starts[keep])
        ends.append(pos + line_ends[keep])
        first_line += len(newlines)
        pos = stop

    def joined(parts: list[np.ndarray]) -> np.ndarray:
        return np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, np.int64)

    return _Lines(joined(numbers), joined(starts), joined(ends), longest, max_open)


def _as_numpy(array: Any, dtype: type[np.generic]) -> np.ndarray:
    """Read-only view of a null-free primitive pyarrow array (``Array.to_numpy`` imports pandas,
    ~250 ms, on first use)."""
    if len(array) == 0:
        return np.empty(0, dtype=dtype)
    offset = array.offset * np.dtype(dtype).itemsize
    return np.frombuffer(array.buffers()[1], dtype=dtype, count=len(array), offset=offset)


def _one_object_per_line(body: bytes, lines: _Lines) -> bool:
    """Whether every non-blank line (JSON whitespace stripped) starts with ``{`` and ends with
    ``}``, with at most :data:`_MAX_OPEN_PER_LINE` openings.

    With that, and pyarrow's row count equal to the number of such lines, each line holds exactly
    one object: a string cannot span lines (raw control characters are rejected), and a ``{``
    cannot follow a ``}`` inside an unfinished object, so every line ends a top-level value.
    """
    if lines.max_open > _MAX_OPEN_PER_LINE:
        return False
    arr = np.frombuffer(body, dtype=np.uint8)
    first = arr[lines.starts]
    last_at = lines.ends - 1
    # One "\r" before the newline (CRLF): look one byte further back.
    crlf = (arr[last_at] == 0x0D) & (last_at > lines.starts)
    last = arr[last_at - crlf]
    plain = (first == 0x7B) & (last == 0x7D)
    for i in np.flatnonzero(~plain).tolist():  # indentation, trailing spaces, or junk
        text = body[lines.starts[i] : lines.ends[i]].strip(_JSON_WS)
        if text[:1] != b"{" or text[-1:] != b"}":
            return False
    return True


class _NonFiniteNumber(Exception):
    """``NaN``, ``Infinity`` or ``-Infinity``: Python's json accepts them, JSON does not."""


class _ObjectWithDuplicates(dict[str, Any]):
    """A JSON object in which some keys occur more than once (``duplicates``)."""

    duplicates: frozenset[str] = frozenset()


def _object_from_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) == len(pairs):
        return obj
    marked = _ObjectWithDuplicates(obj)
    marked.duplicates = frozenset(
        k for k, count in Counter(k for k, _ in pairs).items() if count > 1
    )
    return marked


def _reject_constant(name: str) -> Any:
    raise _NonFiniteNumber(name)


def int_any_size(text: str) -> int:
    # int(str) refuses more than sys.get_int_max_str_digits() digits (4300 by default, 640 at
    # least); Decimal has no such limit and converts exactly.
    return int(text) if len(text) <= 640 else int(Decimal(text))


_DECODER = json.JSONDecoder(object_pairs_hook=_object_from_pairs, parse_constant=_reject_constant)
_HUGE_INT_DECODER = json.JSONDecoder(
    object_pairs_hook=_object_from_pairs, parse_constant=_reject_constant, parse_int=int_any_size
)


def decoded_lines(body: bytes, display: str) -> Iterator[tuple[int, Any]]:
    """``(line number, decoded object)`` of each non-blank line in order: the exact line loop
    of the token and chat parsers (the first line that is no JSON value raises)."""
    for line_number, line in enumerate(body.split(b"\n"), start=1):
        if line.strip(b" \t\r"):
            yield line_number, _decode_line(line, display, line_number)


def _decode_line(line: bytes, display: str, line_number: int) -> Any:
    expected = "expected one JSON object per line"
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as e:
        raise TraceError(
            display,
            f"not valid UTF-8 (byte 0x{line[e.start]:02x} at byte {e.start + 1} of the line); "
            "expected UTF-8 encoded JSON",
            line=line_number,
        ) from None
    try:
        try:
            return _DECODER.decode(text)
        except json.JSONDecodeError:
            raise
        except ValueError:  # an integer literal beyond sys.get_int_max_str_digits()
            return _HUGE_INT_DECODER.decode(text)
    except json.JSONDecodeError as e:
        message = f"invalid JSON ({e.msg} at column {e.colno}); {expected}"
    except _NonFiniteNumber as e:
        message = f"invalid JSON ({e.args[0]} is not a JSON number); {expected}"
    except RecursionError:
        message = f"invalid JSON (nested too deeply to parse); {expected}"
    except ValueError as e:
        message = f"invalid JSON ({e}); {expected}"
    raise TraceError(display, message, line=line_number)


def _int_text(value: int) -> str:
    if value.bit_length() > 128:
        return f"an integer of {value.bit_length()} bits"
    return str(value)


def _describe(value: Any) -> str:
    """A JSON value for an error message: its (shortened) text and its JSON type."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"{'true' if value else 'false'} (a boolean)"
    if isinstance(value, int):
        return f"{_int_text(value)} (an integer)"
    if isinstance(value, float):
        return f"{value!r} (a number with a fraction or an exponent, not an integer)"
    if isinstance(value, str):
        text = json.dumps(value)
        return f"{text if len(text) <= 40 else text[:37] + '...'} (a string)"
    if isinstance(value, list):
        return f"a list of {len(value)} elements"
    return "an object"


_ARROW_TYPES = ("float64", "int64", "list<int64>")


def read_json_screened(
    body: bytes, columns: Sequence[tuple[str, str]], lines: _Lines | None = None
) -> tuple[Any, _Lines] | None:
    """pyarrow's table of ``body`` with exactly ``columns`` (name, ``float64``, ``int64`` or
    ``list<int64>``; other keys ignored) and the body's non-blank lines, or None whenever the
    exact parser must decide.

    pyarrow silently accepts several things the formats do not (two objects on one line, one
    object over several lines, ``NaN``/``Inf``, invalid UTF-8 in ignored keys, any nesting
    depth) and crashes on a top-level ``null`` as the first row, so those are screened out before
    and after it runs. It rejects (None) booleans, strings, ``3.0``/``1e3`` for int64, integers
    beyond int64, and duplicate keys. Nulls and missing keys come back as nulls: the caller
    checks them, and the values' ranges, for its format.
    """
    if not body.isascii():
        try:
            body.decode("utf-8")
        except UnicodeDecodeError:
            return None
    # pyarrow takes NaN, Inf and Infinity (signed) as numbers, even in ignored keys.
    if (b"N" in body or b"I" in body) and (b"NaN" in body or b"Inf" in body):
        return None
    if lines is None:
        lines = _non_blank_lines(body)
    if len(lines.numbers) == 0 or not _one_object_per_line(body, lines):
        return None

    import pyarrow as pa
    import pyarrow.json as pa_json

    types = {"float64": pa.float64(), "int64": pa.int64(), "list<int64>": pa.list_(pa.int64())}
    schema = pa.schema([(name, types[kind]) for name, kind in columns])
    try:
        table = pa_json.read_json(
            pa.BufferReader(body),
            read_options=pa_json.ReadOptions(
                use_threads=False, block_size=max(1 << 20, lines.longest + 2)
            ),
            parse_options=pa_json.ParseOptions(
                explicit_schema=schema, unexpected_field_behavior="ignore"
            ),
        )
    except pa.ArrowException:
        return None
    if table.num_rows != len(lines.numbers):
        return None
    return table, lines
