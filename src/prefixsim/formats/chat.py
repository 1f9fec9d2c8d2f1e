"""Chat traces: JSONL of OpenAI-style chat requests, rendered, tokenized, then hashed.

One request per line::

    {"messages": [{"role": "system", "content": "..."}, {"role": "user", "content": "..."}],
     "timestamp": <ms, optional>, "output_length": <int, optional>}

Each request's prompt is its ``messages`` rendered by the chat template (below), tokenized, and
hashed into chained blocks exactly like a token trace (:mod:`.tokens`). Either every line has a
``timestamp`` or none does; without them, request ``i`` (from 0, in file order) arrives at
``i * 1000 / arrival_rate`` ms. Other keys (``model``, ``max_tokens``, ...) are ignored.

Templates (:data:`TEMPLATES`; ``chat_template`` may also be a per-message template of its own
with ``{role}`` and ``{content}``, rendered with :meth:`str.format_map`, and no suffix):

* ``chatml``: ``<|im_start|>{role}\\n{content}<|im_end|>\\n`` per message, then the generation
  prompt ``<|im_start|>assistant\\n``;
* ``plain``: ``{role}: {content}\\n`` per message, then ``assistant: ``.

Tokenizers: ``bytes`` (built in: the prompt's UTF-8 bytes are its token ids, 0..255) or the path
of a local ``tokenizer.json`` read by the optional ``tokenizers`` package (nothing is
downloaded), encoded without added special tokens.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
import string
from typing import Any

import numpy as np

from ..errors import ParameterError, TraceError, shown, shown_text
from . import TraceOptions
from .sessions import check_session_id, dense_session_ids
from .tokens import TokenTable, check_fields, check_output_length, check_timestamp, wrong_value

TEMPLATES: dict[str, tuple[str, str]] = {
    "chatml": ("<|im_start|>{role}\n{content}<|im_end|>\n", "<|im_start|>assistant\n"),
    "plain": ("{role}: {content}\n", "assistant: "),
}
"""Named chat templates: (per-message template, generation prompt appended at the end)."""

CHAT_FIELDS = {
    "messages": "a list of objects with role and content strings",
    "timestamp": "optional, a finite number (arrival time, ms)",
    "output_length": "optional, a non-negative integer (output tokens)",
}


def template_parts(chat_template: str) -> tuple[str, str]:
    """(per-message template, suffix) of a named or custom template; a custom one is checked:
    its only replacement fields are ``{role}`` and ``{content}`` (``{content}`` at least once),
    with no attribute, index, conversion or format spec. ``str.format_map`` would otherwise
    evaluate ``{role.upper}`` (a method's repr in the prompt) or ``{role[x]}`` (a TypeError)."""
    if not isinstance(chat_template, str):
        raise ParameterError("chat_template", chat_template, "expected a string")
    if chat_template in TEMPLATES:
        return TEMPLATES[chat_template]
    allowed = f"one of {', '.join(TEMPLATES)} or a template with {{role}} and {{content}}"
    try:
        fields = [
            (name, spec, conversion)
            for _, name, spec, conversion in string.Formatter().parse(chat_template)
            if name is not None
        ]
    except ValueError as e:  # an unmatched brace
        raise ParameterError("chat_template", chat_template, f"{allowed} ({e})") from None
    for name, spec, conversion in fields:
        if name not in ("role", "content") or spec or conversion:
            field = (
                "{"
                + name
                + (f"!{conversion}" if conversion else "")
                + (f":{spec}" if spec else "")
                + "}"
            )
            raise ParameterError(
                "chat_template",
                chat_template,
                f"{allowed}: the only fields are {{role}} and {{content}}, without attributes, "
                f"indices, conversions or format specs; got {shown(field)}",
            )
    if not any(name == "content" for name, _, _ in fields):
        raise ParameterError("chat_template", chat_template, f"{allowed}: no {{content}}")
    return chat_template, ""


def render(messages: list[dict[str, str]], chat_template: str = "chatml") -> str:
    """The prompt text of ``messages`` under ``chat_template``."""
    each, suffix = template_parts(chat_template)
    return "".join(each.format_map(m) for m in messages) + suffix


MAX_TOKENIZER_BYTES = 1 << 30
"""The largest ``tokenizer.json`` read (1 GiB; the largest published ones are tens of MB)."""


def read_tokenizer_file(path: str) -> bytes:
    """The bytes of a ``tokenizer.json``. Only a regular file of at most
    :data:`MAX_TOKENIZER_BYTES` is read: a named pipe would block forever and ``/dev/zero``
    never ends (a MemoryError), so they are refused without reading, as the trace readers do
    (opened non-blocking, checked on the open descriptor). A :class:`ParameterError` naming
    ``tokenizer`` otherwise."""
    expected = "bytes or a readable tokenizer.json file"

    def bad(why: str) -> ParameterError:
        return ParameterError("tokenizer", path, f"{expected} ({why})")

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as e:
        with contextlib.suppress(OSError):  # a socket cannot be opened: say what it is
            if not stat.S_ISREG(os.stat(path).st_mode):
                raise bad("not a regular file") from None
        raise bad(e.strerror or type(e).__name__) from None
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise bad("a directory")
        if not stat.S_ISREG(st.st_mode):
            raise bad("not a regular file")
        if st.st_size > MAX_TOKENIZER_BYTES:
            raise bad(f"{st.st_size} bytes, more than {MAX_TOKENIZER_BYTES}")
        os.set_blocking(fd, True)
        with os.fdopen(fd, "rb") as f:
            fd = -1  # owned by f now
            data = f.read(MAX_TOKENIZER_BYTES + 1)
    except OSError as e:
        raise bad(e.strerror or type(e).__name__) from None
    finally:
        if fd >= 0:
            os.close(fd)
    if len(data) > MAX_TOKENIZER_BYTES:  # grew after the check
        raise bad(f"more than {MAX_TOKENIZER_BYTES} bytes")
    return data


def tokenizer_file_sha(path: str) -> str:
    """sha256 of a ``tokenizer.json`` (part of the parsed trace's identity)."""
    return hashlib.sha256(read_tokenizer_file(path)).hexdigest()


def tokenize(texts: list[str], tokenizer: str) -> list[np.ndarray]:
    """Token ids (int64) of each text."""
    if tokenizer == "bytes":
        return [np.frombuffer(t.encode("utf-8"), dtype=np.uint8).astype(np.int64) for t in texts]
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise ParameterError(
            "tokenizer",
            tokenizer,
            "bytes, or install the optional tokenizers package to read a tokenizer.json "
            "(pip install 'prefixsim[tokenizers]')",
        ) from None
    data = read_tokenizer_file(tokenizer)  # not Tokenizer.from_file: it would open a FIFO
    try:
        tok = Tokenizer.from_str(data.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise ParameterError(
            "tokenizer", tokenizer, f"a valid tokenizer.json (not UTF-8 at byte {e.start + 1})"
        ) from None
    except Exception as e:  # the Rust side raises plain Exception on a bad file
        raise ParameterError(
            "tokenizer", tokenizer, f"a valid tokenizer.json ({shown_text(str(e))})"
        ) from None
    encodings = tok.encode_batch(texts, add_special_tokens=False)
    return [np.array(e.ids, dtype=np.int64) for e in encodings]


def parse_chat(body: bytes, display: str, opts: TraceOptions) -> TokenTable:
    """Parse uncompressed chat JSONL (BOM stripped) into a :class:`TokenTable`."""
    from .jsonl import decoded_lines

    template_parts(opts.chat_template)  # a bad template fails before the parse
    texts: list[str] = []
    timestamps: list[float | None] = []
    outputs: list[int] = []
    line_numbers: list[int] = []
    sessions: list[tuple[str, Any] | None] = []
    for line_number, obj in decoded_lines(body, display):
        messages = _check_messages(obj, display, line_number)
        has_ts = "timestamp" in obj
        if timestamps and has_ts != (timestamps[0] is not None):
            first = line_numbers[0]
            raise TraceError(
                display,
                f"{'present' if has_ts else 'missing'} here but "
                f"{'missing' if has_ts else 'present'} on line {first}; "
                "expected on every line or on none",
                line=line_number,
                field="timestamp",
            )
        timestamps.append(check_timestamp(obj, display, line_number) if has_ts else None)
        outputs.append(check_output_length(obj, display, line_number))
        sessions.append(check_session_id(obj, display, line_number))
        texts.append(render(messages, opts.chat_template))
        line_numbers.append(line_number)
    if not line_numbers:
        raise TraceError(display, "no requests; expected one JSON object per line")
    ids = tokenize(texts, opts.tokenizer)
    offsets = np.zeros(len(ids) + 1, dtype=np.int64)
    np.cumsum([len(i) for i in ids], out=offsets[1:])
    if timestamps[0] is None:
        ts = np.arange(len(texts), dtype=np.float64) * (1000.0 / opts.arrival_rate)
    else:
        ts = np.array(timestamps, dtype=np.float64)
    return TokenTable(
        timestamps=ts,
        output_lengths=np.array(outputs, dtype=np.int64),
        token_offsets=offsets,
        tokens=np.concatenate(ids) if ids else np.empty(0, dtype=np.int64),
        line_numbers=np.array(line_numbers, dtype=np.int64),
        session_ids=dense_session_ids(sessions),
    )


def _not_unicode(role: str, content: str) -> str | None:
    """What makes ``role`` or ``content`` unencodable (a lone surrogate, which JSON's ``\\ud800``
    escape gives and UTF-8 cannot hold), or None. Strings of text encode: only then is the
    search for the character paid."""
    for key, text in (("role", role), ("content", content)):
        if text.isascii():
            continue
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as e:
            char = text[e.start]
            return (
                f"{key} with a lone surrogate ({ascii(char)[1:-1]}) at character {e.start}, "
                "which is not valid Unicode text"
            )
    return None


def _check_messages(obj: Any, display: str, line: int) -> list[dict[str, str]]:
    from .jsonl import _describe

    check_fields(obj, ("messages",), CHAT_FIELDS, display, line)
    messages = obj["messages"]
    if type(messages) is not list:
        raise wrong_value(display, line, "messages", CHAT_FIELDS["messages"], messages)
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            got = _describe(m)
        elif type(m.get("role")) is not str:
            got = f"role {_describe(m.get('role'))}"
        elif type(m.get("content")) is not str:
            got = f"content {_describe(m.get('content'))}"
        elif (bad := _not_unicode(m["role"], m["content"])) is not None:
            got = bad
        else:
            continue
        raise TraceError(
            display,
            f"expected {CHAT_FIELDS['messages']}, element {i} has {got}",
            line=line,
            field="messages",
        )
    return [{"role": m["role"], "content": m["content"]} for m in messages]
