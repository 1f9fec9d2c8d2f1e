"""Files of a run directory written whole or not at all, read with one-line errors.

Every file is written to a temporary name in the same directory and renamed into place, so a
killed run never leaves a half-written file under a final name.
"""

from __future__ import annotations

import contextlib
import errno
import os
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import IO, Any

import pyarrow as pa
import pyarrow.parquet as pq

import prefixsim

PARQUET_COMPRESSION = "zstd"


class StoreError(prefixsim.PrefixSimError):
    """A run directory that cannot be used (one line for the user)."""


def describe_os_error(err: OSError) -> str:
    """``cannot write PATH: REASON`` for a failed file operation in a run directory, one line."""
    reason = err.strerror or str(err)
    if err.errno == errno.ENOSPC:
        reason = "no space left on the device"
    elif err.errno == errno.EROFS:
        reason = "read-only file system"
    elif err.errno in (errno.ENOTDIR, errno.EEXIST):
        reason = f"{reason} (a file is in the way of a directory)"
    where = f" {err.filename}" if err.filename else ""
    return f"cannot write{where}: {reason}"


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


_UMASK = _umask()


def _naming(err: OSError, path: Path) -> OSError:
    """``err`` about ``path``, the file being written, rather than its temporary name (a
    directory in the way of ``results.parquet`` is reported as ``'.results.parquet.x1y2.tmp'
    -> 'results.parquet'`` by ``os.replace``): the message names what the user can fix."""
    if err.errno is None:
        return err
    return type(err)(err.errno, err.strerror, str(path))


class PendingFile:
    """A temporary file ``tmp`` for ``path`` (``file``, open for writing) that becomes ``path``
    on :meth:`commit` (fsync, rename) or is removed on :meth:`discard`, leaving ``path`` as it
    was. :meth:`create` makes the temporary file. For a file written over a while
    (:class:`~sweep.store.stream.PerRequestStream`); :func:`atomic_file` is the same within one
    ``with`` block."""

    def __init__(self, path: Path, tmp: str, file: IO[Any]) -> None:
        self.path = path
        self.tmp = tmp
        self.file = file

    @classmethod
    def create(cls, path: Path, mode: str = "wb", folder: Path | None = None) -> PendingFile:
        """A new temporary file in ``folder`` (default: ``path``'s; another folder must be on
        the same file system, for the rename), with the usual mode of a final file."""
        folder = folder or path.parent
        try:
            folder.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{path.name}.", suffix=".tmp")
        except OSError as err:
            raise _naming(err, path) from None
        try:
            os.fchmod(fd, 0o666 & ~_UMASK)  # mkstemp creates 0600; final files: the usual mode
            file: IO[Any] = os.fdopen(fd, mode)
        except BaseException:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        return cls(path, tmp, file)

    def commit(self) -> None:
        try:
            with self.file as f:
                f.flush()
                os.fsync(f.fileno())
            os.replace(self.tmp, self.path)
        except OSError as err:
            self.discard()
            raise _naming(err, self.path) from None
        except BaseException:
            self.discard()
            raise

    def discard(self) -> None:
        with contextlib.suppress(OSError, AttributeError):
            self.file.close()
        with contextlib.suppress(OSError):
            os.unlink(self.tmp)


@contextlib.contextmanager
def atomic_file(path: Path, mode: str = "wb") -> Iterator[IO[Any]]:
    """Open a temporary file beside ``path``; on success fsync it and rename it to ``path``; on
    any error (or interrupt) remove it, leaving ``path`` as it was."""
    pending = PendingFile.create(path, mode)
    try:
        yield pending.file
    except BaseException:
        pending.discard()
        raise
    pending.commit()


def atomic_write_text(path: Path, text: str) -> None:
    with atomic_file(path, "w") as f:
        f.write(text)


def atomic_parquet(path: Path, write: Callable[[Any], None]) -> None:
    with atomic_file(path) as f:
        write(f)


def read_parquet(path: Path, columns: Sequence[str] | None = None) -> pa.Table:
    try:
        return pq.read_table(path, columns=list(columns) if columns else None)
    except (OSError, pa.ArrowException) as err:
        raise StoreError(f"{path}: unreadable ({err})") from None


def read_part(path: Path) -> pa.Table:
    try:
        with pa.memory_map(str(path)) as source:
            return pa.ipc.open_file(source).read_all()
    except (OSError, pa.ArrowException) as err:
        raise StoreError(f"{path}: unreadable part file ({err}); delete it to recompute") from None


def conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table`` with ``schema``'s columns in order (a column it lacks is all null)."""
    cols = []
    names = set(table.column_names)  # a new list at every access: once, not per field
    for f in schema:
        if f.name in names:
            cols.append(table.column(f.name).cast(f.type))
        else:
            cols.append(pa.nulls(table.num_rows, f.type))
    return pa.Table.from_arrays(cols, schema=schema)
