"""Operator re-runs: `make rerun`'s code path records a request, the watchdog delivers it
to the served function (real Firestore emulator, the ledger job counting executions), and
the new generation executes once however often it is delivered."""

from __future__ import annotations

import itertools
import json
import os
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import requests
from google.cloud import firestore

from dedup.cache import CompletedRunCache
from dedup.keys import RunKey
from dedup.outcomes import Outcome
from dedup.protocol import Deduplicator
from dedup.run_context import PermanentFailure, RunContext
from dedup.store import RecordExists, RunRecord, RunStatus
from dedup.store.firestore import FirestoreRunStore
from dedup.watchdog.due import WatchedJob
from dedup.watchdog.reruns import (
    DONE,
    FAILED,
    PENDING,
    FirestoreRerunQueue,
    RerunRequest,
    reruns_collection,
)
from infra.config import StackConfig, load_config
from local_stack import FunctionServer
from local_stack.deliveries import (
    INVOKER,
    LOCATION,
    PROJECT,
    in_process_function,
    scheduler_headers,
)
from local_stack.tables import job_tables_env
from operator_tools.rerun import RerunRefused, request_rerun, tick_now
from operator_tools.runs import RunStores
from tests.function.test_catch_up import JOB_HEADERS, SLOW_BODY, Served, Watch, z

# The served function (a module fixture), shared with the catch-up tests' helpers.
from tests.function.test_catch_up import served as served
from tests.function.test_watchdog import Runs

pytestmark = pytest.mark.usefixtures("firestore_emulator")

# generation 0's run_id as computed before re-runs (and forced runs) existed: every record
# in the field keeps its ID.
KNOWN_RUN_ID = "621b7f15b69745b34dd94483b4d5313ca0e1be6055f5683f41e1be1dc6a02255"
PREFIX = "rerun-test"
JOB = "sync"
JOB_ID = f"{PREFIX}-{JOB}"


def stack(collection: str, *, reruns: bool = True) -> StackConfig:
    return load_config({
        "gcp:project": PROJECT,
        "gcp:region": LOCATION,
        "scheduler-dedup:namePrefix": PREFIX,
        "scheduler-dedup:collection": collection,
        "scheduler-dedup:watchdog": {"reruns": reruns},
        "scheduler-dedup:jobs": [{
            "name": JOB, "schedule": "* * * * *", "timeZone": "Europe/Berlin",
            "attemptDeadlineSeconds": 60, "body": json.loads(SLOW_BODY),
        }],
    })


def watched() -> WatchedJob:
    return WatchedJob(
        JOB_ID, "* * * * *", "Europe/Berlin", attempt_deadline_seconds=60, body=SLOW_BODY,
        headers=JOB_HEADERS, reruns=True,
    )


_MINUTES_BACK = itertools.count(3)
# Counted back from one instant for the whole module: counting from each test's own "now"
# would give two tests the same minute when a minute boundary passes between them.
_MODULE_MINUTE = datetime.now(UTC).replace(second=0, microsecond=0)


@pytest.fixture
def recent() -> datetime:
    """A real minute in the past (the served function never takes it for a forced run),
    another one for each test: the served function caches completed runs in memory."""
    return _MODULE_MINUTE - timedelta(minutes=next(_MINUTES_BACK))


@pytest.fixture
def store(served: Served) -> Iterator[FirestoreRunStore]:
    yield FirestoreRunStore(firestore.Client(project=PROJECT), served.collection, 5)


def ask(
    cfg: StackConfig, store: FirestoreRunStore, t: datetime, reason: str = "fixed",
    *, again: bool = False,
) -> Any:
    return request_rerun(
        cfg, RunStores(store), job_name=JOB, time_text=t.isoformat(), reason=reason,
        requested_by="alice@example.com", now=t + timedelta(minutes=2), again=again,
    )


def clean(served: Served) -> None:
    """Tests of one module share the collection (each has a minute of its own): no request
    of an earlier test is left for this test's watchdog to deliver."""
    requests_of = firestore.Client(project=PROJECT).collection(
        reruns_collection(served.collection))
    for document in requests_of.list_documents():
        document.delete()


# -- identity and the header ------------------------------------------------------------------

