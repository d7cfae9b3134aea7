"""Each fate of an RPC on FakeFirestore (land, fail, lost reply, stall: landed late or
dropped), the yield point before every RPC, and the store's own rules the simulation leans
on (versions from the simulated clock, no shared state with callers, one database each)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from google.api_core import exceptions as gexc

from dedup.store import RecordExists, RunRecord, RunStatus
from dedup.store.firestore import FirestoreRunStore
from simulation.firestore_fake import FakeFirestore, Fate, Rpc

START = datetime(2026, 10, 16, 12, 0, tzinfo=UTC)


class Steered:
    """A fake whose next RPCs' fates a test names, and which records every RPC it saw."""

    def __init__(self) -> None:
        self.now = START
        self.next_fates: list[Fate] = []
        self.seen: list[Rpc] = []
        self.fake = FakeFirestore(lambda: self.now, fates=self.fate, before_rpc=self.seen.append)

    def fate(self, rpc: Rpc) -> Fate:
        return self.next_fates.pop(0) if self.next_fates else Fate.LAND


@pytest.fixture
def steered() -> Steered:
    return Steered()


def record() -> RunRecord:
    return RunRecord(status=RunStatus.IN_PROGRESS, attempt_id="a1", attempts=1,
                     lease_seconds=30.0, expire_at=START + timedelta(days=7), job="nightly",
                     schedule_time=START, project="p", location="l")


def stored(fake: FakeFirestore, path: str) -> dict[str, object] | None:
    return fake.document(path).get().to_dict()


def test_a_failed_commit_writes_nothing_and_raises_service_unavailable(steered: Steered) -> None:
    steered.next_fates = [Fate.FAIL]
    with pytest.raises(gexc.ServiceUnavailable):
        steered.fake.document("runs/r1").create({"n": 1})
    assert stored(steered.fake, "runs/r1") is None


def test_a_lost_reply_applies_the_commit_and_raises_deadline_exceeded(steered: Steered) -> None:
    steered.next_fates = [Fate.LOST_REPLY]
    with pytest.raises(gexc.DeadlineExceeded):
        steered.fake.document("runs/r1").create({"n": 1})
    assert stored(steered.fake, "runs/r1") == {"n": 1}
    # The caller's retry meets its own write
    with pytest.raises(gexc.AlreadyExists):
        steered.fake.document("runs/r1").create({"n": 1})


def test_a_lost_reply_of_a_refused_commit_is_a_deadline_too(steered: Steered) -> None:
    steered.fake.document("runs/r1").create({"n": 1})
    steered.next_fates = [Fate.LOST_REPLY]
    with pytest.raises(gexc.DeadlineExceeded):
        steered.fake.document("runs/r1").create({"n": 2})
    assert stored(steered.fake, "runs/r1") == {"n": 1}


@pytest.mark.parametrize("fate, raised", [(Fate.FAIL, gexc.ServiceUnavailable),
                                          (Fate.LOST_REPLY, gexc.ServiceUnavailable),
                                          (Fate.STALL, gexc.DeadlineExceeded)])
def test_a_read_that_does_not_land_raises_and_parks_nothing(
        steered: Steered, fate: Fate, raised: type[Exception]) -> None:
    steered.fake.document("runs/r1").create({"n": 1})
    reads: list[Callable[[], object]] = [
        lambda: steered.fake.document("runs/r1").get(),
        lambda: list(steered.fake.get_all([steered.fake.document("runs/r1")])),
        lambda: steered.fake.collection("runs").where("n", "==", 1).get(),
    ]
    for read in reads:
        steered.next_fates = [fate]
        with pytest.raises(raised):
            read()
    assert steered.fake.stalled == ()


def test_a_stalled_commit_lands_later_checked_against_the_store_as_it_is_then(
        steered: Steered) -> None:
    fake = steered.fake
    steered.next_fates = [Fate.STALL]
    with pytest.raises(gexc.DeadlineExceeded):
        fake.document("runs/r1").create({"claim": "a1"})
    assert stored(fake, "runs/r1") is None  # the read that resolves it finds nothing
    assert fake.stalled == (Rpc("commit", "(default)", ("runs/r1",), ("create",)),)
    steered.now += timedelta(seconds=5)
    [(rpc, applied)] = fake.land_stalled()
    assert applied and rpc.paths == ("runs/r1",) and not fake.stalled
    snapshot = fake.document("runs/r1").get()
    assert snapshot.to_dict() == {"claim": "a1"} and snapshot.update_time == steered.now


