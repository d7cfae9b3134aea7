"""The dedup protocol in-process against the real Firestore emulator: RPC counts, leases,
fencing, takeover, release, result replay."""

from __future__ import annotations

import dataclasses
import json
import os
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from google.cloud import firestore

from dedup.cache import CompletedRunCache
from dedup.claim import Claim
from dedup.keys import RunKey
from dedup.outcomes import Delivery, Outcome
from dedup.protocol import Deduplicator
from dedup.run_context import PermanentFailure, RunContext
from dedup.store import MAX_ERROR_CHARS, RecordChanged, RunRecord, RunStatus
from dedup.store.firestore import (
    FirestoreRunStore,
    changed_fields,
    document_to_record,
    record_to_document,
)
from local_stack import FirestoreEmulator
from local_stack.deliveries import (
    LOCATION,
    PROJECT,
    in_process_function,
    scheduler_headers,
)
from local_stack.rpc_counter import RpcCounter
from local_stack.steered_job import read_ledger
from tests.function.helpers import lease_lapsed
from tests.waiting import job_works_for

pytestmark = pytest.mark.usefixtures("firestore_emulator")


def make_dedup(
    collection: str, lease: float = 60, heartbeat: float | None = None,
    wall_clock_skew: timedelta = timedelta(0),
) -> tuple[Deduplicator, FirestoreRunStore]:
    client = firestore.Client(project=PROJECT)
    store = FirestoreRunStore(client, collection, timeout_seconds=5)
    dedup = Deduplicator(
        store, lease_seconds=lease, retention_seconds=3600,
        cache=CompletedRunCache(0, 3600), heartbeat_seconds=heartbeat,
        wall_clock=lambda: datetime.now(UTC) + wall_clock_skew,
    )
    return dedup, store


def key(job: str = "nightly-export", minute: int = 0) -> RunKey:
    return RunKey(PROJECT, LOCATION, job, datetime(2026, 10, 16, 12, minute, tzinfo=UTC))


# -- RPC counts (the cost floor) ----------------------------------------------------------

def test_fresh_run_costs_two_rpcs(collection_name: str, ledger: Path) -> None:
    function = in_process_function(collection_name)
    status, body = function.deliver(scheduler_headers(), b'{"result": 7}')
    assert (status, body["outcome"], body["result"]["echo"]) == (200, "completed", 7)
    assert function.rpcs.counts == {"commit": 2}


def test_duplicate_on_the_completing_instance_costs_no_rpc(
    collection_name: str, ledger: Path
) -> None:
    function = in_process_function(collection_name)
    function.deliver(scheduler_headers(), b'{"result": "first"}')
    function.rpcs.reset()
    status, body = function.deliver(scheduler_headers(), b'{"result": "second"}')
    assert (status, body["outcome"], body["result"]["echo"]) == (200, "duplicate", "first")
    assert function.rpcs.total == 0
    assert len(read_ledger(str(ledger))) == 1


def test_duplicate_on_another_instance_costs_two_rpcs_then_none(
    collection_name: str, ledger: Path
) -> None:
    first = in_process_function(collection_name)
    other = in_process_function(collection_name)
    first.deliver(scheduler_headers(), b'{"result": "done"}')
    status, body = other.deliver(scheduler_headers())
    assert (status, body["outcome"], body["result"]["echo"]) == (200, "duplicate", "done")
    assert other.rpcs.counts == {"commit": 1, "batch_get_documents": 1}
    other.rpcs.reset()
    assert other.deliver(scheduler_headers())[0] == 200
    assert other.rpcs.total == 0  # the read taught this instance the run is complete
    assert len(read_ledger(str(ledger))) == 1


def test_duplicate_while_running_gets_409_for_two_rpcs(collection_name: str) -> None:
    dedup, store = make_dedup(collection_name)
    claim = dedup.claim(key())
    assert isinstance(claim, Claim)
    rpcs = RpcCounter(store.client)
    decision = dedup.claim(key())
    assert isinstance(decision, Delivery) and decision.outcome is Outcome.IN_PROGRESS
    assert rpcs.counts == {"commit": 1, "batch_get_documents": 1}


