"""Fixtures for the infra tests: each fixture stack (examples/stacks/) runs once under Pulumi's
mocks. The tests never read the team's own stack files (stacks/)."""

from __future__ import annotations

from pathlib import Path

import pytest

from infra.config import load_config
from operator_tools.offline import load_stack_config, run_offline
from tests.infra.helpers import StackUnderTest
from tests.stacks import FIXTURE_STACKS, FIXTURE_STACKS_DIR

STACKS = FIXTURE_STACKS


@pytest.fixture(scope="session")
def infra_build_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Source zips of the test runs go here, not into the repository's build/."""
    return tmp_path_factory.mktemp("function-source")


@pytest.fixture(scope="session")
def stack_runs(infra_build_dir: Path) -> dict[str, StackUnderTest]:
    runs: dict[str, StackUnderTest] = {}
    for name in STACKS:
        raw = load_stack_config(name, FIXTURE_STACKS_DIR)
        runs[name] = StackUnderTest(
            name=name,
            raw=raw,
            config=load_config(raw),
            run=run_offline(raw, stack=name, build_dir=infra_build_dir),
        )
    return runs


@pytest.fixture(params=STACKS)
def stack(request: pytest.FixtureRequest, stack_runs: dict[str, StackUnderTest]) -> StackUnderTest:
    return stack_runs[str(request.param)]
