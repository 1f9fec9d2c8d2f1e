"""What the cost model's byte counts must fit, checked before a replay: a cache size in whole
blocks of a model, and every bytes total within int64.

:func:`capacity_blocks` and :func:`capacity_from_size` turn a cache's bytes (or a size such as
``"64GiB"``) into whole blocks; :func:`check_cost` refuses, before any replay, a block, a cache
or a trace whose bytes could pass ``2**63 - 1`` (the CLI and the sweep's planning run it, so no
total of :mod:`prefixsim.cost_table` can fail after the replay). The public names are
re-exported by :mod:`prefixsim.cost`, where users import them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ._exact import INT64_MAX, exact_sum, first_running_total_over
from .errors import ParameterError, TraceError
from .models import ModelProfile

if TYPE_CHECKING:
    from .trace import Trace


def _reuse_past_int64(
    model: ModelProfile, block_size: int, key: str, value: object
) -> ParameterError:
    per_block = model.kv_bytes_per_block(block_size)
    return ParameterError(
        key,
        value,
        f"the reused blocks (ceil(hit_tokens / block_size) per request) of {model.name} at "
        f"block_size={block_size} ({per_block} bytes each, the model's kv_bytes_per_block) "
        "would pass 2**63 - 1 bytes; use a smaller block_size, model or trace "
        "(prefixsim.cost.check_cost refuses such a trace before a replay)",
    )


def check_cost(
    model: ModelProfile,
    block_size: int,
    *,
    capacity: int | None = None,
    trace: Trace | None = None,
) -> int:
    """Refuse, before any replay, what would make a byte count of the cost model pass int64
    (the type of the bytes columns), naming the key or the trace line that causes it; returns
    ``kv_bytes_per_block``. Checked: one block (names ``block_size``), the cache of
    ``capacity`` blocks (names ``capacity``), and the bytes the trace's requests would reuse
    if every block hit: a request reuses at most ``ceil(input_length / block_size)`` blocks
    (its hit tokens are at most its prompt) and at most ``len(hash_ids)`` (a hit is a run of
    its blocks), so ``sum(min(...)) * kv_bytes_per_block`` (names the trace file, the line where
    the running total passes 2**63 - 1 and ``input_length``): so no total can fail after the
    replay, whatever it hits. The CLI runs it before replaying, the sweep's planning for each
    trace and block size of a grid with a model (:func:`sweep.engine_checks.check_with_engine`),
    so both refuse the same traces."""
    per_block = model.kv_bytes_per_block(block_size)
    if capacity is not None and capacity * per_block > INT64_MAX:
        raise ParameterError(
            "capacity",
            capacity,
            f"{capacity} blocks of {per_block} bytes ({model.name} at block_size={block_size}) "
            f"pass 2**63 - 1 bytes: at most {INT64_MAX // per_block} blocks",
        )
    if trace is not None and trace.n_requests:
        blocks = np.minimum(-(-trace.input_lengths // block_size), np.diff(trace.offsets))
        if exact_sum(blocks) > INT64_MAX // per_block:
            i = first_running_total_over(blocks, INT64_MAX // per_block)
            line = None if i is None else int(trace.line_numbers[i])
            raise TraceError(
                trace.name,
                f"with {model.name} at block_size={block_size} ({per_block} bytes per block) "
                "the requests up to this line could reuse more than 2**63 - 1 bytes of KV "
                "cache (their blocks, if every one hit); use a smaller block_size, model or "
                "trace",
                line=line,
                field="input_length",
            )
    return per_block


def capacity_blocks(
    cache_bytes: int, model: ModelProfile, block_size: int, key: str = "cache_size"
) -> int:
    """Whole blocks of ``model`` (at its ``kv_dtype``) that fit in ``cache_bytes`` (floor).
    A size below one block is a :class:`ParameterError` naming ``key``."""
    per_block = model.kv_bytes_per_block(block_size)
    blocks = int(cache_bytes) // per_block
    if blocks < 1:
        raise ParameterError(
            key,
            cache_bytes,
            f"smaller than one block of {model.name} ({per_block} bytes at "
            f"block_size={block_size}, {model.kv_dtype})",
        )
    return blocks


def capacity_from_size(
    cache_size: str | int, model: ModelProfile, block_size: int, key: str = "cache_size"
) -> tuple[int, int]:
    """``(capacity in blocks, cache bytes)`` of a cache of ``cache_size`` (``"64GiB"``, or an
    int of bytes) for ``model`` at ``block_size``: whole blocks, floor. Errors name ``key``."""
    from .units import parse_size

    cache_bytes = parse_size(key, cache_size)
    return capacity_blocks(cache_bytes, model, block_size, key), cache_bytes
