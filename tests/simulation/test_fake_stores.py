"""The kit's own Firestore stores run on FakeFirestore: each one's ordinary use, answered as
the store's contract says (the differential test, test_fake_firestore.py, holds the
answers to the emulator's)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from dedup.overlap import LatestRun
from dedup.store import RecordChanged, RecordExists, RunRecord, RunStatus
from dedup.watchdog.backfills import Backfill, PlannedRun
from dedup.watchdog.cursors import Cursor, CursorMoved
from dedup.watchdog.reruns import DONE, RerunRequest
from simulation.firestore_fake import FakeFirestore
from tests.simulation.kit_stores import KitStores, kit_stores

START = datetime(2026, 10, 16, 12, 0, tzinfo=UTC)


class SteppedClock:
    """Simulated time: moves only when told."""

    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def stores() -> KitStores:
    return kit_stores(FakeFirestore(SteppedClock()), "runs")


def record(status: RunStatus = RunStatus.IN_PROGRESS, attempts: int = 1) -> RunRecord:
    return RunRecord(status=status, attempt_id=f"a{attempts}", attempts=attempts,
                     lease_seconds=30.0, expire_at=START + timedelta(days=7), job="nightly",
                     schedule_time=START, project="p", location="l")


def test_the_run_store_creates_reads_replaces_renews_and_deletes(stores: KitStores) -> None:
    runs = stores.runs
    first = runs.create("r1", record())
    with pytest.raises(RecordExists):
        runs.create("r1", record())
    stored = runs.get("r1")
    assert stored is not None and stored.version == first and stored.record == record()
    done = runs.replace("r1", record(RunStatus.COMPLETED), first, over=record())
    assert done > first
    with pytest.raises(RecordChanged):
        runs.replace("r1", record(RunStatus.FAILED), first)  # a stale version
    renewed = runs.renew("r1", START + timedelta(days=8), done)
    assert renewed > done
    assert set(runs.get_many(["r1", "absent", "r1"])) == {"r1"}
    with pytest.raises(RecordChanged):
        runs.delete("r1", done)
    runs.delete("r1", renewed)
    assert runs.get("r1") is None


def test_the_latest_run_store_takes_a_job_once_per_version(stores: KitStores) -> None:
    latest = LatestRun("r1", "a1", "nightly", START)
    version = stores.latest.put("nightly", latest, None)
    with pytest.raises(RecordChanged):
        stores.latest.put("nightly", latest, None)
    found = stores.latest.get("nightly")
    assert found is not None and found.latest == latest and found.version == version
    assert stores.latest.put("nightly", LatestRun("r2", "a1", "nightly", START), version) > version


def test_the_watch_stores_cursors_are_guarded_by_their_version(stores: KitStores) -> None:
    stores.watch.put_cursors({"nightly": Cursor(judged_through=START)}, START)
    read = stores.watch.get_cursors(["nightly", "other"])
    assert list(read) == ["nightly"] and read["nightly"].judged_through == START
    stores.watch.put_cursors({"nightly": read["nightly"]}, START + timedelta(minutes=1))
    with pytest.raises(CursorMoved):
        stores.watch.put_cursors({"nightly": read["nightly"]}, START + timedelta(minutes=2))


def test_the_rerun_queue_holds_pending_requests_until_finished(stores: KitStores) -> None:
    requests = [RerunRequest("p", "l", "nightly", START + timedelta(hours=h), 1, "me", "why",
                             START) for h in range(3)]
    assert stores.reruns.create_many(requests) == {}
    stores.reruns.create(requests[0])  # its own, found again: not an error
    assert {r.request_id for r in stores.reruns.pending(10)} == {
        r.request_id for r in requests}
    stores.reruns.finish(requests[0], DONE, "completed", START)
    stores.reruns.finish_all([(requests[1], DONE, "completed")], START)
    assert [r.request_id for r in stores.reruns.pending(10)] == [requests[2].request_id]


def test_backfills_are_created_once_and_updated_by_version(stores: KitStores) -> None:
    backfill = Backfill("b1", "p", "l", "nightly", START, START + timedelta(hours=2), "all",
                        "forward", "why", "me", START, total=2)
    runs = [PlannedRun(START, 0), PlannedRun(START + timedelta(hours=1), 0)]
    stores.backfills.create(backfill, runs, START, None)
    with pytest.raises(RecordExists):
        stores.backfills.create(backfill, runs, START, None)
    stored = stores.backfills.get("nightly")
    assert stored is not None and stored.value == backfill
    assert stores.backfills.page(backfill, 0) == runs
    # The same content again changes nothing, so the version holds (as Firestore's does)
    assert stores.backfills.update(backfill, stored.version, START) == stored.version
    moved = stores.backfills.update(backfill, stored.version, START + timedelta(minutes=1))
    assert moved > stored.version
    with pytest.raises(RecordChanged):
        stores.backfills.update(backfill, stored.version, START + timedelta(minutes=2))
