"""The package imports lazily: what that must and must not change (fresh interpreters)."""

from __future__ import annotations

import subprocess
import sys


def run(code: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    return proc.stdout.strip()


def test_importing_the_profiles_does_not_load_the_engine() -> None:
    # Hydra imports prefixsim.profiles to find the bundled model and hardware profiles, on
    # every `python -m sweep`, --help included: that must not load numba and the kernels.
    out = run("import sys, prefixsim.profiles; print('numba' in sys.modules)")
    assert out == "False"


def test_the_package_attribute_replay_is_the_function_whatever_was_imported_first() -> None:
    # `prefixsim.replay` is a submodule and a function; importing the submodule first must not
    # leave the module where the function was (it did once the package imported lazily).
    out = run(
        "import prefixsim.replay, prefixsim\n"
        "print(callable(prefixsim.replay), prefixsim.replay.__name__)\n"
        "from prefixsim import replay\n"
        "print(replay is prefixsim.replay)"
    )
    assert out.splitlines() == ["True replay", "True"]


def test_the_sweep_imports_what_its_first_replay_does_not_need_later() -> None:
    # Everything imported before the first replay holds it up (docs/performance.md): the
    # cluster engine (cluster points only) and pyarrow.compute (the final merge, a segment's
    # per-request rows) are imported where they are used.
    out = run(
        "import sys, sweep.app\n"
        "print('prefixsim.cluster' in sys.modules, 'pyarrow.compute' in sys.modules)"
    )
    assert out == "False False"
