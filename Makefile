# Two commands for a newcomer: `make demo` (the kit's main job, run locally) and `make test`.
# The tools run on the functions' runtime Python (python312, infra/cloud_function.py): Google's
# client libraries warn on import, a year before a Python version's end of life, that their
# releases will stop supporting it (3.11: from 2026-10-24), and that notice is true of 3.11,
# not noise to filter. python3.12 on PATH, else a pyenv-installed 3.12, else python3 (its
# notice then shows; docs/limits.md). PYTHON=<interpreter> chooses another.
RUNTIME_PYTHON_VERSION := 3.12
ifeq ($(origin PYTHON),undefined)
PYTHON := $(firstword $(foreach p,python$(RUNTIME_PYTHON_VERSION) \
	$(wildcard $(shell pyenv root 2>/dev/null)/versions/$(RUNTIME_PYTHON_VERSION).*/bin/python$(RUNTIME_PYTHON_VERSION)),\
	$(if $(shell $(p) -c 'import ensurepip, venv' 2>/dev/null && echo ok),$(p))) python3)
endif
PYTHON_VERSION := $(shell $(PYTHON) -c 'import sys; print(*sys.version_info[:2], sep=".")' 2>/dev/null)
# .venv is a link to the virtualenv of that Python's version (.venv-3.12): another version
# builds its own beside it, and .venv is switched to it once it is complete.
VENV := .venv
VENV_BUILT := .venv-$(PYTHON_VERSION)
BIN := $(VENV)/bin
# The kit's console entry (pyproject.toml's [project.scripts]; the venv installs this checkout
# editable). PYTHONPATH names this checkout first: a venv borrowed from another checkout (a
# git worktree's link, a fork's VENV=) has an editable install naming that one instead.
SCHEDULER_DEDUP := PYTHONPATH=$(CURDIR)$(if $(PYTHONPATH),:$(PYTHONPATH)) $(BIN)/scheduler-dedup
# STACK=<name> picks one stack (Pulumi.<name>.yaml) for demo, plan, policy-check and runs;
# unset, plan and policy-check take every stack file and the demo its default stack.
STACK ?=
# POLICY_CONFIG=<file> gives policy-check a --policy-pack-config file (enforcement levels,
# the deployers setting), e.g. policies/policy-config.example.json.
# Unset, each stack gets policies/policy-config.<stack>.json if it exists, as CI's pulumi up.
POLICY_CONFIG ?=
# The team's stacks: Pulumi.<stack>.yaml in Pulumi.yaml's stackConfigDir (stacks/).
STACK_DIR := $(or $(shell sed -n 's/^stackConfigDir: *//p' Pulumi.yaml),.)
STACKS := $(patsubst $(STACK_DIR)/Pulumi.%.yaml,%,$(wildcard $(STACK_DIR)/Pulumi.*.yaml))

.DEFAULT_GOAL := help
.PHONY: help demo test lint typecheck workflow-lint unit simulate lock lock-kit plan runs rerun backfill backfill-status backfill-cancel silence silence-remove silences migrate-proxy-records upgrade-check new-job policy-check bench clean schema docs docs-serve dist protocol-dist

help: ## List the targets, one line each (STACK=<name> picks a stack)
	@awk 'BEGIN {FS = ":[^#]*## "} /^[a-z-]+:.*## / {printf "  make %-22s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

# The virtual environment is built from pinned requirements on first use, and again for
# another Python version (a .venv that is not a link to $(VENV_BUILT)).
# The team's lock (make lock), once it has one, is installed too: its job tests import it.
# Then this checkout, editable (hatchling, pinned in requirements-dev.txt, no download): the
# scheduler-dedup command; pyproject.toml and hatch_build.py declare it and its metadata.
TEAM_LOCK := $(wildcard function/jobs/requirements.txt)
$(VENV)/stamp: requirements.txt requirements-dev.txt requirements-tools.txt function/requirements.in policies/requirements.txt constraints.txt pyproject.toml hatch_build.py $(TEAM_LOCK) \
		$(if $(filter $(VENV_BUILT),$(shell readlink $(VENV) 2>/dev/null)),,$(VENV_BUILT)/.switch)
	$(PYTHON) -m venv $(VENV_BUILT)
	$(VENV_BUILT)/bin/pip install --quiet --upgrade pip
	$(VENV_BUILT)/bin/pip install --quiet -r requirements-dev.txt -c constraints.txt
	$(if $(TEAM_LOCK),$(VENV_BUILT)/bin/pip install --quiet --require-hashes --no-deps -r $(TEAM_LOCK))
	$(VENV_BUILT)/bin/pip install --quiet --no-deps --no-build-isolation -e .
	touch $(VENV_BUILT)/stamp
	if [ -d $(VENV) ] && [ ! -L $(VENV) ]; then rm -rf $(VENV); fi
	ln -sfn $(VENV_BUILT) $(VENV)

