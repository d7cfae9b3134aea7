"""Issue 25, items 2 and 9: job code can neither ask the watchdog for runs nor blind it.

The watchdog's cursors and re-run queue are in a database of its own (DEDUP_WATCH_DATABASE),
which the dedup function's account cannot write: what job code writes into the dedup
database's `<collection>_reruns` or `<collection>_watchdog` is never read. The watchdog
re-checks every request in its own database as `make rerun` does, and a document it cannot
read (cursor or request) is refused and reported, never a 500 for the whole tick.

Real Firestore emulator (named databases are separate there, as in Firestore), a served
function counting executions (the ledger job), the watchdog wired as deployed
(build_watchdog_handler).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from google.cloud import firestore

from dedup.keys import RunKey
from dedup.settings import Settings, SettingsError
from dedup.store.firestore import FirestoreRunStore
from dedup.watchdog.cursors import Cursor
from dedup.watchdog.delivery import TargetAuth
from dedup.watchdog.due import WatchedJob
from dedup.watchdog.reruns import (
    DONE,
    PENDING,
    REFUSED,
    FirestoreRerunQueue,
    MalformedDocument,
    RerunRequest,
    reruns_collection,
)
from dedup.watchdog.settings import WatchSettings
from dedup.watchdog.tick import build_watchdog_handler
from dedup.watchdog.verdicts import MALFORMED
from local_stack.deliveries import LOCATION, PROJECT
from tests.function.test_catch_up import Served, minutely, recent_minutes, z

# The served function (a module fixture), shared with the catch-up tests' helpers.
from tests.function.test_catch_up import served as served
from tests.function.test_watchdog import Runs

pytestmark = pytest.mark.usefixtures("firestore_emulator")

WATCH_DATABASE = "watchdog-own-test"


@dataclass
class OwnWatch:
    """A watchdog as deployed: records in the dedup database ((default) here), cursors and
    re-run queue in WATCH_DATABASE, delivering to the served function."""

    collection: str
    jobs: list[WatchedJob]
    url: str
    now: datetime
    logs: list[Mapping[str, Any]] = field(default_factory=list)

    def settings(self) -> WatchSettings:
        store = Settings(project=PROJECT, location=LOCATION, collection=self.collection,
                         store_timeout_seconds=5)
        return WatchSettings(
            store, tuple(self.jobs), lookback_seconds=3600, grace_seconds=30,
            target_url=self.url, target_auth=TargetAuth.NONE, delivery_timeout_seconds=20,
            watch_database=WATCH_DATABASE,
        )

    def tick(self) -> dict[str, Any]:
        handler = build_watchdog_handler(
            self.settings(), firestore.Client(project=PROJECT), self.logs.append,
            wall_clock=lambda: self.now,
        )
        reply = handler.handle({}, b"")
        assert reply.status == 200, reply.body  # never a 500 for the whole tick
        return dict(reply.body)


def dedup_db() -> firestore.Client:
    return firestore.Client(project=PROJECT)  # what the dedup function's account writes


def watch_db() -> firestore.Client:
    return firestore.Client(project=PROJECT, database=WATCH_DATABASE)


def own_queue(collection: str) -> FirestoreRerunQueue:
    return FirestoreRerunQueue(FirestoreRunStore(watch_db(), collection, 5),
                               reruns_collection(collection))


def snapshot(document: Any) -> dict[str, Any]:
    found: Any = document.get()
    return dict(found.to_dict() or {})


def rerunnable(name: str) -> WatchedJob:
    return replace(minutely(name, catch_up=False), reruns=True)


def request(job: str, t: datetime, generation: int = 1, **extra: Any) -> RerunRequest:
    return RerunRequest(PROJECT, LOCATION, job, t, generation, "ops@example.com", "fixed",
                        t + timedelta(seconds=30), **extra)


def executed(served: Served, job: str, t: datetime) -> list[int]:
    return [e["generation"] for e in served.executions(job)
            if e["schedule_time"] == t.isoformat()]


# -- item 2: the queue is the watchdog's own -------------------------------------------------

def test_a_request_forged_in_the_dedup_database_is_not_delivered(served: Served) -> None:
    """Job code writes a well-formed pending request where the queue used to be (the dedup
    database it can write): the watchdog never reads it; the operator's, in its own
    database, is delivered."""
    job = rerunnable(f"forged-{uuid.uuid4().hex[:6]}")
    now, times = recent_minutes(3)
    Runs(served.collection).completed(job.name, *times)
    forged = request(job.name, times[0])  # "ops@example.com", as an operator would
    dedup_db().collection(reruns_collection(served.collection)).document(
        forged.request_id).create(forged.to_document())
    watch = OwnWatch(served.collection, [job], served.server.url, now)
    assert watch.tick()["reruns"] == []
    assert executed(served, job.name, times[0]) == []  # (generation 0 ran in-process)

    own_queue(served.collection).create(request(job.name, times[1]))
    [delivered] = watch.tick()["reruns"]
    assert (delivered["schedule_time"], delivered["generation"], delivered["status"]) == (
        z(times[1]), 1, "completed")
    assert executed(served, job.name, times[1]) == [1]
    assert executed(served, job.name, times[0]) == []


def test_a_cursor_forged_in_the_dedup_database_hides_no_missed_run(served: Served) -> None:
    """Job code writes the job's cursor as judged "30 s ago" into the dedup database: the
    watchdog reads its own cursors only, and reports the missed run."""
    job = minutely(f"blind-{uuid.uuid4().hex[:6]}", catch_up=False)
    now, times = recent_minutes(6)
    Runs(served.collection).completed(job.name, *(t for t in times if t != times[3]))
    blinding = Cursor(judged_through=now - timedelta(seconds=30), watch_from=times[0],
                      first_run=times[0])
    dedup_db().collection(f"{served.collection}_watchdog").document(job.name).set(
        blinding.to_document(now))
    body = OwnWatch(served.collection, [job], served.server.url, now).tick()
    assert [(p["kind"], p["schedule_time"]) for p in body["problems"]] == [
        ("missed", z(times[3]))]


@pytest.mark.parametrize(
    ("case", "why"),
    [
        ("not-a-scheduled-time", "is not a scheduled time of job"),
        ("in-the-future", "is in the future"),
        ("duplicate-generation", "generation 1 is not the next of the run"),
        ("another-pending", "another request of the run (generation 1) is pending"),
        ("no-reruns", "re-runs are not enabled for job"),
        ("another-project", "it asks for project 'someone-else'"),
    ],
)
def test_a_request_failing_make_reruns_checks_is_refused_and_reported(
    served: Served, case: str, why: str,
) -> None:
    """Whoever wrote it (the watchdog's database is the operators' too), a request is
    delivered only if `make rerun` would have written it: else refused, with why, on a
    WARNING line and in the tick's reply, and nothing executes."""
    job = rerunnable(f"check-{case[:10]}-{uuid.uuid4().hex[:6]}")
    now, times = recent_minutes(3)
    Runs(served.collection).completed(job.name, *times)
    queue = own_queue(served.collection)
    t = times[1]
    asked = request(job.name, t, 2 if case == "another-pending" else 1)
    if case == "not-a-scheduled-time":
        asked = request(job.name, t + timedelta(seconds=30))
    elif case == "in-the-future":
        asked = request(job.name, now + timedelta(minutes=5))
    elif case == "duplicate-generation":
        queue.create(request(job.name, t, 2, status=DONE))  # generation 2 asked before
    elif case == "another-pending":
        queue.create(request(job.name, t, 1))  # delivered first: itself valid
    elif case == "no-reruns":
        job = replace(job, reruns=False)
    elif case == "another-project":
        asked = replace(asked, project="someone-else")
    queue.create(asked)
    watch = OwnWatch(served.collection, [job], served.server.url, now)
    replies = watch.tick()["reruns"]
    [refused] = [r for r in replies if r["generation"] == asked.generation
                 and r["schedule_time"] == z(asked.schedule_time)]
    assert refused["status"] == REFUSED and why in refused["error"], refused
    [line] = [e for e in watch.logs if e.get("outcome") == "rerun"
              and e.get("run_id") == asked.request_id]
    assert line["severity"] == "WARNING" and why in line["error"]
    stored = queue.get_many([asked.request_id])[asked.request_id]
    assert (stored.status, why in str(stored.outcome)) == (REFUSED, True)
    assert asked.generation not in executed(served, job.name, asked.schedule_time)
    assert watch.tick()["reruns"] == [] or case == "another-pending"


