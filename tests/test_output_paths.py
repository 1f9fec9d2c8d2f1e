"""What ``python -m prefixsim -o``, ``prefixsim.convert`` and ``prefixsim.synth`` write to
(issue 22): only a regular file or a new path (a named pipe or ``/dev/null`` used to be
replaced by a regular file), with the mode the umask gives (issue 21: 0600 whatever the
umask), and errors that name the user's path, never the temporary file's."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from cli_checks import one_line_exit_2, run_module

TOKENS = json.dumps({"timestamp": 0, "token_ids": list(range(40))}) + "\n"


def commands(src: Path, out: str) -> dict[str, tuple[str, ...]]:
    return {
        "report": ("prefixsim", str(src), "--block-size", "4", "-o", out),
        "convert": ("prefixsim.convert", str(src), out, "--block-size", "4"),
        "synth": ("prefixsim.synth", out, "--requests", "5"),
        "synth-tokens": ("prefixsim.synth", out, "--requests", "5", "--format", "tokens"),
    }


KINDS = ["report", "convert", "synth", "synth-tokens"]


@pytest.fixture
def src(tmp_path: Path) -> Path:
    path = tmp_path / "t.jsonl"
    path.write_text(TOKENS)
    return path


@pytest.mark.parametrize("kind", KINDS)
def test_a_named_pipe_is_refused_not_replaced(tmp_path: Path, src: Path, kind: str) -> None:
    fifo = tmp_path / "out.jsonl"
    os.mkfifo(fifo)
    module, *args = commands(src, str(fifo))[kind]
    one_line_exit_2(run_module(module, *args), f"{fifo}: is a named pipe")
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    assert {p.name for p in tmp_path.iterdir()} == {"t.jsonl", "out.jsonl"}  # no temporary


@pytest.fixture
def null_device(tmp_path: Path) -> Path:
    """A character device to write to: as root, a clone of /dev/null (major 1, minor 3) made in
    the test's folder, so that a regression replaces the clone and never the system's
    /dev/null (which the old code did, run as root); otherwise /dev/null itself (a user cannot
    replace it: its folder is not writable)."""
    if os.geteuid() != 0:
        return Path("/dev/null")
    clone = tmp_path / "null"
    try:
        os.mknod(clone, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    except OSError:
        pytest.skip("root without the right to make a device node")
    return clone


@pytest.mark.parametrize("kind", KINDS)
def test_a_device_is_refused_not_replaced(src: Path, null_device: Path, kind: str) -> None:
    before = os.stat(null_device)
    module, *args = commands(src, str(null_device))[kind]
    one_line_exit_2(run_module(module, *args), f"{null_device}: is a character device")
    after = os.stat(null_device)
    assert stat.S_ISCHR(after.st_mode) and after.st_ino == before.st_ino


@pytest.mark.parametrize("kind", KINDS)
def test_a_directory_is_refused(tmp_path: Path, src: Path, kind: str) -> None:
    module, *args = commands(src, str(tmp_path))[kind]
    one_line_exit_2(run_module(module, *args), f"{tmp_path}: is a directory")


@pytest.mark.parametrize("kind", KINDS)
def test_a_missing_directory_names_the_users_path(tmp_path: Path, src: Path, kind: str) -> None:
    out = tmp_path / "no" / "out.jsonl"
    module, *args = commands(src, str(out))[kind]
    one_line_exit_2(run_module(module, *args), f"{out}: no such directory")


@pytest.mark.parametrize("kind", KINDS)
def test_an_unwritable_directory_names_the_users_path(src: Path, kind: str) -> None:
    out = "/proc/prefixsim-out.jsonl"  # procfs: no file can be created there, even by root
    if not Path("/proc/self").exists():
        pytest.skip("no procfs here")
    module, *args = commands(src, out)[kind]
    one_line_exit_2(run_module(module, *args), f"{out}: cannot write")


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_files_get_the_umask_mode(tmp_path: Path, src: Path, kind: str, umask: int) -> None:
    out = tmp_path / "out.jsonl"
    module, *args = commands(src, str(out))[kind]
    proc = run_module(module, *args, umask=umask)
    assert proc.returncode == 0, proc.stderr
    assert stat.S_IMODE(os.stat(out).st_mode) == 0o666 & ~umask
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


@pytest.mark.parametrize("kind", KINDS)
def test_an_existing_regular_file_is_replaced(tmp_path: Path, src: Path, kind: str) -> None:
    out = tmp_path / "out.jsonl"
    out.write_text("old\n")
    module, *args = commands(src, str(out))[kind]
    assert run_module(module, *args).returncode == 0
    assert out.read_text() != "old\n"


def test_report_output_says_where_it_wrote(tmp_path: Path, src: Path) -> None:
    out = tmp_path / "report.json"
    proc = run_module("prefixsim", str(src), "--block-size", "4", "-o", str(out))
    assert proc.returncode == 0 and proc.stdout == ""
    assert proc.stderr.startswith(f"{out}: report of 1 requests written")
    assert json.loads(out.read_text())["n_requests"] == 1


def test_an_invalid_output_is_refused_before_the_replay(tmp_path: Path, src: Path) -> None:
    """The output is checked first: a long replay is not wasted on a path it cannot write."""
    bad = tmp_path / "no" / "r.json"
    err = one_line_exit_2(run_module("prefixsim", str(src), "--block-size", "4", "-o", str(bad)))
    assert "no such directory" in err