def test_generation_zero_keeps_the_run_id_and_each_generation_gets_its_own() -> None:
    t = datetime(2026, 11, 30, 8, 15, tzinfo=UTC)
    run = RunKey(PROJECT, LOCATION, "invoice-sync", t)
    assert run.run_id == KNOWN_RUN_ID
    assert replace(run, generation=0).run_id == KNOWN_RUN_ID
    ids = {replace(run, generation=g).run_id for g in range(1, 4)}
    assert len(ids) == 3 and KNOWN_RUN_ID not in ids
    assert replace(run, generation=1).run_id != replace(run, forced=True).run_id


@pytest.mark.parametrize("value", ["-1", "one", "1.5", "", "1000001", "\u0661"])
def test_a_bad_generation_header_is_a_400_naming_it(collection_name: str, value: str) -> None:
    function = in_process_function(collection_name)
    headers = {**scheduler_headers(), "X-Dedup-Generation": value}
    status, body = function.deliver(headers)
    assert status == 400
    assert body["error"].startswith(f"X-Dedup-Generation {value!r} is not a whole number")


def test_a_generation_header_keys_the_delivery_apart(
    collection_name: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TEST_LEDGER", str(tmp_path / "ledger.jsonl"))
    function = in_process_function(collection_name)
    first = function.deliver(scheduler_headers())
    again = function.deliver({**scheduler_headers(), "X-Dedup-Generation": "0"})
    rerun = function.deliver({**scheduler_headers(), "X-Dedup-Generation": "2"})
    assert (first[1]["outcome"], again[1]["outcome"]) == ("completed", "duplicate")
    assert again[1]["run_id"] == first[1]["run_id"] and "generation" not in again[1]
    assert (rerun[0], rerun[1]["outcome"], rerun[1]["generation"]) == (200, "completed", 2)
    assert rerun[1]["run_id"] != first[1]["run_id"]
    [line] = [e for e in function.logs if e.get("generation") == 2]
    assert "(re-run, generation 2)" in str(line["message"])


# -- requests, delivered by the watchdog --------------------------------------------------------

def test_a_rerun_delivered_twice_executes_once_and_keeps_the_original_record(
    served: Served, store: FirestoreRunStore, recent: datetime,
) -> None:
    clean(served)
    cfg = stack(served.collection)
    Runs(served.collection).completed(JOB_ID, recent)
    original = store.get(RunKey(PROJECT, LOCATION, JOB_ID, recent).run_id)
    assert original is not None
    asked = ask(cfg, store, recent, reason="ledger import fixed")
    assert asked.request.generation == 1 and asked.previous.record.status is RunStatus.COMPLETED

    watch = Watch(served.collection, [watched()], served.server.url, now=recent)
    start = threading.Barrier(2)

    def tick() -> dict[str, Any]:
        handler = watch.handler()
        start.wait()
        return dict(handler.handle({}, b"").body)

    with ThreadPoolExecutor(2) as pool:  # two ticks deliver the pending request at once
        bodies = list(pool.map(lambda _: tick(), range(2)))
    bodies.append(watch.tick())
    reruns = [r for b in bodies for r in b["reruns"]]
    assert {(r["job"], r["schedule_time"], r["generation"]) for r in reruns} == {
        (JOB_ID, z(recent), 1)
    }
    assert [r["status"] for r in reruns].count("completed") == 1
    assert {r["requested_by"] for r in reruns} == {"alice@example.com"}

    executions = [e for e in served.executions(JOB_ID) if e["schedule_time"] == (
        recent.isoformat())]
    assert [e["generation"] for e in executions] == [1]
    # Delivered by hand once more (a stale retry): answered from the record.
    again = requests.post(served.server.url, headers={
        **scheduler_headers(JOB_ID, z(recent), authorization=None), "X-Dedup-Generation": "1",
    }, data=SLOW_BODY, timeout=30)
    assert again.json()["outcome"] == "duplicate"
    assert len([e for e in served.executions(JOB_ID) if e["generation"] == 1 and e[
        "schedule_time"] == recent.isoformat()]) == 1
    # The request is done, and the original record is untouched.
    queue = FirestoreRerunQueue(store, reruns_collection(served.collection))
    [request] = queue.for_job(JOB_ID)
    assert (request.status, request.outcome, request.reason) == (
        DONE, "completed", "ledger import fixed"
    )
    kept = store.get(original_id := RunKey(PROJECT, LOCATION, JOB_ID, recent).run_id)
    assert kept is not None and kept.record == original.record and original_id
    rerun = store.get(request.request_id)
    assert rerun is not None and rerun.record.generation == 1
    assert rerun.record.status is RunStatus.COMPLETED
    # A further re-run asks first (generation 1 completed), then is the next generation.
    with pytest.raises(RerunRefused, match="has been re-run already: generation 1 completed"):
        ask(cfg, store, recent)
    assert ask(cfg, store, recent, again=True).request.generation == 2


def test_a_rerun_of_a_run_in_progress_is_refused(
    served: Served, store: FirestoreRunStore, recent: datetime,
) -> None:
    clean(served)
    Runs(served.collection).in_progress(JOB_ID, recent, claimed_at=recent)
    with pytest.raises(RerunRefused, match=r"generation 0 of .* is in progress \(attempt 1\)"):
        ask(stack(served.collection), store, recent)
    queue = FirestoreRerunQueue(store, reruns_collection(served.collection))
    assert [r for r in queue.for_job(JOB_ID) if r.schedule_time == recent] == []


def test_a_second_request_while_one_is_pending_is_refused(
    served: Served, store: FirestoreRunStore, recent: datetime,
) -> None:
    clean(served)
    cfg = stack(served.collection)
    Runs(served.collection).completed(JOB_ID, recent)
    assert ask(cfg, store, recent).request.status == PENDING
    with pytest.raises(RerunRefused, match=r"\(generation 1, asked by alice@example.com .*"
                       "is still pending"):
        ask(cfg, store, recent)


def test_a_request_whose_create_landed_unseen_is_adopted_not_refused(
    served: Served, store: FirestoreRunStore, recent: datetime,
) -> None:
    # The create landed and its reply was lost: the retry meets the request it wrote and
    # succeeds; another operator's request for the same generation is still refused.
    clean(served)
    cfg = stack(served.collection)
    Runs(served.collection).completed(JOB_ID, recent)
    request = ask(cfg, store, recent).request
    queue = FirestoreRerunQueue(store, reruns_collection(served.collection))
    queue.create(request)  # the retry of a create that landed
    assert queue.get_many([request.request_id])[request.request_id] == request
    with pytest.raises(RecordExists):
        queue.create(replace(request, requested_by="bob@example.com"))
    with pytest.raises(RecordExists):
        queue.create(replace(request, requested_at=request.requested_at + timedelta(seconds=1)))


def test_a_missed_run_is_requested_as_generation_zero(
    served: Served, store: FirestoreRunStore, recent: datetime,
) -> None:
    clean(served)
    asked = ask(stack(served.collection), store, recent)
    assert (asked.request.generation, asked.previous) == (0, None)
    assert asked.request.request_id == RunKey(PROJECT, LOCATION, JOB_ID, recent).run_id


def test_a_fenced_run_is_requested_and_delivered_as_a_run_that_never_ran(
    served: Served, store: FirestoreRunStore, recent: datetime,
) -> None:
    """A fence ("nothing ran": left where a claim's create had an unknown outcome, issue
    37 item 7) is no failed run to the tools or the watchdog: `make rerun` asks for
    generation 0, the watchdog delivers it, and it executes once. (The reverted fence, a
    plain `failed` record, was settled `failed` without a delivery: backfills lost runs.)"""
    clean(served)
    key = RunKey(PROJECT, LOCATION, JOB_ID, recent)
    store.create(key.run_id, RunRecord.fence_of(key, "a-fenced-attempt", 60, recent))
    asked = ask(stack(served.collection), store, recent)
    assert (asked.request.generation, asked.previous) == (0, None)
    watch = Watch(served.collection, [watched()], served.server.url, now=recent)
    [delivered] = watch.tick()["reruns"]
    assert (delivered["status"], delivered["generation"]) == ("completed", 0)
    assert [e["generation"] for e in served.executions(JOB_ID)
            if e["schedule_time"] == recent.isoformat()] == [0]


# -- what `make rerun` refuses before writing anything ------------------------------------------

def test_time_must_be_a_scheduled_time_with_an_offset_and_not_in_the_future(
    collection_name: str, store: FirestoreRunStore,
) -> None:
    cfg = stack(collection_name)
    hourly = cfg.model_copy(update={"jobs": tuple(
        j.model_copy(update={"schedule": "15 9 * * *"}) for j in cfg.jobs
    )})
    now = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)

    def refused(config: StackConfig, text: str, reason: str = "why") -> str:
        with pytest.raises(RerunRefused) as caught:
            request_rerun(config, RunStores(store), job_name=JOB, time_text=text, reason=reason,
                          requested_by="bob", now=now)
        return str(caught.value)

    assert refused(hourly, "2026-11-30T09:20:00+01:00") == (
        "2026-11-30T09:20+01:00 (2026-11-30T08:20:00Z) is not a scheduled time of job "
        "rerun-test-sync ('15 9 * * *' in Europe/Berlin): the nearest are "
        "2026-11-30T09:15+01:00 (2026-11-30T08:15:00Z) and 2026-12-01T09:15+01:00 "
        "(2026-12-01T08:15:00Z)"
    )
    assert "has no UTC offset" in refused(hourly, "2026-11-30T09:15:00")
    assert "is not an RFC 3339 time" in refused(hourly, "yesterday 9:15")
    assert "is in the future" in refused(hourly, "2026-12-01T09:15:00+01:00")
    assert refused(hourly, "2026-11-30T09:15:00+01:00", reason=" ").startswith(
        "REASON is required")
    assert "set watchdog.reruns: true" in refused(
        stack(collection_name, reruns=False), "2026-11-30T09:15:00+01:00")


