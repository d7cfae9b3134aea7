"""The differential test that keeps FakeFirestore from drifting from Firestore: seeded
sequences of the kit's own store calls (tests/simulation/store_calls.py: FirestoreRunStore,
FirestoreLatestRunStore, FirestoreWatchStore, FirestoreRerunQueue, FirestoreBackfills, with
writers racing on a few documents with stale versions) run on the real emulator and on the
fake; each answer (return value with the store's times as labels, or the type of
exception), the order of the versions and, at the end, every document written must be the
same. A failure names the first call whose answer differs, and the seed that replays it.

The emulator's runs of the seeds collected are made first, side by side (each seed in
collections of its own: they cannot meet), as a loaded host answers each RPC in several
milliseconds; a sequence never depends on the answers, so each seed's test then runs the
fake alone and compares."""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import cast

import pytest
from google.cloud import firestore

from local_stack import FirestoreEmulator
from simulation.firestore_fake import FakeFirestore
from tests.conftest import EMULATOR_PROJECT
from tests.simulation.client_calls import STEPS
from tests.simulation.store_calls import Executor, StoreRun, calls_of, divergence, store_run

SEEDS = range(50)
CALLS = 40
EMULATOR_THREADS = 16
# The fake's clock: far from the times the calls pass, and still for two readings at a
# time, so that commits also meet a clock that has not moved.
FAKE_EPOCH = datetime(2030, 1, 1, tzinfo=UTC)


def still_then_moving_clock() -> Callable[[], datetime]:
    ticks = itertools.count()
    return lambda: FAKE_EPOCH + timedelta(milliseconds=next(ticks) // 2)


@pytest.fixture(scope="module")
def emulator_runs(
    request: pytest.FixtureRequest, firestore_emulator: FirestoreEmulator
) -> dict[int, StoreRun]:
    """The emulator's answers to every seed this session runs (one, when replaying)."""
    seeds = sorted({cast(int, item.callspec.params["seed"]) for item in request.session.items
                    if isinstance(item, pytest.Function) and item.originalname ==
                    test_the_fake_answers_the_kits_calls_as_the_emulator.__name__})
    client = firestore.Client(project=EMULATOR_PROJECT)

    def run(seed: int) -> StoreRun:
        collection = f"diff{seed}_{uuid.uuid4().hex[:8]}"
        return store_run(Executor(client, collection), calls_of(seed, CALLS))

    with ThreadPoolExecutor(EMULATOR_THREADS) as pool:
        return dict(zip(seeds, pool.map(run, seeds), strict=True))


@pytest.mark.parametrize("seed", SEEDS, ids=lambda seed: f"seed{seed}")
def test_the_fake_answers_the_kits_calls_as_the_emulator(
        seed: int, emulator_runs: dict[int, StoreRun]) -> None:
    emulator = emulator_runs[seed]
    calls = calls_of(seed, CALLS)
    fake = Executor(FakeFirestore(still_then_moving_clock()), emulator.collection)
    for at, (call, expected) in enumerate(zip(calls, emulator.answers, strict=True)):
        answered = fake.answer(call)
        assert answered == expected, divergence(seed, calls, at, "answer", expected, answered)
    last = len(calls) - 1
    assert fake.version_order() == emulator.version_order, divergence(
        seed, calls, last, "order of versions", emulator.version_order, fake.version_order())
    documents = fake.documents()
    for path, found in emulator.documents.items():
        assert documents[path] == found, divergence(
            seed, calls, last, f"documents of {path}", found, documents[path])


def test_the_fake_answers_the_clients_own_calls_as_the_emulator(
        firestore_emulator: FirestoreEmulator) -> None:
    """What the fake claims of Firestore beyond what the kit's calls show today."""
    collection = f"client_{uuid.uuid4().hex[:8]}"
    emulator = Executor(firestore.Client(project=EMULATOR_PROJECT), collection)
    fake = Executor(FakeFirestore(still_then_moving_clock()), collection)
    for at, (name, step) in enumerate(STEPS):
        expected, answered = emulator.step(step), fake.step(step)
        assert answered == expected, (
            f"FakeFirestore answered step {at} ({name}) unlike the emulator:\n"
            f"emulator: {expected!r}\nfake:     {answered!r}\n"
            f"steps so far: {[n for n, _ in STEPS[:at + 1]]}")
    assert fake.version_order() == emulator.version_order()
