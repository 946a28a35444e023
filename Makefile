# Two commands do all the set-up: `make demo` and `make test` (each creates .venv if missing).
VENV ?= .venv
PYTHON ?= python3
BIN = $(VENV)/bin
PROMPT ?= Plan a small launch: write the announcement and list the risks.
# pytest-xdist processes for `make test` (each starts its own throwaway PostgreSQL server); more
# than the cores: many tests wait on subprocesses, so four overlap their waits on two cores
TEST_WORKERS ?= 4

.PHONY: demo test lint

$(BIN)/lace: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $@

demo: $(BIN)/lace
	LACE_HOME=$${LACE_HOME:-$(CURDIR)/.lace-demo} $(BIN)/lace run "$(PROMPT)"
	LACE_HOME=$${LACE_HOME:-$(CURDIR)/.lace-demo} $(BIN)/lace threads

lint: $(BIN)/lace
	$(BIN)/ruff check .
	$(BIN)/lint-imports
	$(BIN)/mypy

test: lint
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist worksteal
