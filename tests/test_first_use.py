"""The first use of the kernels (issue 21, "silent first-use compiles"): a notice on stderr
while numba compiles this package's kernels, said once, and the warm-up that compiles them
ahead (``python -m prefixsim warm-up``, run by ``make run``)."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import types
from pathlib import Path

import numba
import pytest

from prefixsim import first_use, warm_up


def _jitted(module: str, name: str) -> numba.core.registry.CPUDispatcher:
    """A fresh (never compiled) dispatcher whose function lives in ``module``."""
    code = f"def {name}(x):\n    return x + 1\n"
    namespace: dict[str, object] = {"__name__": module}
    exec(compile(code, f"<{module}>", "exec"), namespace)
    func = namespace[name]
    assert isinstance(func, types.FunctionType)
    return numba.njit(func)


def test_a_compile_of_ours_is_said_once_with_what_compiled() -> None:
    first = _jitted("prefixsim.fake_kernels", "first_kernel")
    second = _jitted("prefixsim.fake_kernels", "second_kernel")
    stream = io.StringIO()
    with first_use.noting(stream) as notice:
        first(1)
        second(1)
        first(2)  # compiled already: nothing more
    lines = stream.getvalue().splitlines()
    assert len(lines) == 2, lines
    assert lines[0].startswith("prefixsim: compiling first_kernel (and any other kernel")
    assert "happens once" in lines[0] and "python -m prefixsim warm-up" in lines[0]
    assert lines[1].startswith("prefixsim: compiled first_kernel, second_kernel in ")
    assert notice.compiled == ["first_kernel", "second_kernel"]


def test_nothing_is_said_without_a_compile_of_ours() -> None:
    ours = _jitted("prefixsim.fake_kernels", "warm_kernel")
    ours(1)  # compiled before the block
    theirs = _jitted("somebody_else", "their_kernel")
    stream = io.StringIO()
    with first_use.noting(stream):
        ours(3)
        theirs(1)  # another package's dispatcher: not ours to announce
    assert stream.getvalue() == ""


def test_nested_blocks_speak_once() -> None:
    kernel = _jitted("prefixsim.fake_kernels", "nested_kernel")
    outer, inner = io.StringIO(), io.StringIO()
    with first_use.noting(outer), first_use.noting(inner):
        kernel(1)
    assert inner.getvalue() == ""
    assert len(outer.getvalue().splitlines()) == 2


def test_the_cli_says_it_on_a_fresh_cache_and_not_after(tmp_path: Path) -> None:
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "numba")}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    command = [sys.executable, "-m", "prefixsim", "conversation", "--policy", "FIFO"]
    command += ["--capacity", "64", "--no-per-request"]
    first = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    assert first.returncode == 0, first.stderr
    said = [x for x in first.stderr.splitlines() if x.startswith("prefixsim: compil")]
    # FIFO's replay is the single-cache driver over its steps, named by the composition
    driver = "single_driver.FIFOState"
    assert len(said) == 2 and driver in said[0] and driver in said[1], said
    again = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    assert again.returncode == 0, again.stderr
    assert "compil" not in again.stderr  # loaded from the cache: nothing to say


@pytest.mark.slow
def test_the_warm_up_runs_every_step() -> None:
    # every step of the public API it exercises must work (one that breaks is a bug); the
    # kernels come from the cache of the test session's earlier runs, or compile here
    stream = io.StringIO()
    assert warm_up.warm_up(processes=1, stream=stream) == 0, stream.getvalue()
    assert "steps ready" in stream.getvalue().splitlines()[-1]


def test_warm_up_is_a_command_of_python_m_prefixsim() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "prefixsim", "warm-up", "--help"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "python -m prefixsim warm-up" in done.stdout


def test_a_step_the_engine_refuses_is_skipped_not_failed(monkeypatch: pytest.MonkeyPatch) -> None:
    # a policy registered without a compiled kernel: the engine refuses it, nothing to warm
    import prefixsim

    def refused(policy: str, trace: object) -> None:
        raise prefixsim.ParameterError("policy", policy, "has no compiled kernel yet")

    steps = [("NOKERNEL", lambda trace: refused("NOKERNEL", trace))]
    monkeypatch.setattr(warm_up, "_steps", lambda: steps)
    stream = io.StringIO()
    assert warm_up.warm_up(processes=1, stream=stream) == 0, stream.getvalue()
    assert "(NOKERNEL: no kernel to compile)" in stream.getvalue()


def test_outcomes_that_crossed_a_process_boundary_are_read_by_value(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # a pool's workers send their outcomes back pickled: copies, not the module's constants
    # (main's warm-up compared them with ``is`` and called a skipped step a failure)
    import pickle

    import prefixsim

    def refused(trace: object) -> None:
        raise prefixsim.ParameterError("policy", "NOKERNEL", "has no compiled kernel yet")

    def fine(trace: object) -> None:
        return None

    monkeypatch.setattr(warm_up, "_steps", lambda: [("NOKERNEL", refused), ("FINE", fine)])
    run_steps = warm_up._run_steps
    monkeypatch.setattr(
        warm_up, "_run_steps", lambda names: pickle.loads(pickle.dumps(run_steps(names)))
    )
    stream = io.StringIO()
    assert warm_up.warm_up(processes=1, stream=stream) == 0, stream.getvalue()
    assert "2 of 2 steps ready (NOKERNEL: no kernel to compile)" in stream.getvalue()


@pytest.mark.slow
def test_the_warm_up_of_make_run_exits_0_in_several_processes() -> None:
    # ``make run`` calls it with the default processes (a pool on any machine of 2+ cores)
    done = subprocess.run(
        [sys.executable, "-m", "prefixsim", "warm-up", "--processes", "2"],
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    assert "failed" not in done.stderr, done.stderr
