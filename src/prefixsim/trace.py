"""Mooncake FAST'25 traces as columnar, dense in-memory arrays.

A trace file is JSONL, one request per line::

    {"timestamp": <int>, "input_length": <int>, "output_length": <int>, "hash_ids": [<int>, ...]}

:class:`Trace` keeps the requests column by column. The requests' ``hash_ids`` are stored as
one flat ``block_ids`` array with ``offsets`` (request ``i`` is
``block_ids[offsets[i]:offsets[i + 1]]``), remapped to dense block ids ``0..n_blocks-1`` in order
of first appearance, so kernels index per-block state by id instead of hashing. Remapping is a
bijection on the hash ids of one trace, so it changes no hit and no eviction.

:func:`load_trace` reads plain or gzip JSONL. It parses with pyarrow when the file looks ordinary
and falls back to an exact line-by-line parser (stdlib :mod:`json`) whenever pyarrow fails, could
have altered a value, or could have accepted something that is not one valid request per line;
the exact parser is the reference and either reports the first bad line or yields the same
:class:`Trace`. Parsed traces are cached on disk (see :mod:`prefixsim._trace_cache`).
"""

from __future__ import annotations

import codecs
import dataclasses
import gzip
import hashlib
import json
import math
import os
import stat
import zlib
from collections import Counter
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any, cast

import numpy as np

from . import _trace_cache, formats
from ._exact import INT64_MAX, exact_sum, first_running_total_over
from .errors import ParameterError, TraceError
from .formats import TraceOptions, mooncake_stream
from .formats.sessions import SESSION_KEY, check_session_id, dense_session_ids

BUNDLED_TRACES: dict[str, str] = {"conversation": "conversation.jsonl.gz"}
"""Names of the traces shipped in ``prefixsim/data`` and their file names."""


@dataclass(frozen=True, eq=False)
class Trace:
    """A replayable trace.

    Invariants: ``offsets[0] == 0``, ``offsets`` is non-decreasing with
    ``offsets[-1] == len(block_ids)``; every block id is in ``[0, n_blocks)`` and ids appear for
    the first time in increasing order (id ``j`` is the ``j``-th distinct hash of the file).
    """

    name: str
    """Bundled name, or the file's path as given."""
    sha256: str
    """sha256 of the uncompressed JSONL content (independent of gzip and file name)."""
    timestamps: np.ndarray  # float64, ms, per request
    input_lengths: np.ndarray  # int64, tokens, per request
    output_lengths: np.ndarray  # int64, tokens, per request
    offsets: np.ndarray  # int64, n_requests + 1
    block_ids: np.ndarray  # int32, dense ids, flat over all requests
    n_blocks: int
    """Number of distinct hash ids."""
    line_numbers: np.ndarray = field(repr=False)  # int64, 1-based file line of each request
    block_size: int | None = None
    """The block size the blocks were hashed at (token and chat traces), or None when the blocks
    do not depend on it (Mooncake ``hash_ids``); replaying at another block size is refused."""
    session_ids: np.ndarray | None = field(default=None, repr=False)
    """int64 per request: the request's ``session_id`` (any JSON string or integer) numbered
    densely ``0, 1, ...`` in order of first appearance (``"7"`` and ``7`` are two sessions), -1
    for a request without one (absent or null); None when no request has one."""

    def __post_init__(self) -> None:
        _check_total_prompt_tokens(self)

    @property
    def n_requests(self) -> int:
        return len(self.input_lengths)

    @property
    def n_accesses(self) -> int:
        """Block accesses one replay performs (the flat length of all ``hash_ids``)."""
        return len(self.block_ids)

    def request_blocks(self, i: int) -> np.ndarray:
        return self.block_ids[self.offsets[i] : self.offsets[i + 1]]

    @property
    def total_prompt_tokens(self) -> int:
        return exact_sum(self.input_lengths)


