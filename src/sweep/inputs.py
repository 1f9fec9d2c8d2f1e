"""What a sweep checks and reads before it takes its run directory: the executor settings and
the output directory, checked (:func:`checked_config`), and the traces, each loaded once
(:func:`load_traces`)."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import prefixsim
from prefixsim import ParameterError, Trace
from prefixsim.formats import TraceOptions

from .config import Backend, ExecutorConfig, SweepConfig

log = logging.getLogger("sweep")

DASK_MISSING = (
    "executor=dask needs the dask and distributed packages: pip install 'prefixsim[dask]'"
)


def checked_config(cfg: SweepConfig) -> SweepConfig:
    """``cfg`` with its executor settings and ``out_dir`` checked (:class:`ParameterError`)
    and ``out_dir``'s interpolations resolved."""
    validate_executor(cfg.executor)
    dask = cfg.executor.backend == Backend.dask
    if dask and not all(_importable(m) for m in ("dask", "distributed")):
        raise prefixsim.PrefixSimError(DASK_MISSING)  # before the run directory is made
    if cfg.executor.address and cfg.executor.backend != Backend.dask:
        log.warning(
            "executor.address is for executor=dask; ignored with %s", cfg.executor.backend.value
        )
    if not str(cfg.out_dir).strip():
        raise ParameterError("out_dir", cfg.out_dir, "expected a directory path")
    if "${" in cfg.out_dir:  # e.g. the default, when called from Python rather than Hydra
        cfg = dataclasses.replace(cfg, out_dir=_resolve(cfg.out_dir))
    from .lifecycle import check_not_latest

    check_not_latest(cfg.out_dir)  # outputs/latest is the sweep's link
    return cfg


def _importable(module: str) -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a module set to None in sys.modules: not importable
        return False


def validate_executor(ex: ExecutorConfig) -> None:
    if isinstance(ex.n_jobs, bool) or ex.n_jobs == 0:
        raise ParameterError(
            "executor.n_jobs", ex.n_jobs, "expected -1 (all cores), -k (all but k-1) or >= 1"
        )
    if ex.batch_size is not None and ex.batch_size < 1:
        raise ParameterError("executor.batch_size", ex.batch_size, "expected null (auto) or >= 1")
    if ex.n_workers is not None and ex.n_workers < 1:
        raise ParameterError("executor.n_workers", ex.n_workers, "expected null or >= 1")
    if ex.threads_per_worker < 1:
        raise ParameterError("executor.threads_per_worker", ex.threads_per_worker, "expected >= 1")
    if not ex.connect_timeout > 0:
        raise ParameterError("executor.connect_timeout", ex.connect_timeout, "expected seconds > 0")


def load_traces(
    names: Sequence[str],
    block_sizes: Sequence[int] = (512,),
    options: TraceOptions | None = None,
) -> tuple[dict[Any, str], dict[str, Trace]]:
    """Load each distinct trace once, or once per block size for the formats whose blocks
    depend on it (token and chat traces, which are hashed at each block size).

    Returns (trace as typed -> sha256, or (trace, block_size) -> sha256 for the per-block-size
    ones; sha256 -> Trace). A per-block-size trace's sha256 identifies its content, options and
    block size, so each block size is its own entry.
    """
    shas: dict[Any, str] = {}
    traces: dict[str, Trace] = {}
    sizes = list(dict.fromkeys(block_sizes)) or [512]

    def add(key: Any, trace: Trace) -> None:
        shas[key] = trace.sha256
        if trace.sha256 in traces:
            log.warning(
                "trace %s has the same content as %s: its points are run once",
                trace.name,
                traces[trace.sha256].name,
            )
        else:
            traces[trace.sha256] = trace

    for name in dict.fromkeys(names):
        trace = prefixsim.load_trace(name, block_size=sizes[0], options=options)
        if trace.block_size is None:
            add(name, trace)
            warn_without_blocks(name, {None: trace})
            continue
        add((name, sizes[0]), trace)
        loaded: dict[int | None, Trace] = {sizes[0]: trace}
        for block_size in sizes[1:]:
            loaded[block_size] = prefixsim.load_trace(name, block_size=block_size, options=options)
            add((name, block_size), loaded[block_size])
        warn_without_blocks(name, loaded)
    return shas, traces


def warn_without_blocks(name: str, loaded: dict[int | None, Trace]) -> None:
    """One warning for a trace none of whose requests has a full block at some block sizes
    (every point there hits nothing: a prompt shorter than a block is never cached)."""
    empty = [bs for bs, t in loaded.items() if t.n_requests and t.n_accesses == 0]
    if not empty:
        return
    longest = max(int(t.input_lengths.max()) for t in loaded.values() if t.n_requests)
    where = "at block_size=" + ", ".join(str(bs) for bs in empty) if empty != [None] else "in it"
    every = len(empty) == len(loaded)
    log.warning(
        "trace %s: no request has a full block %s (the longest prompt has %d tokens): %s",
        name,
        where,
        longest,
        "every hit rate will be 0" if every else "the points there will hit nothing",
    )


def _resolve(value: str) -> str:
    """``value`` with its interpolations resolved (Hydra's ``${now:...}`` included)."""
    from omegaconf import OmegaConf

    if not OmegaConf.has_resolver("now"):
        OmegaConf.register_new_resolver(
            "now", lambda pattern: datetime.now().strftime(pattern), use_cache=True
        )
    return str(OmegaConf.create({"value": value}).value)
