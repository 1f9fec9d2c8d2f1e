"""``python -m prefixsim warm-up`` (which ``make run`` calls): compile the kernels ahead of
their first use. It runs the public API (every registered policy, the LRU curve and the
ceiling, a hierarchy in both modes, every router, the token and chat hashing) on a tiny trace,
in a few processes at once: through the API, not a list of kernels.

Apart from :mod:`prefixsim.first_use` (the notice while numba compiles), which the API's
entries use (``replay``, ``replay_tiers``, ``replay_cluster`` are :func:`~first_use.noted`):
the warm-up imports them, so in one module they would import each other.
"""

from __future__ import annotations

import functools
import os
import sys
import time
from collections.abc import Callable, Sequence
from typing import IO, Any

from .errors import ParameterError
from .first_use import PACKAGE, noting

OK, SKIPPED, FAILED = "ok", "skipped", "failed"
"""A warm-up step's status: done; refused by the engine (a policy without a compiled kernel:
nothing to warm); failed (a bug). Compared by value: the outcomes of a pool's workers come
back pickled, as copies (``is`` would tell a copy of "skipped" from the constant)."""


def _tiny_trace(folder: str) -> Any:
    """A Mooncake trace of a few requests with shared prefixes, loaded as any trace is."""
    import json

    from .trace import load_trace

    path = os.path.join(folder, "warm_up.jsonl")
    with open(path, "w", encoding="utf-8") as f:
        for t, ids in enumerate([[1, 2, 3], [1, 2, 4], [5, 6], [1, 2, 3, 7], [5, 8]]):
            row = {"timestamp": t, "input_length": 512 * len(ids), "output_length": 8}
            f.write(json.dumps({**row, "hash_ids": ids, "session_id": t % 2}) + "\n")
    return load_trace(path)


def _steps() -> list[tuple[str, Callable[..., Any]]]:
    """The warm-up's steps, each a call of the public API on the tiny trace (argument: it)."""
    from .cluster import router_names
    from .policies import policy_names

    steps: list[tuple[str, Callable[..., Any]]] = []
    for policy in policy_names():
        steps.append((policy, functools.partial(_replay, policy)))
    steps.append(("LRU curve and ceiling", _curve))
    steps.append(("tiers", _tiers))
    for router in router_names():
        steps.append((f"router {router}", functools.partial(_cluster, router)))
    steps.append(("token and chat traces", _formats))
    return steps


def _replay(policy: str, trace: Any) -> None:
    from .replay import replay

    replay(trace, policy, 16, block_size=512)


def _curve(trace: Any) -> None:
    from .lru_curve import ceiling, lru_curve

    curve = lru_curve(trace, [1, 2, 4, 8], 512)
    curve.result(4)  # the per-request hits of one capacity
    ceiling(trace, 512)


def _tiers(trace: Any) -> None:
    from .tiers import replay_tiers

    for mode in ("exclusive", "inclusive"):
        for top, low in (("LRU", "S3FIFO"), ("S3FIFO", "LRU")):
            tiers = [
                {"name": "hbm", "policy": top, "capacity": 16, "medium": "hbm"},
                {"name": "dram", "policy": low, "capacity": 64, "medium": "dram_pcie"},
            ]
            replay_tiers(trace, tiers, mode=mode, block_size=512)


def _cluster(router: str, trace: Any) -> None:
    from .cluster import replay_cluster

    for policy in ("S3FIFO", "LRU"):
        replay_cluster(
            trace, 2, router, policy, 16, model="llama-3.1-8b", hardware="h100", block_size=512
        )


def _formats(trace: Any) -> None:
    import json
    import tempfile

    from .formats import TraceOptions
    from .trace import load_trace

    with tempfile.TemporaryDirectory() as folder:
        tokens = os.path.join(folder, "tokens.jsonl")
        with open(tokens, "w", encoding="utf-8") as f:
            f.write(json.dumps({"timestamp": 0, "token_ids": list(range(40))}) + "\n")
        load_trace(tokens, block_size=16)
        chats = os.path.join(folder, "chats.jsonl")
        with open(chats, "w", encoding="utf-8") as f:
            turn = [{"role": "user", "content": "warming up the kernels"}]
            f.write(json.dumps({"messages": turn}) + "\n")
        load_trace(chats, block_size=16, options=TraceOptions(format="chat"))


