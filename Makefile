# Two commands a newcomer needs: `make serve` and `make test`. Both install what they need.
PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: install serve test lint bench clean

$(STAMP): pyproject.toml constraints.txt
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "$(PYTHON) not found; set PYTHON=python3" >&2; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip setuptools wheel
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[embedded,dev]'
	@touch $(STAMP)

install: $(STAMP)

serve: install
	$(BIN)/svc serve --host 127.0.0.1 --port 8080

test: install
	$(BIN)/ruff check .
	$(BIN)/lint-imports
	$(BIN)/pytest -q -p no:cacheprovider

lint: install
	$(BIN)/ruff check .
	$(BIN)/lint-imports

bench: install
	$(BIN)/python bench/api.py
	$(BIN)/python bench/templates.py

clean:
	rm -rf $(VENV) *.egg-info .pytest_cache .ruff_cache
