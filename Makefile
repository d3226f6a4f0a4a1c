# Two commands a newcomer needs: `make serve` and `make test`. Both install what they need.
PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
HOST   ?= 127.0.0.1
PORT   ?= 8080

.PHONY: install serve test lint bench mutate clean

$(STAMP): pyproject.toml constraints.txt
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "$(PYTHON) not found; set PYTHON=python3" >&2; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip setuptools wheel
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[embedded,dev]'
	@touch $(STAMP)

install: $(STAMP)

# `make serve PORT=9000 HOST=0.0.0.0` to listen elsewhere.
serve: install
	$(BIN)/svc serve --host $(HOST) --port $(PORT)

# Tests run in a random order (pytest-randomly). The seed is chosen here and printed first
# (pytest's -q hides the plugin's own header): rerun one order with `make test SEED=1234`, or
# turn it off while debugging with `-p no:randomly`. The 15 slowest tests are listed at the
# end, to keep the suite within its 15 minutes.
# The suite runs in TEST_WORKERS processes (pytest-xdist), a test file per process at a time;
# each process has its own embedded database and local Ray. The longest files go first
# (tests/heavy_first.py), so both processes end together. `make test TEST_WORKERS=0` runs
# it in this one process.
TEST_WORKERS ?= 2
ifeq ($(SEED),)
SEED := $(shell od -An -N2 -tu2 /dev/urandom | tr -d ' ')
endif
test: install
	$(BIN)/ruff check .
	$(BIN)/lint-imports
	@# Every actor, CLI and server the tests start imports the project: compiled once here, even
	@# where PYTHONDONTWRITEBYTECODE is set (each process would compile it again, ~0.3 s of CPU).
	PYTHONDONTWRITEBYTECODE= $(BIN)/python -m compileall -q -j 0 actors api config plugins scripts svc tests >/dev/null
	@# pytest rewrites the asserts of every test module it collects (about 12 s of CPU in each test
	@# process) and keeps the result only where bytecode may be written: one collection writes it
	@# while mypy runs, a core each, and every test process then reads it.
	@PYTHONDONTWRITEBYTECODE= $(BIN)/pytest -q --collect-only -p no:cacheprovider -p no:randomly >/dev/null 2>&1 & \
	$(BIN)/mypy; checked=$$?; wait; exit $$checked
	@echo "Random test order, seed $(SEED): 'make test SEED=$(SEED)' runs this order again."
	$(BIN)/pytest -q -p no:cacheprovider -p randomly --randomly-seed=$(SEED) --durations=15 \
		-n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder

# Mutation testing of the modules that decide money, access and egress, each against its fast
# tests ([tool.mutmut] in pyproject.toml; survivors and their verdicts in docs/testing.md).
# Three workers over two shared databases (tests/support/shared_db.py);
# `make mutate MUTANTS='plugins.egress*'` runs one module's slice.
MUTANTS ?=
MUTATE_WORKERS ?= 3
mutate: install
	$(BIN)/python -m tests.support.shared_db $(BIN)/mutmut run --max-children $(MUTATE_WORKERS) $(MUTANTS)
	$(BIN)/mutmut results

# mypy: the product packages at the level of [tool.mypy] in pyproject.toml (cache in .mypy_cache).
lint: install
	$(BIN)/ruff check .
	$(BIN)/lint-imports
	$(BIN)/mypy

bench: install
	$(BIN)/python bench/api.py
	$(BIN)/python bench/templates.py
	$(BIN)/python bench/pages.py

clean:
	rm -rf $(VENV) *.egg-info .pytest_cache .ruff_cache .mypy_cache mutants
