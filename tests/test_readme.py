"""Every shell and Python block of the README runs as written, in order, in one empty folder.

A user goes through the README top to bottom: each block must run where it stands, with the
files the blocks before it made. The shell blocks run in ``bash`` (``set -e``) with ``python``
this interpreter; the Python blocks run in one namespace. Two things are not run, both visible
in the README: a line whose comment says ``placeholder`` (it stands for a trace, a tokenizer or
a scheduler of the user's: :data:`PLACEHOLDERS` lists what one looks like, and the fast test
below holds every such line marked), and the set-up block (``make run``, ``make test``: CI
runs those itself, ``.ci/run``). The sweeps run with ``plot=false`` added: the figures have
their own tests, and drawing them would double this test's time.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
SHELL = ("bash", "sh", "shell")
PLACEHOLDERS = (
    "path/to/",
    "/data/",
    "/models/",
    "tcp://scheduler",
    "my traces/",
    "outputs/2026-11-30/",
)
"""What stands for something of the user's in a command (a file, a folder, a host)."""
MARK = re.compile(r"#.*\bplaceholder\b")
SETUP = ("make run", "make test", "pip install")  # set-up, not examples

PRELUDE = """set -euo pipefail
python() {  # the sweeps without figures (tested on their own)
    if [ "${1-}" = -m ] && [ "${2-}" = sweep ]; then command python "$@" plot=false
    else command python "$@"; fi
}
"""


def blocks(text: str) -> list[tuple[str, str, int]]:
    """(language, code, line of the fence) of every fenced block, in order."""
    out = []
    for m in re.finditer(r"^```(\w*)\n(.*?)^```", text, flags=re.DOTALL | re.MULTILINE):
        out.append((m.group(1), m.group(2), text.count("\n", 0, m.start()) + 1))
    return out


def command_lines(code: str) -> list[str]:
    """A shell block's commands, continuation lines joined."""
    joined = re.sub(r"\\\n\s*", " ", code)
    return [line for line in joined.splitlines() if line.strip()]


def code_part(line: str) -> str:
    """A line without its trailing comment (a ``#`` after a space, outside quotes, roughly)."""
    return re.split(r"\s#", line, maxsplit=1)[0]


def runnable(code: str) -> str:
    """A shell block as run: placeholder lines and the set-up commands commented out."""
    out = []
    for line in command_lines(code):
        skip = MARK.search(line) or line.strip().startswith(SETUP)
        out.append(f"# not run: {line}" if skip else line)
    return "\n".join(out) + "\n"


def test_the_readme_has_blocks_to_run() -> None:
    found = blocks(README.read_text())
    assert sum(lang == "python" for lang, _, _ in found) >= 4
    assert sum(lang in SHELL for lang, _, _ in found) >= 10


def test_placeholders_are_marked_and_only_they() -> None:
    # issue 21: placeholders were not marked, so a test (or a user) could not tell them
    for lang, code, line in blocks(README.read_text()):
        if lang not in (*SHELL, "python"):
            continue
        lines = command_lines(code) if lang in SHELL else code.splitlines()
        for text in lines:
            has = any(p in code_part(text) for p in PLACEHOLDERS)
            if lang == "python":  # runs as a whole: a placeholder only in a comment
                assert not has, f"README.md:{line}: a placeholder in Python code: {text}"
            else:
                assert has == bool(MARK.search(text)), f"README.md:{line}: {text}"


def test_every_file_a_command_reads_is_made_before() -> None:
    # issue 21: "Your own traces" used chats.jsonl and provider_trace.jsonl before the block
    # that made them. A static check of the order (the slow test below runs it all).
    made: set[str] = set()
    name = r"([\w./-]+\.jsonl(?:\.gz)?)"
    reads = re.compile(r"(?:trace=|prefixsim(?:\.convert)? |load_trace\(\")" + name)
    writes = re.compile(r"(?:> ?|open\(\"|synth |\.jsonl \S*?)" + name)
    for lang, code, line in blocks(README.read_text()):
        if lang not in (*SHELL, "python"):
            continue
        for text in code.splitlines():
            if MARK.search(text):
                continue
            for name in reads.findall(code_part(text)):
                assert name in made, f"README.md:{line}: {name} is read before it is made"
            made.update(writes.findall(code_part(text)))


@pytest.mark.slow
def test_every_block_runs_in_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shim = tmp_path / "bin"
    shim.mkdir()
    for name in ("python", "python3"):  # a script, not a link: a venv's python finds its
        (shim / name).write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')  # pyvenv.cfg
        (shim / name).chmod(0o755)
    work = tmp_path / "work"
    work.mkdir()
    env = {**os.environ, "PATH": f"{shim}{os.pathsep}{os.environ['PATH']}", "MPLBACKEND": "Agg"}
    env.pop("HYDRA_FULL_ERROR", None)
    monkeypatch.chdir(work)
    monkeypatch.setenv("MPLBACKEND", "Agg")
    namespace: dict[str, object] = {"__name__": "__readme__"}
    for lang, code, line in blocks(README.read_text()):
        if lang == "python":
            exec(compile(code, f"README.md:{line} (python)", "exec"), namespace)
        elif lang in SHELL:
            done = subprocess.run(
                ["bash", "-c", PRELUDE + runnable(code)],
                cwd=work,
                env=env,
                capture_output=True,
                text=True,
                timeout=900,
                check=False,
            )
            assert done.returncode == 0, f"README.md:{line}: exit {done.returncode}\n{done.stderr}"
