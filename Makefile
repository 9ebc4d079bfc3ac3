# gpuhub: `make demo` runs a local JupyterHub with LocalGPUSpawner; `make test` runs every test.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(CURDIR)/$(VENV)/bin
# JupyterHub finds configurable-http-proxy (npm) and jupyterhub-singleuser (venv) on PATH.
export PATH := $(CURDIR)/node_modules/.bin:$(BIN):$(PATH)
GPUHUB_DEMO_GPUS ?= auto
export GPUHUB_DEMO_GPUS

.PHONY: install demo test lint typecheck pytest benchmarks clean

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml package.json package-lock.json
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "gpuhub needs Python 3.11+"'
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	npm ci --no-audit --no-fund
	$(BIN)/python -m pip install --quiet -e ".[test]"
	touch $@

demo: install
	@mkdir -p .demo
	cd .demo && $(BIN)/jupyterhub -f $(CURDIR)/jupyter_config/jupyterhub_config.py

lint: install
	$(BIN)/ruff check .

typecheck: install
	$(BIN)/mypy

pytest: install
	$(BIN)/python -m pytest

test: lint typecheck pytest

benchmarks: install
	$(BIN)/python -m benchmarks

clean:
	rm -rf $(VENV) node_modules .demo .pytest_cache .mypy_cache .ruff_cache
