"""Shared test helpers: traces built in memory, independent of the file loader."""

from __future__ import annotations

import gzip
import hashlib
from collections.abc import Hashable, Sequence
from pathlib import Path

import numpy as np
import pytest

import prefixsim
from prefixsim import Trace

Request = tuple[int, Sequence[Hashable]]  # (input_length, hash_ids)


def has_kernel(policy: str) -> bool:
    """Whether ``policy`` has a compiled kernel (a policy registered without steps has a
    plain-Python reference only: its kernel engine refuses it)."""
    from numba.core.dispatcher import Dispatcher

    return isinstance(prefixsim.get_policy(policy).kernel, Dispatcher)


def bundled_head(folder: Path, n: int) -> Path:
    """The first ``n`` requests of the bundled trace, as a plain JSONL file in ``folder``."""
    src = prefixsim.trace.bundled_trace_path("conversation")
    lines = gzip.decompress(src.read_bytes()).decode().splitlines(keepends=True)[:n]
    path = folder / "small.jsonl"
    path.write_text("".join(lines))
    return path


def make_trace(
    requests: Sequence[Request], name: str = "test", outputs: Sequence[int] | None = None
) -> Trace:
    """A :class:`Trace` from ``(input_length, hash_ids)`` pairs, ids remapped by first use,
    with ``outputs`` as the output lengths (0 if None)."""
    dense: dict[Hashable, int] = {}
    flat: list[int] = []
    offsets = [0]
    for _, hash_ids in requests:
        flat.extend(dense.setdefault(h, len(dense)) for h in hash_ids)
        offsets.append(len(flat))
    n = len(requests)
    return Trace(
        name=name,
        sha256=hashlib.sha256(
            repr((requests, outputs) if outputs else requests).encode()
        ).hexdigest(),
        timestamps=np.arange(n, dtype=np.float64),
        input_lengths=np.array([r[0] for r in requests], dtype=np.int64),
        output_lengths=np.array(outputs or [0] * n, dtype=np.int64),
        offsets=np.array(offsets, dtype=np.int64),
        block_ids=np.array(flat, dtype=np.int32),
        n_blocks=len(dense),
        line_numbers=np.arange(1, n + 1, dtype=np.int64),
    )


@pytest.fixture(scope="session", autouse=True)
def _private_trace_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Point the binary trace cache at a per-session folder (inherited by subprocesses), so
    tests never read or write the user's cache."""
    import os

    os.environ["PREFIXSIM_CACHE_DIR"] = str(tmp_path_factory.mktemp("trace-cache"))


@pytest.fixture(scope="session")
def conversation() -> Trace:
    """The bundled Mooncake conversation trace."""
    from prefixsim import load_trace

    return load_trace("conversation", use_cache=False)
