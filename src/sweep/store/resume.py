"""What a run directory already holds, and the part files that let a stopped run resume.

A batch's part file (Arrow IPC, :data:`~sweep.store.schemas.PART_SCHEMA`) is written as soon as
the batch finishes, so Ctrl-C, a killed worker or a full disk loses at most the batches still
running. A point counts as done when its row is in ``results.parquet`` or in a part (and, when
per-request output is on, its per-request rows too); the next run skips it.
"""

from __future__ import annotations

import json
import operator
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa

from .files import StoreError, atomic_file, atomic_write_text, read_parquet, read_part
from .schemas import PART_SCHEMA


@dataclass
class Existing:
    """What a run directory already holds."""

    registry: dict[str, int] = field(default_factory=dict)
    """point_key -> point_id of every point planned here before."""
    done: set[str] = field(default_factory=set)
    """Keys of the points with a result row."""
    with_per_request: set[str] = field(default_factory=set)
    """Keys of the points with per-request rows."""
    n_parts: int = 0


class PartFiles:
    """The folder of part files (created by the first write, not here)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._seq = 0
        # names sort in write order, and two runs' names never collide
        self._run_tag = f"{os.getpid()}-{int.from_bytes(os.urandom(4), 'big'):08x}"

    def paths(self) -> list[Path]:
        """The part files, oldest first (the latest version of a point wins)."""
        if not self.folder.is_dir():
            return []
        return sorted(p for p in self.folder.iterdir() if p.suffix == ".arrow")

    def write(self, table: pa.Table) -> Path:
        """Write one finished batch (a table of :data:`PART_SCHEMA`) atomically."""
        self._seq += 1
        name = f"part-{time.time_ns():020d}-{self._run_tag}-{self._seq:06d}.arrow"
        path = self.folder / name
        with atomic_file(path) as f, pa.ipc.new_file(f, PART_SCHEMA) as writer:
            writer.write_table(table)
        return path


def load_registry(path: Path) -> dict[str, int]:
    """point_key -> point_id from ``.sweep/points.json`` (empty when there is none)."""
    if not path.exists():
        return {}
    try:
        doc = json.loads(path.read_text())
        return {str(k): int(v) for k, v in doc["points"]}
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise StoreError(f"{path}: unreadable ({err})") from None


def save_registry(path: Path, registry: dict[str, int]) -> None:
    items = sorted(registry.items(), key=operator.itemgetter(1))
    doc = {"version": 1, "points": [[k, i] for k, i in items]}
    atomic_write_text(path, json.dumps(doc, separators=(",", ":")) + "\n")


def load_existing(
    registry_file: Path, results: Path, per_request: Path, parts: list[Path]
) -> Existing:
    """The points already done: in ``results`` (with per-request rows in ``per_request``) or in
    the part files ``parts`` (in write order: a later part's version of a point wins)."""
    ex = Existing(registry=load_registry(registry_file))
    if results.exists():
        table = read_parquet(results, columns=["point_id", "point_key"])
        ids = table.column("point_id").to_numpy()
        keys = table.column("point_key").to_pylist()
        for k, i in zip(keys, ids.tolist(), strict=True):
            ex.registry.setdefault(k, i)
        ex.done.update(keys)
        if per_request.exists():
            pr_ids = set(
                np.unique(
                    read_parquet(per_request, columns=["point_id"]).column("point_id").to_numpy()
                ).tolist()
            )
            ex.with_per_request.update(k for k, i in zip(keys, ids, strict=True) if i in pr_ids)
    ex.n_parts = len(parts)
    for part in parts:
        table = read_part(part)
        keys = table.column("point_key").to_pylist()
        part_ids = table.column("point_id").to_pylist()
        has_pr = table.column("hit_tokens").is_valid().to_pylist()
        for k, i, has in zip(keys, part_ids, has_pr, strict=True):
            ex.registry.setdefault(k, i)
            ex.done.add(k)
            if has:
                ex.with_per_request.add(k)
            else:
                ex.with_per_request.discard(k)
    return ex
