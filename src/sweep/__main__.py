"""``python -m sweep KEY=VALUE...``: run a Hydra-declared grid of replays in parallel.

    python -m sweep capacity=1024,2048,4096 policy=S3FIFO,LRU

The arguments go through :func:`sweep.argv.rewrite_argv` (grid sweeps into list form, in
Hydra's own grammar), then through ``hydra.main`` (composition, ``--help``, ``--cfg job``, type
checking against the structured config), then :func:`sweep.app.run_sweep` runs the grid.

Exit status: 0 done; 1 some points failed (the others are written), a worker or the Dask
cluster was lost (finished points are written); 2 a key the configuration lacks or a value of
the wrong type (:mod:`sweep.overrides`, Hydra's own errors in one line), a parameter the engine
rejects, an unreadable trace, a run directory in use or that cannot be written (a file in the
way, a read-only mount, a full disk), an unreachable Dask scheduler; 130 interrupted (finished
points are kept). See the README's table.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, NoReturn

CONFIG_PATH = "pkg://sweep.conf"
"""Hydra's configuration: the package ``sweep.conf``. In a source checkout ``src/sweep/conf`` is a
symbolic link to the top-level ``conf/`` (so files added there, such as a new
``conf/experiment/NAME.yaml``, are found at once with ``PYTHONPATH=src`` or ``pip install -e .``);
a wheel carries a copy of ``conf/`` as package data (``pyproject.toml``)."""

CONF_DIR = Path(__file__).resolve().parent / "conf"
"""The directory of :data:`CONFIG_PATH` (for Hydra's compose API in tests and notebooks)."""


def _error(message: str) -> None:
    print(f"sweep: error: {message}", file=sys.stderr)


def _remove_if_fresh_and_empty(path: Path, since: float) -> None:
    """Hydra creates the run directory (and its parents) before the task runs; do not leave
    empty ones behind when the configuration is rejected."""
    try:
        stop = Path.cwd().resolve()
        path = path.resolve()
    except (OSError, RuntimeError):  # a symbolic link loop: there is nothing we made there
        return
    while path != stop and stop in path.parents:
        try:
            if any(path.iterdir()) or path.stat().st_mtime < since - 1:
                return
            path.rmdir()
        except OSError:
            return
        path = path.parent


class _HydraRejected(Exception):
    """A configuration Hydra or OmegaConf rejected while composing it (one line)."""


def hydra_error_line(err: BaseException) -> str | None:
    """One line for an error of Hydra's composition (a config file that does not parse or
    names a key the schema lacks, an unknown config group option), with the closest key for
    an unknown one; None for anything else (a bug keeps its traceback)."""
    import yaml
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from .overrides import omegaconf_error_line

    if isinstance(err, yaml.YAMLError):  # a profile or experiment file that is not YAML
        mark = getattr(err, "problem_mark", None)
        where = f"{mark.name}:{mark.line + 1}:{mark.column + 1}: " if mark else ""
        what = [getattr(err, "context", None), getattr(err, "problem", None)]
        return where + ("; ".join(w for w in what if w) or str(err).splitlines()[0])
    if isinstance(err, (HydraException, OmegaConfBaseException)):
        return omegaconf_error_line(err)
    return None


def _reraise(err: BaseException) -> NoReturn:
    raise err


@contextlib.contextmanager
def _one_line_hydra_errors() -> Iterator[None]:
    """Hydra prints a composition error in several lines (with advice such as "use
    +key=value" and "Set the environment variable HYDRA_FULL_ERROR=1") and exits 1; here it
    is :class:`_HydraRejected`, one line and exit 2 like every other bad input. (The
    overrides typed on the command line are checked before, with the closest key or the
    expected type: :mod:`sweep.overrides`; this is for the config files.) Errors that are not
    Hydra's or OmegaConf's keep Hydra's handling, as does ``HYDRA_FULL_ERROR=1``. (Hydra's
    private API, as in ``_no_mode_probe``.)"""
    from hydra._internal import utils

    original = utils.run_and_report

    def run_and_report(func: Any) -> Any:
        try:
            return func()
        except Exception as err:
            line = None if os.environ.get("HYDRA_FULL_ERROR") == "1" else hydra_error_line(err)
            if line is None:
                return original(functools.partial(_reraise, err))  # Hydra's own report
            raise _HydraRejected(line) from None

    utils.run_and_report = run_and_report
    try:
        yield
    finally:
        utils.run_and_report = original


@contextlib.contextmanager
def _no_mode_probe() -> Iterator[None]:
    """Hydra composes the whole configuration twice per run: once only to read ``hydra.mode``
    (``Hydra.get_mode``), then for the job. Our configuration never sets ``hydra.mode`` (the
    sweep has no multirun), so the probe always answers None, and Hydra then runs in RUN mode;
    answering None without composing saves a fifth of a second of start-up. (Hydra's private
    API, as in ``sweep.argv``: pinned by ``hydra-core<1.4``.)"""
    from hydra._internal.hydra import Hydra

    probe = Hydra.get_mode
    Hydra.get_mode = lambda self, config_name, overrides: None  # type: ignore[method-assign]
    try:
        yield
    finally:
        Hydra.get_mode = probe  # type: ignore[method-assign]


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m sweep ARGS``; returns the exit status. Ctrl-C at any moment is one line
    and status 130 (a run that made its folder says what it kept and how to resume)."""
    try:
        return _main(argv)
    except KeyboardInterrupt as err:
        # nothing imported here: an interrupt may have cut an import short (a second import
        # of a half-initialised module fails with a traceback of its own)
        if type(err).__name__ != "SweepInterrupted":  # that one's log said what was kept
            _error("interrupted before the run folder was made: nothing written")
        return 130


def _main(argv: Sequence[str] | None) -> int:
    from .argv import ArgvError, rewrite_argv

    args = list(sys.argv[1:] if argv is None else argv)
    try:
        rewrite = rewrite_argv(args)
    except ArgvError as err:
        _error(str(err))
        return 2
    for note in rewrite.notes:
        print(f"sweep: {note}", file=sys.stderr)
    if any(a.startswith(("model=", "hardware=")) for a in rewrite.argv):
        # only then: the check imports the engine, which --help and most runs need not wait for
        from prefixsim import PrefixSimError

        from .costing import check_profile_overrides

        try:
            check_profile_overrides(rewrite.argv, CONF_DIR)  # model=NAME: one line, exit 2
        except PrefixSimError as err:
            _error(str(err))
            return 2
    import hydra
    from omegaconf import DictConfig

    from .config import register_configs

    register_configs()
    started = time.time()
    status = {"code": 0}

    @hydra.main(version_base="1.3", config_path=CONFIG_PATH, config_name="config")
    def task(cfg: DictConfig) -> None:
        status["code"] = _run(cfg, args, started)

    saved = sys.argv
    sys.argv = [saved[0] if saved else "sweep", *rewrite.argv]
    try:
        with _no_mode_probe(), _one_line_hydra_errors():
            task()
    except _HydraRejected as err:
        _error(str(err))
        return 2
    finally:
        sys.argv = saved
    return status["code"]


def _run(cfg: Any, argv: Sequence[str], started: float) -> int:
    from hydra.core.hydra_config import HydraConfig

    import prefixsim

    from . import ranges
    from .app import run_sweep
    from .config import GRID_KEYS, to_sweep_config

    try:
        sweep_cfg = to_sweep_config(cfg)
    except prefixsim.PrefixSimError as err:
        _error(str(err))
        with contextlib.suppress(Exception):  # out_dir itself may be what does not resolve
            _remove_if_fresh_and_empty(Path(os.path.abspath(str(cfg.out_dir))), started)
        return 2
    try:
        overrides: list[str] | None = list(HydraConfig.get().overrides.task)
    except ValueError:
        overrides = None
    try:
        summary = run_sweep(
            sweep_cfg,
            command=["python", "-m", "sweep", *argv],
            overrides=overrides,
            config_yaml=ranges.to_yaml(cfg, GRID_KEYS),
            release_workers=True,
        )
    except prefixsim.PrefixSimError as err:
        _error(str(err))
        _remove_if_fresh_and_empty(Path(os.path.abspath(sweep_cfg.out_dir)), started)
        return 2
    return summary.exit_code


def _exit(code: int) -> NoReturn:
    """End the process with ``code`` once :func:`main` has returned (every file written and
    closed): the exit handlers run (logging, multiprocessing and loky clean-up, tqdm), the
    standard streams are flushed, then the process ends without the interpreter's teardown of
    every object, which took 0.3-0.8 s after the 1,008-point grid (a heap of a gigabyte,
    numba's and Arrow's libraries) for nothing. With another non-daemon thread alive, without
    atexit's runner, or under a profiler or tracer (``python -m cProfile -o ...`` writes its
    output after the module returns), the usual exit."""
    import atexit
    import threading

    run_exit_handlers = getattr(atexit, "_run_exitfuncs", None)
    main_thread = threading.main_thread()
    busy = [t for t in threading.enumerate() if t is not main_thread and not t.daemon]
    if run_exit_handlers is None or busy or sys.getprofile() or sys.gettrace():
        sys.exit(code)
    run_exit_handlers()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


if __name__ == "__main__":
    _exit(main())