def _check_total_prompt_tokens(trace: Trace) -> None:
    """Refuse a trace whose ``input_length`` values sum past ``2**63 - 1``.

    Every total the engine reports is bounded by this sum (a request's hit tokens are clamped to
    its ``input_length``; the LRU curve's partial sums are sums of hit tokens), so with it in
    int64 no total, counter or Parquet column can wrap around. Each value alone may be up to
    ``2**63 - 1``: only the sum is the problem, and it is checked exactly.
    """
    if exact_sum(trace.input_lengths) <= INT64_MAX:
        return
    i = first_running_total_over(trace.input_lengths)
    line = int(trace.line_numbers[i]) if i is not None and i < len(trace.line_numbers) else None
    raise TraceError(
        trace.name,
        "the input_length values of the requests up to this line sum to more than "
        "2**63 - 1 tokens; totals must fit in a 64-bit integer",
        line=line,
        field="input_length",
    )


def bundled_trace_path(name: str) -> Path:
    """Path of a bundled trace by name (``"conversation"``)."""
    from importlib.resources import files

    return Path(str(files("prefixsim") / "data" / BUNDLED_TRACES[name]))


# --------------------------------------------------------------------------------------------
# Loading

_FIELDS = ("timestamp", "input_length", "output_length", "hash_ids")
_EXPECTED = {
    "timestamp": "a finite number (arrival time, ms)",
    "input_length": "a non-negative integer (prompt tokens)",
    "output_length": "a non-negative integer (output tokens)",
    "hash_ids": "a list of integers (block hashes)",
}
_GZIP_MAGIC = b"\x1f\x8b"
_JSON_WS = b" \t\r"  # JSON whitespace other than the newline that ends a line
_INT64_MAX = 2**63 - 1
_MAX_OPEN_PER_LINE = 256
"""Lines with more ``{``/``[`` than this take the exact path (pyarrow accepts any nesting depth
in ignored keys, stdlib json stops near the recursion limit)."""


def load_trace(
    path_or_name: str | os.PathLike[str],
    *,
    use_cache: bool = True,
    block_size: int | None = None,
    format: str | None = None,
    chain: bool = False,
    options: TraceOptions | None = None,
) -> Trace:
    """Load a JSONL trace (plain or gzip) or a bundled trace by name.

    The format is detected from the first non-blank line (``hash_ids``: Mooncake, ``token_ids``:
    tokens, ``messages``: chat) unless ``format`` forces it; token and chat traces are hashed
    into chained blocks of ``block_size`` tokens (required for them, ignored otherwise), and
    ``chain=True`` re-hashes a Mooncake trace's ids along each prefix. ``options`` gives the
    chat options (:class:`prefixsim.formats.TraceOptions`); ``format`` and ``chain`` override
    its fields. See :mod:`prefixsim.formats`. The rest of this docstring is the Mooncake format.

    A name in :data:`BUNDLED_TRACES` that is not an existing file loads the bundled trace. Blank
    lines are skipped; every other line must be one JSON object with ``timestamp`` (a number),
    ``input_length`` and ``output_length`` (non-negative integers) and ``hash_ids`` (a list of
    integers of any size and sign), optionally ``session_id`` (a string or an integer:
    :mod:`prefixsim.formats.sessions`); other keys are ignored. Booleans are not numbers here, and
    ``3.0`` or ``1e3`` are not integers.

    With ``use_cache`` (the default), a file whose raw bytes were parsed before is read from the
    on-disk cache instead of being parsed again.

    Raises:
        TraceError: the file is missing, unreadable, not (complete) gzip, has no request, or a
            line is not a valid request; names the file, the 1-based line and the field.
    """
    given = os.fsdecode(os.fspath(path_or_name))
    if given in BUNDLED_TRACES and not os.path.isfile(given):
        path = bundled_trace_path(given)
        display = str(path)
    else:
        path = Path(given)
        display = given
    plain = format in (None, "mooncake") and not chain and (options is None or not options.chain)
    if plain and (options is None or options.format in (None, "mooncake")):
        # Large ordinary Mooncake files: streamed through a compiled parser (falls back here).
        streamed = mooncake_stream.try_load(path, given, use_cache)
        if streamed is not None:
            return cast(Trace, streamed)
    raw = _read_bytes(path, display)
    # Formats other than plain Mooncake (their own modules): a small dispatch on the options.
    opts = options or TraceOptions()
    if format is not None or chain:
        opts = dataclasses.replace(opts, format=format or opts.format, chain=chain or opts.chain)
    fmt = opts.format or formats.detect_format(raw, display)
    if fmt != "mooncake" or opts.chain:
        return cast(
            Trace, formats.load_derived(given, raw, display, fmt, opts, block_size, use_cache)
        )
    key = hashlib.sha256(raw).hexdigest() if use_cache else None
    if key is not None:
        cached = _trace_cache.load(key)
        if cached is not None:
            return Trace(name=given, **cached)
    if raw.startswith(_GZIP_MAGIC):
        data = _gunzip(raw, display)
        sha256 = hashlib.sha256(data).hexdigest()
    else:
        data = raw
        sha256 = key or hashlib.sha256(raw).hexdigest()
    trace = Trace(name=given, sha256=sha256, **_parse_jsonl(data, display))
    if key is not None:
        _trace_cache.store(key, trace)
    return trace


