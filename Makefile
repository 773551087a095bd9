# The two commands that matter: `make demo` and `make test`. Both install what they need first.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: install test test-fast demo lint bench crds clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test,dev,sandbox]'
	touch $(STAMP)

install: $(STAMP)

test: $(STAMP)
	$(BIN)/pytest -q $(PYTEST_ARGS)

test-fast: $(STAMP)
	$(BIN)/pytest -q -m "not integration and not e2e" $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy mcm_tasks informers providers mcm_sandbox beat_schedule.py
	$(BIN)/lint-imports

demo: $(STAMP)
	$(BIN)/python -m mcm_sandbox.demo $(if $(KEEP),--keep,)

bench: $(STAMP)
	$(BIN)/python bench/run_all.py

crds: $(STAMP)
	$(BIN)/mcm-tasks crds --out crds/

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache build *.egg-info
