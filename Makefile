# sibyl-pg developer commands. `make help` lists them.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
BENCH_STAMP := $(VENV)/.bench-stamp
BENCH_ARGS ?=
HOST ?= 127.0.0.1
PORT ?= 8000
PYTEST_ARGS ?=
# pytest-xdist workers, each with a database of its own (tests/conftest.py); the PEP-corpus tests
# share one worker (--dist loadgroup). One more than the cores: a worker waits on its PostgreSQL
# backend half of the time. TEST_WORKERS=0: one process, no xdist.
TEST_WORKERS ?= $(shell echo $$(( $$(nproc 2>/dev/null || echo 1) + 1 )))
# apt-get as root (CI), else through sudo
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)

.DEFAULT_GOAL := help

.PHONY: help install run serve test test-thorough lint typecheck check bench bench-load bench-ui eval lock clean ui browser

help: ## List the targets
	@grep -E '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "  %-14s %s\n", $$1, $$2}'

# Every step is announced, and a line every 8 s says the install still works while a step is
# silent (the venv's own pip, pip's upgrade, pip unpacking and installing: up to a minute each).
$(STAMP): pyproject.toml constraints.txt
	@echo "› installing sibyl-pg with its dependencies into .venv (first time: 1-3 min)"
	@( while sleep 8 </dev/null >/dev/null 2>&1; do echo "  … still installing ($$SECONDS s)"; done ) & \
	  ticker=$$!; trap 'kill $$ticker 2>/dev/null' EXIT; set -e; \
	  echo "› creating .venv ($(PYTHON) -m venv)"; $(PYTHON) -m venv $(VENV); \
	  echo "› upgrading pip in .venv"; $(BIN)/pip install --quiet --upgrade pip; \
	  echo "› installing the packages constraints.txt pins (pip's progress follows)"; \
	  $(BIN)/pip install --progress-bar on -c constraints.txt -e '.[dev,semantic]'
	@touch $(STAMP)
	@echo "› .venv is ready"

install: $(STAMP) ## Create .venv and install the project with its dev tools

run: install ## Migrate, import the PEP corpus if empty, print demo keys, serve on 127.0.0.1:8000 (another port: make run PORT=8001)
	$(BIN)/sibyl-pg quickstart --host $(HOST) --port $(PORT)

serve: install ## Serve without the set-up steps
	$(BIN)/sibyl-pg serve --host $(HOST) --port $(PORT)

test: install ## Run the whole test suite against a real PostgreSQL (fresh database per worker)
	$(BIN)/pytest -n $(TEST_WORKERS) --dist loadgroup $(PYTEST_ARGS)

test-thorough: install ## make test with every random case (walk oracle 200 graphs, more examples)
	SIBYL_TEST_THOROUGH=1 $(BIN)/pytest -n $(TEST_WORKERS) --dist loadgroup $(PYTEST_ARGS)

lint: install ## ruff (lint + format check)
	$(BIN)/ruff check app bench evaluation tests migrations
	$(BIN)/ruff format --check app bench evaluation tests migrations

typecheck: install ## mypy
	$(BIN)/mypy app bench evaluation tests

check: lint typecheck ## lint + typecheck

$(BENCH_STAMP): $(STAMP)
	@echo "› installing the benchmark's extra dependencies"
	$(BIN)/pip install -c constraints.txt -e '.[dev,bench,semantic]'
	touch $(BENCH_STAMP)

lock: ## Re-pin constraints.txt to the newest releases pyproject.toml admits (in a scratch venv), then run make check test
	rm -rf .venv-lock && $(PYTHON) -m venv .venv-lock
	.venv-lock/bin/pip install --quiet --upgrade pip
	.venv-lock/bin/pip install --quiet -e '.[dev,bench,semantic]'
	{ sed -n '/^#/p' constraints.txt; .venv-lock/bin/pip freeze --exclude-editable | grep -vi '^sibyl'; } > constraints.txt.new
	mv constraints.txt.new constraints.txt && rm -rf .venv-lock
	@echo "› constraints.txt re-pinned: git diff constraints.txt, then make check test"

bench: $(BENCH_STAMP) ## The benchmark (docs/benchmark.md) on the synthetic and the Debian graph, the 357k-line import, the 60 s load test; BENCH_ARGS=--quick: smoke run
	$(BIN)/sibyl-pg bench run $(BENCH_ARGS)
	$(BIN)/sibyl-pg bench run --graph debian --out bench-results/debian $(BENCH_ARGS)
	$(BIN)/sibyl-pg bench import $(if $(findstring --quick,$(BENCH_ARGS)),--quick,)
	$(BIN)/python -m bench.load --seconds 60 --clients 32

bench-load: install ## 32 clients mixing reads and writes for 60 s against `serve` (docs/security.md)
	$(BIN)/python -m bench.load --seconds 60 --clients 32

bench-ui: install browser ## The explorer's first view and a 200-node graph in headless chromium, against `make run` (docs/ui.md)
	$(BIN)/python -m bench.ui --url http://$(HOST):$(PORT)

ui: ## Rebuild the explorer's page (app/ui/static, committed) from ui/ with npm (docs/ui.md)
	cd ui && npm ci && npm run build

browser: ## Install Debian's chromium for the explorer's browser tests (tests/test_ui.py) when missing
	@if [ -x /usr/bin/chromium ]; then echo "› $$(/usr/bin/chromium --version 2>/dev/null | head -n 1)"; else \
	  echo "› installing Debian's chromium for the browser tests (a minute or two)"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq chromium fonts-dejavu-core; fi

EVAL_ARGS ?=

eval: install ## The evaluation (docs/eval.md) on a fresh PEP import; EVAL_ARGS=--keep/--reuse/--json F
	$(BIN)/sibyl-pg eval $(EVAL_ARGS)

clean: ## Remove the virtualenv and caches (keeps .data)
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
