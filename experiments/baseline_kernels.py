"""A policy's kernel as it was at an earlier commit, for benchmarks that time it beside
today's kernel in one process (alternating, checked equal per request).

The package at ``ref`` is exported with ``git archive`` into a folder of its own under the
system's temporary folder, named ``prefixsim_<commit>`` so that it imports beside today's
``prefixsim`` (its imports are relative), and numba caches its kernels there: no copy of old
kernel code lives in the tree, and any commit can be the baseline.

    from baseline_kernels import baseline_kernel
    old = baseline_kernel("ebaec63", "S3FIFO")
    hit_tokens, final = old(block_ids, offsets, input_lengths, n_blocks, block_size, cnt, capacity)
"""

from __future__ import annotations

import importlib
import io
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent

Kernel = Callable[..., tuple[Any, int]]


def _package(ref: str) -> Any:
    """``prefixsim`` as it was at ``ref``, imported as ``prefixsim_<commit>``."""
    sha = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--short=12", f"{ref}^{{commit}}"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    name = f"prefixsim_{sha}"
    root = Path(tempfile.gettempdir()) / "prefixsim-baselines"
    if not (root / name / "__init__.py").exists():
        tar = subprocess.run(
            ["git", "-C", str(REPO), "archive", sha, "src/prefixsim"],
            check=True,
            capture_output=True,
        ).stdout
        unpack = Path(tempfile.mkdtemp(dir=root.parent if root.exists() else None))
        with tarfile.open(fileobj=io.BytesIO(tar)) as archive:
            archive.extractall(unpack, filter="data")
        root.mkdir(exist_ok=True)
        (unpack / "src" / "prefixsim").replace(root / name)
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    return importlib.import_module(name)


def baseline_kernel(ref: str, policy: str) -> Kernel:
    """``policy``'s kernel at ``ref``, called as ``kernel(block_ids, offsets, input_lengths,
    n_blocks, block_size, counters, capacity, **params)``: its own parameters (``params``, for
    example ``small_ratio=0.05``, the rest defaults) and, where that commit had them, its own
    working arrays, allocated in the call."""
    pkg = _package(ref)
    spec = pkg.get_policy(policy)

    def kernel(block_ids: Any, offsets: Any, lengths: Any, n_blocks: int, block_size: int,
               cnt: Any, capacity: int, **params_: Any) -> tuple[Any, int]:  # fmt: skip
        params = pkg.make_params(policy, capacity, **params_)
        fast = getattr(spec, "fast_kernel", None)  # (the earliest commits have none)
        if fast is not None and not hasattr(fast, "py_func"):
            # a commit whose fast kernel is a template, compiled per hit rule: its replay
            single = importlib.import_module(f"{pkg.__name__}.engine.single")
            args = (block_ids, offsets, lengths, n_blocks, block_size)
            hits, final, counters = single.run(spec, params, *args)
            cnt[: len(counters)] += list(counters.values())
            return hits, final
        if hasattr(spec, "kernel_inputs"):
            extra = spec.kernel_inputs(params, n_blocks)
        else:
            extra = spec.kernel_args(params)
        return spec.kernel(block_ids, offsets, lengths, n_blocks, block_size, cnt, *extra)

    return kernel