def test_a_rerun_whose_job_fails_is_finished_failed_not_retried_every_tick(
    served: Served, store: FirestoreRunStore, recent: datetime,
) -> None:
    clean(served)
    cfg = stack(served.collection)
    Runs(served.collection).completed(JOB_ID, recent)
    request = ask(cfg, store, recent).request
    failing = replace(watched(), body=json.dumps({"fail": True}))
    watch = Watch(served.collection, [failing], served.server.url, now=recent)
    [delivered] = watch.tick()["reruns"]
    assert (delivered["status"], delivered["generation"]) == ("failed", 1)
    assert watch.tick()["reruns"] == []
    assert [e["generation"] for e in served.executions(JOB_ID)
            if e["schedule_time"] == recent.isoformat()] == [1]
    queue = FirestoreRerunQueue(store, reruns_collection(served.collection))
    [finished] = [r for r in queue.for_job(JOB_ID) if r.request_id == request.request_id]
    assert finished.status == FAILED and str(finished.outcome).startswith("HTTP 500: ")
    # The next request asks for generation 2.
    assert ask(cfg, store, recent).request.generation == 2


def test_a_request_for_a_job_the_watchdog_does_not_watch_is_refused(
    served: Served, store: FirestoreRunStore, recent: datetime,
) -> None:
    clean(served)
    Runs(served.collection).completed(JOB_ID, recent)
    ask(stack(served.collection), store, recent)
    other = replace(watched(), name="another-job")
    [delivered] = Watch(served.collection, [other], served.server.url, now=recent).tick()[
        "reruns"]
    assert delivered["status"] == "refused"
    assert delivered["error"] == f"job {JOB_ID!r} is not watched by this watchdog"
    assert not [e for e in served.executions(JOB_ID) if e["schedule_time"] == recent.isoformat()
                and e["generation"] == 1]


