"""Mooncake FAST'25 traces as columnar, dense in-memory arrays.

A trace file is JSONL, one request per line::

    {"timestamp": <int>, "input_length": <int>, "output_length": <int>, "hash_ids": [<int>, ...]}

:class:`Trace` keeps the requests column by column. The requests' ``hash_ids`` are stored as
one flat ``block_ids`` array with ``offsets`` (request ``i`` is
``block_ids[offsets[i]:offsets[i + 1]]``), remapped to dense block ids ``0..n_blocks-1`` in order
of first appearance, so kernels index per-block state by id instead of hashing. Remapping is a
bijection on the hash ids of one trace, so it changes no hit and no eviction.

:func:`load_trace` reads plain or gzip JSONL: large Mooncake files through the streaming parser
(:mod:`prefixsim.formats.mooncake_stream`), the others in memory through
:mod:`prefixsim.formats.mooncake` (pyarrow or the compiled parser when the file looks ordinary,
else the exact line-by-line parser, which is the reference: it reports the first bad line or
yields the same :class:`Trace`), other formats through :mod:`prefixsim.formats`. Parsed traces
are cached on disk (see :mod:`prefixsim._trace_cache`).
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import os
import stat
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from . import _trace_cache, formats
from ._exact import INT64_MAX, MAX_BLOCK_SIZE, exact_sum, first_running_total_over
from .errors import ParameterError, TraceError
from .formats import TraceOptions, mooncake_stream

# The parsers' names stay importable from here (tests, and the formats, import them so).
from .formats.jsonl import (  # noqa: F401
    _as_numpy,
    _decode_line,
    _describe,
    _Lines,
    _non_blank_lines,
    _one_object_per_line,
)
from .formats.mooncake import _dense_ids, _parse_fast, _parse_jsonl, _parse_slow  # noqa: F401

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
        _check_timestamps(self)

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


MAX_TIMESTAMP_MS = 1e300
"""Largest magnitude of a ``timestamp`` (ms): every difference of two arrival times, and
every queueing delay the cluster's load model computes from them, stays finite (two finite
timestamps of 1.7e308 and -1.7e308 are ``Infinity`` apart)."""


def _check_timestamps(trace: Trace) -> None:
    """Refuse a timestamp that is not finite or past :data:`MAX_TIMESTAMP_MS` in magnitude
    (the parsers refuse NaN and the infinities; this holds for every format and the cache)."""
    ts = trace.timestamps
    if not len(ts) or (ts.max() <= MAX_TIMESTAMP_MS and ts.min() >= -MAX_TIMESTAMP_MS):
        return
    i = int(np.flatnonzero(~(np.abs(ts) <= MAX_TIMESTAMP_MS))[0])
    line = int(trace.line_numbers[i]) if i < len(trace.line_numbers) else None
    raise TraceError(
        trace.name,
        f"expected a finite number of ms of magnitude at most {MAX_TIMESTAMP_MS:g} (every "
        f"difference of two arrival times must be finite), got {float(ts[i])!r}",
        line=line,
        field="timestamp",
    )


def bundled_trace_path(name: str) -> Path:
    """Path of a bundled trace by name (``"conversation"``)."""
    from importlib.resources import files

    return Path(str(files("prefixsim") / "data" / BUNDLED_TRACES[name]))


# --------------------------------------------------------------------------------------------
# Loading

_GZIP_MAGIC = b"\x1f\x8b"


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
        streamed = _load_streamed(path, given, use_cache)
        if streamed is not None:
            return streamed
    raw = _read_bytes(path, display)
    # Formats other than plain Mooncake (their own modules): a small dispatch on the options.
    opts = options or TraceOptions()
    if format is not None or chain:
        opts = dataclasses.replace(opts, format=format or opts.format, chain=chain or opts.chain)
    fmt = opts.format or formats.detect_format(raw, display)
    if fmt != "mooncake" or opts.chain:
        return _load_derived(given, raw, display, fmt, opts, block_size, use_cache)
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


def _load_streamed(path: Path, given: str, use_cache: bool) -> Trace | None:
    """The :class:`Trace` of a large ordinary Mooncake file, parsed as a stream
    (:mod:`prefixsim.formats.mooncake_stream`), or None when the ordinary loader must run
    (small or unusual file, another format, anything to report).

    With the cache, the file's sha256 (the cache key; a plain file's content hash too) comes
    first, and the parser (numba's first use in a process takes about a second) is loaded only
    on a miss: a process that finds the trace cached and replays elsewhere (a sweep's parent)
    never loads it. Without the cache, the sha256 runs on another thread while the file is
    parsed."""
    if not mooncake_stream.is_candidate(path):
        return None
    try:
        with path.open("rb") as f:
            head = f.read(1 << 20)
        if formats.detect_format(head, given) != "mooncake":
            return None
    except (OSError, TraceError):
        return None
    hasher = mooncake_stream._Sha256Thread(path)
    key = None
    if use_cache:
        key = hasher.get()
        if key is None:
            return None
        cached = _trace_cache.load(key)
        if cached is not None:
            return Trace(name=given, **cached)
    parsed = mooncake_stream._parse_file(path, content_sha=head[:2] == b"\x1f\x8b", raw_sha256=None)
    raw = hasher.get()
    if parsed is None or raw is None:
        return None
    fields, sha = parsed
    trace = Trace(name=given, sha256=sha or raw, **fields)
    if key is not None:
        _trace_cache.store(key, trace)
    return trace


def _load_derived(
    given: str,
    raw: bytes,
    display: str,
    fmt: str,
    opts: TraceOptions,
    block_size: int | None,
    use_cache: bool,
) -> Trace:
    """Parse (or read from the cache) a token or chat trace at ``block_size``, or a Mooncake
    trace with ``chain`` (:mod:`prefixsim.formats`): the :class:`Trace`."""
    from .policies.base import check_int  # the engine, for the block size check only

    if formats.needs_block_size(fmt):
        if block_size is None:
            raise ParameterError(
                "block_size",
                None,
                f"a {fmt} trace is hashed into blocks of block_size tokens: give block_size "
                "(--block-size)",
            )
        block_size = check_int("block_size", block_size, 1, MAX_BLOCK_SIZE)
    else:
        block_size = None
    if opts.chain and fmt != "mooncake":
        raise ParameterError("chain", True, f"only for mooncake traces; {fmt} traces are chained")
    if fmt == "chat":  # before the cache: a trace parsed with a template now refused is not read
        from .formats.chat import template_parts

        template_parts(opts.chat_template)
    tokenizer_sha = None
    if fmt == "chat" and opts.tokenizer != "bytes":
        from .formats.chat import tokenizer_file_sha

        tokenizer_sha = tokenizer_file_sha(opts.tokenizer)
    raw_sha = hashlib.sha256(raw).hexdigest()
    key = (
        formats.derived_sha256(raw_sha, fmt, block_size, opts, tokenizer_sha) if use_cache else None
    )
    if key is not None:
        cached = _trace_cache.load(key)
        if cached is not None:
            return Trace(name=given, **cached, block_size=block_size)
    data = _gunzip(raw, display) if raw.startswith(b"\x1f\x8b") else raw
    body = data[3:] if data.startswith(b"\xef\xbb\xbf") else data
    sha = formats.derived_sha256(
        hashlib.sha256(data).hexdigest(), fmt, block_size, opts, tokenizer_sha
    )
    if fmt == "mooncake":
        fields = _parse_jsonl(data, display)
        h0, h1, offsets = formats.hashing.chain_hashes(
            fields["block_ids"].astype(np.int64), fields["offsets"], 1
        )
        fields["block_ids"], fields["n_blocks"] = formats.hashing.intern_blocks(
            h0, h1, offsets, display
        )
    else:
        assert block_size is not None
        from .formats.tokens import hash_tokens, parse_tokens

        if fmt == "tokens":
            table = parse_tokens(body, display)
        else:
            from .formats.chat import parse_chat

            table = parse_chat(body, display, opts)
        fields = hash_tokens(table, block_size, display)
    trace = Trace(name=given, sha256=sha, **fields, block_size=block_size)
    if key is not None:
        _trace_cache.store(key, trace)
    return trace


def _read_bytes(path: Path, display: str) -> bytes:
    """The file's bytes. Only a regular file is read: a FIFO would block forever and a device
    such as ``/dev/zero`` never ends, so they are refused without reading (opened non-blocking,
    checked on the open descriptor, so a file swapped after a check is not read either)."""
    expected = "expected a JSONL trace file (Mooncake, token or chat; plain or gzip)"
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
