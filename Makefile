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

.DEFAULT_GOAL := help

.PHONY: help install run serve test lint typecheck check bench bench-load clean

help: ## List the targets
	@grep -E '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "  %-10s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: $(STAMP) ## Create .venv and install the project with its dev tools

run: install ## Migrate, import the PEP corpus if empty, print demo keys, serve on $(HOST):$(PORT)
	$(BIN)/sibyl-pg quickstart --host $(HOST) --port $(PORT)

serve: install ## Serve without the set-up steps
	$(BIN)/sibyl-pg serve --host $(HOST) --port $(PORT)

test: install ## Run the whole test suite against a real PostgreSQL (fresh database per run)
	$(BIN)/pytest $(PYTEST_ARGS)

lint: install ## ruff (lint + format check)
	$(BIN)/ruff check app tests migrations
	$(BIN)/ruff format --check app tests migrations

typecheck: install ## mypy
	$(BIN)/mypy app

check: lint typecheck ## lint + typecheck

$(BENCH_STAMP): $(STAMP)
	$(BIN)/pip install --quiet -e '.[dev,bench]'
	touch $(BENCH_STAMP)

bench: $(BENCH_STAMP) ## The benchmark (docs/benchmark.md), the 357k-line import, the 60 s load test; BENCH_ARGS=--quick: smoke run
	$(BIN)/sibyl-pg bench run $(BENCH_ARGS)
	$(BIN)/sibyl-pg bench import $(if $(findstring --quick,$(BENCH_ARGS)),--quick,)
	$(BIN)/python -m app.bench.load --seconds 60 --clients 32

bench-load: install ## 32 clients mixing reads and writes for 60 s against `serve` (docs/security.md)
	$(BIN)/python -m app.bench.load --seconds 60 --clients 32

clean: ## Remove the virtualenv and caches (keeps .data)
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
