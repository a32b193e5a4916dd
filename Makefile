# One virtual environment at .venv/, created on first use.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install test test-unit lint docs demo bench clean

DEMO_STAMP := $(VENV)/.demo-installed

$(STAMP): setup.cfg pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $(STAMP) $(DEMO_STAMP)

# The demo needs the jobs' extras and the local S3 server, not the dev tools (torch, mypy, mkdocs ...).
$(DEMO_STAMP): setup.cfg pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -qq -e '.[demo]'
	touch $(DEMO_STAMP)

install: $(STAMP)

test: $(STAMP)
	$(BIN)/python -m pytest tests --durations=30

test-unit: $(STAMP)
	$(BIN)/python -m pytest tests/unit

lint: $(STAMP)
	$(BIN)/ruff check lineage_data connectors tests bench examples
	$(BIN)/ruff format --check lineage_data connectors tests bench examples
	$(BIN)/mypy

# The documentation site (docs/, mkdocs.yml) into site/; --strict fails on a broken link or reference.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

demo: $(DEMO_STAMP)
	$(BIN)/python -m examples.demo

bench: $(STAMP)
	$(BIN)/python -m bench all --scale smoke

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache site