def test_now_asks_a_reachable_watchdog_for_a_tick_at_once(
    served: Served, store: FirestoreRunStore, recent: datetime,
) -> None:
    """`make rerun ... NOW=1 WATCHDOG_URL=...`: the served watchdog delivers it right away;
    one that refuses the operator leaves the request for its next tick."""
    clean(served)
    Runs(served.collection).completed(JOB_ID, recent)
    entry = {
        "name": JOB_ID, "schedule": "* * * * *", "timeZone": "Europe/Berlin",
        "attemptDeadlineSeconds": 60, "body": SLOW_BODY, "headers": dict(JOB_HEADERS),
        "reruns": True,
    }
    env = {
        "DEDUP_PROJECT": PROJECT, "DEDUP_LOCATION": LOCATION,
        "DEDUP_COLLECTION": served.collection, "DEDUP_STORE_TIMEOUT_SECONDS": "5",
        **job_tables_env(watch_jobs=[entry]), "DEDUP_WATCH_LOOKBACK_SECONDS": "900",
        "DEDUP_WATCH_TARGET_URL": served.server.url, "DEDUP_WATCH_TARGET_AUTH": "none",
        "FIRESTORE_EMULATOR_HOST": os.environ["FIRESTORE_EMULATOR_HOST"],
        "GOOGLE_CLOUD_PROJECT": PROJECT,
    }
    # Both watchdogs are up (their readiness probes ticked) before the request exists. One
    # serves the Scheduler job's account only: the operator (no token over http) is refused.
    guarded_env = {**env, "DEDUP_ALLOWED_CALLERS": INVOKER}
    with FunctionServer(guarded_env, target="watch_scheduled_runs") as guarded, \
            FunctionServer(env, target="watch_scheduled_runs") as watchdog:
        ask(stack(served.collection), store, recent)
        refused = tick_now(guarded.url)
        said = tick_now(watchdog.url)
    assert refused.startswith("no tick now: the watchdog answered HTTP 403 (")
    assert refused.endswith("the request waits for its next tick")
    assert said == (f"tick now: the watchdog delivered 1 re-run(s): {JOB_ID} @ {z(recent)} "
                    "generation 1: completed")
    queue = FirestoreRerunQueue(store, reruns_collection(served.collection))
    [request] = queue.for_job(JOB_ID)
    assert request.status == DONE
    assert [e["generation"] for e in served.executions(JOB_ID)
            if e["schedule_time"] == recent.isoformat()] == [1]


