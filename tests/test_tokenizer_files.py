"""A ``--tokenizer`` path is read like a trace file: a regular file of bounded size, or one
line naming ``tokenizer`` (audit of issues 21 and 22, Fail 9: a FIFO hung, ``/dev/zero`` was
a MemoryError's traceback). The same reader serves the CLI, the API and the sweep."""

from __future__ import annotations

import os
import resource
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from cli_checks import one_line_exit_2
from prefixsim import ParameterError, load_trace
from prefixsim.formats import TraceOptions
from prefixsim.formats import chat as chat_format

CHATS = '{"messages": [{"role": "user", "content": "Hello there, how are you?"}]}\n'


def _limited() -> None:  # old code read /dev/zero until memory ran out: cap it
    resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))


def _run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,  # a FIFO blocked forever on the old code: a timeout is a failure
        cwd=cwd,
        preexec_fn=_limited,
    )


def _special(kind: str, tmp_path: Path) -> str:
    if kind == "fifo":
        path = tmp_path / "tok.fifo"
        os.mkfifo(path)
        return str(path)
    if kind == "socket":
        path = tmp_path / "tok.sock"
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(path))
        sock.close()
        return str(path)
    if kind == "directory":
        (tmp_path / "tok.d").mkdir()
        return str(tmp_path / "tok.d")
    return kind  # a device


SPECIAL = ["fifo", "socket", "directory", "/dev/zero", "/dev/null", "/dev/urandom"]


@pytest.mark.parametrize("kind", SPECIAL)
def test_the_cli_refuses_a_tokenizer_that_is_not_a_regular_file(tmp_path: Path, kind: str) -> None:
    (tmp_path / "chats.jsonl").write_text(CHATS)
    tok = _special(kind, tmp_path)
    proc = _run("prefixsim", "chats.jsonl", "--block-size", "4", "--tokenizer", tok, cwd=tmp_path)
    one_line_exit_2(proc, "tokenizer", "a directory" if kind == "directory" else "regular file")


@pytest.mark.parametrize("kind", ["fifo", "/dev/zero"])
def test_the_sweep_refuses_it_before_the_run_folder(tmp_path: Path, kind: str) -> None:
    (tmp_path / "chats.jsonl").write_text(CHATS)
    tok = _special(kind, tmp_path)
    proc = _run(
        "sweep", "trace=chats.jsonl", "block_size=4", f"tokenizer={tok}", "plot=false",
        cwd=tmp_path,
    )  # fmt: skip
    one_line_exit_2(proc, "tokenizer", "regular file")
    assert not (tmp_path / "outputs").exists()


# in this process only what cannot block or exhaust memory on a regression (see above)
@pytest.mark.parametrize("kind", ["socket", "directory", "/dev/null"])
def test_the_api_refuses_it_naming_tokenizer(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "chats.jsonl"
    path.write_text(CHATS)
    with pytest.raises(ParameterError, match="tokenizer"):
        load_trace(path, block_size=4, options=TraceOptions(tokenizer=_special(kind, tmp_path)))


def test_a_tokenizer_past_the_size_bound_is_refused_without_reading(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "chats.jsonl"
    path.write_text(CHATS)
    big = tmp_path / "tokenizer.json"
    big.write_bytes(b" " * 2048)
    monkeypatch.setattr(chat_format, "MAX_TOKENIZER_BYTES", 1024)
    with pytest.raises(ParameterError, match="2048 bytes, more than 1024"):
        load_trace(path, block_size=4, options=TraceOptions(tokenizer=str(big)))


def test_a_tokenizer_that_is_not_utf8_is_one_line(tmp_path: Path) -> None:
    pytest.importorskip("tokenizers")
    path = tmp_path / "chats.jsonl"
    path.write_text(CHATS)
    bad = tmp_path / "tokenizer.json"
    bad.write_bytes(b'{"version": "\xff"}')
    with pytest.raises(ParameterError, match=r"tokenizer.*not UTF-8"):
        load_trace(path, block_size=4, options=TraceOptions(tokenizer=str(bad)))