def test_a_completion_sends_only_what_its_claim_changed_and_stores_the_whole_record(
    collection_name: str,
) -> None:
    """The completion names 4 fields, not 18 (encoding each is the costliest part of a
    fresh run's path), yet leaves the very record a write of the whole record leaves."""
    frozen = datetime(2026, 10, 16, 12, 30, tzinfo=UTC)  # so both records are alike
    client = firestore.Client(project=PROJECT)
    masks: list[list[str]] = []  # the fields each write names (a create names none)
    commit = client._firestore_api.commit

    def recording_commit(*args: Any, request: Any, **kwargs: Any) -> Any:
        masks.extend(sorted(write.update_mask.field_paths) for write in request["writes"])
        return commit(*args, request=request, **kwargs)

    client._firestore_api.commit = recording_commit
    stored: dict[str, Any] = {}
    for way in ("changes", "whole record"):
        store = FirestoreRunStore(client, f"{collection_name}_{way.split()[0]}", 5)
        dedup = Deduplicator(store, lease_seconds=60, retention_seconds=3600,
                             cache=CompletedRunCache(0, 3600), wall_clock=lambda: frozen)
        claim = dedup.claim(key())
        assert isinstance(claim, Claim)
        if way == "whole record":
            claim.record = None  # the record at its version unknown: all of it is written
        assert dedup.complete(claim, '{"rows":3}', 1.5) is True
        snapshot: Any = client.collection(store.collection).document(claim.run_id).get()
        stored[way] = {**snapshot.to_dict(), "attempt_id": None}  # the one difference
    assert masks[0] == [] and masks[2] == []  # the two claims: creates
    assert masks[1] == ["duration_seconds", "finished_at", "result_json", "status"]
    assert len(masks[3]) == 18
    assert stored["changes"] == stored["whole record"]
    assert document_to_record({**stored["changes"], "attempt_id": "a1"}).status is (
        RunStatus.COMPLETED)


def test_changed_fields_leaves_out_only_what_the_store_holds_already() -> None:
    held = {"status": "in_progress", "lease_seconds": 60.0, "attempts": 1, "error": None}
    document = {"status": "completed", "lease_seconds": 60, "attempts": 1, "error": None,
                "finished_at": datetime(2026, 10, 16, tzinfo=UTC)}
    # 60 is not 60.0 to the store (an integer, not a double), and a field the held record
    # lacks is written whatever its value.
    assert changed_fields(held, document) == {
        "status": "completed", "lease_seconds": 60,
        "finished_at": datetime(2026, 10, 16, tzinfo=UTC),
    }
    assert changed_fields(document, document) == {}
    whole = record_to_document(RunRecord.claim(key(), "a1", 1, 60, datetime.now(UTC)))
    assert changed_fields({}, whole) == whole


# -- leases, takeover and fencing ---------------------------------------------------------

def test_expired_lease_is_taken_over_and_the_old_attempt_is_fenced_off(
    collection_name: str,
) -> None:
    # Lease 3: the look that must find the claim live (two RPCs) is not raced by the lease.
    dedup, store = make_dedup(collection_name, lease=3.0)
    old = dedup.claim(key())
    assert isinstance(old, Claim)
    live = dedup.claim(key())
    assert isinstance(live, Delivery) and live.outcome is Outcome.IN_PROGRESS
    lease_lapsed(store, key().run_id)
    new = dedup.claim(key())
    assert isinstance(new, Claim) and new.attempt == 2 and new.attempt_id != old.attempt_id

    # The old attempt wakes up: it may neither complete nor delete the new claim.
    assert dedup.complete(old, json.dumps("stale")) is False
    assert dedup.release(old) is False
    assert dedup.renew(old) is False
    stored = store.get(new.run_id)
    assert stored is not None
    assert stored.record.attempt_id == new.attempt_id
    assert stored.record.status.value == "in_progress"

    assert dedup.complete(new, json.dumps("fresh")) is True
    stored = store.get(new.run_id)
    assert stored is not None and stored.record.result_json == '"fresh"'


def test_leases_are_judged_by_the_store_clock_not_the_instance_clock(
    collection_name: str,
) -> None:
    """An instance whose clock runs an hour fast still sees another's 60 s lease as live."""
    holder, _ = make_dedup(collection_name, lease=60)
    skewed, _ = make_dedup(collection_name, lease=60, wall_clock_skew=timedelta(hours=1))
    assert isinstance(holder.claim(key()), Claim)
    decision = skewed.claim(key())
    assert isinstance(decision, Delivery) and decision.outcome is Outcome.IN_PROGRESS