def test_a_stalled_commit_whose_precondition_fails_by_then_writes_nothing(
        steered: Steered) -> None:
    fake = steered.fake
    steered.next_fates = [Fate.STALL]
    with pytest.raises(gexc.DeadlineExceeded):
        fake.document("runs/r1").create({"claim": "a1"})
    fake.document("runs/r1").create({"claim": "a2"})  # a guarded write after the read
    assert fake.land_stalled() == [(Rpc("commit", "(default)", ("runs/r1",), ("create",)),
                                    False)]
    assert stored(fake, "runs/r1") == {"claim": "a2"}


def test_stalled_commits_can_be_dropped_or_landed_by_choice(steered: Steered) -> None:
    fake = steered.fake
    for run in ("r1", "r2", "r3"):
        steered.next_fates = [Fate.STALL]
        with pytest.raises(gexc.DeadlineExceeded):
            fake.document(f"runs/{run}").set({"run": run})
    assert fake.drop_stalled(lambda rpc: rpc.paths == ("runs/r2",)) == [
        Rpc("commit", "(default)", ("runs/r2",), ("set",))]
    assert [rpc.paths for rpc, _ in fake.land_stalled(lambda rpc: rpc.paths == ("runs/r3",))
            ] == [("runs/r3",)]
    assert [rpc.paths for rpc in fake.drop_stalled()] == [("runs/r1",)]
    assert fake.land_stalled() == []
    assert [stored(fake, f"runs/{r}") for r in ("r1", "r2", "r3")] == [None, None, {"run": "r3"}]


def test_a_stalled_batch_lands_whole(steered: Steered) -> None:
    fake = steered.fake
    batch = fake.batch()
    batch.create(fake.document("q/a"), {"n": 1})
    batch.set(fake.document("q/b"), {"n": 2})
    steered.next_fates = [Fate.STALL]
    with pytest.raises(gexc.DeadlineExceeded):
        batch.commit()
    assert fake.stalled[0].writes == ("create", "set")
    fake.land_stalled()
    assert stored(fake, "q/a") == {"n": 1} and stored(fake, "q/b") == {"n": 2}


def test_before_rpc_sees_every_rpc_and_may_stop_it(steered: Steered) -> None:
    fake = steered.fake
    fake.document("runs/r1").create({"n": 1})
    fake.document("runs/r1").get()
    list(fake.get_all([fake.document("runs/r1"), fake.document("runs/r2")]))
    fake.collection("runs").where("n", "==", 1).limit(1).get()
    assert [(rpc.kind, rpc.paths) for rpc in steered.seen] == [
        ("commit", ("runs/r1",)), ("batch_get", ("runs/r1",)),
        ("batch_get", ("runs/r1", "runs/r2")), ("run_query", ("runs",))]

    class Killed(Exception):
        pass

    def kill_writers(rpc: Rpc) -> None:
        if rpc.kind == "commit":
            raise Killed  # the scheduler stops the calling actor here

    stopping = FakeFirestore(lambda: START, before_rpc=kill_writers)
    with pytest.raises(Killed):
        stopping.document("runs/r1").create({"n": 1})
    assert stored(stopping, "runs/r1") is None


def test_commit_times_come_from_the_clock_each_after_the_last(steered: Steered) -> None:
    fake = steered.fake
    first = fake.document("runs/r1").create({"n": 1}).update_time
    second = fake.document("runs/r1").update({"n": 2}).update_time
    assert first == START and second == START + timedelta(microseconds=1)
    # A write that changes nothing keeps the version (as Firestore's: no new update_time)
    assert fake.document("runs/r1").update({"n": 2}).update_time == second
    assert fake.document("runs/r1").update({"n": 2.0}).update_time > second  # 2.0 is not 2
    read = fake.document("runs/r1").get()
    # A read is never before what it saw
    assert read.update_time is not None and read.read_time >= read.update_time
    steered.now += timedelta(seconds=3)
    assert fake.document("runs/r2").create({}).update_time == START + timedelta(seconds=3)


