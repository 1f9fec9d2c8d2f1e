"""Every Python block of the README runs as written, in order, in one namespace.

The blocks run in an empty folder. A block that reads a run directory (``outputs/...``) gets it
from the README's own command: the ``python -m sweep`` line of the README that writes that
``out_dir``, or, for a dated folder like the one the user's command prints, the user's command
itself. The sweeps run with ``plot=false`` (the figures have their own tests).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
USER_COMMAND = ["capacity=1024,2048,4096", "policy=S3FIFO,LRU"]
RUN_DIR = re.compile(r"""["'](outputs/[^"'{}]+?)(?:/(?:results|per_request)\.parquet)?["']""")


def python_blocks(text: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", text, flags=re.DOTALL | re.MULTILINE)


def sweep_commands(text: str) -> dict[str, list[str]]:
    """out_dir -> the arguments of the README's ``python -m sweep`` command that writes it."""
    out: dict[str, list[str]] = {}
    joined = re.sub(r"\\\n\s*", " ", text)  # continuation lines
    for line in joined.splitlines():
        if "python -m sweep " not in line:
            continue
        args = shlex.split(line.split("python -m sweep ", 1)[1], comments=True)
        for arg in args:
            if arg.startswith("out_dir="):
                out[arg.removeprefix("out_dir=")] = args
    return out


def test_the_readme_has_blocks_to_run() -> None:
    text = README.read_text()
    assert len(python_blocks(text)) >= 4
    assert "outputs/small_ratio" in sweep_commands(text)


@pytest.mark.slow
def test_every_python_block_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = README.read_text()
    commands = sweep_commands(text)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MPLBACKEND", "Agg")
    namespace: dict[str, object] = {"__name__": "__readme__"}
    for i, block in enumerate(python_blocks(text)):
        for run_dir in dict.fromkeys(RUN_DIR.findall(block)):
            if not (tmp_path / run_dir).is_dir():
                args = [a for a in commands.get(run_dir, USER_COMMAND) if "out_dir=" not in a]
                subprocess.run(
                    [sys.executable, "-m", "sweep", *args, f"out_dir={run_dir}", "plot=false"],
                    check=True,
                    capture_output=True,
                    env={**os.environ, "MPLBACKEND": "Agg"},
                )
        code = compile(block, f"README.md python block {i + 1}", "exec")
        exec(code, namespace)