def test_heartbeat_keeps_a_long_job_s_lease_alive(collection_name: str) -> None:
    """A job that runs twice its lease is not taken over while its heartbeat renews (a
    renewal every 0.5 s of a 3 s lease: one may take 2.5 s to land; a 1 s lease renewed
    every 0.3 s lapsed after one slow round trip on a loaded machine)."""
    dedup, _ = make_dedup(collection_name, lease=3.0, heartbeat=0.5)
    rival, _ = make_dedup(collection_name, lease=3.0)
    rival_answers: list[Outcome] = []

    def job(context: RunContext) -> str:
        for _ in range(4):
            job_works_for(1.5)
            decision = rival.claim(key())
            assert isinstance(decision, Delivery)
            rival_answers.append(decision.outcome)
        return "done" if not context.claim_lost.is_set() else "lost"

    delivery = dedup.run(key(), job, b"", {})
    assert delivery.outcome is Outcome.COMPLETED and delivery.result_json == '"done"'
    assert rival_answers == [Outcome.IN_PROGRESS] * 4


def test_job_is_told_when_its_claim_was_lost(collection_name: str) -> None:
    """A takeover (as after an instance froze past its lease) sets claim_lost for the job."""
    dedup, _ = make_dedup(collection_name, lease=1.0, heartbeat=0.3)
    _, rival_store = make_dedup(collection_name, lease=1.0)
    seen = threading.Event()

    def job(context: RunContext) -> None:
        # Overwrite the claim the way a takeover does; retry if a renewal slipped in.
        for _ in range(10):
            stored = rival_store.get(context.run_id)
            assert stored is not None
            stolen = dataclasses.replace(stored.record, attempt_id="rival", attempts=2)
            try:
                rival_store.replace(context.run_id, stolen, stored.version)
                break
            except RecordChanged:
                continue
        if context.claim_lost.wait(30):
            seen.set()

    delivery = dedup.run(key(), job, b"", {})
    assert seen.is_set()
    assert delivery.outcome is Outcome.CLAIM_LOST
    stored = rival_store.get(key().run_id)
    assert stored is not None and stored.record.attempt_id == "rival"


def test_failed_job_keeps_a_failed_record_and_the_retry_runs_at_once(
    collection_name: str, ledger: Path
) -> None:
    function = in_process_function(collection_name)
    status, body = function.deliver(scheduler_headers(), b'{"fail": true}')
    assert (status, body["outcome"]) == (500, "failed")
    assert function.rpcs.counts == {"commit": 2}  # create + mark failed
    [snapshot] = list(function.client.collection(collection_name).stream())
    failed = snapshot.to_dict() or {}
    assert failed["status"] == "failed" and failed["attempts"] == 1
    assert failed["error"] == "RuntimeError: job asked to fail"
    assert abs(failed["failed_at"] - datetime.now(UTC)) < timedelta(minutes=1)
    assert failed["finished_at"] is None and failed["duration_seconds"] is None
    status, body = function.deliver(scheduler_headers(), b'{"result": "second try"}')
    assert (status, body["outcome"], body["result"]["echo"]) == (200, "completed", "second try")
    [snapshot] = list(function.client.collection(collection_name).stream())
    done = snapshot.to_dict() or {}
    assert done["status"] == "completed" and done["attempts"] == 2
    assert done["error"] is None and done["failed_at"] is None  # the takeover cleared them
    assert [e["attempt"] for e in read_ledger(str(ledger))] == [1, 2]


def test_a_failed_record_is_claimed_at_once_even_inside_its_lease(collection_name: str) -> None:
    dedup, store = make_dedup(collection_name, lease=600)
    claim = dedup.claim(key())
    assert isinstance(claim, Claim)
    assert dedup.release(claim, "ValueError: bad\ninput " + "x" * 1000) is True
    stored = store.get(key().run_id)
    assert stored is not None and stored.record.status is RunStatus.FAILED
    assert stored.record.error is not None and "\n" not in stored.record.error
    assert len(stored.record.error) == MAX_ERROR_CHARS
    retry = dedup.claim(key())  # no wait for the 600 s lease, no 409
    assert isinstance(retry, Claim) and retry.attempt == 2