def test_make_reruns_own_sequence_passes_the_checks(served: Served) -> None:
    """Generation 1 done, then generation 2: both delivered, each once."""
    job = rerunnable(f"sequence-{uuid.uuid4().hex[:6]}")
    now, times = recent_minutes(2)
    Runs(served.collection).completed(job.name, *times)
    queue = own_queue(served.collection)
    watch = OwnWatch(served.collection, [job], served.server.url, now)
    queue.create(request(job.name, times[0], 1))
    assert [r["status"] for r in watch.tick()["reruns"]] == ["completed"]
    queue.create(request(job.name, times[0], 2))
    assert [r["status"] for r in watch.tick()["reruns"]] == ["completed"]
    assert executed(served, job.name, times[0]) == [1, 2]
    assert [r.status for r in queue.for_job(job.name)] == [DONE, DONE]


# -- item 9: a malformed document is refused and reported, the tick goes on --------------------

def test_a_malformed_request_is_refused_and_reported_and_the_tick_answers_200(
    served: Served,
) -> None:
    job = rerunnable(f"bad-request-{uuid.uuid4().hex[:6]}")
    other = minutely(f"judged-{uuid.uuid4().hex[:6]}", catch_up=False)
    now, times = recent_minutes(4)
    Runs(served.collection).completed(job.name, *times)
    Runs(served.collection).completed(other.name, *(t for t in times if t != times[2]))
    queue = own_queue(served.collection)
    good = request(job.name, times[1])
    queue.create(good)
    document = watch_db().collection(reruns_collection(served.collection)).document("bad")
    document.set({**request(job.name, times[0]).to_document(), "generation": "two"})
    watch = OwnWatch(served.collection, [job, other], served.server.url, now)
    body = watch.tick()
    [malformed] = [p for p in body["problems"] if p["kind"] == MALFORMED]
    assert malformed["document"] == f"{reruns_collection(served.collection)}/bad"
    assert malformed["job"] == job.name and "generation is str 'two'" in malformed["error"]
    [line] = [e for e in watch.logs if e.get("kind") == MALFORMED]
    assert line["severity"] == "ERROR"  # counted by the watchdog-problem alert's metric
    assert (other.name, z(times[2]), "missed") in {
        (p["job"], p["schedule_time"], p["kind"]) for p in body["problems"]}
    assert [(r["generation"], r["status"]) for r in body["reruns"]] == [(1, "completed")]
    stored = snapshot(document)
    assert stored["status"] == REFUSED and "generation" in stored["outcome"]
    assert [p for p in watch.tick()["problems"] if p["kind"] == MALFORMED] == []