def _read_bytes(path: Path, display: str) -> bytes:
    """The file's bytes. Only a regular file is read: a FIFO would block forever and a device
    such as ``/dev/zero`` never ends, so they are refused without reading (opened non-blocking,
    checked on the open descriptor, so a file swapped after a check is not read either)."""
    expected = "expected a Mooncake JSONL trace file (plain or gzip)"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        bundled = ", ".join(BUNDLED_TRACES)
        raise TraceError(
            display, f"no such file; {expected} or a bundled trace name ({bundled})"
        ) from None
    except IsADirectoryError:
        raise TraceError(display, f"is a directory; {expected}") from None
    except OSError as e:
        raise TraceError(display, f"cannot read the file: {e.strerror or e}") from e
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise TraceError(display, f"is a directory; {expected}")
        if not stat.S_ISREG(mode):
            raise TraceError(display, f"is not a regular file ({_file_kind(mode)}); {expected}")
        os.set_blocking(fd, True)
        with os.fdopen(fd, "rb") as f:
            fd = -1  # owned by f now
            return f.read()
    except OSError as e:
        raise TraceError(display, f"cannot read the file: {e.strerror or e}") from e
    finally:
        if fd >= 0:
            os.close(fd)


def _file_kind(mode: int) -> str:
    kinds = (
        (stat.S_ISFIFO, "a named pipe"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    )
    return next((name for test, name in kinds if test(mode)), "not a file")


def _gunzip(raw: bytes, display: str) -> bytes:
    try:
        return gzip.decompress(raw)
    except (EOFError, OSError, zlib.error) as e:
        raise TraceError(
            display, f"truncated or corrupt gzip data ({e}); expected a complete gzip stream"
        ) from None


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
    """Parse with pyarrow, or None if the exact path must decide.

    pyarrow silently accepts several things the format does not (two objects on one line, one
    object over several lines, ``null`` values and missing keys as nulls, ``NaN``/``Inf``,
    invalid UTF-8 in ignored keys, any nesting depth) and crashes on a top-level ``null`` as the
    first row, so those are screened out before and after it runs. It rejects (we then fall back)
    booleans, strings, ``3.0``/``1e3`` for int64, integers beyond int64, and duplicate keys.
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
    line_numbers, longest = lines.numbers, lines.longest

    import pyarrow as pa
    import pyarrow.json as pa_json

    schema = pa.schema(
        [
            ("timestamp", pa.float64()),
            ("input_length", pa.int64()),
            ("output_length", pa.int64()),
            ("hash_ids", pa.list_(pa.int64())),
        ]
    )
    try:
        table = pa_json.read_json(
            pa.BufferReader(body),
            read_options=pa_json.ReadOptions(
                use_threads=False, block_size=max(1 << 20, longest + 2)
            ),
            parse_options=pa_json.ParseOptions(
                explicit_schema=schema, unexpected_field_behavior="ignore"
            ),
        )
    except pa.ArrowException:
        return None
    if table.num_rows != len(line_numbers):
        return None
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


def _dense_ids(flat: np.ndarray) -> tuple[np.ndarray, int]:
    """Int64 hash ids remapped to ``0..n-1`` in order of first appearance."""
    n = len(flat)
    if n == 0:
        return np.empty(0, dtype=np.int32), 0
    lo, hi = int(flat.min()), int(flat.max())
    span = hi - lo + 1
    if span <= 4 * n + (1 << 16):  # compact ids (Mooncake's): a lookup table, no sort of all ids
        shifted = flat - lo
        positions = np.arange(n, dtype=np.int64)
        first = np.full(span, n, dtype=np.int64)
        np.minimum.at(first, shifted, positions)
        new_ids = shifted[first[shifted] == positions]  # in order of first appearance
        table = np.zeros(span, dtype=np.int32)
        table[new_ids] = np.arange(len(new_ids), dtype=np.int32)
        return table[shifted], len(new_ids)
    order = np.argsort(flat, kind="stable")
    ordered = flat[order]
    starts_group = np.empty(n, dtype=bool)
    starts_group[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=starts_group[1:])
    group = np.cumsum(starts_group) - 1  # sorted-value rank of each id, in sorted order
    first = order[starts_group]  # first position of each distinct value (stable sort)
    rank = np.empty(len(first), dtype=np.int32)
    rank[np.argsort(first)] = np.arange(len(first), dtype=np.int32)
    dense = np.empty(n, dtype=np.int32)
    dense[order] = rank[group]
    return dense, len(first)


# -- exact path: stdlib json, line by line -----------------------------------------------------


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


def _int_any_size(text: str) -> int:
    # int(str) refuses more than sys.get_int_max_str_digits() digits (4300 by default, 640 at
    # least); Decimal has no such limit and converts exactly.
    return int(text) if len(text) <= 640 else int(Decimal(text))


_DECODER = json.JSONDecoder(object_pairs_hook=_object_from_pairs, parse_constant=_reject_constant)
_HUGE_INT_DECODER = json.JSONDecoder(
    object_pairs_hook=_object_from_pairs, parse_constant=_reject_constant, parse_int=_int_any_size
)


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
        if value > _INT64_MAX:
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


def check_block_size_matches(trace: Trace, block_size: int) -> None:
    """Refuse to replay a trace hashed at one block size with another (its blocks would not be
    ``block_size`` tokens, and every hit count would be wrong)."""
    if trace.block_size is not None and block_size != trace.block_size:
        raise ParameterError(
            "block_size",
            block_size,
            f"trace {trace.name} was hashed into blocks of {trace.block_size} tokens; "
            f"load it again with block_size={block_size} to replay at that size",
        )


# --------------------------------------------------------------------------------------------
# Legal oddities


def oddities(trace: Trace, block_size: int) -> dict[str, int]:
    """How many requests have each legal oddity the replay handles (never rejected).

    ``duplicate_hash_in_request``: a hash occurs twice in one request's ``hash_ids``;
    ``hash_ids_longer_than_input`` / ``hash_ids_shorter_than_input``: ``len(hash_ids)`` is more /
    less than ``ceil(input_length / block_size)``; ``zero_input_length``; ``empty_hash_ids``.
    """
    if isinstance(block_size, bool) or not isinstance(block_size, int | np.integer):
        raise ParameterError("block_size", block_size, "a positive integer (tokens per block)")
    if block_size < 1:
        raise ParameterError("block_size", block_size, "a positive integer (tokens per block)")
    n_ids = np.diff(trace.offsets)
    blocks_for_input = -(-trace.input_lengths // int(block_size))  # ceil without overflow
    request_of = np.repeat(np.arange(trace.n_requests, dtype=np.int64), n_ids)
    pairs = np.sort(request_of * max(trace.n_blocks, 1) + trace.block_ids)
    repeated = pairs[1:][pairs[1:] == pairs[:-1]]
    return {
        "duplicate_hash_in_request": len(np.unique(repeated // max(trace.n_blocks, 1))),
        "hash_ids_longer_than_input": int(np.count_nonzero(n_ids > blocks_for_input)),
        "hash_ids_shorter_than_input": int(np.count_nonzero(n_ids < blocks_for_input)),
        "zero_input_length": int(np.count_nonzero(trace.input_lengths == 0)),
        "empty_hash_ids": int(np.count_nonzero(n_ids == 0)),
    }
