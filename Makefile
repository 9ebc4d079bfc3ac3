# gpuhub: `make demo` runs a local JupyterHub with LocalGPUSpawner; `make test` runs every test.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(CURDIR)/$(VENV)/bin
# JupyterHub finds configurable-http-proxy (npm) and jupyterhub-singleuser (venv) on PATH.
export PATH := $(CURDIR)/node_modules/.bin:$(BIN):$(PATH)
# auto: this machine's GPUs, or 4 simulated ones without a driver; also simulated:N or 0,1,2.
GPUHUB_DEMO_GPUS ?= auto
export GPUHUB_DEMO_GPUS

.PHONY: install lock demo demo-k8s demo-helm demo-helm-down test lint typecheck pytest pytest-fast benchmarks clean wheel images \
	cluster cluster-down cluster-status test-cluster jstest

install: $(VENV)/.installed

# Both lock files pin what the tests passed with: package-lock.json (npm ci) and
# requirements.lock (pip constraints; `make lock` refreshes it).
$(VENV)/.installed: pyproject.toml requirements.lock package.json package-lock.json
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "gpuhub needs Python 3.11+"'
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	npm ci --no-audit --no-fund
	$(BIN)/python -m pip install --quiet -c requirements.lock -e ".[test]"
	touch $@

# requirements.lock anew: the newest versions pyproject.toml's ranges allow, installed into a
# fresh venv and frozen (its header comment kept). Run it after changing those ranges, then
# `make install` and the tests; commit it with the change.
LOCK_VENV := .lock-venv
lock:
	rm -rf $(LOCK_VENV)
	$(PYTHON) -m venv $(LOCK_VENV)
	$(LOCK_VENV)/bin/python -m pip install --quiet --upgrade pip
	test -d node_modules || npm ci --no-audit --no-fund
	$(LOCK_VENV)/bin/python -m pip install --quiet -e ".[test]"
	{ sed -n '/^#/p' requirements.lock; $(LOCK_VENV)/bin/python -m pip freeze --exclude-editable; } \
		> requirements.lock.new
	mv requirements.lock.new requirements.lock
	rm -rf $(LOCK_VENV)

demo: install
	@mkdir -p .demo
	cd .demo && $(BIN)/jupyterhub -f $(CURDIR)/jupyter_config/jupyterhub_config.py

# The Kubernetes demo on the local cluster (docs/cluster.md): GPUSpawner and the jobs service
# under the Helm chart's RBAC, Kueue's queue, servers and jobs on the process node's 4
# simulated GPUs. Same users, password and GPUHUB_DEMO_PORT as `make demo`.
demo-k8s: install
	$(BIN)/python -m localk8s.demo

# gpuhub installed as admins install it (docs/admin-guide.md, "Try the chart on the local
# cluster"): `helm upgrade --install` of helm/gpuhub as release gpuhub into namespace
# gpuhub-helm with localk8s/values-local.yaml, z2jh from helm/gpuhub/charts/, else the archive
# GPUHUB_Z2JH_CHART names, else gpuhub's stand-in; the hub, proxy and jobs service run as the
# chart's pods on the process node. Prints the hub's URL and the demo password.
demo-helm: install
	$(BIN)/python -m localk8s.demo_helm up

demo-helm-down:
	@if [ -x $(BIN)/python ]; then $(BIN)/python -m localk8s.demo_helm down; else echo "no cluster (no .venv)"; fi

# A real Kubernetes on loopback (docs/cluster.md): etcd, kube-apiserver, controller-manager,
# scheduler, kwok's fake GPU nodes, the process node local-0, Kueue, JobSet, Trainer and the
# Training Operator, each built with `go build` from its Go module (cached in
# ~/.cache/gpuhub-cluster) on the first run. GPUHUB_CLUSTER_NODES=file picks the fake nodes.
cluster: install
	$(BIN)/python -m localk8s up

cluster-down:
	@if [ -x $(BIN)/python ]; then $(BIN)/python -m localk8s down; else echo "no cluster (no .venv)"; fi

cluster-status: install
	$(BIN)/python -m localk8s status

