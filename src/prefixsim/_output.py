"""Writing an output file (a report, a converted or synthetic trace) the way the readers read:
only a regular file or a new path, atomically, with the mode the umask gives.

``python -m prefixsim -o``, ``prefixsim.convert`` and ``prefixsim.synth`` write through
:func:`atomic_output`: the content goes to a temporary file beside the target, renamed over it
once complete, so a killed run never leaves half a file. Before anything is written the target
is checked: a named pipe, a device (``/dev/null``), a socket or a directory is refused, as the
trace readers refuse them, instead of being replaced by a regular file (run as root, ``OUT=
/dev/null`` used to replace the system's ``/dev/null``). The file gets ``0o666 & ~umask``, as
``open(path, "w")`` would (``mkstemp`` creates 0600). Every error is an :class:`OutputError`
naming the user's path, never the temporary file's.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from .errors import PrefixSimError, shown_text


class OutputError(PrefixSimError):
    """An output file that cannot be written: ``"{path}: {why}"``."""

    def __init__(self, path: str | os.PathLike[str], why: str) -> None:
        self.path = os.fspath(path)
        super().__init__(f"{shown_text(self.path)}: {why}")  # a 100K-character path: bounded


_KINDS = (
    (stat.S_ISDIR, "is a directory"),
    (stat.S_ISFIFO, "is a named pipe"),
    (stat.S_ISCHR, "is a character device"),
    (stat.S_ISBLK, "is a block device"),
    (stat.S_ISSOCK, "is a socket"),
)


def check_output_path(path: str | os.PathLike[str]) -> Path:
    """``path`` as a :class:`Path` if it is a regular file or a new path in an existing
    directory; an :class:`OutputError` otherwise (nothing is written). A path that ends in
    ``/`` names a directory (``-o newdir/`` wrote a file named ``newdir``); a symbolic link is
    followed, so the file it names is the one written (the link stays)."""
    text = os.fspath(path)
    if text.endswith((os.sep, os.altsep or os.sep)):
        raise OutputError(path, "ends in '/', a directory; expected a file name")
    target = Path(os.path.realpath(text)) if os.path.islink(text) else Path(text)
    try:
        mode = os.stat(target).st_mode  # follows a symbolic link to what it names
    except FileNotFoundError:
        mode = None
    except OSError as err:
        raise OutputError(path, f"cannot write here ({err.strerror or err})") from None
    if mode is not None and not stat.S_ISREG(mode):
        kind = next((why for test, why in _KINDS if test(mode)), "is not a regular file")
        raise OutputError(path, f"{kind}; expected a regular file or a new path")
    if not target.parent.is_dir():
        raise OutputError(path, f"no such directory {shown_text(str(target.parent))!r}")
    return target


@contextlib.contextmanager
def atomic_output(path: str | os.PathLike[str]) -> Iterator[IO[bytes]]:
    """A binary file to write the content of ``path`` into; renamed over ``path`` when the
    block ends without an error, removed otherwise."""
    target = check_output_path(path)
    try:
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    except OSError as err:
        raise OutputError(path, f"cannot write here ({err.strerror or err})") from None
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)
        with os.fdopen(fd, "wb") as f:
            yield f
        os.replace(tmp, target)
    except BaseException as err:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(err, OSError):
            raise OutputError(path, f"cannot write ({err.strerror or err})") from None
        raise


def write_text(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` through :func:`atomic_output`."""
    with atomic_output(path) as f:
        f.write(text.encode("utf-8"))
