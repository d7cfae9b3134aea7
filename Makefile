# Two commands for a newcomer: `make demo` (the kit's main job, run locally) and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STACK ?= dev

.PHONY: demo test lint typecheck workflow-lint unit plan runs policy-check bench clean schema docs docs-serve

# The virtual environment is built from pinned requirements on first use.
$(VENV)/stamp: requirements.txt requirements-dev.txt function/requirements.txt policies/requirements.txt constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -r requirements-dev.txt -c constraints.txt
	touch $@

demo: $(VENV)/stamp
	$(BIN)/python -m demo $(DEMO_ARGS)

test: lint typecheck workflow-lint policy-check docs unit

lint: $(VENV)/stamp
	$(BIN)/ruff check .

typecheck: $(VENV)/stamp
	$(BIN)/mypy

# The GitHub Actions workflows: zizmor's security audits, offline (no GitHub API calls).
workflow-lint: $(VENV)/stamp
	$(BIN)/zizmor --offline .github/workflows

unit: $(VENV)/stamp
	$(BIN)/pytest

plan: $(VENV)/stamp
	$(BIN)/python -m infra.plan $(STACK)

# Per job, the last expected runs with status, attempts, duration and the watchdog's verdict,
# read from the stack's Firestore database (the emulator if FIRESTORE_EMULATOR_HOST is set,
# else Application Default Credentials). RUNS_ARGS="--last 20 --job hourly-sync".
runs: $(VENV)/stamp
	$(BIN)/python -m infra.runs $(STACK) $(RUNS_ARGS)

policy-check: $(VENV)/stamp
	$(BIN)/python -m policies.offline_check

bench: $(VENV)/stamp
	$(BIN)/python -m bench $(BENCH_ARGS)

# Pulumi.yaml's config block, README's configuration reference and schema/stack.schema.json,
# regenerated from the config models in infra/config.py (tests/infra/test_schema.py checks).
schema: $(VENV)/stamp
	$(BIN)/python -m infra.schema

# The documentation site (docs/, mkdocs.yml): built with --strict, so a broken link or a page
# missing from the nav fails make test. docs-serve browses it on http://127.0.0.1:8000.
docs: $(VENV)/stamp
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

docs-serve: $(VENV)/stamp
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
