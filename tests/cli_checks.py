"""Running the command lines as a user does, and the README's promise for bad input: one line
naming the cause, exit status 2, no traceback (shared by the hostile-input tests)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def run_module(
    module: str,
    *args: str,
    umask: int | None = None,
    cwd: Path | None = None,
    timeout: float = 120,
) -> subprocess.CompletedProcess[str]:
    """``python -m module args...`` in a fresh process (with ``umask`` if given)."""

    def set_umask() -> None:
        if umask is not None:
            os.umask(umask)

    return subprocess.run(
        [sys.executable, "-m", module, *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=timeout,
        cwd=cwd,
        preexec_fn=set_umask if umask is not None else None,
    )


def one_line_exit_2(proc: subprocess.CompletedProcess[str], *fragments: str) -> str:
    """The stderr of a refused command, checked: exit 2, one short line, no traceback, no
    temporary file's name, every fragment present."""
    assert proc.returncode == 2, proc.stderr
    # The first-use compile notice (a cold numba cache) is not part of the refusal.
    err = "\n".join(
        line
        for line in proc.stderr.strip().splitlines()
        if not line.startswith("prefixsim: compil")
    )
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    assert len(err) < 700, err
    assert ".tmp" not in err, err
    for fragment in fragments:
        assert fragment in err, err
    return err
