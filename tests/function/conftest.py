"""Fixtures shared by the function's in-process tests (`ledger` and `collection_name` are
in tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from local_stack.deliveries import InProcessFunction
from tests.function.helpers import function_with_held_jobs


@pytest.fixture
def function(collection_name: str, ledger: Path) -> InProcessFunction:
    """The dedup function in process, on the test's own collection, with the steered test
    job (which helpers.running can also hold until the test lets it end)."""
    return function_with_held_jobs(collection_name)


@pytest.fixture
def pool() -> Iterator[ThreadPoolExecutor]:
    """Threads for deliveries a test runs in the background."""
    with ThreadPoolExecutor(max_workers=4) as executor:
        yield executor