def test_old_records_without_the_new_fields_still_read() -> None:
    old = {
        "status": "completed", "attempt_id": "a" * 32, "attempts": 1, "lease_seconds": 60,
        "expire_at": datetime(2026, 10, 17, tzinfo=UTC), "job": "j",
        "schedule_time": datetime(2026, 10, 16, tzinfo=UTC), "project": PROJECT,
        "location": LOCATION, "result_json": None,
    }
    record = document_to_record(old)
    assert record.status is RunStatus.COMPLETED
    assert (record.finished_at, record.duration_seconds, record.failed_at, record.error) == (
        None, None, None, None
    )
    assert record.permanent is False  # written before permanent failures existed


def test_record_has_the_fields_the_ttl_policy_and_people_need(
    collection_name: str, ledger: Path
) -> None:
    function = in_process_function(collection_name, retention_seconds=86400.0)
    _, body = function.deliver(scheduler_headers(schedule_time="2026-10-16T05:00:00-07:00"))
    snapshot: Any = function.client.collection(collection_name).document(body["run_id"]).get()
    data = snapshot.to_dict()
    assert data is not None
    assert data["status"] == "completed"
    assert data["job"] == "nightly-export"
    assert data["project"] == PROJECT and data["location"] == LOCATION
    assert data["schedule_time"] == datetime(2026, 10, 16, 12, tzinfo=UTC)
    assert data["attempts"] == 1 and len(data["attempt_id"]) == 32
    assert abs(data["finished_at"] - datetime.now(UTC)) < timedelta(minutes=1)
    assert 0 <= data["duration_seconds"] < 10
    assert data["claimed_at"] <= data["finished_at"]
    assert data["failed_at"] is None and data["error"] is None
    expire_in = data["expire_at"] - datetime.now(UTC)
    assert timedelta(hours=23) < expire_in <= timedelta(hours=24)
    assert len(body["run_id"]) == 64


def _refused(context: RunContext) -> None:
    raise PermanentFailure("downstream said no\nfor good", {"error": {"status": 403}})


def test_a_permanent_failure_is_recorded_failed_answered_done_and_final(
    collection_name: str,
) -> None:
    """PermanentFailure (the proxy: a 403/404 from the downstream): `failed` and
    `permanent` in the store (round trip), answered FAILED_PERMANENT (a 200), and every
    later delivery replays it without running the job: a failed record that is not
    permanent would be taken over instead."""
    dedup, store = make_dedup(collection_name, lease=600)
    calls: list[int] = []

    def job(context: RunContext) -> None:
        calls.append(context.attempt)
        _refused(context)

    first = dedup.run(key(), job, b"", {})
    assert first.outcome is Outcome.FAILED_PERMANENT
    assert (first.detail, first.result_json) == (
        "downstream said no for good", '{"error":{"status":403}}')
    stored = store.get(key().run_id)
    assert stored is not None
    record = stored.record
    assert (record.status, record.permanent, record.attempts, record.error) == (
        RunStatus.FAILED, True, 1, "downstream said no for good")
    assert record.result_json == first.result_json and record.failed_at is not None
    for _ in range(2):  # this instance again, and another one
        again = dedup.run(key(), job, b"", {})
        assert (again.outcome, again.result_json, again.detail) == (
            Outcome.FAILED_PERMANENT, first.result_json, first.detail)
        dedup, _ = make_dedup(collection_name, lease=600)
    assert calls == [1]
    # A re-run is another generation: it runs.
    rerun = dedup.run(dataclasses.replace(key(), generation=1), lambda c: "ok", b"", {})
    assert rerun.outcome is Outcome.COMPLETED


def test_a_permanent_failure_past_expire_at_is_a_new_life_without_the_flag(
    collection_name: str,
) -> None:
    dedup, store = make_dedup(collection_name)
    past, _ = make_dedup(collection_name, wall_clock_skew=timedelta(hours=-2))
    assert past.run(key(), _refused, b"", {}).outcome is Outcome.FAILED_PERMANENT
    assert dedup.run(key(), lambda c: "ok", b"", {}).outcome is Outcome.COMPLETED
    stored = store.get(key().run_id)
    assert stored is not None
    assert (stored.record.status, stored.record.permanent, stored.record.attempts) == (
        RunStatus.COMPLETED, False, 1)


