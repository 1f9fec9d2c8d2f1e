"""A run folder's life around a sweep: who made it, what is left of it, how to come back to it.

* A run interrupted before any point finished leaves no folder behind: the folder (and the
  dated folders above it) this run created is removed when nothing was kept in it
  (:class:`Claim`). A folder that existed before is never removed.
* ``outputs/latest`` (:data:`LATEST`) is a symbolic link to the last run folder kept under
  ``outputs/`` of the current folder, updated by every such run: ``out_dir=outputs/latest``
  resumes the last run, ``python -m sweep.plot outputs/latest`` draws its figures.
* The messages of a run that stopped give the command that resumes it
  (:func:`resume_command`): the same arguments with ``out_dir=`` this run's folder, which a
  default dated ``out_dir`` would not be (``outputs/${now:...}`` is a new folder each time).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shlex
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .store import RunDir
    from .summary import SweepSummary

log = logging.getLogger("sweep")

OUTPUTS = "outputs"
"""The folder of the default ``out_dir`` (``outputs/YYYY-MM-DD/HH-MM-SS``), in the current
folder."""
LATEST = "latest"
"""``outputs/latest``: the last run folder kept under :data:`OUTPUTS`."""


class SweepInterrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM stopped the sweep after its run folder was made; the log said what
    was kept and how to resume."""


@dataclass(frozen=True)
class Claim:
    """What of a run folder's path existed before the run: ``first_new`` is the outermost
    folder this run creates (None: the run folder existed already, it is not this run's)."""

    path: Path
    first_new: Path | None

    @classmethod
    def before(cls, path: Path) -> Claim:
        """Note, before the run folder is made, which of ``path`` and its parents exist."""
        first_new = None
        for folder in (path, *path.parents):
            if os.path.lexists(folder):
                break
            first_new = folder
        return cls(path, first_new)

    def discard_if_nothing_kept(self, kept: bool) -> bool:
        """Remove the run folder this run created when ``kept`` is false (an interrupt before
        any point finished), and the folders above it it created, if they are empty (another
        sweep may have put its own run folder there meanwhile); returns whether the run folder
        was removed."""
        if kept or self.first_new is None or not os.path.lexists(self.path):
            return False
        with contextlib.suppress(OSError):
            shutil.rmtree(self.path)
        if os.path.lexists(self.path):
            return False
        for folder in self.path.parents:
            if folder == self.first_new.parent:
                break
            try:
                folder.rmdir()  # only when empty
            except OSError:
                break
        return True


def anything_kept(run_dir: RunDir) -> bool:
    """Whether a run folder holds results: rows in ``results.parquet``, or part files that the
    next run folds in."""
    return bool(run_dir.rows_in_results()) or bool(run_dir.part_files())


def check_not_latest(out_dir: str, cwd: Path | None = None) -> None:
    """Refuse ``out_dir=outputs/latest`` (or a folder in it) while that name is not the link (a
    :class:`prefixsim.ParameterError` naming out_dir): the run would make it a real folder,
    and every later run would leave it stale without a word. Through the link (a resume of
    the newest run) it is accepted."""
    cwd = cwd or Path.cwd()
    link = cwd / OUTPUTS / LATEST
    target = os.path.normpath(os.path.join(cwd, out_dir))
    if link.is_symlink() or not (target == str(link) or target.startswith(f"{link}{os.sep}")):
        return
    from prefixsim import ParameterError

    raise ParameterError(
        "out_dir",
        out_dir,
        f"{OUTPUTS}/{LATEST} is the link to the newest run under {OUTPUTS}/, kept by the "
        "sweep; choose another folder",
    )


def update_latest(run_path: Path, cwd: Path | None = None) -> Path | None:
    """Point ``outputs/latest`` at ``run_path`` when it is under ``outputs/`` of ``cwd`` (the
    current folder); returns the link, or None when it was not updated (another place; a
    ``latest`` that is not a link, which is left alone; a file system that refuses links)."""
    cwd = cwd or Path.cwd()
    outputs = cwd / OUTPUTS
    try:
        real = Path(os.path.realpath(run_path))
        root = Path(os.path.realpath(outputs))
    except (OSError, RuntimeError):
        return None
    if root not in real.parents:
        return None
    link = outputs / LATEST
    if os.path.lexists(link) and not link.is_symlink():
        # a folder the user named "latest": never replaced, but said (it stays stale)
        log.warning(
            "%s is not a link (a folder or file of that name): not pointed at this run; "
            "rename it so that it shows the newest run",
            link,
        )
        return None
    target = os.path.relpath(real, root)
    tmp = outputs / f".{LATEST}.{os.getpid()}.tmp"
    try:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        tmp.symlink_to(target, target_is_directory=True)
        os.replace(tmp, link)
    except OSError as err:
        log.debug("%s not updated: %s", link, err)
        with contextlib.suppress(OSError):
            tmp.unlink()
        return None
    return link


def shown_path(path: Path, cwd: Path | None = None) -> str:
    """``path`` as the user would type it: relative to the current folder when under it."""
    cwd = cwd or Path.cwd()
    with contextlib.suppress(ValueError):
        return str(path.relative_to(cwd))
    return str(path)


def _hydra_value(text: str) -> str:
    """``text`` as a value of Hydra's override grammar: as is when plain, else quoted."""
    if re.fullmatch(r"[A-Za-z0-9_./+\-:@%~]+", text):
        return text
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def resume_command(command: Sequence[str] | None, run_path: Path) -> str:
    """The command that resumes the run into ``run_path``: ``command`` with its ``out_dir=``
    replaced by ``run_path`` (shell-quoted); from Python, ``run_sweep`` with that out_dir."""
    where = shown_path(run_path)
    if command is None:
        return f"run_sweep with out_dir={where!r}"
    args = [a for a in command if not re.match(r"^\+{0,2}out_dir=", a)]
    return shlex.join([*args, f"out_dir={_hydra_value(where)}"])


def leave(
    run_dir: RunDir,
    claim: Claim,
    interrupted: bool,
    summary: SweepSummary | None,
    command: Sequence[str] | None,
) -> None:
    """After the run: a folder this run made and an interrupt left empty is removed; a kept
    folder under ``outputs/`` becomes ``outputs/latest``; an interrupted run says how to
    resume it (the command with this run's ``out_dir``)."""
    if interrupted and claim.discard_if_nothing_kept(anything_kept(run_dir)):
        if summary is not None:
            summary.discarded = True
        log.warning("interrupted before any point finished: nothing kept, no run folder left")
        return
    update_latest(run_dir.path)
    if not interrupted:
        return
    again = resume_command(command, run_dir.path)
    if summary is None:
        log.warning("interrupted; what finished is kept in %s; to resume: %s", run_dir.path, again)
        return
    missing = summary.planned - summary.skipped - summary.computed
    log.warning(
        "interrupted: %d point(s) finished and kept in %s; to compute the %d missing: %s",
        summary.computed,
        run_dir.path,
        missing,
        again,
    )
