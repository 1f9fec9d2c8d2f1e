"""The compiled strict-subset parser of Mooncake JSONL lines (numba), used by
:mod:`.mooncake_stream`: which subset it reads, and how, is documented there. Every function
here is a kernel or a constant the kernels read; the byte codes are ASCII (``10`` newline,
``34`` ``"``, ``44`` ``,``, ``58`` ``:``, ``91``/``93`` brackets, ``123``/``125`` braces).

Every subscript is ``a[ix(i)]`` (:data:`~prefixsim.policies.base.ix`), so numba skips its
negative-index fix-up: byte positions start at a non-negative ``i`` and only grow, request and
id positions (``r``, ``nid``) only grow from 0, an id ``v`` is read from digits alone (no sign)
and is tested ``< len(table)`` before it indexes the table, and ``k`` counts digits or key bytes.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ..policies.base import ix


@njit(cache=True)
def _skip_ws(buf, i, end):
    while i < end and (buf[ix(i)] == 32 or buf[ix(i)] == 9 or buf[ix(i)] == 13):
        i += 1
    return i


@njit(cache=True)
def _minus(buf, i, end):
    """(whether ``buf[i]`` is a '-', the index after it)."""
    if i < end and buf[ix(i)] == 45:
        return True, i + 1
    return False, i


@njit(cache=True)
def _digits(buf, i, end, v):
    """(``v`` followed by the decimal digits from ``buf[i]`` on, the index after them)."""
    while i < end and 48 <= buf[ix(i)] <= 57:
        v = v * 10 + (buf[ix(i)] - 48)
        i += 1
    return v, i


@njit(cache=True)
def _read_int(buf, i, end, max_digits, allow_minus):
    """(value, next index, ok) of a JSON integer at ``buf[i]`` with no fraction or exponent."""
    neg, after = _minus(buf, i, end)
    if neg and not allow_minus:
        return 0, i, False
    start = after
    v, i = _digits(buf, start, end, 0)
    n = i - start
    if n == 0 or n > max_digits or (n > 1 and buf[ix(start)] == 48):
        return 0, i, False
    if i < end and (buf[ix(i)] == 46 or buf[ix(i)] == 101 or buf[ix(i)] == 69):  # '.', 'e', 'E'
        return 0, i, False
    return (-v if neg else v), i, True


_POW10 = np.array([10.0**k for k in range(23)])  # exact doubles


@njit(cache=True)
def _read_decimal(buf, i, end):
    """(value, next index, ok) of a JSON number without exponent and with at most 15 digits,
    read exactly: the digits form an integer m < 2**53 and the value is m / 10**k with k <= 22,
    one correctly rounded IEEE division of two exact doubles (Clinger's fast path), so it equals
    Python's ``float(text)``."""
    neg, start = _minus(buf, i, end)
    m, i = _digits(buf, start, end, 0)
    n_int = i - start
    if n_int == 0 or (n_int > 1 and buf[ix(start)] == 48):
        return 0.0, i, False
    k = 0
    if i < end and buf[ix(i)] == 46:  # '.'
        m, j = _digits(buf, i + 1, end, m)
        k = j - (i + 1)
        i = j
        if k == 0:
            return 0.0, i, False
    if n_int + k > 15 or (i < end and (buf[ix(i)] == 101 or buf[ix(i)] == 69)):
        return 0.0, i, False
    v = float(m) / _POW10[ix(k)]
    return (-v if neg else v), i, True


# Key codes: 1 timestamp, 2 input_length, 3 output_length, 4 hash_ids, 5 session_id, 0 other.
_K_TS = np.frombuffer(b"timestamp", dtype=np.uint8).copy()
_K_IN = np.frombuffer(b"input_length", dtype=np.uint8).copy()
_K_OUT = np.frombuffer(b"output_length", dtype=np.uint8).copy()
_K_IDS = np.frombuffer(b"hash_ids", dtype=np.uint8).copy()
_K_SESSION = np.frombuffer(b"session_id", dtype=np.uint8).copy()

NO_SESSION = np.iinfo(np.int64).min
"""Session key of a request without one (absent or ``null``)."""
_STRING_PENDING = NO_SESSION + 1
"""Session key the kernel writes for a string: the chunk's strings are numbered after it."""
STRING_BASE = 1 << 62
"""Session key of the ``k``-th distinct string: ``STRING_BASE + k``. Integer session ids the
kernel reads have at most 18 digits, so ``|value| < 10**18 < 2**60``: the keys of integers,
of strings and ``NO_SESSION`` never collide, and ``"7"`` and ``7`` stay apart."""


@njit(cache=True)
def _same(buf, i, key):
    for k in range(len(key)):  # noqa: SIM110 - numba compiles no generator expressions
        if buf[ix(i + k)] != key[ix(k)]:
            return False
    return True


@njit(cache=True)
def _key_code(buf, i, j):
    n = j - i
    if n == 9 and _same(buf, i, _K_TS):
        return 1
    if n == 12 and _same(buf, i, _K_IN):
        return 2
    if n == 13 and _same(buf, i, _K_OUT):
        return 3
    if n == 8 and _same(buf, i, _K_IDS):
        return 4
    if n == 10 and _same(buf, i, _K_SESSION):
        return 5
    return 0


@njit(cache=True, nogil=True)  # the sha256 thread runs meanwhile
def _parse_chunk(
    buf, i, r, nid, line, ts, ins, outs, counts, lines, out_ids, table, next_id, skeys, s_s, s_e
):
    """Parse the complete lines of ``buf`` from byte ``i`` (it ends at a newline or the end of
    the file), writing request ``r`` on and dense block id ``nid`` on.

    Returns ``(status, i, r, nid, line, next_id, need)``: status 0 when all is read, 1 when the
    exact loader must decide, 2 when an id (``need``) is past the end of ``table``: grow it and
    call again from the returned ``i``, the start of that request's line (ids the partial
    request saw were numbered in order of appearance, so reading it again finds the same ids).

    Block ids are numbered through the direct ``table`` (``dense id + 1``, 0 when unseen: a
    zero-filled table costs no memory until its pages are written). ``skeys[r]``: the request's
    session key (:data:`NO_SESSION`, the integer, or :data:`_STRING_PENDING` with the string's
    bytes at ``buf[s_s[r]:s_e[r]]``)."""
    end = len(buf)
    n_table = len(table)
    while i < end:
        line_start = i
        i = _skip_ws(buf, i, end)
        if i < end and buf[ix(i)] == 10:  # blank line
            i += 1
            line += 1
            continue
        if i >= end:
            break
        if buf[ix(i)] != 123:  # '{'
            return 1, i, r, nid, line, next_id, 0
        i += 1
        seen = 0
        first_id = nid
        skeys[ix(r)] = NO_SESSION
        while True:
            i = _skip_ws(buf, i, end)
            if i >= end or buf[ix(i)] != 34:  # '"'
                return 1, i, r, nid, line, next_id, 0
            j = i + 1
            while j < end and buf[ix(j)] != 34 and buf[ix(j)] != 92 and buf[ix(j)] != 10:
                j += 1
            if j >= end or buf[ix(j)] != 34:
                return 1, i, r, nid, line, next_id, 0
            code = _key_code(buf, i + 1, j)
            if code == 0 or (seen >> code) & 1:
                return 1, i, r, nid, line, next_id, 0
            seen |= 1 << code
            i = _skip_ws(buf, j + 1, end)
            if i >= end or buf[ix(i)] != 58:  # ':'
                return 1, i, r, nid, line, next_id, 0
            i = _skip_ws(buf, i + 1, end)
            if code == 1:
                x, i, ok = _read_decimal(buf, i, end)
                if not ok:
                    return 1, i, r, nid, line, next_id, 0
                ts[ix(r)] = x
            elif code == 5:
                ok = True
                if i + 4 <= end and buf[ix(i)] == 110:  # 'n': null, no session
                    ok = buf[ix(i + 1)] == 117 and buf[ix(i + 2)] == 108 and buf[ix(i + 3)] == 108
                    i += 4
                elif i < end and buf[ix(i)] == 34:  # a string without escapes or control characters
                    j = i + 1
                    while j < end and buf[ix(j)] != 34 and buf[ix(j)] != 92 and buf[ix(j)] >= 32:
                        j += 1
                    ok = j < end and buf[ix(j)] == 34
                    skeys[ix(r)] = _STRING_PENDING
                    s_s[ix(r)] = i + 1
                    s_e[ix(r)] = j
                    i = j + 1
                else:
                    v, i, ok = _read_int(buf, i, end, 18, True)
                    skeys[ix(r)] = v
                if not ok:
                    return 1, i, r, nid, line, next_id, 0
            elif code == 2 or code == 3:
                v, i, ok = _read_int(buf, i, end, 18, False)
                if not ok:
                    return 1, i, r, nid, line, next_id, 0
                if code == 2:
                    ins[ix(r)] = v
                else:
                    outs[ix(r)] = v
            else:
                if i >= end or buf[ix(i)] != 91:  # '['
                    return 1, i, r, nid, line, next_id, 0
                i = _skip_ws(buf, i + 1, end)
                if i < end and buf[ix(i)] == 93:  # ']'
                    i += 1
                else:
                    while True:  # the hot loop: _read_int inlined by hand, ids only
                        start = i
                        v = 0
                        while i < end and 48 <= buf[ix(i)] <= 57:
                            v = v * 10 + (buf[ix(i)] - 48)
                            i += 1
                        n = i - start
                        if n == 0 or n > 18 or (n > 1 and buf[ix(start)] == 48):
                            return 1, i, r, nid, line, next_id, 0
                        if v >= n_table:
                            return 2, line_start, r, first_id, line, next_id, v
                        d = table[ix(v)] - 1
                        if d < 0:
                            d = next_id
                            table[ix(v)] = d + 1
                            next_id += 1
                        out_ids[ix(nid)] = d
                        nid += 1
                        # Then ", " (the usual case), "," or "]"; anything else ('.', 'e',
                        # a sign, a letter) is not an id list of the subset.
                        if i < end and buf[ix(i)] == 44:
                            i += 1
                            if i < end and buf[ix(i)] == 32:
                                i += 1
                            elif i < end and (buf[ix(i)] == 9 or buf[ix(i)] == 13):
                                i = _skip_ws(buf, i, end)
                            continue
                        i = _skip_ws(buf, i, end)
                        if i < end and buf[ix(i)] == 44:  # ','
                            i = _skip_ws(buf, i + 1, end)
                            continue
                        if i < end and buf[ix(i)] == 93:
                            i += 1
                            break
                        return 1, i, r, nid, line, next_id, 0
            i = _skip_ws(buf, i, end)
            if i < end and buf[ix(i)] == 44:
                i += 1
                continue
            if i < end and buf[ix(i)] == 125:  # '}'
                i += 1
                break
            return 1, i, r, nid, line, next_id, 0
        if seen & 0b11110 != 0b11110:
            return 1, i, r, nid, line, next_id, 0
        i = _skip_ws(buf, i, end)
        if i < end and buf[ix(i)] != 10:
            return 1, i, r, nid, line, next_id, 0
        counts[ix(r)] = nid - first_id
        lines[ix(r)] = line
        r += 1
        i += 1
        line += 1
    return 0, i, r, nid, line, next_id, 0
