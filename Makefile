# Everything a newcomer runs: `make demo` (the main job on the embedded default) and `make test`.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: venv demo test test-fast bench lint clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $(STAMP)

demo: venv
	$(PY) -m app demo

test: venv
	$(PY) -m pytest

test-fast: venv  # everything but the `slow` tests: Spark end to end, the service runs, the kill tests
	$(PY) -m pytest -m "not slow"

bench: venv
	$(PY) -m pytest -m benchmark -p no:cacheprovider tests --benchmark-only -q

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis .benchmarks
