"""Token traces: JSONL of prompts as token ids, hashed into chained blocks.

One request per line::

    {"timestamp": <ms>, "token_ids": [<int>, ...], "output_length": <int>, "session_id": ...}

``timestamp`` and ``token_ids`` are required; ``output_length`` is optional (absent or null
means 0); ``session_id`` is optional (a string or an integer, :mod:`.sessions`); any other key
is ignored. Token ids are integers in
``[0, 2**63)``. ``input_length`` is the number of token ids; the blocks are the full
``block_size`` blocks of the prompt hashed by :mod:`prefixsim.formats.hashing`.

:func:`parse_tokens` reads the file into a :class:`TokenTable` (pyarrow when the file looks
ordinary, else an exact line-by-line parser that names the first bad line);
:func:`hash_tokens` turns a table into the :class:`~prefixsim.trace.Trace` fields at one block
size.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .._exact import INT64_MAX
from ..errors import TraceError
from . import hashing
from .sessions import SESSION_KEY, check_session_id, dense_session_ids

TOKEN_FIELDS = {
    "timestamp": "a finite number (arrival time, ms)",
    "token_ids": "a list of integers in [0, 2**63) (the prompt's token ids)",
    "output_length": "optional, a non-negative integer (output tokens)",
    "session_id": "optional, a string or an integer (the request's session)",
}


@dataclass(frozen=True)
class TokenTable:
    """Prompts as flat token ids: request ``r`` is
    ``tokens[token_offsets[r] : token_offsets[r + 1]]``."""

    timestamps: np.ndarray  # float64, ms
    output_lengths: np.ndarray  # int64
    token_offsets: np.ndarray  # int64, n_requests + 1
    tokens: np.ndarray  # int64
    line_numbers: np.ndarray  # int64, 1-based
    session_ids: np.ndarray | None = None  # int64 dense ids, -1: none (formats.sessions)

    @property
    def n_requests(self) -> int:
        return len(self.timestamps)


def hash_tokens(table: TokenTable, block_size: int, display: str) -> dict[str, Any]:
    """The :class:`~prefixsim.trace.Trace` fields (but ``name``, ``sha256``) at ``block_size``."""
    h0, h1, block_offsets = hashing.chain_hashes(table.tokens, table.token_offsets, block_size)
    block_ids, n_blocks = hashing.intern_blocks(h0, h1, block_offsets, display)
    return {
        "timestamps": np.asarray(table.timestamps, dtype=np.float64),
        "input_lengths": np.diff(table.token_offsets).astype(np.int64),
        "output_lengths": np.asarray(table.output_lengths, dtype=np.int64),
        "offsets": block_offsets,
        "block_ids": block_ids,
        "n_blocks": n_blocks,
        "line_numbers": np.asarray(table.line_numbers, dtype=np.int64),
        "session_ids": table.session_ids,
    }


def parse_tokens(body: bytes, display: str) -> TokenTable:
    """Parse uncompressed token-trace JSONL (BOM already stripped)."""
    table = _parse_fast(body)
    return table if table is not None else _parse_slow(body, display)


def _parse_fast(body: bytes) -> TokenTable | None:
    """pyarrow (:func:`.jsonl.read_json_screened`, as the Mooncake reader uses it); None if the
    exact parser must decide (anything unusual, including every error)."""
    from .jsonl import _as_numpy, read_json_screened

    if SESSION_KEY in body:
        return None  # session ids: the exact parser reads them
    names = ("timestamp", "token_ids", "output_length")
    read = read_json_screened(
        body, list(zip(names, ("float64", "list<int64>", "int64"), strict=True))
    )
    if read is None:
        return None
    table, lines = read
    line_numbers = lines.numbers
    ts_col, ids_col, out_col = (table.column(n).combine_chunks() for n in names)
    if ts_col.null_count or ids_col.null_count or ids_col.values.null_count:
        return None
    timestamps = _as_numpy(ts_col, np.float64)
    if not np.isfinite(timestamps).all():
        return None
    if out_col.null_count:
        valid = np.frombuffer(out_col.buffers()[0], dtype=np.uint8)  # validity bitmap
        bits = np.unpackbits(valid, bitorder="little")[
            out_col.offset : out_col.offset + len(out_col)
        ]
        outputs = np.where(bits.astype(bool), _as_numpy(out_col, np.int64), 0)
    else:
        outputs = _as_numpy(out_col, np.int64)
    if (outputs < 0).any():
        return None
    offsets = _as_numpy(ids_col.offsets, np.int32).astype(np.int64)
    tokens = _as_numpy(ids_col.values, np.int64)[offsets[0] : offsets[-1]]
    if len(tokens) and tokens.min() < 0:
        return None
    return TokenTable(
        timestamps=timestamps.copy(),
        output_lengths=np.array(outputs, dtype=np.int64),
        token_offsets=offsets - offsets[0],
        tokens=tokens.copy(),
        line_numbers=line_numbers.astype(np.int64),
    )


def _parse_slow(body: bytes, display: str) -> TokenTable:
    """Exact reference parser (stdlib json): the first invalid line raises :class:`TraceError`."""
    from .jsonl import decoded_lines

    timestamps: list[float] = []
    outputs: list[int] = []
    lengths: list[int] = []
    tokens: list[int] = []
    line_numbers: list[int] = []
    sessions: list[tuple[str, Any] | None] = []
    for line_number, obj in decoded_lines(body, display):
        ts, ids, out = check_token_request(obj, display, line_number)
        sessions.append(check_session_id(obj, display, line_number))
        timestamps.append(ts)
        outputs.append(out)
        lengths.append(len(ids))
        tokens.extend(ids)
        line_numbers.append(line_number)
    if not line_numbers:
        raise TraceError(display, "no requests; expected one JSON object per line")
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return TokenTable(
        timestamps=np.array(timestamps, dtype=np.float64),
        output_lengths=np.array(outputs, dtype=np.int64),
        token_offsets=offsets,
        tokens=np.array(tokens, dtype=np.int64),
        line_numbers=np.array(line_numbers, dtype=np.int64),
        session_ids=dense_session_ids(sessions),
    )


def wrong_value(display: str, line: int, field: str, expected: str, value: Any) -> TraceError:
    """The error for a field of the wrong type or range, worded the same in every format:
    ``expected <what the format asks>, got <the JSON value there>``."""
    from .jsonl import _describe

    return TraceError(
        display, f"expected {expected}, got {_describe(value)}", line=line, field=field
    )


def check_timestamp(obj: dict[str, Any], display: str, line: int) -> float:

    ts = obj["timestamp"]
    expected = TOKEN_FIELDS["timestamp"]
    if type(ts) is int:
        try:
            ts = float(ts)
        except OverflowError:
            ts = float("inf")
    elif type(ts) is not float:
        raise wrong_value(display, line, "timestamp", expected, ts)
    if not np.isfinite(ts):
        raise TraceError(
            display, f"expected {expected}, got a number too large", line=line, field="timestamp"
        )
    return float(ts)


def check_output_length(obj: dict[str, Any], display: str, line: int) -> int:

    value = obj.get("output_length")
    if value is None:
        return 0
    if type(value) is not int or not 0 <= value <= INT64_MAX:
        expected = "a non-negative integer (output tokens)"
        raise wrong_value(display, line, "output_length", expected, value)
    return value


def check_fields(
    obj: Any, required: tuple[str, ...], fields: dict[str, str], display: str, line: int
) -> None:
    """``obj`` is an object with every ``required`` key, each given once."""
    from .jsonl import _describe

    expected = ", ".join(f"{k} ({v})" for k, v in fields.items())
    if not isinstance(obj, dict):
        raise TraceError(
            display, f"expected a JSON object with {expected}, got {_describe(obj)}", line=line
        )
    duplicates: frozenset[str] = getattr(obj, "duplicates", frozenset())
    for name in required:
        if name not in obj:
            raise TraceError(display, f"missing; expected {fields[name]}", line=line, field=name)
    for name in fields:
        if name in duplicates:
            raise TraceError(
                display, "key given more than once; expected it once", line=line, field=name
            )


def check_token_request(obj: Any, display: str, line: int) -> tuple[float, list[int], int]:
    """``(timestamp, token_ids, output_length)`` of one decoded line, checked."""
    from .jsonl import _describe

    check_fields(obj, ("timestamp", "token_ids"), TOKEN_FIELDS, display, line)
    ts = check_timestamp(obj, display, line)
    ids = obj["token_ids"]
    if type(ids) is not list:
        raise wrong_value(display, line, "token_ids", TOKEN_FIELDS["token_ids"], ids)
    for i, t in enumerate(ids):
        if type(t) is not int or not 0 <= t <= INT64_MAX:
            raise TraceError(
                display,
                f"expected a list of integers in [0, 2**63), element {i} is {_describe(t)}",
                line=line,
                field="token_ids",
            )
    return ts, ids, check_output_length(obj, display, line)