def test_no_caller_shares_the_stored_state(steered: Steered) -> None:
    fake = steered.fake
    document: dict[str, object] = {"m": {"k": [1, 2]}, "t": datetime(2026, 1, 1)}
    fake.document("runs/r1").create(document)
    document["m"] = "changed"
    read = fake.document("runs/r1").get().to_dict()
    assert read == {"m": {"k": [1, 2]}, "t": datetime(2026, 1, 1, tzinfo=UTC)}
    read["m"]["k"].append(3)
    assert stored(fake, "runs/r1") == {"m": {"k": [1, 2]}, "t": datetime(2026, 1, 1, tzinfo=UTC)}


def test_each_database_holds_its_own_documents(steered: Steered) -> None:
    records = steered.fake.for_database("records")
    records.document("runs/r1").create({"n": 1})
    assert stored(steered.fake, "runs/r1") is None and stored(records, "runs/r1") == {"n": 1}
    assert steered.fake.for_database("records") is records
    assert steered.seen[0].database == "records"


def test_documents_are_read_outside_the_simulation(steered: Steered) -> None:
    steered.fake.document("runs/r2").create({"m": {"k": 1}})
    steered.fake.document("runs/r1").create({"n": 1})
    steered.fake.document("runs/r1/pages/p0").create({"p": 0})
    rpcs = len(steered.seen)
    found = steered.fake.documents("runs")
    assert found == {"r1": {"n": 1}, "r2": {"m": {"k": 1}}} and list(found) == ["r1", "r2"]
    assert len(steered.seen) == rpcs  # no RPC, so no yield point and no fate
    found["r2"]["m"]["k"] = 2
    assert stored(steered.fake, "runs/r2") == {"m": {"k": 1}}


class Retrying(Steered):
    """A fake that retries as the client does, up to twice."""

    def __init__(self) -> None:
        super().__init__()
        self.fake = FakeFirestore(lambda: self.now, fates=self.fate,
                                  before_rpc=self.seen.append, client_retries=2)


RETRY = object()  # any retry= a caller passes: the kit's retries both faults the fake raises


def test_a_call_retried_after_its_lost_reply_meets_its_own_write() -> None:
    retrying = Retrying()
    retrying.next_fates = [Fate.LOST_REPLY, Fate.LAND]
    with pytest.raises(gexc.AlreadyExists):
        retrying.fake.document("runs/r1").create({"n": 1}, retry=RETRY)
    assert [rpc.attempt for rpc in retrying.seen] == [1, 2]
    # Through the kit's store: its own create, found by its retry
    retrying.next_fates = [Fate.LOST_REPLY, Fate.LAND]
    client: Any = retrying.fake  # the store's stubs name the real client
    runs = FirestoreRunStore(client, "records", 5.0)
    with pytest.raises(RecordExists):
        runs.create("r2", record())


def test_a_retried_call_ends_in_retry_error_once_every_sending_failed() -> None:
    retrying = Retrying()
    retrying.next_fates = [Fate.FAIL, Fate.STALL, Fate.FAIL]
    with pytest.raises(gexc.RetryError):
        retrying.fake.document("runs/r1").set({"n": 1}, retry=RETRY)
    assert len(retrying.fake.stalled) == 1  # the stalled sending may still land
    assert retrying.fake.stalled[0].attempt == 2
    retrying.next_fates = [Fate.FAIL, Fate.LAND]
    assert retrying.fake.document("runs/r1").get(retry=RETRY).to_dict() is None


def test_without_a_retry_the_first_fault_is_final() -> None:
    retrying = Retrying()
    retrying.next_fates = [Fate.FAIL]
    with pytest.raises(gexc.ServiceUnavailable):
        retrying.fake.document("runs/r1").create({"n": 1})
    assert len(retrying.seen) == 1
