"""Fixtures of the proxy tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.proxy.fake_apis import FakeGoogleApis


@pytest.fixture
def fake() -> Iterator[FakeGoogleApis]:
    with FakeGoogleApis() as apis:
        yield apis
