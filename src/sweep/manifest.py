"""What ``manifest.json`` records about the environment: versions, git commit, host."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

PACKAGES = (
    "prefixsim",
    "numpy",
    "numba",
    "llvmlite",
    "pyarrow",
    "pandas",
    "hydra-core",
    "omegaconf",
    "joblib",
    "tqdm",
    "dask",
    "distributed",
)


def versions() -> dict[str, str | None]:
    """Installed version of each package the sweep uses (None when not installed)."""
    out: dict[str, str | None] = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def git_info(path: Path | None = None) -> dict[str, Any] | None:
    """Commit of the git checkout holding the sweep's source (None outside one, or before the
    first commit) and whether tracked files differ from it. Read-only: takes no lock."""
    where = path or Path(__file__).resolve().parent
    env = {**os.environ, "GIT_OPTIONAL_LOCKS": "0"}

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(
                ["git", "-C", str(where), *args],
                capture_output=True,
                text=True,
                timeout=10,
                env=env,
                check=False,
            )
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    commit = git("rev-parse", "--verify", "--quiet", "HEAD")
    if not commit:
        return None
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"commit": commit, "dirty": bool(status) if status is not None else None}


def host() -> dict[str, Any]:
    return {
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "executable": sys.executable,
    }