Outcome = tuple[str, str, str]
"""``(step name, status, detail)``: :data:`OK`, :data:`SKIPPED` or :data:`FAILED`, and the
error for a failed step (else "")."""


def _run_steps(names: Sequence[str]) -> tuple[list[Outcome], list[str]]:
    """Run the steps ``names`` in this process: an :data:`Outcome` each, and the kernels that
    compiled (the others were in numba's cache already). Plain strings only: the outcomes of a
    pool's workers come back pickled."""
    import io
    import tempfile

    wanted = dict(_steps())
    out: list[Outcome] = []
    with noting(io.StringIO()) as notice, tempfile.TemporaryDirectory() as folder:
        trace = _tiny_trace(folder)
        for name in names:
            try:
                wanted[name](trace)
            except ParameterError:  # the engine does not run this (no kernel): nothing to warm
                out.append((name, SKIPPED, ""))
            except Exception as err:  # a bug: said, and the other steps go on
                out.append((name, FAILED, f"{type(err).__name__}: {err}"))
            else:
                out.append((name, OK, ""))
    return out, notice.compiled


def _ignore_ctrl_c() -> None:
    """A worker of the warm-up: Ctrl-C is the parent's to handle (it stops the pool)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)


def warm_up(processes: int | None = None, stream: IO[str] | None = None) -> int:
    """Compile (or load) every kernel the public API uses, ahead of their first use, in
    ``processes`` processes (default: the cores, at most 4); returns the number of steps that
    failed (each said on ``stream``)."""
    stream = stream or sys.stderr
    names = [name for name, _ in _steps()]
    workers = max(1, min(processes or os.cpu_count() or 1, 4, len(names)))
    shares = [names[i::workers] for i in range(workers)]  # round robin: kinds spread out
    t0 = time.perf_counter()
    print(
        f"{PACKAGE}: warm-up: compiling the kernels numba has not cached yet, in {workers} "
        "process(es) (once: later runs load them from the cache)",
        file=stream,
        flush=True,
    )
    try:
        if workers == 1:
            parts = [_run_steps(names)]
        else:
            import multiprocessing

            context = multiprocessing.get_context("spawn")
            with context.Pool(workers, initializer=_ignore_ctrl_c) as pool:
                parts = pool.map(_run_steps, shares)  # Ctrl-C: the pool is terminated
    except KeyboardInterrupt:
        print(
            f"{PACKAGE}: warm-up: interrupted; the kernels compiled so far are cached", file=stream
        )
        return 130
    return _report(parts, time.perf_counter() - t0, stream)


def _report(
    parts: Sequence[tuple[list[Outcome], list[str]]], seconds: float, stream: IO[str]
) -> int:
    """Say what the warm-up's processes did (``parts``: :func:`_run_steps`' answers, copies
    when they come from a pool); returns the number of failed steps."""
    done = [r for steps, _ in parts for r in steps]
    compiled = [k for _, kernels in parts for k in kernels]
    skipped = [name for name, status, _ in done if status == SKIPPED]
    failed = [(name, err) for name, status, err in done if status == FAILED]
    for name, err in failed:
        print(f"{PACKAGE}: warm-up: {name} failed: {err}", file=stream)
    none = f" ({', '.join(skipped)}: no kernel to compile)" if skipped else ""
    print(
        f"{PACKAGE}: warm-up: {len(done) - len(failed)} of {len(done)} steps ready{none}, "
        f"{len(compiled)} kernel(s) compiled, in {seconds:.1f} s",
        file=stream,
    )
    return len(failed)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m prefixsim warm-up [--processes N]``."""
    from ._args import OneLineParser

    parser = OneLineParser(
        prog="python -m prefixsim warm-up",
        description="Compile every kernel ahead of its first use (numba caches them on disk).",
    )
    parser.add_argument("--processes", type=int, default=None, help="default: the cores, <= 4")
    args = parser.parse_args(argv)
    try:
        return 1 if warm_up(args.processes) else 0
    except KeyboardInterrupt:
        print(f"{PACKAGE}: warm-up: interrupted; what compiled so far is cached", file=sys.stderr)
        return 130