# The frontend too: stylelint, prettier and eslint over labextension/ (package.json "lint:check";
# `npm run lint` fixes what they can).
lint: install
	$(BIN)/ruff check .
	$(BIN)/lint-imports
	npm run --silent lint:check

typecheck: install
	$(BIN)/mypy

# The frontend's unit tests: jest in jsdom over labextension/src/__tests__ (jest.config.js,
# JupyterLab's @jupyterlab/testing setup), in well under a minute.
jstest: install
	npm test --silent

# The Kubernetes-facing tests run on the cluster GPUHUB_TEST_KUBECONFIG names, else on the
# local one (make cluster; started here, or reused when it runs, and left running).
TEST_KUBECONFIG = $(or $(GPUHUB_TEST_KUBECONFIG),$(CURDIR)/.cluster/kubeconfig)

test-cluster: install
	@if [ -z "$(GPUHUB_TEST_KUBECONFIG)" ]; then $(BIN)/python -m localk8s up; fi

# Three passes. The tests on the cluster (marked `cluster` by tests/conftest.py) run first, one
# at a time: they read the cluster's whole capacity and queues, and its controllers share the
# machine's cores, so neighbours would skew both. Then the rest side by side (pytest-xdist,
# PYTEST_WORKERS at once, each with its own ports and folders; a module's tests share a
# worker): most of them wait on a hub, a kernel or a browser. Last, one at a time, the few
# that measure CPU activity (marked `alone`).
PYTEST_WORKERS ?= 4
pytest: install test-cluster
	GPUHUB_TEST_KUBECONFIG=$(TEST_KUBECONFIG) $(BIN)/python -m pytest -m "cluster and not alone" --durations=15
	GPUHUB_TEST_KUBECONFIG=$(TEST_KUBECONFIG) $(BIN)/python -m pytest -n $(PYTEST_WORKERS) \
		--dist loadgroup -m "not cluster and not alone" --durations=15
	GPUHUB_TEST_KUBECONFIG=$(TEST_KUBECONFIG) $(BIN)/python -m pytest -m alone

# The tests that start no real hub, Jupyter server, service, browser or cluster
# (harness/e2e.py).
pytest-fast: install
	$(BIN)/python -m pytest -m "not e2e"

test: lint typecheck jstest pytest

# Container images (needs Docker with BuildKit): the hub image, the CUDA notebook image (also
# the default job image) and the CPU notebook image, each installing the wheel built here.
IMAGE_PREFIX ?= ghcr.io/gpuhub
GPUHUB_VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)
DOCKER ?= docker

wheel: install
	rm -f dist/gpuhub-*.whl
	$(BIN)/python -m pip wheel --no-deps --no-build-isolation . -w dist

images: wheel
	$(DOCKER) build -f images/hub/Dockerfile --build-arg GPUHUB_VERSION=$(GPUHUB_VERSION) -t $(IMAGE_PREFIX)/gpuhub-hub:$(GPUHUB_VERSION) .
	$(DOCKER) build -f images/notebook/Dockerfile --build-arg GPUHUB_VERSION=$(GPUHUB_VERSION) -t $(IMAGE_PREFIX)/gpuhub-notebook:$(GPUHUB_VERSION) .
	$(DOCKER) build -f images/notebook-cpu/Dockerfile --build-arg GPUHUB_VERSION=$(GPUHUB_VERSION) -t $(IMAGE_PREFIX)/gpuhub-notebook-cpu:$(GPUHUB_VERSION) .

# jupyterlab-nvdashboard, the peer the metrics benchmark runs beside gpuhub, goes into its
# own folder (pip --target): installed in .venv it would enable itself in the demo and tests.
benchmarks: install
	test -d .bench/nvdashboard/jupyterlab_nvdashboard || $(BIN)/python -m pip install --quiet \
		--no-deps --target .bench/nvdashboard "jupyterlab-nvdashboard==0.15.0"
	$(BIN)/python -m benchmarks

clean:
	rm -rf $(VENV) $(LOCK_VENV) node_modules .demo .pytest_cache .mypy_cache .ruff_cache
