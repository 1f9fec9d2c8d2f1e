"""Exact integer sums of int64 arrays.

``ndarray.sum()`` wraps around silently past ``2**63 - 1``; a total that wrapped would be a
wrong number written as if it were right. :func:`exact_sum` returns the true total as a Python
int, at numpy speed: each value is split as ``hi * 2**32 + lo`` with ``lo`` in ``[0, 2**32)``
and ``hi`` in ``[-2**31, 2**31)``, and each part is summed over chunks small enough that its
int64 sum cannot wrap (``2**30`` values of magnitude below ``2**32`` sum below ``2**62``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

INT64_MAX = 2**63 - 1
MAX_BLOCK_SIZE = 2**31 - 1
"""The largest ``block_size``: with it, ``k * block_size`` stays in int64 for every ``k`` below
2**31 blocks (the replays' hit tokens)."""
_CHUNK = 1 << 30


def exact_sum(values: np.ndarray) -> int:
    """The exact sum of an integer array (any length, any int64 values) as a Python int."""
    a = np.asarray(values)
    if a.dtype != np.int64:
        a = a.astype(np.int64)
    total = 0
    for start in range(0, len(a), _CHUNK):
        part = a[start : start + _CHUNK]
        hi = int(np.sum(part >> 32, dtype=np.int64))
        lo = int(np.sum(part & 0xFFFFFFFF, dtype=np.int64))
        total += (hi << 32) + lo
    return total


def first_running_total_over(values: np.ndarray, limit: int = INT64_MAX) -> int | None:
    """Index of the first element at which the running total of the non-negative ``values``
    exceeds ``limit``, or None. Only called once :func:`exact_sum` found the total too large,
    so the plain-Python scan is never on the path of a valid input."""
    running = 0
    for i, v in enumerate(np.asarray(values).tolist()):
        running += v
        if running > limit:
            return i
    return None


class HitTotals:
    """Totals of a result with per-request ``hit_tokens`` and ``prompt_tokens`` (int64 arrays),
    summed exactly: a replay, a hierarchy, a cluster and the ceiling share these, so none of
    them can report a total that wrapped around."""

    hit_tokens: np.ndarray
    prompt_tokens: np.ndarray

    @property
    def n_requests(self) -> int:
        return len(self.hit_tokens)

    @property
    def total_hit_tokens(self) -> int:
        return exact_sum(self.hit_tokens)

    @property
    def total_prompt_tokens(self) -> int:
        return exact_sum(self.prompt_tokens)

    @property
    def overall_hit_rate(self) -> float:
        """``total_hit_tokens / total_prompt_tokens`` (0.0 for a trace with no prompt tokens)."""
        return self.totals()[2]

    def report_totals(self) -> dict[str, Any]:
        """The report's totals (``overall_hit_rate``, ``total_hit_tokens``,
        ``total_prompt_tokens``), as the specification names them."""
        hit, prompt, rate = self.totals()
        return {"overall_hit_rate": rate, "total_hit_tokens": hit, "total_prompt_tokens": prompt}

    def totals(self) -> tuple[int, int, float]:
        """``(total_hit_tokens, total_prompt_tokens, overall_hit_rate)``, each sum taken once:
        a sweep point wants all three, and the properties one by one sum each array twice."""
        hit, prompt = self.total_hit_tokens, self.total_prompt_tokens
        return hit, prompt, hit / prompt if prompt else 0.0