def test_record_past_expire_at_counts_as_absent(collection_name: str) -> None:
    """TTL deletion lags: a completed record past expire_at no longer blocks the run."""
    dedup, _ = make_dedup(collection_name)
    past, _ = make_dedup(collection_name, wall_clock_skew=timedelta(hours=-2))
    claim = past.claim(key())  # its expire_at = now - 2 h + 1 h retention: already past
    assert isinstance(claim, Claim)
    assert past.complete(claim, None)
    again = dedup.claim(key())
    assert isinstance(again, Claim) and again.attempt == 1


# -- keys ------------------------------------------------------------------------------

def test_two_spellings_and_two_casings_are_one_run(collection_name: str, ledger: Path) -> None:
    function = in_process_function(collection_name)
    utc = scheduler_headers(schedule_time="2026-10-16T12:00:00Z")
    pacific = {k.lower(): v for k, v in scheduler_headers(
        schedule_time="2026-10-16T05:00:00-07:00").items()}
    http11 = {"X-Cloudscheduler-Jobname": "nightly-export",
              "X-Cloudscheduler-Scheduletime": "2026-10-16T12:00:00.000Z",
              "X-Dedup-Project": PROJECT, "X-Dedup-Location": LOCATION}
    full_name = scheduler_headers(
        job=f"projects/{PROJECT}/locations/{LOCATION}/jobs/nightly-export",
        project=None, location=None)
    outcomes = [function.deliver(h)[1]["outcome"] for h in (utc, pacific, http11, full_name)]
    assert outcomes == ["completed", "duplicate", "duplicate", "duplicate"]
    assert len(read_ledger(str(ledger))) == 1


def test_same_job_and_time_in_two_projects_or_locations_are_separate_runs(
    collection_name: str, ledger: Path
) -> None:
    function = in_process_function(collection_name)
    replies = [
        function.deliver(scheduler_headers(project="billing-prod-1")),
        function.deliver(scheduler_headers(project="billing-prod-2")),
        function.deliver(scheduler_headers(project="billing-prod-1", location="us-central1")),
        function.deliver(scheduler_headers(project=None, location=None)),  # own defaults
    ]
    assert [r[1]["outcome"] for r in replies] == ["completed"] * 4
    assert len({r[1]["run_id"] for r in replies}) == 4
    assert {e["project"] for e in read_ledger(str(ledger))} == {
        "billing-prod-1", "billing-prod-2", PROJECT}


def test_one_log_line_per_delivery(collection_name: str, ledger: Path) -> None:
    function = in_process_function(collection_name)
    function.deliver(scheduler_headers())
    function.deliver(scheduler_headers())
    function.deliver({"X-CloudScheduler-JobName": "x"})
    assert [line["outcome"] for line in function.logs] == ["completed", "duplicate", "rejected"]
    first = function.logs[0]
    for field_name in ("severity", "run_id", "job", "schedule_time", "attempt_id", "attempt",
                       "outcome", "latency_ms", "project", "location", "duration_seconds"):
        assert first[field_name] is not None, field_name
    assert function.logs[1]["duration_seconds"] is None  # a duplicate ran nothing
    assert first["schedule_time"] == "2026-10-16T12:00:00.000000Z"
    assert function.logs[2]["severity"] == "WARNING" and function.logs[2]["status"] == 400


def test_store_outage_is_a_bounded_retryable_500(ledger: Path, collection_name: str) -> None:
    """Nothing listens on the store's port: a 500 within the store timeout, job not run."""
    dead = FirestoreEmulator()  # a free port with nothing behind it
    saved = os.environ["FIRESTORE_EMULATOR_HOST"]
    os.environ["FIRESTORE_EMULATOR_HOST"] = dead.host
    try:
        function = in_process_function(collection_name, store_timeout_seconds=1.5)
        started = time.monotonic()
        status, body = function.deliver(scheduler_headers())
        elapsed = time.monotonic() - started
    finally:
        os.environ["FIRESTORE_EMULATOR_HOST"] = saved
    assert (status, body["outcome"]) == (500, "store_unavailable")
    assert elapsed < 5
    assert read_ledger(str(ledger)) == []
    assert function.logs[0]["severity"] == "ERROR"
