# Everything a newcomer runs: `make demo` (the main job on the embedded default) and `make test`.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: venv tools demo test test-fast bench lint clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $(STAMP)

# Debian's prometheus (server + promtool) for the deployment tests; installed only when missing.
tools:
	bash tests/deploy/install_tools.sh

demo: venv
	$(PY) -m app demo

test: venv tools
	$(PY) -m pytest

test-fast: venv  # everything but the `slow` tests: Spark end to end, the service runs, the kill tests
	$(PY) -m pytest -m "not slow"

# ruff (style and likely bugs) and mypy (types: strict for states/, spouts/ and the coordinator); config in pyproject.toml
lint: venv
	$(VENV)/bin/ruff check app states spouts tests
	$(VENV)/bin/mypy

bench: venv  ## the commit path against the raw LWT ceiling, 3 repetitions (BENCH_ARGS="--keys 20000")
	$(PY) -m tests.bench $(BENCH_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis .benchmarks