@pytest.mark.parametrize(
    ("fields", "why"),
    [
        ({"judged_through": "2026-01-01"}, "judged_through is str"),
        ({"watching": {"x": "soon"}}, "watching.x is str"),
        ({"catch_ups": {"x": {"deliveries": 1}}}, "delivered_at is missing"),
        ({"never_ran_reported": "yes"}, "never_ran_reported is str"),
        ({"judged_through": "FUTURE"}, "judged_through"),
    ],
)
def test_a_malformed_cursor_is_reported_and_the_job_judged_afresh(
    served: Served, fields: dict[str, Any], why: str,
) -> None:
    job = minutely(f"bad-cursor-{uuid.uuid4().hex[:6]}", catch_up=False)
    other = minutely(f"judged-{uuid.uuid4().hex[:6]}", catch_up=False)
    now, times = recent_minutes(5)
    for j in (job, other):
        Runs(served.collection).completed(j.name, *(t for t in times if t != times[2]))
    if fields.get("judged_through") == "FUTURE":
        fields = {"judged_through": now + timedelta(days=1)}
        why = f"judged_through {z(now + timedelta(days=1))} is after now"
    cursors = watch_db().collection(f"{served.collection}_watchdog")
    cursors.document(job.name).set({**Cursor(first_run=times[0]).to_document(now), **fields})
    watch = OwnWatch(served.collection, [job, other], served.server.url, now)
    body = watch.tick()
    [malformed] = [p for p in body["problems"] if p["kind"] == MALFORMED]
    assert malformed["job"] == job.name and why in malformed["error"], malformed
    assert malformed["document"] == f"{served.collection}_watchdog/{job.name}"
    missed = {(p["job"], p["schedule_time"]) for p in body["problems"] if p["kind"] == "missed"}
    assert missed == {(job.name, z(times[2])), (other.name, z(times[2]))}
    # The cursor is the watchdog's own again: the next tick reports nothing twice.
    assert Cursor.from_document(snapshot(cursors.document(job.name))).malformed is None
    assert watch.tick()["problems"] == []


# -- the documents' own checks, and the setting ------------------------------------------------

def test_a_request_document_must_match_its_ids_and_types() -> None:
    t = datetime(2026, 11, 30, 8, 15, tzinfo=UTC)
    good = request("job", t)
    document = good.to_document()
    assert RerunRequest.from_document(document, good.request_id) == good
    cases: list[tuple[dict[str, Any], str]] = [
        ({"generation": True}, "generation is bool"),
        ({"schedule_time": "2026-11-30T08:15:00Z"}, "schedule_time is str"),
        ({"status": "approved"}, "status 'approved' is not one of"),
        ({"job": None}, "job is missing"),
        ({"run_id": RunKey(PROJECT, LOCATION, "job", t, generation=2).run_id},
         "run_id"),
    ]
    for broken, why in cases:
        with pytest.raises(MalformedDocument, match=why):
            RerunRequest.from_document({**document, **broken}, good.request_id)
    with pytest.raises(MalformedDocument, match="document ID 'other'"):
        RerunRequest.from_document(document, "other")
    assert good.status == PENDING


def test_the_watch_database_must_be_none_of_the_records_databases() -> None:
    from local_stack.tables import job_tables_env

    env = {"DEDUP_PROJECT": PROJECT, "DEDUP_LOCATION": LOCATION, "DEDUP_DATABASE": "sched-dedup",
           **job_tables_env(watch_jobs=[{"name": "j", "schedule": "* * * * *",
                                         "database": "sched-dedup-proxy"}])}
    assert WatchSettings.from_env(
        {**env, "DEDUP_WATCH_DATABASE": "sched-dedup-watchdog"}
    ).watch_database == "sched-dedup-watchdog"
    assert WatchSettings.from_env(env).watch_database is None
    for database in ("sched-dedup", "sched-dedup-proxy", "Not_An_ID"):
        with pytest.raises(SettingsError, match="DEDUP_WATCH_DATABASE"):
            WatchSettings.from_env({**env, "DEDUP_WATCH_DATABASE": database})
