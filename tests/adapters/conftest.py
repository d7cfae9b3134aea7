"""The served examples, one server per app for a test module (tests/adapters/served.py)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.adapters.served import (
    EXAMPLES_DIR,
    SERVERS,
    ServedExample,
    example_python,
    served_example,
)


@pytest.fixture(scope="module")
def apps_python() -> Path | None:
    """The interpreter the apps are served by (served.example_python); test_install_bounds.py
    overrides it with each fresh virtualenv's."""
    return example_python()


@pytest.fixture(scope="module", params=sorted(SERVERS))
def example(request: pytest.FixtureRequest, firestore_emulator: object, apps_python: Path | None,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServedExample]:
    """One example app served for the module's tests, each test on runs of its own; its
    job works for JOB_SECONDS=0.5, so concurrent deliveries overlap."""
    app = str(request.param)
    if not (EXAMPLES_DIR / app / "main.py").is_file():
        pytest.skip(f"examples/own-service/{app}/main.py is not in this checkout yet")
    with served_example(app, f"runs_{uuid.uuid4().hex[:12]}", tmp_path_factory.mktemp(app),
                        apps_python, JOB_SECONDS="0.5") as served:
        yield served
