# awa — every set-up step lives here, so a fresh machine needs only Python 3.11+ and make.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
PYTEST_ARGS ?=

.DEFAULT_GOAL := help

.PHONY: help
help: ## List the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  \033[36m%-14s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

# The venv is rebuilt when missing or older than pyproject.toml.
$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

.PHONY: install
install: $(STAMP) ## Create .venv and install awa with its dev extra

.PHONY: check
check: $(STAMP) ## Lint, format check and type check (ruff + mypy --strict)
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench
	$(BIN)/mypy --strict src/awa

.PHONY: fmt
fmt: $(STAMP) ## Format and autofix
	$(BIN)/ruff format src tests bench
	$(BIN)/ruff check --fix src tests bench

# Programs some tests drive, as PROGRAM=DEBIAN_PACKAGE. `make test` installs the missing ones
# where it can; where it cannot, only their tests skip, and the reasons print last.
SYSTEM_DEPS := chromium=chromium chromedriver=chromium-driver pgbouncer=pgbouncer nginx=nginx

.PHONY: system-deps
system-deps: ## Install what some tests drive (Chromium, PgBouncer, nginx) via apt where allowed
	@bash .ci/system-deps $(SYSTEM_DEPS)

.PHONY: test
test: $(STAMP) system-deps ## Run the whole suite on real PostgreSQL (DATABASE_URL or embedded)
	$(BIN)/python -m pytest $(PYTEST_ARGS)

.PHONY: test-unit
test-unit: $(STAMP) ## Run only the unit tests (no database)
	$(BIN)/python -m pytest tests/unit $(PYTEST_ARGS)

.PHONY: mutate
mutate: $(STAMP) ## Apply hand-written mutants of permits/control/dispatcher one by one; report survivors
	$(BIN)/python -m tests.mutation.run

.PHONY: demo
demo: $(STAMP) ## Run the demo on the embedded PostgreSQL
	$(BIN)/awa demo

.PHONY: bench-insert
bench-insert: $(STAMP) ## Measure insert and insert_many throughput
	$(BIN)/python bench/insert.py

.PHONY: bench
bench: $(STAMP) ## Side-by-side benchmark vs peers, 3 reps (~30 min) -> bench/results, docs
	$(BIN)/python bench/run.py

.PHONY: bench-quick
bench-quick: $(STAMP) ## Small side-by-side benchmark, 1 rep -> bench/results/tmp/quick
	$(BIN)/python bench/run.py --quick

.PHONY: soak
soak: $(STAMP) ## Soak: 10 min of mixed load, a worker SIGKILLed every minute; 0 lost (SOAK_ARGS=--quick)
	$(BIN)/python bench/soak.py $(SOAK_ARGS)

.PHONY: clean
clean: ## Remove the venv, caches and the embedded data directory
	rm -rf $(VENV) .awa .pytest_cache .mypy_cache .ruff_cache build dist
