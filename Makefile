# Two commands do all the set-up: `make demo` and `make test` (each creates .venv if missing).
VENV ?= .venv
PYTHON ?= python3
BIN = $(VENV)/bin
PROMPT ?= Plan a small launch: write the announcement and list the risks.
# pytest-xdist processes for `make test` (each starts its own throwaway PostgreSQL server). Four
# finish sooner on two cores (4 m 40 s against 5 m 45 s) but crowd the timing tests: with four,
# test_leases' app-and-run test once saw a new thread 1.6 s late (its bound is 1 s)
TEST_WORKERS ?= 2

.PHONY: demo test lint

$(BIN)/lace: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[dev]'
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
