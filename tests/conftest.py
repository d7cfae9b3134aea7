"""Fixtures shared by every test folder.

Tests that touch Firestore run against the real emulator, started once per session on a
free port. If it is missing the suite fails with how to install it: never a silent skip.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from google.cloud import firestore

from local_stack import FirestoreEmulator, LocalStackError

EMULATOR_PROJECT = "dedup-kit-test"
# The files that take longest, collected first and longest first: under --dist loadfile
# each file goes to one worker in collection order, so a long file met last leaves the
# other worker idle at the end, while the short ones that follow even the two out. Each
# file's seconds (its tests' summed durations in a loaded `make test`, pytest's junit
# report) beside it: re-measure when a file's time changes much, and keep every file over
# ~20 s here, in that order.
LONG_FILES = (
    "tests/function/test_backfill.py",  # 158
    "tests/test_fork.py",  # 152
    "tests/function/test_overlap_served.py",  # 147
    "tests/scheduler_emulator/test_end_to_end.py",  # 142
    "tests/scheduler_emulator/test_demo_command.py",  # 139
    "tests/scheduler_emulator/test_serve.py",  # 99
    "tests/test_by_version.py",  # 55
    "tests/infra/test_lock.py",  # 54
    "tests/infra/test_job_logic.py",  # 47
    "tests/function/test_store_faults.py",  # 33
    "tests/function/test_forced_runs_served.py",  # 31
    "tests/bench/test_harness.py",  # 30
    "tests/infra/test_readme_first_job.py",  # 27
    "tests/function/test_store_faults_served.py",  # 26
    "tests/infra/test_scale.py",  # 20
)


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
