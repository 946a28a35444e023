# Two commands do all the set-up: `make demo` and `make test` (each creates .venv if missing).
VENV ?= .venv
PYTHON ?= python3
BIN = $(VENV)/bin
PROMPT ?= Plan a small launch: write the announcement and list the risks.
# pytest-xdist processes for `make test` (each starts its own throwaway PostgreSQL server and
# fork server). The tests wait on child processes and servers part of the time: on two cores
# five were quickest (160 and 166 s against 170 and 192 s with six, 169 and 180 s with four).
TEST_WORKERS ?= 5

.PHONY: demo test lint checks

# uv installs the pinned packages (and compiles their bytecode) on every core: about 7 s less
# than pip's 24 s on two cores, on a machine with no cache of either
$(BIN)/lace: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -c constraints.txt uv
	$(BIN)/uv pip install --quiet --python $(BIN)/python --compile-bytecode -c constraints.txt \
		-e '.[dev]'
	touch $@

demo: $(BIN)/lace
	LACE_HOME=$${LACE_HOME:-$(CURDIR)/.lace-demo} $(BIN)/lace run "$(PROMPT)"
	LACE_HOME=$${LACE_HOME:-$(CURDIR)/.lace-demo} $(BIN)/lace threads
	@echo "lace is installed in $(BIN): source $(BIN)/activate puts it on your PATH (the README's tour follows)"

lint: checks
	$(BIN)/lint-imports

checks: $(BIN)/lace
	$(BIN)/ruff check .
	$(BIN)/mypy

# ruff and mypy run beside the tests (their report follows the tests'); either failing fails.
# The import contracts are a test (tests/test_layers.py runs lint-imports). The test modules
# are rewritten for pytest's asserts once, by a collection before the workers start (each
# worker would rewrite all of them again: PYTHONDONTWRITEBYTECODE keeps no cache).
test: $(BIN)/lace
	@lint_log=$$(mktemp); $(MAKE) --no-print-directory checks >"$$lint_log" 2>&1 & lint=$$!; \
	export PYTHONDONTWRITEBYTECODE=; $(BIN)/python -m pytest --collect-only -q >/dev/null; \
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist worksteal; tests=$$?; \
	wait $$lint; linted=$$?; cat "$$lint_log"; rm -f "$$lint_log"; \
	[ $$tests -eq 0 ] && [ $$linted -eq 0 ]
