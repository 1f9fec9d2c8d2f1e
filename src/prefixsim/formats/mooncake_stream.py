"""Streaming parse of ordinary Mooncake traces: a compiled strict-subset parser, chunk by chunk.

For traces of millions of requests, :func:`parse` reads the file in chunks (decompressing
gzip as a stream), parses each chunk's complete lines with a numba kernel and maps the
``hash_ids`` to dense ids as it goes, so the file's bytes are never all in memory and the peak
is about the final arrays plus one chunk and the id table.

The kernel accepts only a strict subset of the format, whose values it can read exactly: each
non-blank line is one object whose keys are ``timestamp``, ``input_length``, ``output_length``,
``hash_ids`` and optionally ``session_id`` (each once, any order, JSON whitespace between
tokens), with numbers without exponent (``timestamp`` with at most 15 digits, read exactly as
Python's ``float``; the others integers of at most 18 digits, so they fit int64),
``input_length`` and ``output_length`` non-negative, ``hash_ids`` non-negative ids dense enough
for a direct table (below ``8 * accesses + 2**20``), and ``session_id`` ``null``, such an
integer (negative too) or a string without escapes or control characters (its bytes, valid
UTF-8, are then the string, so equal strings have equal bytes). On anything else (another key,
an exponent, an escape, a bad line...) it gives up and :func:`prefixsim.load_trace` falls back
to its exact loader, which either reads the same trace or reports the first bad line: the result
never depends on which path ran (tested, session ids included).

Session ids are numbered as :mod:`prefixsim.formats.sessions` says: each request gets an int64
key (:data:`NO_SESSION`, the integer itself, or :data:`STRING_BASE` plus the string's number in
order of first appearance), and the keys are numbered densely in order of first appearance at
the end. :func:`parse_body` runs the same parser on a file already in memory: the ordinary
loader's path for small files with session ids.
"""

from __future__ import annotations

import hashlib
import os
import threading
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from .mooncake_kernel import _STRING_PENDING, NO_SESSION, STRING_BASE, _parse_chunk

CHUNK = 1 << 23
"""Bytes read (or decompressed) per step."""
_MAX_ID = 2**31 - 2


class _GiveUp(Exception):
    """Something the strict kernel does not read; the caller falls back to the exact loader."""


def _whole_lines(path: Path, sha: Any) -> Iterator[np.ndarray]:
    """The file's uncompressed content (gzip decompressed as a stream, the byte order mark
    dropped) in pieces that end at a newline (the last at the end of the content). Each piece is
    a view of one reused buffer, valid until the next is asked for: no bytes object per piece,
    and the buffer's pages are faulted in once. ``sha`` (if any) is updated with the content."""
    buf = np.empty(CHUNK, np.uint8)
    filled = 0  # bytes in buf: the carried start of a line, then what was just read
    start = -1  # where the content starts in the first piece (after a byte order mark)
    with path.open("rb", buffering=0) as f:
        gz = zlib.decompressobj(wbits=31) if f.read(2) == b"\x1f\x8b" else None
        f.seek(0)
        while True:
            if filled == len(buf):  # one line longer than the buffer
                grown = np.empty(2 * len(buf), np.uint8)
                grown[:filled] = buf
                buf = grown
            n = _read_into(f, gz, buf[filled:])
            if sha is not None and n:
                sha.update(buf[filled : filled + n])
            if start < 0 and (n == 0 or filled + n >= 3):
                start = 3 if buf[: min(3, filled + n)].tobytes() == b"\xef\xbb\xbf" else 0
            if n == 0:
                if filled > max(start, 0):
                    yield buf[max(start, 0) : filled]
                return
            cut = _after_last_newline(buf, filled, filled + n)
            filled += n
            if cut and start >= 0:
                yield buf[start:cut]
                start = 0
                buf[: filled - cut] = buf[cut:filled]  # the unfinished line
                filled -= cut


