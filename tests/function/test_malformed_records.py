"""A run record that is no record: job code can write any document of its own records
database (the dedup database, its runtime's), at any run ID (run IDs follow from the stack
file). Such a document is read field by field and never trusted: the store returns it as a
MalformedRun (get_many) or raises MalformedRecord (get); the function runs nothing over it
and answers that run 500 saying why; the watchdog reports that run `malformed` and judges
every other run as ever; `make rerun` refuses to ask over it. The cross-database case (a
runtime's database next to the default one, two functions) is in
test_watchdog_runtimes.py. Real Firestore emulator throughout.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from google.cloud import firestore

from dedup.keys import RunKey
from dedup.store import MalformedRecord, MalformedRun, RunRecord, RunStatus, StoredRun
from dedup.store.firestore import (
    FirestoreRunStore,
    NotARunRecord,
    document_to_record,
    record_to_document,
)
from dedup.watchdog.reruns import (
    DONE,
    FAILED,
    FirestoreRerunQueue,
    RerunRequest,
    reruns_collection,
)
from dedup.watchdog.verdicts import MALFORMED
from local_stack.deliveries import LOCATION, PROJECT, InProcessFunction, scheduler_headers
from local_stack.steered_job import read_ledger
from operator_tools.rerun import RerunRefused, request_rerun
from operator_tools.runs import RunStores
from tests.function import helpers
from tests.function.test_catch_up import Served, Watch, minutely, recent_minutes

# The served function (a module fixture), shared with the catch-up tests' helpers.
from tests.function.test_catch_up import served as served
from tests.function.test_rerun import JOB, JOB_ID, stack
from tests.function.test_watchdog import TEN_MINUTES, Runs, at, problems, z
from tests.function.test_watchdog import Watch as JudgingWatch

T = datetime(2026, 10, 16, 12, 0, tzinfo=UTC)
GOOD = record_to_document(replace(
    RunRecord.claim(RunKey(PROJECT, LOCATION, "job", T), "a" * 32, 1, 60.0,
                    T + timedelta(days=1), T),
    status=RunStatus.COMPLETED, finished_at=T, duration_seconds=1.5))


def write(client: firestore.Client, collection: str, run_id: str,
          document: dict[str, Any]) -> None:
    """What job code can do in its own database: any document, at any ID."""
    client.collection(collection).document(run_id).set(document)


# -- the store ---------------------------------------------------------------------------------

@pytest.mark.parametrize(("flaw", "named"), [
    ({"status": "x"}, "status is str 'x', not one of"),
    ({"status": None}, "status is missing"),
    ({"attempt_id": None}, "attempt_id is missing, not text"),
    ({"attempts": "1"}, "attempts is str '1', not a whole number"),
    ({"attempts": True}, "attempts is bool"),
    ({"lease_seconds": "60"}, "lease_seconds is str '60', not a number"),
    ({"expire_at": "2026-10-17T12:00:00Z"}, "expire_at is str"),
    ({"schedule_time": datetime(2026, 10, 16, 12, 0)}, "schedule_time is datetime"),  # naive
    ({"claimed_at": 3}, "claimed_at is int '3', not a timestamp"),
    ({"error": ["a"]}, "error is list"),
    ({"forced": "yes"}, "forced is str 'yes', not a bool"),
    ({"generation": 1.5}, "generation is float"),
    ({"unfinished_attempts": [1, "2"]}, "unfinished_attempts is list"),
])
def test_each_field_is_checked_and_the_first_flaw_named(
    flaw: dict[str, Any], named: str
) -> None:
    assert document_to_record(GOOD).status is RunStatus.COMPLETED
    assert document_to_record({**GOOD, "lease_seconds": 60}).lease_seconds == 60.0
    with pytest.raises(NotARunRecord, match=named.replace("(", r"\(")):
        document_to_record({**GOOD, **flaw})


@pytest.mark.usefixtures("firestore_emulator")
def test_get_many_reads_a_malformed_document_beside_the_records_and_get_refuses_it(
    collection_name: str,
) -> None:
    client = firestore.Client(project=PROJECT)
    store = FirestoreRunStore(client, collection_name, 5)
    write(client, collection_name, "good", GOOD)
    write(client, collection_name, "bad", {"status": "x"})
    found = store.get_many(["good", "bad", "absent"])
    assert set(found) == {"good", "bad"}
    good, bad = found["good"], found["bad"]
    assert isinstance(good, StoredRun) and good.record.status is RunStatus.COMPLETED
    assert bad == MalformedRun("bad", f"{collection_name}/bad",
                               "status is str 'x', not one of "
                               "['completed', 'failed', 'in_progress', 'skipped']")
    assert str(bad).startswith(f"run record {collection_name}/bad is malformed: status")
    with pytest.raises(MalformedRecord) as refused:
        store.get("bad")
    assert refused.value.malformed == bad


# -- the function ------------------------------------------------------------------------------

@pytest.mark.usefixtures("firestore_emulator")
def test_the_function_runs_nothing_over_a_malformed_record_and_says_why_each_time(
    function: InProcessFunction, ledger: Path, collection_name: str,
) -> None:
    t1, t2 = "2026-10-16T12:00:00Z", "2026-10-16T12:01:00Z"
    broken = RunKey(PROJECT, LOCATION, "nightly-export", datetime(2026, 10, 16, 12, 0,
                                                                  tzinfo=UTC)).run_id
    write(function.client, collection_name, broken, {"status": "completed"})
    for _ in range(2):  # every delivery of that run: the same answer, at once
        status, body = function.deliver(scheduler_headers(schedule_time=t1), b"{}")
        assert (status, body["outcome"], body["run_id"]) == (500, "store_unavailable", broken)
    lines = [e for e in function.logs if e.get("run_id") == broken]
    assert len(lines) == 2 and all(line["severity"] == "ERROR" for line in lines)
    assert lines[0]["detail"].startswith(
        f"run record {collection_name}/{broken} is malformed: attempt_id is missing")
    assert "nothing ran" in lines[0]["detail"]
    assert read_ledger(str(ledger)) == []
    # Another run of the job: as ever.
    assert function.deliver(scheduler_headers(schedule_time=t2), b"{}")[0] == 200
    # The remedy: the document deleted, the run's next delivery runs it, once.
    function.client.collection(collection_name).document(broken).delete()
    assert function.deliver(scheduler_headers(schedule_time=t1), b"{}")[1]["outcome"] == (
        "completed")
    assert [e["schedule_time"] for e in read_ledger(str(ledger))] == [
        "2026-10-16T12:01:00+00:00", "2026-10-16T12:00:00+00:00"]


@pytest.mark.usefixtures("firestore_emulator")
def test_overlap_refuses_a_run_over_its_malformed_record_and_a_malformed_previous_blocks_nothing(
    function: InProcessFunction, pool: ThreadPoolExecutor, ledger: Path, collection_name: str,
) -> None:
    def sent(minute: int) -> dict[str, str]:
        return {**scheduler_headers(schedule_time=f"2026-10-16T12:0{minute}:00Z"),
                "X-Dedup-Overlap": "forbid"}

    def run_id(minute: int) -> str:
        return RunKey(PROJECT, LOCATION, "nightly-export",
                      datetime(2026, 10, 16, 12, minute, tzinfo=UTC)).run_id

    # The job's latest run, still running, then its record rewritten into no record.
    first = helpers.running(function, pool, ledger, sent(0))
    try:
        write(function.client, collection_name, run_id(0), {"status": "in_progress"})
        status, body = function.deliver(sent(1), b"{}")
        assert (status, body["outcome"]) == (200, "completed")  # nothing live blocks it
        # This run's own document is no record: refused before anything is written.
        write(function.client, collection_name, run_id(2), {"status": 7})
        status, body = function.deliver(sent(2), b"{}")
        assert (status, body["outcome"]) == (500, "store_unavailable")
        [line] = [e for e in function.logs if e.get("run_id") == run_id(2)]
        assert "status is int '7'" in line["detail"] and "nothing ran" in line["detail"]
    finally:
        # Its record changed under it: the job ran, its completion could not be recorded.
        finished = first.finish()
    assert finished[1]["outcome"] == "completed_unrecorded"
    assert [e["schedule_time"] for e in read_ledger(str(ledger))] == [
        "2026-10-16T12:00:00+00:00", "2026-10-16T12:01:00+00:00"]


# -- the watchdog ------------------------------------------------------------------------------

@pytest.mark.usefixtures("firestore_emulator")
def test_a_watched_run_whose_record_turns_malformed_is_reported_once_and_watched_no_more(
    collection_name: str,
) -> None:
    runs = Runs(collection_name)
    job = TEN_MINUTES.name
    runs.completed(job, *[at(10, m) for m in range(0, 60, 10)], at(11, 0), at(11, 10),
                   at(11, 20), at(11, 30))
    runs.in_progress(job, at(11, 40), claimed_at=at(11, 55))  # a late retry, running
    watch = JudgingWatch(collection_name, [TEN_MINUTES])
    status, body = watch.tick(at(12, 0))
    assert (status, problems(body)) == (200, [])
    # Job code rewrites one field of it: how long it has run can no longer be computed.
    runs.client.collection(collection_name).document(
        RunKey(PROJECT, LOCATION, job, at(11, 40)).run_id).update({"claimed_at": "11:55"})
    runs.completed(job, at(11, 50), at(12, 0))

    status, body = watch.tick(at(12, 10))
    assert (status, problems(body)) == (200, [(MALFORMED, job, z(at(11, 40)))])
    [problem] = body["problems"]
    assert "claimed_at is str '11:55'" in problem["error"]
    assert body["checked"] == 2  # the watched run, and 11:50 (ok)
    assert watch.summary()[MALFORMED] == 1
    status, body = watch.tick(at(12, 20))  # reported once, watched no more
    assert (status, problems(body), body["checked"]) == (200, [], 1)


@pytest.mark.usefixtures("firestore_emulator")
def test_a_rerun_over_a_malformed_generation_ends_failed_and_the_others_are_delivered(
    served: Served,
) -> None:
    now, times = recent_minutes(4)
    job = replace(minutely(f"reruns-{now:%H%M%S}", catch_up=False), reruns=True)
    runs = Runs(served.collection)
    runs.completed(job.name, *times)
    queue = FirestoreRerunQueue(runs.store, reruns_collection(served.collection))
    asked = [RerunRequest(PROJECT, LOCATION, job.name, t, 1, "alice@example.com", "fixed",
                          now) for t in times[:2]]
    for request in asked:
        queue.create(request)
    spoilt, other = asked
    write(runs.client, served.collection, spoilt.request_id, {"status": "failed"})

    body = Watch(served.collection, [job], served.server.url, now).tick()
    assert [(p["kind"], p["run_id"]) for p in body["problems"]] == [
        (MALFORMED, spoilt.request_id)]
    by_id = {r["schedule_time"]: r for r in body["reruns"]}
    assert by_id[z(other.schedule_time)]["status"] == "completed"
    assert by_id[z(spoilt.schedule_time)]["status"] == FAILED
    assert "is malformed" in by_id[z(spoilt.schedule_time)]["error"]
    finished = queue.get_many([r.request_id for r in asked])
    assert (finished[spoilt.request_id].status, finished[other.request_id].status) == (
        FAILED, DONE)
    assert [(e["schedule_time"], e["generation"]) for e in served.executions(job.name)] == [
        (other.schedule_time.isoformat(), 1)]


@pytest.mark.usefixtures("firestore_emulator")
def test_make_rerun_refuses_to_ask_over_a_malformed_record(served: Served) -> None:
    t = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(minutes=30)
    store = FirestoreRunStore(firestore.Client(project=PROJECT), served.collection, 5)
    run_id = RunKey(PROJECT, LOCATION, JOB_ID, t).run_id
    write(store.client, served.collection, run_id, {"status": "completed", "attempts": 1})
    with pytest.raises(RerunRefused, match=f"run record {served.collection}/{run_id} is "
                       "malformed: attempt_id is missing"):
        request_rerun(stack(served.collection), RunStores(store), job_name=JOB,
                      time_text=t.isoformat(), reason="fixed", requested_by="alice@example.com",
                      now=t + timedelta(minutes=2))
