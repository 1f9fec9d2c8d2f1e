"""How much memory this process may use, and the check that refuses what cannot fit in it.

A capacity, a size or a count that would make the tool allocate more than the machine has is
refused before anything is allocated, with the size it would need: an allocation of a terabyte
either fails with a ``MemoryError`` (a traceback) or, worse, succeeds lazily and the operating
system kills the process later. The limit is the smallest of the physical memory, the cgroup
limit of a container (v2 ``memory.max``, v1 ``memory.limit_in_bytes``) and the address-space
limit (``ulimit -v``), whichever apply.
"""

from __future__ import annotations

import contextlib
import functools
import os

from .errors import ParameterError


def _read_int(path: str) -> int | None:
    try:
        with open(path, encoding="ascii") as f:
            text = f.read().strip()
    except (OSError, ValueError):
        return None
    return int(text) if text.isdigit() else None  # "max": no limit


@functools.cache
def memory_limit_bytes() -> int:
    """Bytes this process can hope to allocate (see the module docstring)."""
    limits: list[int] = []
    with contextlib.suppress(ValueError, OSError, AttributeError):  # not on this platform
        limits.append(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        value = _read_int(path)
        if value is not None and value > 0:
            limits.append(value)
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_AS)
        if soft != resource.RLIM_INFINITY and soft > 0:
            limits.append(soft)
    except (ImportError, ValueError, OSError):
        pass
    return min(limits) if limits else 2**63 - 1


def format_bytes(n: int) -> str:
    """``12.5 GiB (13421772800 bytes)``: the exact count, and a readable one."""
    from .units import format_size

    return f"{format_size(n)} ({n} bytes)" if n >= 1024 else f"{n} bytes"


def check_fits(key: str, value: object, needed: int, what: str) -> None:
    """Refuse ``value`` of ``key`` when ``what`` would need ``needed`` bytes, more than
    :func:`memory_limit_bytes`."""
    limit = memory_limit_bytes()
    if needed > limit:
        raise ParameterError(
            key,
            value,
            f"{what} would need {format_bytes(needed)} of memory; this machine allows "
            f"{format_bytes(limit)}",
        )
