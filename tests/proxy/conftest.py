"""Fixtures of the proxy tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from local_stack.fake_google_apis import FakeGoogleApis


@pytest.fixture
def fake() -> Iterator[FakeGoogleApis]:
    with FakeGoogleApis() as apis:
        yield apis
