"""overlap between runs of one job, in process against the real Firestore emulator: the
header's validation, what each policy costs in RPCs, and a skipped run as the watchdog
judges it (never missed, never caught up). The served tests are in test_overlap_served.py."""

from __future__ import annotations

import json
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from google.cloud import firestore

from dedup.keys import RunKey
from dedup.overlap import latest_run_id
from dedup.store import RunStatus, StoredRun
from dedup.store.firestore import FirestoreRunStore
from dedup.watchdog.due import WatchedJob
from dedup.watchdog.settings import WatchSettings
from dedup.watchdog.tick import build_watchdog_handler
from dedup.watchdog.verdicts import FINE, SKIPPED, classify_run
from local_stack.deliveries import (
    LOCATION,
    PROJECT,
    InProcessFunction,
    in_process_function,
    scheduler_headers,
    settings_for,
)
from local_stack.interval_job import executions
from local_stack.steered_job import read_ledger
from tests.function import helpers
from tests.waiting import wait_until

pytestmark = pytest.mark.usefixtures("firestore_emulator")

JOB = "sync"
T1 = datetime(2026, 10, 16, 12, 0, tzinfo=UTC)
T2 = T1 + timedelta(minutes=1)
T3 = T1 + timedelta(minutes=2)


def z(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def headers(t: datetime, overlap: str | None, **extra: str) -> dict[str, str]:
    sent = scheduler_headers(JOB, z(t))
    if overlap is not None:
        sent["X-Dedup-Overlap"] = overlap
    return {**sent, **extra}


def run_id(t: datetime) -> str:
    return RunKey(PROJECT, LOCATION, JOB, t).run_id


def running(function: InProcessFunction, pool: ThreadPoolExecutor, ledger: Path, t: datetime,
            overlap: str) -> helpers.HeldRun:
    """Run `t` in the background and return once its job has started; it runs until
    the test lets it finish."""
    return helpers.running(function, pool, ledger, headers(t, overlap))


@pytest.mark.parametrize("value", ["Forbid", "skip", "", "allow,forbid"])
def test_a_bad_overlap_header_is_a_400_naming_the_choices_and_nothing_is_written(
    function: InProcessFunction, collection_name: str, value: str
) -> None:
    function.rpcs.reset()
    status, body = function.deliver(headers(T1, value))
    assert status == 400
    assert body["error"].startswith(f"X-Dedup-Overlap {value!r} is not one of allow, forbid, "
                                    "wait, replace")
    assert function.rpcs.counts == {}


def test_allow_costs_no_rpc_more_than_no_header(function: InProcessFunction) -> None:
    for t, overlap in ((T1, None), (T2, "allow")):
        function.rpcs.reset()
        assert function.deliver(headers(t, overlap), b"{}")[0] == 200
        assert function.rpcs.counts == {"commit": 2}  # create + complete, as ever


def test_what_forbid_costs_clear_and_blocked(
    function: InProcessFunction, pool: ThreadPoolExecutor, ledger: Path
) -> None:
    # Clear (the job's first run): read the latest run, read this run's record (one
    # batch), claim, take the job (create its latest run), complete.
    function.rpcs.reset()
    assert function.deliver(headers(T1, "forbid"), b"{}")[0] == 200
    assert function.rpcs.counts == {"batch_get_documents": 2, "commit": 3}
    # Clear again, the latest run naming a run that ended: the same 5 RPCs.
    function.rpcs.reset()
    assert function.deliver(headers(T2, "forbid"), b"{}")[0] == 200
    assert function.rpcs.counts == {"batch_get_documents": 2, "commit": 3}
    # Blocked: two reads and the skipped record, nothing else.
    first = running(function, pool, ledger, T3, "forbid")
    function.rpcs.reset()
    later = T3 + timedelta(minutes=1)
    status, body = function.deliver(headers(later, "forbid"), b"{}")
    assert (status, body["outcome"]) == (200, "skipped")
    assert function.rpcs.counts == {"batch_get_documents": 2, "commit": 1}
    assert first.finish()[0] == 200


def test_forbid_skips_a_run_while_the_previous_one_runs_and_the_skip_is_final(
    function: InProcessFunction, pool: ThreadPoolExecutor, ledger: Path, collection_name: str
) -> None:
    first = running(function, pool, ledger, T1, "forbid")
    status, body = function.deliver(headers(T2, "forbid"), b"{}")
    assert (status, body["outcome"]) == (200, "skipped")
    assert run_id(T1) in body["detail"]
    assert first.finish()[1]["outcome"] == "completed"
    # Once the blocking run ended, a late retry of the skipped run is still skipped.
    status, body = function.deliver(headers(T2, "forbid"), b"{}")
    assert (status, body["outcome"]) == (200, "skipped")
    assert function.deliver(headers(T3, "forbid"), b"{}")[1]["outcome"] == "completed"
    assert [e["schedule_time"] for e in read_ledger(str(ledger))] == [
        T1.isoformat(), T3.isoformat()]
    store = FirestoreRunStore(function.client, collection_name, 5)
    skipped = store.get(run_id(T2))
    assert skipped is not None and skipped.record.status is RunStatus.SKIPPED
    assert skipped.record.blocked_by == run_id(T1)
    latest: Any = function.client.collection(collection_name + "_overlap").document(
        latest_run_id(RunKey(PROJECT, LOCATION, JOB, T3))).get()
    assert (latest.to_dict() or {})["run_id"] == run_id(T3)


def test_queued_watchdog_deliveries_and_forced_runs_follow_the_policy(
    function: InProcessFunction, pool: ThreadPoolExecutor, ledger: Path
) -> None:
    first = running(function, pool, ledger, T1, "forbid")
    # A re-run queued by the watchdog (X-Dedup-Deliver-Within): asked for, so it waits.
    rerun = headers(T1 - timedelta(minutes=5), "forbid", **{
        "X-Dedup-Generation": "1", "X-Dedup-Deliver-Within": "600"})
    status, body = function.deliver(rerun, b"{}")
    assert (status, body["outcome"]) == (409, "in_progress")
    # A forced run ("Run now": its schedule time ahead of the clock) is skipped.
    ahead = datetime.now(UTC).replace(microsecond=0) + timedelta(minutes=5)
    status, body = function.deliver(headers(ahead, "forbid"), b"{}")
    assert (status, body["outcome"], body["trigger"]) == (200, "skipped", "forced")
    assert first.finish()[0] == 200
    status, body = function.deliver(rerun, b"{}")
    assert (status, body["outcome"], body["generation"]) == (200, "completed", 1)


def test_wait_answers_409_until_the_previous_run_ended(
    function: InProcessFunction, pool: ThreadPoolExecutor, ledger: Path
) -> None:
    first = running(function, pool, ledger, T1, "wait")
    replies = []
    for _ in range(3):  # Scheduler's retries while T1 runs
        status, body = function.deliver(headers(T2, "wait"), b"{}")
        replies.append((status, body["outcome"]))
    assert first.finish()[1]["outcome"] == "completed"

    def delivered() -> bool:
        status, body = function.deliver(headers(T2, "wait"), b"{}")
        replies.append((status, body["outcome"]))
        return status == 200

    wait_until(delivered, what="T2 to be let in once T1 ended", poll=0.1)
    assert replies[-1] == (200, "completed")
    assert set(replies[:-1]) == {(409, "in_progress")} and len(replies) > 3


def test_replace_stops_the_previous_run_through_claim_lost_and_then_runs(
    collection_name: str, ledger: Path, pool: ThreadPoolExecutor
) -> None:
    # The interval job stops once claim_lost is set; a 3 s lease renews every second.
    function = in_process_function(collection_name, default_job="local_stack.interval_job:run",
                                   lease_seconds=3)
    started = time.monotonic()
    body = json.dumps({"sleep": 120}).encode()
    first = pool.submit(function.deliver, headers(T1, "replace"), body)
    wait_until(lambda: executions(str(ledger)), what="T1's job to start")
    replies = []

    def delivered() -> bool:
        status, reply = function.deliver(headers(T2, "replace"), b"{}")
        replies.append((status, reply["outcome"]))
        return status == 200

    wait_until(delivered, timeout=25, what="T2 to replace T1", poll=0.1)
    assert replies[-1] == (200, "completed"), replies
    status, reply = first.result()
    assert (status, reply["outcome"]) == (500, "failed")  # it stopped: the job raised
    assert time.monotonic() - started < 120  # it did not run its 120 s
    [stopped] = [e for e in executions(str(ledger)) if e.run_id == run_id(T1)]
    assert stopped.stopped
    # Its retry does not start it again: it was replaced.
    status, reply = function.deliver(headers(T1, "replace"), body)
    assert (status, reply["outcome"]) == (200, "skipped")
    assert "replaced by run" in reply["detail"]
    stored = FirestoreRunStore(function.client, collection_name, 5).get(run_id(T1))
    assert stored is not None and stored.record.replaced_by == run_id(T2)


def test_replace_an_older_runs_retry_never_stops_the_newer_run_it_meets_it_waits(
    collection_name: str, ledger: Path, pool: ThreadPoolExecutor
) -> None:
    """Issue 37, item 5: under `replace` only a newer run replaces an older one. A retry of
    an older run that failed, delivered while a newer run runs, must not stop it (it used
    to mark it `replaced_by`: stopped through claim_lost, its retries `200 skipped`, judged
    skipped, nobody told). It waits (409, nothing written) and runs once the job is free."""
    # A 3 s lease renews every second: a `replaced_by` mark would stop T2 within that.
    function = helpers.function_with_held_jobs(collection_name, lease_seconds=3)
    store = FirestoreRunStore(function.client, collection_name, 5)
    fail = json.dumps({"fail": True}).encode()
    assert function.deliver(headers(T1, "replace"), fail)[:1] == (500,)
    newer = running(function, pool, ledger, T2, "replace")
    try:
        status, reply = function.deliver(headers(T1, "replace"), b"{}")
        assert (status, reply["outcome"]) == (409, "in_progress"), reply
        seen = store.get(run_id(T2))
        assert seen is not None

        def renewed_or_marked() -> StoredRun | None:
            now = store.get(run_id(T2))
            moved = now is not None and (now.version != seen.version
                                         or now.record.replaced_by is not None)
            return now if moved else None

        # T2's next renewal lands (or, on the old code, T2 is already marked to stop).
        after = wait_until(renewed_or_marked, what="T2's claim to be renewed", poll=0.1)
        assert after.record.replaced_by is None, "the older run's retry marked T2 to stop"
        assert after.record.status is RunStatus.IN_PROGRESS
    finally:
        status, reply = newer.finish()
    assert (status, reply["outcome"]) == (200, "completed")
    assert reply["result"]["claim_lost"] is False  # T2 was never told to stop
    # The older run kept its `failed` record while it waited, and runs once T2 ended.
    stored = store.get(run_id(T1))
    assert stored is not None and stored.record.status is RunStatus.FAILED
    assert stored.record.replaced_by is None
    status, reply = function.deliver(headers(T1, "replace"), b"{}")
    assert (status, reply["outcome"]) == (200, "completed"), reply
    ran = Counter(e["run_id"] for e in read_ledger(str(ledger)))
    assert ran == {run_id(T1): 2, run_id(T2): 1}  # T1: its failed attempt, then its run
    job = WatchedJob(JOB, "* * * * *", attempt_deadline_seconds=60, retry_window_seconds=60)
    later = T3 + timedelta(minutes=30)
    for t in (T1, T2):
        assert classify_run(job, t, store.get(run_id(t)), later, 60, T1) == FINE


def test_a_skipped_run_is_skipped_for_the_watchdog_never_missed_nor_caught_up(
    function: InProcessFunction, pool: ThreadPoolExecutor, ledger: Path, collection_name: str
) -> None:
    first = running(function, pool, ledger, T1, "forbid")
    assert function.deliver(headers(T2, "forbid"), b"{}")[1]["outcome"] == "skipped"
    assert first.finish()[0] == 200
    job = WatchedJob(JOB, "* * * * *", attempt_deadline_seconds=60, retry_window_seconds=60,
                     catch_up=True, catch_up_within_seconds=3600)
    now = T3 + timedelta(minutes=30)
    store = FirestoreRunStore(function.client, collection_name, 5)
    assert classify_run(job, T2, store.get(run_id(T2)), now, 60, T1) == SKIPPED
    settings = WatchSettings(settings_for(collection_name), (job,), 3600, 60)
    logs: list[Any] = []
    reply = build_watchdog_handler(settings, firestore.Client(project=PROJECT), logs.append,
                                   wall_clock=lambda: now).handle({}, b"")
    assert reply.status == 200
    kinds = {(p["kind"], p["schedule_time"]) for p in reply.body["problems"]}
    [summary] = [line for line in logs if str(line["message"]).startswith("watchdog summary")]
    assert ("missed", z(T2)) not in kinds and summary["skipped"] == 1
    assert not [line for line in logs if line.get("outcome") == "caught_up"]
    assert [e["schedule_time"] for e in read_ledger(str(ledger))] == [T1.isoformat()]


def test_two_runs_that_find_the_job_free_at_once_never_both_run(
    function: InProcessFunction, ledger: Path
) -> None:
    times = [T1 + timedelta(minutes=i) for i in range(8)]
    replies = helpers.race(function, ledger, [headers(t, "forbid") for t in times])
    outcomes = Counter((status, body["outcome"]) for status, body in replies)
    assert len(read_ledger(str(ledger))) == 1, outcomes
    assert outcomes[(200, "completed")] == 1
    assert set(outcomes) <= {(200, "completed"), (200, "skipped"), (409, "in_progress")}


def test_a_malformed_latest_run_document_blocks_nothing_and_is_overwritten(
    function: InProcessFunction, collection_name: str
) -> None:
    latest = function.client.collection(collection_name + "_overlap").document(
        latest_run_id(RunKey(PROJECT, LOCATION, JOB, T1)))
    latest.set({"run_id": 42})  # no attempt_id, job, schedule_time
    status, body = function.deliver(headers(T1, "forbid"), b"{}")
    assert (status, body["outcome"]) == (200, "completed")
    snapshot: Any = latest.get()
    assert (snapshot.to_dict() or {})["run_id"] == run_id(T1)


# -- "Run now" under forbid (issue 37, items 1 and 2) ---------------------------------------

def forced_press(next_tick: datetime, forced_runs: str) -> dict[str, str]:
    """A "Run now" delivery: it carries the job's next scheduled time, an hour ahead."""
    return headers(next_tick, "forbid", **{"X-Dedup-Forced-Runs": forced_runs})


def test_forbid_refuses_run_now_while_a_run_is_live_and_a_press_after_it_ended_runs(
    function: InProcessFunction, pool: ThreadPoolExecutor, ledger: Path, collection_name: str
) -> None:
    next_tick = (datetime.now(UTC) + timedelta(hours=1)).replace(microsecond=0)
    forced_id = RunKey(PROJECT, LOCATION, JOB, next_tick, forced=True).run_id
    first = running(function, pool, ledger, T1, "forbid")
    status, refused = function.deliver(forced_press(next_tick, "separate"), b"{}")
    assert (status, refused["outcome"], refused["run_id"]) == (200, "skipped", forced_id)
    assert first.finish()[1]["outcome"] == "completed"
    # Pressed again once that run ended (same next tick, so the same forced run ID): it runs.
    status, body = function.deliver(forced_press(next_tick, "separate"), b"{}")
    assert (status, body["outcome"], body["run_id"], body["trigger"]) == (
        200, "completed", forced_id, "forced")
    assert [e["run_id"] for e in read_ledger(str(ledger))] == [run_id(T1), forced_id]
    assert "press it again once that run ended" in refused["detail"]


def test_forbid_refusing_run_now_under_replace_next_leaves_the_scheduled_run_to_run(
    function: InProcessFunction, pool: ThreadPoolExecutor, ledger: Path, collection_name: str
) -> None:
    next_tick = (datetime.now(UTC) + timedelta(hours=1)).replace(microsecond=0)
    scheduled_id = run_id(next_tick)
    first = running(function, pool, ledger, T1, "forbid")
    status, body = function.deliver(forced_press(next_tick, "replaceNext"), b"{}")
    assert (status, body["outcome"], body["run_id"]) == (200, "skipped", scheduled_id)
    assert first.finish()[1]["outcome"] == "completed"
    store = FirestoreRunStore(function.client, collection_name, 5)
    assert store.get(scheduled_id) is None  # the refused press consumed nothing
    # Scheduler's own delivery of that run, at its time (an instance whose margin covers
    # the hour stands in for waiting it), the job now free: it runs, once.
    on_time = helpers.function_with_held_jobs(collection_name, forced_run_margin_seconds=7200)
    status, body = on_time.deliver(headers(next_tick, "forbid"), b"{}")
    assert (status, body["outcome"], body["run_id"], body["trigger"]) == (
        200, "completed", scheduled_id, "scheduled")
    stored = store.get(scheduled_id)
    assert stored is not None and stored.record.status is RunStatus.COMPLETED
    assert [e["run_id"] for e in read_ledger(str(ledger))] == [run_id(T1), scheduled_id]
