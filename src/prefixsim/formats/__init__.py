"""Trace formats other than plain Mooncake, and the format detection of :func:`load_trace`.

``mooncake``: precomputed chained block hashes (``hash_ids``), read by :mod:`.mooncake` (in memory)
and :mod:`.mooncake_stream` (large files, streamed);
``tokens``: prompts as token ids (:mod:`.tokens`); ``chat``: OpenAI-style ``messages``
(:mod:`.chat`), rendered by a chat template and tokenized. Token and chat traces are hashed into
chained blocks at a ``block_size`` (:mod:`.hashing`), so their blocks, and so the parsed trace,
depend on it: such a :class:`~prefixsim.trace.Trace` records its ``block_size`` and its
``sha256`` identifies (content, format, options, block size). A Mooncake trace read with
``chain=True`` has its ids re-hashed along each request's prefix (for traces whose ids identify
a block's content only). See ``docs/trace-formats.md``.
"""

from __future__ import annotations

import hashlib
import json
import zlib
from dataclasses import dataclass
from typing import Any

from ..errors import ParameterError, TraceError
from . import hashing
from .jsonl import int_any_size

FORMATS = ("mooncake", "tokens", "chat")
"""Trace formats :func:`~prefixsim.load_trace` reads."""

DETECT_HELP = (
    "expected a JSON object with hash_ids (mooncake: timestamp, input_length, output_length, "
    "hash_ids), token_ids (tokens: timestamp, token_ids, optional output_length) or messages "
    "(chat: messages of role and content, optional timestamp and output_length)"
)


MIN_ARRIVAL_RATE, MAX_ARRIVAL_RATE = 1e-9, 1e12
"""``arrival_rate`` accepted (requests per second): request ``i`` arrives at
``i * 1000 / arrival_rate`` ms, finite for every ``i`` a file can hold only if the rate is not
tiny (``1e-320`` passes ``> 0`` and gives ``Infinity`` and ``NaN`` timestamps); one request per
31 years to a million per microsecond."""


@dataclass(frozen=True)
class TraceOptions:
    """How a trace file is read (all but ``format`` only matter to some formats)."""

    format: str | None = None
    """``mooncake``, ``tokens``, ``chat``, or None to detect it from the first line."""
    chain: bool = False
    """Mooncake only: re-hash each request's ``hash_ids`` along its prefix (unchained traces)."""
    chat_template: str = "chatml"
    """Chat only: ``chatml``, ``plain``, or a per-message template (``{role}``, ``{content}``)."""
    tokenizer: str = "bytes"
    """Chat only: ``bytes`` (UTF-8 bytes are the token ids) or a path to a ``tokenizer.json``."""
    arrival_rate: float = 1.0
    """Chat only: requests per second for files without timestamps (arrivals in file order)."""

    def __post_init__(self) -> None:
        if self.format is not None and self.format not in FORMATS:
            raise ParameterError(
                "trace_format",
                self.format,
                f"expected null (detect) or one of {', '.join(FORMATS)}",
            )
        if not isinstance(self.chain, bool):
            raise ParameterError("chain", self.chain, "expected true or false")
        for key in ("chat_template", "tokenizer"):
            if not isinstance(getattr(self, key), str):
                raise ParameterError(key, getattr(self, key), "expected a string")
        rate = self.arrival_rate
        if isinstance(rate, bool) or not isinstance(rate, int | float):
            raise ParameterError("arrival_rate", rate, "expected a number (requests per second)")
        if not MIN_ARRIVAL_RATE <= rate <= MAX_ARRIVAL_RATE:
            raise ParameterError(
                "arrival_rate",
                rate,
                f"expected requests per second in [{MIN_ARRIVAL_RATE:g}, {MAX_ARRIVAL_RATE:g}]",
            )

    @classmethod
    def from_keys(cls, keys: Any) -> TraceOptions:
        """The options from an object with the trace-reading keys as attributes, named alike
        everywhere a user gives them: the command line's parsed arguments (``formats.args``)
        and the sweep's config (``trace_format`` is the key of ``format``)."""
        return cls(
            format=keys.trace_format,
            chain=keys.chain,
            chat_template=keys.chat_template,
            tokenizer=keys.tokenizer,
            arrival_rate=keys.arrival_rate,
        )


def first_line(raw: bytes, display: str) -> tuple[int, bytes] | None:
    """The 1-based number and bytes of the first non-blank line (gzip read as a stream, only as
    far as needed), or None for a file of blank lines."""
    if raw.startswith(b"\x1f\x8b"):
        d = zlib.decompressobj(wbits=31)
        buf = b""
        pos = 0
        step = 1 << 16
        while True:
            try:
                chunk = d.decompress(raw[pos : pos + step])
            except zlib.error as e:
                raise TraceError(
                    display,
                    f"truncated or corrupt gzip data ({e}); expected a complete gzip stream",
                ) from None
            pos += step
            buf += chunk
            found = _first_nonblank(buf, complete=pos >= len(raw))
            if found is not None or pos >= len(raw):
                return found
    return _first_nonblank(raw, complete=True)


def _first_nonblank(buf: bytes, complete: bool) -> tuple[int, bytes] | None:
    """Scans line by line from the start (never splits the whole buffer: traces are large)."""
    start, number = 0, 1
    while start < len(buf):
        end = buf.find(b"\n", start)
        if end < 0:
            if not complete:
                return None  # the last piece may be cut
            end = len(buf)
        text = buf[start:end].strip(b" \t\r")
        if number == 1 and text.startswith(b"\xef\xbb\xbf"):
            text = text[3:].strip(b" \t\r")
        if text:
            return number, text
        start, number = end + 1, number + 1
    return None


def detect_format(raw: bytes, display: str) -> str:
    """The format of a trace file from its first non-blank line."""
    found = first_line(raw, display)
    if found is None:
        return "mooncake"  # the Mooncake parser reports the empty file
    line_number, text = found
    try:
        # integers read exactly, as the readers read them: json.loads refuses one of more than
        # 4,300 digits, and a token trace with one on its first line was taken for Mooncake
        obj = json.loads(text, parse_int=int_any_size)
    except (ValueError, RecursionError):
        return "mooncake"  # its exact parser names the line and the JSON error
    if isinstance(obj, dict):
        if "hash_ids" in obj:
            return "mooncake"
        if "token_ids" in obj:
            return "tokens"
        if "messages" in obj:
            return "chat"
        keys = ", ".join(sorted(obj)[:8]) or "none"
        got = f"an object with keys {keys}"
    else:
        got = "not a JSON object"
    raise TraceError(display, f"unknown trace format: {DETECT_HELP}; got {got}", line=line_number)


def derived_sha256(
    content_sha: str,
    fmt: str,
    block_size: int | None,
    opts: TraceOptions,
    tokenizer_sha: str | None,
) -> str:
    """Identity of a parsed trace whose blocks depend on options: what sweeps key points by."""
    doc: dict[str, object] = {
        "hash": hashing.HASH_NAME,
        "content_sha256": content_sha,
        "format": fmt,
        "block_size": block_size,
        "chain": opts.chain,
    }
    if fmt == "chat":
        doc.update(
            chat_template=opts.chat_template,
            tokenizer=tokenizer_sha or "bytes",
            arrival_rate=opts.arrival_rate,
        )
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


def needs_block_size(fmt: str) -> bool:
    """Whether the blocks of a trace in ``fmt`` depend on the block size."""
    return fmt in ("tokens", "chat")
