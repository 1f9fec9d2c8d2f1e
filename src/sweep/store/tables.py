"""The trace tables of a run directory: ``traces.parquet`` (totals and the infinite-cache
ceiling per trace and block size) and ``requests.parquet`` (arrival time and prompt tokens per
request), for the figures and for the rows of ``per_request.parquet``."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

import prefixsim

from .files import PARQUET_COMPRESSION, StoreError, atomic_parquet, read_parquet
from .schemas import REQUESTS_SCHEMA, TRACES_SCHEMA


def traces_table(traces: Sequence[prefixsim.Trace], block_sizes: Sequence[int]) -> pa.Table:
    """One row per trace and block size (:data:`TRACES_SCHEMA`), with the infinite-cache
    ceiling (:func:`prefixsim.ceiling`) of each."""
    rows = []
    for trace in traces:
        # A trace hashed at one block size (token, chat) has rows at that size only.
        sizes = block_sizes if trace.block_size is None else [trace.block_size]
        for block_size in sizes:
            top = prefixsim.ceiling(trace, block_size)
            rows.append(
                {
                    "trace": trace.name,
                    "trace_sha256": trace.sha256,
                    "block_size": block_size,
                    "n_requests": trace.n_requests,
                    "n_blocks": trace.n_blocks,
                    "total_prompt_tokens": top.total_prompt_tokens,
                    "ceiling_hit_tokens": top.total_hit_tokens,
                    "ceiling_hit_rate": top.overall_hit_rate,
                }
            )
    return pa.Table.from_pylist(rows, schema=TRACES_SCHEMA)


def requests_table(traces: Sequence[prefixsim.Trace]) -> pa.Table:
    """One row per trace and request (:data:`REQUESTS_SCHEMA`)."""
    return pa.concat_tables(
        pa.Table.from_arrays(
            [
                pa.array([t.sha256] * t.n_requests, pa.string()),
                pa.array(np.arange(t.n_requests, dtype=np.int32)),
                pa.array(t.timestamps),
                pa.array(t.input_lengths),
            ],
            schema=REQUESTS_SCHEMA,
        )
        for t in traces
    )


def save_trace_tables(
    traces_path: Path,
    requests_path: Path,
    traces: Sequence[prefixsim.Trace],
    block_sizes: Sequence[int],
) -> None:
    """Write ``traces.parquet`` and ``requests.parquet`` for ``traces``, keeping the rows of
    traces (and block sizes) that earlier runs into this directory wrote."""
    merge_table(traces_path, traces_table(traces, block_sizes), ["trace_sha256", "block_size"])
    merge_table(requests_path, requests_table(traces), ["trace_sha256"])


def merge_table(path: Path, new: pa.Table, key: list[str]) -> None:
    """Write ``new`` to ``path`` with the old file's rows whose ``key`` is not in ``new``."""
    if path.exists():
        old = read_parquet(path)
        if old.schema.equals(new.schema):
            new_keys = {tuple(r.values()) for r in new.select(key).to_pylist()}
            keep = [tuple(r.values()) not in new_keys for r in old.select(key).to_pylist()]
            new = pa.concat_tables([old.filter(pa.array(keep, pa.bool_())), new])
    atomic_parquet(path, lambda f: pq.write_table(new, f, compression=PARQUET_COMPRESSION))


def load_prompt_tokens(path: Path, sha256: str) -> np.ndarray:
    """The input lengths of trace ``sha256``, in request order, from requests.parquet
    (``path``)."""
    try:
        table = pq.read_table(
            path,
            columns=["request", "prompt_tokens"],
            filters=[("trace_sha256", "==", sha256)],
        ).sort_by("request")
    except (OSError, pa.ArrowException) as err:
        raise StoreError(f"{path}: unreadable ({err})") from None
    return table.column("prompt_tokens").to_numpy()
