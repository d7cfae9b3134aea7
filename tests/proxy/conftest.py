"""Fixtures of the proxy tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from google.cloud import firestore

from local_stack import FirestoreEmulator
from tests.proxy.fake_apis import FakeGoogleApis
from tests.support.deliveries import PROJECT


@pytest.fixture(scope="session")
def warm_emulator(firestore_emulator: FirestoreEmulator) -> FirestoreEmulator:
    """The emulator after one generous first write: its first RPC after start-up can
    take longer than the 5 s store timeout the tests use (JVM warm-up on small hosts)."""
    client = firestore.Client(project=PROJECT)
    client.collection("warm_up").document("w").set({"ok": True}, timeout=60)
    return firestore_emulator


@pytest.fixture
def fake() -> Iterator[FakeGoogleApis]:
    with FakeGoogleApis() as apis:
        yield apis