def _read_into(f: Any, gz: Any, out: np.ndarray) -> int:
    """Fill the front of ``out`` with the next content bytes; 0 at the end of the content."""
    if gz is None:
        return int(f.readinto(out.data))
    while True:
        if gz.eof:  # a second gzip member (concatenated files): the exact loader handles it
            if gz.unused_data or f.read(1):
                raise _GiveUp
            return 0
        raw = gz.unconsumed_tail or f.read(CHUNK // 4)
        if not raw:
            raise _GiveUp  # truncated: the exact loader reports it
        piece = gz.decompress(raw, len(out))
        if piece:
            out[: len(piece)] = np.frombuffer(piece, np.uint8)
            return len(piece)


def _after_last_newline(buf: np.ndarray, lo: int, hi: int) -> int:
    """One past the last newline in ``buf[:hi]`` at or after ``lo``, or 0 if there is none
    (searched backwards a window at a time: lines are short, so one window usually does)."""
    while hi > lo:
        a = max(lo, hi - (1 << 16))
        found = np.flatnonzero(buf[a:hi] == 10)
        if len(found):
            return a + int(found[-1]) + 1
        hi = a
    return 0


def parse(path: Path, raw_sha256: str | None = None) -> tuple[dict[str, Any], str] | None:
    """``(Trace fields but name and sha256, sha256 of the uncompressed content)`` or None.
    ``raw_sha256``, the file's sha256 if known, saves hashing a plain file twice."""
    parsed = _parse_file(path, content_sha=True, raw_sha256=raw_sha256)
    if parsed is None:
        return None
    fields, sha = parsed
    assert sha is not None
    return fields, sha


def _parse_file(
    path: Path, *, content_sha: bool, raw_sha256: str | None
) -> tuple[dict[str, Any], str | None] | None:
    """The fields and, if ``content_sha``, the content's sha256 (a plain file's is
    ``raw_sha256`` when given; None when not asked for)."""
    try:
        size = path.stat().st_size
        with path.open("rb") as f:
            gzipped = f.read(2) == b"\x1f\x8b"
        known = None if gzipped or not content_sha else raw_sha256
        sha = hashlib.sha256() if content_sha and known is None else None
        # Plain files: exact upper bounds (a request line has >= _MIN_LINE bytes, an id >= 2);
        # gzip: a guess of 8x compression, grown if needed.
        builder = _Builder(size if not gzipped else 8 * size)
        for data in _whole_lines(path, sha):
            if not builder.feed(data):
                return None
        fields = builder.result()
    except (_GiveUp, OSError, zlib.error, EOFError):
        return None
    if fields is None:
        return None
    return fields, known or (sha.hexdigest() if sha is not None else None)


def parse_body(body: bytes) -> dict[str, Any] | None:
    """The :class:`~prefixsim.trace.Trace` fields (but name and sha256) of uncompressed JSONL
    already in memory (without its byte order mark), or None when the exact parser must run. The
    ordinary loader uses it for files with session ids, which its pyarrow path does not read."""
    builder = _Builder(len(body))
    whole = np.frombuffer(body, np.uint8)
    pos = 0
    while pos < len(body):  # views of whole lines, about CHUNK bytes each, not copied
        stop = body.find(b"\n", min(pos + CHUNK, len(body)) - 1) + 1 or len(body)
        if not builder.feed(whole[pos:stop]):
            return None
        pos = stop
    return builder.result()


class _Column:
    """An output column written in place: one large ``np.empty`` allocation (its pages become
    resident only as they are written), grown by doubling when a gzip file outgrows the guess.
    The result is a view of the written part, so nothing is concatenated or copied at the end
    and no freed pieces linger in the allocator."""

    def __init__(self, dtype: type[np.generic], capacity: int) -> None:
        self.data = np.empty(max(capacity, 1024), dtype=dtype)
        self.n = 0

    def room(self, k: int) -> np.ndarray:
        """A writable slice for the next ``k`` values (call :meth:`done` after filling it)."""
        if self.n + k > len(self.data):
            grown = np.empty(max(2 * len(self.data), self.n + k), dtype=self.data.dtype)
            grown[: self.n] = self.data[: self.n]
            self.data = grown
        return self.data[self.n : self.n + k]

    def done(self, k: int) -> None:
        self.n += k

    def result(self) -> np.ndarray:
        return self.data[: self.n]


_MIN_LINE = len('{"timestamp":0,"input_length":0,"output_length":0,"hash_ids":[]}')


_BYTES_PER_ID_GUESS = 16
"""The id table starts with one entry per this many bytes of text (dense Mooncake ids: about one
distinct id per 20 bytes), so that it rarely grows: each doubling copies it into fresh pages
(0.66 s for the 10M-request trace's 142M ids when it started at 2**20 entries, against 0.26 s
for one table of the final size)."""


def _zeros_table(entries: int) -> np.ndarray:
    """A zero-filled id table of at least 2**20 entries, at most 2**31 (numpy asks the kernel
    for zero pages: only the entries written cost memory). Falls back to 2**20 entries where the
    address space is short; the table then grows as needed."""
    entries = min(max(entries, 1 << 20), _MAX_ID + 1)
    try:
        return np.zeros(entries, dtype=np.int32)
    except MemoryError:
        return np.zeros(1 << 20, dtype=np.int32)


class _Builder:
    """The trace's arrays, built a piece of whole lines at a time (:meth:`feed`)."""

    def __init__(self, text_bytes: int) -> None:
        per_request = text_bytes // _MIN_LINE + 1
        self.columns = {
            "timestamps": _Column(np.float64, per_request),
            "input_lengths": _Column(np.int64, per_request),
            "output_lengths": _Column(np.int64, per_request),
            "counts": _Column(np.int64, per_request),
            "line_numbers": _Column(np.int64, per_request),
            "session_keys": _Column(np.int64, per_request),
        }
        self.block_ids = _Column(np.int32, text_bytes // 2 + 1)
        self.table = _zeros_table(text_bytes // _BYTES_PER_ID_GUESS)
        self.next_id = 0
        self.line = 1
        self.strings: dict[bytes, int] = {}
        self.sessions = False
        self.scratch = np.empty(0, np.int64)  # string spans; reused

    def _scratch(self, n: int) -> np.ndarray:
        if len(self.scratch) < n:  # reused, so its pages are faulted in once, not per piece
            self.scratch = np.empty(max(n, CHUNK + 2), np.int64)
        return self.scratch

    def feed(self, buf: np.ndarray) -> bool:
        """Parse ``buf`` (uint8, whole lines); False when the exact loader must decide."""
        if buf.flags.writeable:  # one kernel signature (read-only), so numba compiles it once
            buf = buf.view()
            buf.flags.writeable = False
        max_lines = len(buf) // 2 + 1  # blank lines count too; untouched pages cost nothing
        max_ids = len(buf) // 2 + 1  # an id takes 2 bytes at least ("0,")
        ts, ins, outs, counts, lines, skeys = (c.room(max_lines) for c in self.columns.values())
        out_ids = self.block_ids.room(max_ids)
        scratch = self._scratch(2 * max_lines)  # string session ids' spans
        s_start, s_end = scratch[:max_lines], scratch[max_lines : 2 * max_lines]
        i = r = nid = 0
        while True:
            status, i, r, nid, self.line, self.next_id, need = _parse_chunk(
                buf, i, r, nid, self.line, ts, ins, outs, counts, lines, out_ids,
                self.table, self.next_id, skeys, s_start, s_end,
            )  # fmt: skip
            if status != 2:
                break
            # Only dense enough ids get a direct table (it is 4 bytes per possible id).
            if need > min(_MAX_ID, 8 * (self.block_ids.n + max_ids) + (1 << 20)):
                return False  # sparse or huge ids: the exact loader sorts them
            grown = np.zeros(max(2 * len(self.table), need + 1), dtype=np.int32)  # lazily 0
            grown[: len(self.table)] = self.table
            self.table = grown
        if status != 0:
            return False
        if r and not self._session_keys(buf, skeys[:r], s_start, s_end):
            return False
        for c in self.columns.values():
            c.done(r)
        self.block_ids.done(nid)
        return True

    def _session_keys(
        self, buf: np.ndarray, keys: np.ndarray, s_start: np.ndarray, s_end: np.ndarray
    ) -> bool:
        """Number the piece's string session ids (bytes without escapes: equal strings have
        equal bytes); False if one is not valid UTF-8 (the exact loader reports the line)."""
        if not self.sessions and bool((keys != NO_SESSION).any()):
            self.sessions = True
        if not self.sessions:
            return True
        pending = np.flatnonzero(keys == _STRING_PENDING)
        if not len(pending):
            return True
        strings = self.strings
        raw = buf.tobytes()  # one copy of the piece: slicing bytes is cheaper than numpy views
        spans = zip(s_start[pending].tolist(), s_end[pending].tolist(), strict=True)
        texts = [raw[a:b] for a, b in spans]
        if raw.isascii():  # no string to check; new ones numbered in order of first appearance
            add = strings.setdefault
            numbers = [add(text, len(strings)) for text in texts]
        else:
            numbers = []
            for text in texts:
                number = strings.get(text)
                if number is None:
                    try:
                        text.decode("utf-8")
                    except UnicodeDecodeError:
                        return False
                    number = strings[text] = len(strings)
                numbers.append(number)
        keys[pending] = STRING_BASE + np.array(numbers, dtype=np.int64)
        return True

    def result(self) -> dict[str, Any] | None:
        columns = self.columns
        if columns["timestamps"].n == 0:
            return None  # the exact loader names the problem (empty file, blank lines only)
        self.table, self.scratch = np.empty(0, np.int32), np.empty(0, np.int64)  # freed now
        counts = columns.pop("counts").result()
        offsets = np.zeros(len(counts) + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        del counts
        keys = columns.pop("session_keys").result()
        sessions = _dense_sessions(keys) if self.sessions else None
        if sessions is _TOO_MANY:
            return None
        fields: dict[str, Any] = {name: c.result() for name, c in columns.items()}
        fields.update(
            offsets=offsets,
            block_ids=self.block_ids.result(),
            n_blocks=int(self.next_id),
            session_ids=sessions,
        )
        return fields


_TOO_MANY = np.empty(0, np.int64)


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


def _dense_sessions(keys: np.ndarray) -> np.ndarray:
    """Session keys to dense ids ``0, 1, ...`` in order of first appearance, -1 for none (as
    :func:`prefixsim.formats.sessions.dense_session_ids` numbers them)."""
    has = keys != NO_SESSION
    if int(np.count_nonzero(has)) >= 2**31:
        return _TOO_MANY  # dense ids are int32 there
    dense, _ = _dense_ids(keys[has])
    out = np.full(len(keys), -1, np.int64)
    out[has] = dense
    return out


def file_sha256(path: Path) -> str:
    """sha256 of the file's raw bytes, read in chunks into one buffer (no allocation per chunk:
    on a thread, freed chunks would linger in that thread's malloc arena)."""
    h = hashlib.sha256()
    buf = bytearray(1 << 20)
    view = memoryview(buf)
    with path.open("rb", buffering=0) as f:
        while n := f.readinto(buf):
            h.update(view[:n])
    return h.hexdigest()


class _Sha256Thread:
    """:func:`file_sha256` on another thread (hashlib releases the GIL on large updates, the
    parse kernel runs without it), so that it overlaps the parse; :meth:`get` waits for it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.digest: str | None = None
        self.thread = threading.Thread(target=self._run, name="prefixsim-sha256", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.digest = file_sha256(self.path)
        except OSError:
            self.digest = None

    def get(self) -> str | None:
        self.thread.join()
        return self.digest


STREAM_MIN_BYTES = 64 << 20
"""Files smaller than this take the ordinary loader (already fast there)."""


def is_candidate(path: Path) -> bool:
    """A regular file large enough to be worth streaming."""
    try:
        st = os.stat(path)
    except OSError:
        return False
    import stat

    return stat.S_ISREG(st.st_mode) and st.st_size >= STREAM_MIN_BYTES
