# The README's commands. PYTHON is the interpreter the project is installed into.
PYTHON ?= python3

.PHONY: setup run test typecheck bench

setup:  ## install the package (editable) with its test and dev tools
	$(PYTHON) -m pip install -e ".[dev]"

run: setup  ## set up, then run the default sweep on the bundled trace
	$(PYTHON) -m sweep

test:  ## lint and type-check, then the whole test suite (what CI runs)
	$(PYTHON) -m ruff check .
	$(PYTHON) -m ruff format --check .
	$(PYTHON) -m mypy
	$(PYTHON) -m pytest

typecheck:
	$(PYTHON) -m mypy

bench:  ## throughput benchmarks (numbers go in the notes, not in tests)
	$(PYTHON) experiments/bench_replay.py
	$(PYTHON) experiments/bench_sweep.py