# Never made (no recipe creates it): the stamp is out of date while .venv links elsewhere.
$(VENV_BUILT)/.switch:
	@echo "building $(VENV_BUILT) with $(PYTHON) (Python $(PYTHON_VERSION)); $(VENV) then links to it"

# DEMO_ARGS=--keep keeps the Firestore emulator, with the demo's records, up after the report
# until Ctrl-C, and prints the make runs commands that read them (RUNS_ARGS="--at ...").
demo: $(VENV)/stamp ## Run a stack's jobs locally under faults and report (STACK=, DEMO_ARGS=)
	$(SCHEDULER_DEDUP) demo $(if $(STACK),--stack $(STACK)) $(DEMO_ARGS)

test: lint typecheck workflow-lint policy-check plan docs simulate unit ## Everything CI runs

lint: $(VENV)/stamp ## ruff over the repository
	$(BIN)/ruff check .

typecheck: $(VENV)/stamp ## mypy
	$(BIN)/mypy
	for app in examples/own-service/*/main.py; do $(BIN)/mypy "$$app" || exit 1; done

# The GitHub Actions workflows: zizmor's security audits, offline (no GitHub API calls).
workflow-lint: $(VENV)/stamp ## zizmor's audits of the GitHub Actions workflows
	$(BIN)/zizmor --offline .github/workflows examples/team-repo/.github/workflows

# The tests in TEST_WORKERS processes (pytest-xdist): most of their time is spent waiting
# (emulators, served functions, scaled deadlines), so two workers halve it on two cores.
# --dist loadfile: a file's tests share a worker, so a costly module fixture (the fork, the
# 1,000-job stack, the bench's run, a served function) is built once. Not loadgroup: under
# pytest 9.2 it no longer groups anything (pytest-xdist#1386), each worker built its own.
TEST_WORKERS ?= 2
unit: $(VENV)/stamp ## The kit's tests (pytest; they never read your stack files; TEST_WORKERS=)
	$(BIN)/pytest -n $(TEST_WORKERS) --dist loadfile

# The team's function dependencies: function/jobs/requirements.in -> function/jobs/
# requirements.txt, every package and what it needs, with hashes, resolved with the kit's
# pins (constraints.txt); a conflict is one error naming both packages (operator_tools/lock.py).
# Needs the package index. What Cloud Build installs is the kit's lock plus this one.
lock: $(VENV)/stamp ## Pin your jobs' dependencies (function/jobs/requirements.in) with hashes
	$(SCHEDULER_DEDUP) lock

# The deterministic simulation (simulation/, docs/protocol.md "Checked by simulation"): SEEDS
# seeds, each a stack, a fault schedule and a day's deliveries run on simulated time, then
# the invariants checked; the last line is `simulation: N schedules, K invariant violations`,
# and any violation fails. SEED=<s> replays one seed, printing its trace.
SEEDS ?= 300
SEED ?=
simulate: $(VENV)/stamp ## The deterministic simulation (SEEDS=N, SEED=s replays one)
	PYTHONPATH=$(CURDIR)/function:$(CURDIR)$(if $(PYTHONPATH),:$(PYTHONPATH)) $(BIN)/python -m simulation $(if $(SEED),--seed $(SEED),--seeds $(SEEDS))

# The kit's own locks, for its maintainers (a team never runs it: these are kit files).
# function/requirements.txt: every package of function/requirements.in and their
# dependencies, at constraints.txt's versions, with the hashes of every file of each, for
# the functions' runtime (python312, infra/cloud_function.py) on Linux. Then the same for
# the workflows' deploy toolchain (docs/ci.md): .github/requirements/bootstrap.txt (pip,
# setuptools) and deploy.txt (the program, the function code and the policy pack), for the
# workflows' Python (3.11) on Linux.
lock-kit: $(VENV)/stamp ## Kit maintainers: re-pin the kit's function lock and CI toolchain
	$(BIN)/uv pip compile function/requirements.in --constraint constraints.txt \
		--generate-hashes --python-version 3.12 --python-platform linux \
		--custom-compile-command "make lock-kit" --quiet --output-file function/requirements.txt
	$(BIN)/uv pip compile requirements.txt function/requirements.in policies/requirements.txt \
		requirements-tools.txt --constraint constraints.txt --python-version 3.12 \
		--python-platform linux --custom-compile-command "make lock-kit" --quiet \
		--output-file requirements-dist.txt
	for lock in bootstrap deploy; do \
		$(BIN)/uv pip compile .github/requirements/$$lock.in --constraint constraints.txt \
			--generate-hashes --python-version 3.11 --python-platform linux \
			--custom-compile-command "make lock-kit" --quiet \
			--output-file .github/requirements/$$lock.txt || exit 1; \
	done

plan: $(VENV)/stamp ## Offline plan of every stack, or STACK=, job logic imported
	$(SCHEDULER_DEDUP) plan $(STACK)

# Per job, the last expected runs with status, attempts, duration and the watchdog's verdict,
# read from the stack's Firestore database (the emulator if FIRESTORE_EMULATOR_HOST is set,
# else Application Default Credentials). RUNS_ARGS="--last 20 --job hourly-sync"; "--at <RFC
# 3339>" judges the runs as at that instant (a make demo window, ahead of the clock).
runs: $(VENV)/stamp ## A stack's last runs per job from Firestore (STACK= required, RUNS_ARGS=)
	@test -n "$(STACK)" || { echo "make runs needs a stack: make runs STACK=<name> (stacks: $(STACKS))" >&2; exit 2; }
	$(SCHEDULER_DEDUP) runs $(STACK) $(RUNS_ARGS)

# One run executed once more, exactly once: records a re-run request that the watchdog
# delivers at its next tick (needs watchdog.reruns: true), or at once with NOW=1
# WATCHDOG_URL=<url> where you can reach the watchdog. REQUESTED_BY= overrides who asks.
rerun: $(VENV)/stamp ## Ask for one run to execute again (STACK= JOB= TIME= REASON= required)
	@test -n "$(STACK)" -a -n "$(JOB)" -a -n "$(TIME)" -a -n "$(REASON)" || { echo 'make rerun needs STACK=<name> JOB=<jobs[].name> TIME=<schedule time, e.g. 2026-11-30T09:15:00+01:00> REASON="<why>"' >&2; exit 2; }
	@test -z "$(NOW)" -o -n "$(WATCHDOG_URL)" || { echo "make rerun NOW=1 needs WATCHDOG_URL=<the watchdog's URL> (one you can reach; else the next tick delivers it)" >&2; exit 2; }
	$(SCHEDULER_DEDUP) rerun $(STACK) --job "$(JOB)" --time "$(TIME)" --reason "$(REASON)" $(if $(NOW),--now "$(WATCHDOG_URL)")

# The runs of a range executed once more, each exactly once: MODE=missing (default: no
# record), failed or all; ORDER=reverse for newest first; DRY_RUN=1 prints exactly what it
# would queue and writes nothing; CONFIRM=1 re-runs runs already re-run. The watchdog
# releases its runs a few per tick (watchdog.backfillRunsPerTick, backfillInFlight).
backfill: $(VENV)/stamp ## Queue the runs of a range again (STACK= JOB= FROM= TO= REASON= required; MODE= ORDER= STOP_ON_FAILURE= DRY_RUN=)
	@test -n "$(STACK)" -a -n "$(JOB)" -a -n "$(FROM)" -a -n "$(TO)" || { echo 'make backfill needs STACK=<name> JOB=<jobs[].name> FROM=<first schedule time, e.g. 2026-11-30T00:00:00+01:00> TO=<last one> REASON="<why>" [MODE=missing|failed|all] [ORDER=reverse] [STOP_ON_FAILURE=1] [DRY_RUN=1]' >&2; exit 2; }
	@test -n "$(DRY_RUN)" -o -n "$(REASON)" || { echo 'make backfill needs REASON="<why>" (or DRY_RUN=1 to see what it would queue)' >&2; exit 2; }
	$(SCHEDULER_DEDUP) backfill $(STACK) --job "$(JOB)" --from "$(FROM)" --to "$(TO)" --reason "$(REASON)" $(if $(MODE),--mode "$(MODE)") $(if $(ORDER),--order "$(ORDER)") $(if $(STOP_ON_FAILURE),--stop-on-failure) $(if $(DRY_RUN),--dry-run)

backfill-status: $(VENV)/stamp ## A job's backfill and how far it got (STACK= JOB= required)
	@test -n "$(STACK)" -a -n "$(JOB)" || { echo 'make backfill-status needs STACK=<name> JOB=<jobs[].name>' >&2; exit 2; }
	$(SCHEDULER_DEDUP) backfill $(STACK) --job "$(JOB)" --status

backfill-cancel: $(VENV)/stamp ## Stop releasing a job's backfill; runs in flight finish (STACK= JOB= required)
	@test -n "$(STACK)" -a -n "$(JOB)" || { echo 'make backfill-cancel needs STACK=<name> JOB=<jobs[].name>' >&2; exit 2; }
	$(SCHEDULER_DEDUP) backfill $(STACK) --job "$(JOB)" --cancel

# A maintenance window from now until UNTIL, without a deploy: problems are logged (marked
# silenced) and shown by make runs, nothing pages; an incident still open at UNTIL pages
# then. Without JOB= it silences every job. REQUESTED_BY= overrides who asks.
silence: $(VENV)/stamp ## Silence a job, or the stack, until a time (STACK= UNTIL= REASON= required; JOB=)
	@test -n "$(STACK)" -a -n "$(UNTIL)" -a -n "$(REASON)" || { echo 'make silence needs STACK=<name> UNTIL=<end, e.g. 2026-12-06T04:00:00+01:00> REASON="<why>" [JOB=<jobs[].name>; unset: every job]' >&2; exit 2; }
	$(SCHEDULER_DEDUP) silence $(STACK) $(if $(JOB),--job "$(JOB)") --until "$(UNTIL)" --reason "$(REASON)"

silence-remove: $(VENV)/stamp ## Lift a silence set by make silence (STACK= required; JOB=)
	@test -n "$(STACK)" || { echo 'make silence-remove needs STACK=<name> [JOB=<jobs[].name>; unset: the stack's silence]' >&2; exit 2; }
	$(SCHEDULER_DEDUP) silence $(STACK) $(if $(JOB),--job "$(JOB)") --remove

silences: $(VENV)/stamp ## The silences make silence set (STACK= required)
	@test -n "$(STACK)" || { echo 'make silences needs STACK=<name>' >&2; exit 2; }
	$(SCHEDULER_DEDUP) silence $(STACK) --list

# Day 2 rehearsed locally: the stack served (Firestore emulator, the function, the proxy on
# fake Google APIs, the Scheduler emulator in real time, the watchdog on its schedule) until
# Ctrl-C; it prints the FIRESTORE_EMULATOR_HOST and WATCHDOG_URL that point make runs and
# make rerun at it. SERVE_ARGS="--every 60" ticks the watchdog every minute; "--miss
# hourly-sync" has Scheduler never deliver that job's second fire (the watchdog reports it).
.PHONY: serve
serve: $(VENV)/stamp ## Serve a stack locally until Ctrl-C, for make runs/rerun (STACK=, SERVE_ARGS=)
	$(SCHEDULER_DEDUP) serve $(if $(STACK),--stack $(STACK)) $(SERVE_ARGS)

# Once, when upgrading a stack whose proxy kept its records in the dedup database (see
# docs/deploy.md, "Upgrading"): copies them into the proxy's own database; safe to repeat.
migrate-proxy-records: $(VENV)/stamp ## Copy proxied jobs' records into the proxy's database (STACK= required)
	@test -n "$(STACK)" || { echo "make migrate-proxy-records needs a stack: make migrate-proxy-records STACK=<name> (stacks: $(STACKS))" >&2; exit 2; }
	$(SCHEDULER_DEDUP) migrate-proxy-records $(STACK)

# The steps a running deployment needs to reach this checkout's release, from CHANGELOG.md's
# "Upgrading" sections: FROM=<the version it runs> (pulumi stack output kitVersion), or
# FROM=unversioned for a checkout from before the first release. FOR=fork or FOR="by version"
# prints the steps for that kind of repository (default: this one's, a fork).
upgrade-check: $(VENV)/stamp ## Print the upgrade steps from a release to this one (FROM= required; FOR=)
	@$(SCHEDULER_DEDUP) upgrade-check "$(FROM)"$(if $(FOR), --for "$(FOR)")

# A job module, function/jobs/<NAME>.py, and its test, tests/jobs/test_<NAME>.py (which
# make test runs), from the kit's templates (operator_tools/templates/); never over an existing file.
new-job: $(VENV)/stamp ## Write a job module and its test from the kit's template (NAME= required)
	@test -n "$(NAME)" || { echo "make new-job needs a name: make new-job NAME=<module name, e.g. send_invoices>" >&2; exit 2; }
	@$(SCHEDULER_DEDUP) new-job "$(NAME)"

policy-check: $(VENV)/stamp ## The policy pack over every stack, or STACK=, offline (POLICY_CONFIG=)
	$(SCHEDULER_DEDUP) policy-check$(if $(STACK), --stack $(STACK))$(if $(POLICY_CONFIG), --policy-config $(POLICY_CONFIG))

bench: $(VENV)/stamp ## The dedup benchmark (BENCH_ARGS=)
	$(BIN)/python -m bench $(BENCH_ARGS)

# Pulumi.yaml's config block, README's configuration reference and schema/stack.schema.json,
# regenerated from the config models in infra/config/ (tests/infra/test_schema.py checks).
schema: $(VENV)/stamp ## Regenerate Pulumi.yaml's config block, the config docs and the schema
	$(SCHEDULER_DEDUP) schema

# The documentation site (docs/, mkdocs.yml): built with --strict, so a broken link or a page
# missing from the nav fails make test. docs-serve browses it on http://127.0.0.1:8000.
docs: $(VENV)/stamp ## Build the documentation site (strict)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

docs-serve: $(VENV)/stamp ## Serve the documentation on http://127.0.0.1:8000
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve

# The kit as a wheel, dist/scheduler_dedup_kit-<version>-py3-none-any.whl (pyproject.toml:
# its tree under scheduler_dedup_kit/, Requires-Dist from hatch_build.py). Built by the pinned
# hatchling of the venv (--no-build-isolation): reproducible, and offline. Not part of make test.
# First, the version must say what the checkout holds (operator_tools/release.py): a release
# only with its CHANGELOG.md section, and a development version while Unreleased lists changes.
dist: $(VENV)/stamp ## Build the kit's wheel into dist/
	$(SCHEDULER_DEDUP) release --check
	rm -f dist/scheduler_dedup_kit-*.whl
	$(BIN)/pip wheel --quiet --no-deps --no-build-isolation -w dist .
	@ls dist/scheduler_dedup_kit-*.whl

# The protocol alone, dist/scheduler_dedup_protocol-<version>-py3-none-any.whl (protocol/: the
# `dedup` package for a team's own service, docs/own-service.md), built as make dist builds
# the kit's wheel: the venv's pinned hatchling, offline.
protocol-dist: $(VENV)/stamp ## Build the protocol's own wheel (a team's service installs it) into dist/
	rm -f dist/scheduler_dedup_protocol-*.whl
	$(BIN)/pip wheel --quiet --no-deps --no-build-isolation -w dist ./protocol
	@ls dist/scheduler_dedup_protocol-*.whl

# Kit maintainers: CHANGELOG.md's Unreleased section becomes VERSION's, and the version, the
# component schema (and the released one) and the starter's pin follow; refused for a number
# the CHANGELOG's versioning rule forbids. It edits files only: review, commit, tag vVERSION.
.PHONY: release
release: $(VENV)/stamp ## Kit maintainers: cut release VERSION= (edits files; you commit and tag)
	@test -n "$(VERSION)" || { echo "make release needs a version: make release VERSION=<MAJOR.MINOR.PATCH>" >&2; exit 2; }
	$(SCHEDULER_DEDUP) release "$(VERSION)"

clean: ## Remove the virtualenv, caches and dist/
	rm -rf $(VENV) .venv-* .cache .mypy_cache .ruff_cache .pytest_cache dist