def test_the_watchdog_holds_a_rerun_of_a_run_scheduler_may_still_retry(
    served: Served, store: FirestoreRunStore, recent: datetime,
) -> None:
    """A request written to the collection directly (not through `make rerun`) for a run
    whose attempt 1 failed: it waits, pending, while Scheduler may still retry the run (its
    retry window + the watchdog's grace), and is delivered at the first tick after."""
    clean(served)
    Runs(served.collection).failed(JOB_ID, recent)
    queue = FirestoreRerunQueue(store, reruns_collection(served.collection))
    queue.create(RerunRequest(PROJECT, LOCATION, JOB_ID, recent, 1, "script@example.com",
                              "written by hand", recent + timedelta(minutes=1)))
    job = replace(watched(), retry_window_seconds=450)
    watch = Watch(served.collection, [job], served.server.url, now=recent)  # grace 30 s
    retried_until = recent + timedelta(seconds=480)

    for now in (recent + timedelta(minutes=2), retried_until - timedelta(seconds=1)):
        watch.now = now
        [waiting] = watch.tick()["reruns"]
        assert (waiting["status"], waiting["generation"]) == ("waiting", 1)
        assert waiting["error"] == (
            f"the run is not completed and Scheduler may retry it until {z(retried_until)}")
    [request] = [r for r in queue.for_job(JOB_ID) if r.schedule_time == recent]
    assert request.status == PENDING
    assert [e for e in served.executions(JOB_ID) if e["schedule_time"] == recent.isoformat()
            and e["generation"] == 1] == []
    [line] = [e for e in watch.logs if e.get("status") == "waiting"][-1:]
    assert line["severity"] == "INFO"  # expected, not a delivery problem

    watch.now = retried_until
    [delivered] = watch.tick()["reruns"]
    assert (delivered["status"], delivered["generation"]) == ("completed", 1)
    assert [e["generation"] for e in served.executions(JOB_ID)
            if e["schedule_time"] == recent.isoformat()] == [1]
    [request] = [r for r in queue.for_job(JOB_ID) if r.schedule_time == recent]
    assert request.status == DONE


def _refused_start(context: RunContext) -> None:
    raise PermanentFailure("the downstream refused the start: HTTP 403")


def test_the_watchdog_delivers_a_rerun_of_a_run_failed_for_good_at_once(
    served: Served, store: FirestoreRunStore, recent: datetime,
) -> None:
    """A run failed for good (`permanent`: answered 200, and so is every later delivery):
    Scheduler retries nothing that could execute, so its re-run is not held."""
    clean(served)
    dedup = Deduplicator(store, lease_seconds=60, retention_seconds=3650 * 86400,
                         cache=CompletedRunCache(0, 3600), wall_clock=lambda: recent)
    delivery = dedup.run(RunKey(PROJECT, LOCATION, JOB_ID, recent), _refused_start, b"", {})
    assert delivery.outcome is Outcome.FAILED_PERMANENT
    queue = FirestoreRerunQueue(store, reruns_collection(served.collection))
    queue.create(RerunRequest(PROJECT, LOCATION, JOB_ID, recent, 1, "ops@example.com",
                              "grant fixed", recent + timedelta(minutes=1)))
    job = replace(watched(), retry_window_seconds=450)
    watch = Watch(served.collection, [job], served.server.url, now=recent + timedelta(minutes=2))
    [delivered] = watch.tick()["reruns"]
    assert (delivered["status"], delivered["generation"]) == ("completed", 1)
    assert [e["generation"] for e in served.executions(JOB_ID)
            if e["schedule_time"] == recent.isoformat()] == [1]
