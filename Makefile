# The README's commands. PYTHON is the interpreter the project is installed into.
PYTHON ?= python3

# What testing needs beyond running (the "dev" extra), checked by importing it: a `make test`
# with everything installed starts at once, without a pip run.
DEV_MODULES = pytest xdist hypothesis mypy ruff dask distributed tokenizers hydra_plugins.hydra_joblib_launcher

.PHONY: setup setup-dev run test typecheck bench

setup:  ## install the package (editable) and what running it needs, nothing more
	$(PYTHON) -m pip install -e .

setup-dev:  ## add what testing needs (the dev extra), unless it is installed already
	@$(PYTHON) -c "import importlib, sys; [importlib.import_module(m) for m in sys.argv[1:]]; import prefixsim" $(DEV_MODULES) 2>/dev/null \
		|| $(PYTHON) -m pip install -e ".[dev]"

run: setup  ## set up, run the default sweep on the bundled trace, then compile the other kernels once
	$(PYTHON) -m sweep
	$(PYTHON) -m prefixsim warm-up

test: setup-dev  ## lint and type-check, then the whole test suite (what CI runs)
	$(PYTHON) -m ruff check .
	$(PYTHON) -m ruff format --check .
	$(PYTHON) -m mypy
	@# Two workers, a file each at a time (a file's tests share their fixtures and ports): the
	@# suite compiles a numba driver per policy and composition, on one core it took past 20 min.
	@# (pytest-benchmark, if installed, refuses xdist with a warning, which the settings make an error.)
	$(PYTHON) -m pytest -n 2 --dist loadfile -p no:benchmark

typecheck:
	$(PYTHON) -m mypy

bench:  ## throughput benchmarks (numbers go in the notes, not in tests)
	$(PYTHON) experiments/bench_replay.py
	$(PYTHON) experiments/bench_sweep.py
