"""Fixtures shared by every test folder.

Tests that touch Firestore run against the real emulator, started once per session on a
free port. If it is missing the suite fails with how to install it: never a silent skip.

The kit's tests never read the team's places (a fork's stacks, jobs and lock):
tests/team_places_guard.py fails one that does, and the kit's tools run in a test's process
take the kit as it ships as their default project (tests/kit_tree.py).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from google.cloud import firestore

from local_stack import FirestoreEmulator, LocalStackError
from tests import team_places_guard
from tests.kit_tree import Replacement, kit_clone, kit_function, kit_project_defaults

EMULATOR_PROJECT = "dedup-kit-test"
# The files that take longest, collected first and longest first: under --dist loadfile
# each file goes to one worker in collection order, so a long file met last leaves the
# other worker idle at the end, while the short ones that follow even the two out. Each
# file's seconds (its tests' summed durations in a loaded `make test`, pytest's junit
# report) beside it: re-measure when a file's time changes much, and keep every file over
# ~20 s here, in that order.
LONG_FILES = (
    "tests/scheduler_emulator/test_end_to_end.py",  # 94
    "tests/scheduler_emulator/test_demo_command.py",  # 82
    "tests/scheduler_emulator/test_serve.py",  # 73
    "tests/function/test_overlap_served.py",  # 62
    "tests/test_by_version.py",  # 60 (27 before its upgrade test)
    "tests/function/test_backfill.py",  # 50
    "tests/infra/test_lock.py",  # 41
    "tests/test_fork.py",  # 40
    "tests/function/test_store_faults.py",  # 30
    "tests/function/test_store_faults_served.py",  # 25
    "tests/function/test_catch_up.py",  # 21
    "tests/bench/test_harness.py",  # 21
    "tests/infra/test_job_logic.py",  # 20
    "tests/adapters/test_install_bounds.py",  # 20 (quiet, uv's cache warm; 24 cold)
    "tests/proxy/test_proxy_inprocess.py",  # 19
)


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(team_places_guard, "team-places-guard")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    root = config.rootpath

    def rank(item: pytest.Item) -> int:
        relative = item.path.relative_to(root).as_posix()
        return LONG_FILES.index(relative) if relative in LONG_FILES else len(LONG_FILES)

    items.sort(key=rank)  # stable: every other file keeps its place


@pytest.fixture(scope="session")
def firestore_emulator() -> Iterator[FirestoreEmulator]:
    emulator = FirestoreEmulator()
    try:
        emulator.start()
    except LocalStackError as exc:
        pytest.fail(f"cannot start the Firestore emulator: {exc}", pytrace=False)
    previous = {k: os.environ.get(k) for k in ("FIRESTORE_EMULATOR_HOST", "GOOGLE_CLOUD_PROJECT")}
    os.environ["FIRESTORE_EMULATOR_HOST"] = emulator.host
    os.environ["GOOGLE_CLOUD_PROJECT"] = EMULATOR_PROJECT
    # The emulator's first RPC after start-up can take longer than the tests' short store
    # timeouts (JVM warm-up on a small host): one generous write first.
    client = firestore.Client(project=EMULATOR_PROJECT)
    client.collection("warm_up").document("w").set({"ok": True}, timeout=60)
    yield emulator
    emulator.stop()
    for key, value in previous.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@pytest.fixture
def collection_name() -> str:
    """Each test gets its own collection, so tests never see each other's records."""
    return f"runs_{uuid.uuid4().hex[:12]}"


@pytest.fixture
def ledger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The steered test job's ledger (TEST_LEDGER) for a function run in this process: each
    execution appends a line. A served function's tests define their own `ledger`, a path
    alone, and pass it through function_env: TEST_LEDGER set here would reach the served
    process through os.environ and hide a function_env that lost it."""
    path = tmp_path / "ledger.jsonl"
    monkeypatch.setenv("TEST_LEDGER", str(path))
    return path


@pytest.fixture(scope="session")
def kit_checkout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A clone of the kit (tests/kit_tree.py) shared by the session's tests, for a process
    that works on a checkout (make, plan, policy-check): it sees the kit's files alone. A
    test that changes its files takes a kit_clone of its own."""
    return kit_clone(tmp_path_factory.mktemp("kit-clone"))


@pytest.fixture(scope="session")
def kit_function_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the kit's function/ without the team's jobs/ and lock, shared by the
    session's tests: read it, never change it (a test that does takes its own kit_function)."""
    return kit_function(tmp_path_factory.mktemp("kit") / "function")


@pytest.fixture(scope="session", autouse=True)
def the_kits_own_project(
    kit_function_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[list[Replacement]]:
    """The kit's tools, run in a test's process with their defaults, work on the kit as it
    ships: `kit_function_dir` as function/, a stack directory with no stack file (the
    examples stand in); not the checkout's, which in a fork hold the team's jobs, lock and
    stacks (tests/kit_tree.py). Session-wide, from the first test on: a session fixture
    running the program (tests/infra/conftest.py) takes them too. Yields what it replaced."""
    stack_dir = tmp_path_factory.mktemp("kit-project") / "stacks"  # never made, as in the kit
    with pytest.MonkeyPatch.context() as patch:
        replaced = []
        for target, attribute, value in kit_project_defaults(kit_function_dir, stack_dir):
            replaced.append((target, attribute, getattr(target, attribute)))
            patch.setattr(target, attribute, value)
        yield replaced


@pytest.fixture(autouse=True)
def the_teams_tests_take_the_real_defaults(
    request: pytest.FixtureRequest, the_kits_own_project: list[Replacement]
) -> Iterator[None]:
    """The team's tests (tests/jobs/) run the kit's tools on the checkout, theirs."""
    if team_places_guard.kit_test(request.node):
        yield
        return
    with pytest.MonkeyPatch.context() as patch:
        for target, attribute, value in the_kits_own_project:
            patch.setattr(target, attribute, value)
        yield
