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
    try:  # one bounded line (a 100,000-character override is cut in the middle)
        from prefixsim.errors import error_line

        line = error_line("sweep", message)
    except Exception:  # an interrupt cut the engine's import short: the message, cut
        line = f"sweep: error: {message[:1000]}"
    print(line, file=sys.stderr)


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
        except _HydraRejected:
            raise
        except Exception as err:
            if _interrupted(err):
                # Ctrl-C while OmegaConf resolved a value: it wraps the KeyboardInterrupt in
                # an error of its own, which Hydra would print with a traceback
                raise KeyboardInterrupt from None
            line = None if os.environ.get("HYDRA_FULL_ERROR") == "1" else hydra_error_line(err)
            if line is None:
                return original(functools.partial(_reraise, err))  # Hydra's own report
            raise _HydraRejected(line) from None

    utils.run_and_report = run_and_report
    try:
        yield
    finally:
        utils.run_and_report = original


def _interrupted(err: BaseException) -> bool:
    """Whether a KeyboardInterrupt is among ``err``'s causes or contexts."""
    seen: set[int] = set()
    cur: BaseException | None = err
    while cur is not None and id(cur) not in seen:
        if isinstance(cur, KeyboardInterrupt):
            return True
        seen.add(id(cur))
        cur = cur.__cause__ or cur.__context__
    return False


_ABSENT = object()


def _null_node(override: Any, cfg: Any) -> str | None:
    """The node of the composed ``cfg`` that is null and that ``override`` reaches into (a
    parent of its key) or merges a mapping into (its key); None when there is none."""
    from omegaconf import OmegaConf

    if override.is_delete() or override.package is not None:
        return None
    key = override.key_or_group
    parts = key.split(".")
    for i in range(1, len(parts)):
        parent = ".".join(parts[:i])
        node = OmegaConf.select(
            cfg, parent, default=_ABSENT, throw_on_missing=False, throw_on_resolution_failure=False
        )
        if node is _ABSENT:
            return None  # a key the schema lacks: Hydra's own error (one line)
        if node is None:
            return parent
    value = override.value()
    if isinstance(value, dict):
        node = OmegaConf.select(
            cfg, key, default=_ABSENT, throw_on_missing=False, throw_on_resolution_failure=False
        )
        if node is None:
            return key
    return None


@contextlib.contextmanager
def _null_nodes_refused(argv: Sequence[str], typed: dict[str, str]) -> Iterator[None]:
    """An override into a node that is null once the defaults are composed (``tiers.hbm.
    capacity=3`` with no ``tiers=`` chosen, ``model.layers=32`` with no model, a key under
    ``hardware=null``, ``+tiers.hbm...``, a mapping merged into ``tiers.rdma`` of a hierarchy
    without it) is an assertion's traceback in OmegaConf. Hydra applies the command line's
    value overrides to the composed configuration one by one
    (``ConfigLoaderImpl._apply_overrides_to_config``); here each is first checked against the
    configuration as composed so far, which knows every group's choice (the defaults, an
    experiment's ``override /model: ...``, the command line's): :class:`_HydraRejected`, one
    line naming the null node and how to choose it. ``typed``: the overrides as typed, by
    their rewritten text. (Hydra's private API, as in ``_no_mode_probe``.)"""
    from hydra._internal.config_loader_impl import ConfigLoaderImpl

    from .overrides import null_node_line

    original = ConfigLoaderImpl.__dict__["_apply_overrides_to_config"]
    apply = original.__func__

    def apply_each(overrides: list[Any], cfg: Any) -> None:
        for override in overrides:
            node = _null_node(override, cfg)
            if node is not None:
                line = override.input_line or override.key_or_group
                raise _HydraRejected(null_node_line(typed.get(line, line), node, argv))
            apply([override], cfg)

    ConfigLoaderImpl._apply_overrides_to_config = staticmethod(apply_each)  # type: ignore[method-assign]
    try:
        yield
    finally:
        ConfigLoaderImpl._apply_overrides_to_config = original  # type: ignore[method-assign]


def config_file_error(path: str, data: bytes, err: Exception) -> str | None:
    """One line naming the config file ``path`` (its bytes ``data``) for an error of reading
    it that names no file: bytes that are not UTF-8, a number Python does not convert (more
    than 4300 digits, OmegaConf's YAML loader calls ``int()``); None for any other error."""
    from .argv import long_number_reason

    if isinstance(err, UnicodeDecodeError):
        try:
            data.decode("utf-8")
        except UnicodeDecodeError as bad:
            line = data.count(b"\n", 0, bad.start) + 1
            byte = data[bad.start]
            return (
                f"{path}:{line}: not UTF-8 text (byte 0x{byte:02x} at offset {bad.start}); "
                "config files are UTF-8 YAML"
            )
        return f"{path}: not UTF-8 text; config files are UTF-8 YAML"
    if isinstance(err, ValueError):
        text = data.decode("utf-8", "replace")
        for number, row in enumerate(text.splitlines(), 1):
            reason = long_number_reason(row)
            if reason is not None:
                return f"{path}:{number}: {reason}"
    return None


@contextlib.contextmanager
def _config_files_named() -> Iterator[None]:
    """Hydra reads a config file (an experiment, a ``--config-dir`` profile) with
    ``open(encoding="utf-8")`` and OmegaConf's YAML loader: a file that is not UTF-8, or that
    holds a number of more than 4300 digits, is a 60-line traceback that names no file. Here
    each read that fails so is :class:`_HydraRejected`, one line naming the file and line
    (:func:`config_file_error`). (Hydra's private API, as in ``_no_mode_probe``.)"""
    from hydra.core.plugins import Plugins
    from hydra.plugins.config_source import ConfigSource

    def named(load: Any) -> Any:
        def load_config(self: Any, config_path: str) -> Any:
            try:
                return load(self, config_path)
            except (UnicodeDecodeError, ValueError, OSError) as err:
                name = self._normalize_file_name(config_path)
                if self.scheme() == "file":
                    path = os.path.join(self.path, name)
                    read = Path(path).read_bytes
                else:
                    from importlib import resources

                    path = f"{self.path}/{name}"
                    read = resources.files(self.path).joinpath(name).read_bytes
                if isinstance(err, OSError):
                    raise _HydraRejected(f"{path}: cannot be read ({err.strerror})") from None
                try:
                    line = config_file_error(path, read(), err)
                except OSError:
                    line = None
                if line is None:
                    raise
                raise _HydraRejected(line) from None

        return load_config

    # Hydra's plugin discovery imports its own copies of the sources' modules: patch those.
    sources: list[Any] = list(Plugins.instance().discover(ConfigSource))
    originals = [
        (cls, cls.__dict__["load_config"])
        for cls in sources
        if cls.scheme() in ("file", "pkg") and "load_config" in cls.__dict__
    ]
    for cls, load in originals:
        cls.load_config = named(load)
    try:
        yield
    finally:
        for cls, load in originals:
            cls.load_config = load


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
        try:
            status["code"] = _run(cfg, args, started)
        except Exception as err:
            if _interrupted(err):  # not Hydra's "Error executing job" report: see below
                raise KeyboardInterrupt from None
            raise

    saved = sys.argv
    sys.argv = [saved[0] if saved else "sweep", *rewrite.argv]
    try:
        with (
            _no_mode_probe(),
            _config_files_named(),
            _one_line_hydra_errors(),
            _null_nodes_refused(rewrite.argv, rewrite.typed),
        ):
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
