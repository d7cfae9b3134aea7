"""overlap at its seams with the watchdog's deliveries (re-runs, backfills, catch-ups: they
carry X-Dedup-Deliver-Within), with races to take the job, with store faults and with old
records, in process against the real Firestore emulator: a watchdog delivery never
replaces a run and is never replaced or skipped by a scheduled one; a claim that ran
nothing leaves no outcome; a run's own failure evidence is kept."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from dedup.business_runs import BusinessSchedule, business_schedule
from dedup.keys import RunKey
from dedup.overlap import (
    Answer,
    Clear,
    FirestoreLatestRunStore,
    LatestRun,
    OverlapGate,
    run_order,
)
from dedup.store import RunRecord, RunStatus, StoredRun, StoreUnavailable
from dedup.store.firestore import FirestoreRunStore
from dedup.watchdog.due import WatchedJob
from dedup.watchdog.verdicts import FAILED, FINE, MISSED, classify_run
from infra.config import ConfigError, load_config
from local_stack.deliveries import (
    LOCATION,
    PROJECT,
    InProcessFunction,
    in_process_function,
    scheduler_headers,
)
from local_stack.interval_job import executions
from local_stack.steered_job import read_ledger
from tests.function.helpers import lease_lapsed, race, running
from tests.function.test_overlap import JOB, T1, T2, T3, headers, z
from tests.infra.test_config import base_config, set_job, set_key
from tests.waiting import wait_until

pytestmark = pytest.mark.usefixtures("firestore_emulator")

OLD = T1 - timedelta(days=1)
DELIVERY = {"X-Dedup-Generation": "1", "X-Dedup-Deliver-Within": "600"}
WATCHED = WatchedJob(JOB, "* * * * *", attempt_deadline_seconds=60, retry_window_seconds=60)


def key(t: datetime, generation: int = 0) -> RunKey:
    return RunKey(PROJECT, LOCATION, JOB, t, generation=generation)


@pytest.fixture
def store(function: InProcessFunction, collection_name: str) -> FirestoreRunStore:
    return FirestoreRunStore(function.client, collection_name, 5)


def until_200(function: InProcessFunction, sent: dict[str, str]) -> list[tuple[int, str]]:
    """Deliver `sent` as Scheduler retries it, until a 200: every reply, in order."""
    replies: list[tuple[int, str]] = []

    def delivered() -> bool:
        status, body = function.deliver(sent, b"{}")
        replies.append((status, body["outcome"]))
        return status == 200

    wait_until(delivered, what=f"a 200 for {sent['X-CloudScheduler-ScheduleTime']}", poll=0.1)
    return replies


# -- 1. watchdog deliveries never replace, and are never replaced or skipped ------------

def test_a_backfill_under_replace_waits_for_the_live_scheduled_run_and_never_stops_it(
    collection_name: str, ledger: Path, pool: ThreadPoolExecutor
) -> None:
    # The interval job stops on claim_lost; a 3 s lease renews every second.
    function = in_process_function(collection_name, default_job="local_stack.interval_job:run",
                                   lease_seconds=3)
    scheduled = pool.submit(function.deliver, headers(T1, "replace"),
                            json.dumps({"sleep": 2.5}).encode())
    wait_until(lambda: executions(str(ledger)), what="the scheduled run's job to start")
    backfill = headers(OLD, "replace", **DELIVERY)
    replies = until_200(function, backfill)
    status, reply = scheduled.result()
    assert (status, reply["outcome"]) == (200, "completed"), reply  # not cut short
    assert replies[-1] == (200, "completed") and (409, "in_progress") in replies
    stored = FirestoreRunStore(function.client, collection_name, 5).get(key(T1).run_id)
    assert stored is not None and stored.record.replaced_by is None
    assert classify_run(WATCHED, T1, stored, T1 + timedelta(hours=1), 60, OLD) == FINE


@pytest.mark.parametrize("policy", ["forbid", "replace"])
def test_a_scheduled_run_meeting_a_live_watchdog_delivery_waits(
    function: InProcessFunction, pool: ThreadPoolExecutor, ledger: Path,
    store: FirestoreRunStore, policy: str
) -> None:
    rerun = running(function, pool, ledger, headers(OLD, policy, **DELIVERY))
    status, body = function.deliver(headers(T2, policy), b"{}")
    assert (status, body["outcome"]) == (409, "in_progress")
    assert store.get(key(T2).run_id) is None  # not skipped: nothing written
    assert rerun.finish()[1]["outcome"] == "completed"
    held = store.get(key(OLD, 1).run_id)
    assert held is not None and held.record.replaced_by is None
    assert function.deliver(headers(T2, policy), b"{}")[1]["outcome"] == "completed"


# -- 2. the loser of the race to take the job leaves no outcome -------------------------

def test_losers_of_a_real_race_leave_no_failed_record(
    function: InProcessFunction, ledger: Path, store: FirestoreRunStore
) -> None:
    # Watchdog deliveries (forbid: they wait) and scheduled runs (wait), all at once.
    times = [T1 + timedelta(minutes=i) for i in range(8)]
    replies = race(function, ledger, [
        headers(t, "forbid", **DELIVERY) if i % 2 else headers(t, "wait")
        for i, t in enumerate(times)])
    outcomes = Counter((status, body["outcome"]) for status, body in replies)
    assert len(read_ledger(str(ledger))) == 1, outcomes
    assert set(outcomes) == {(200, "completed"), (409, "in_progress")}, outcomes
    ids = [key(t, i % 2).run_id for i, t in enumerate(times)]
    found = store.get_many(ids)
    assert [s.record.status for s in found.values() if isinstance(s, StoredRun)] == [
        RunStatus.COMPLETED]
    assert len(found) == 1
    # A scheduled loser whose retries ran out now is missed, not failed.
    loser = next(t for i, t in enumerate(times) if not i % 2 and ids[i] not in found)
    assert classify_run(WATCHED, loser, None, loser + timedelta(hours=1), 60, OLD) == MISSED


def interloper(monkeypatch: pytest.MonkeyPatch, function: InProcessFunction, loser: RunKey,
               winner: dict[str, str]) -> None:
    """Deterministically lose the race: once `loser` found the job free (and before it
    claims), `winner` is delivered, finds it free too, and takes the job first."""
    enter = OverlapGate.enter
    fired: list[bool] = []

    def racing_enter(self: OverlapGate, key: RunKey, policy: str,
                     business: BusinessSchedule | None = None) -> Clear | Answer:
        entered = enter(self, key, policy, business)
        if key.run_id == loser.run_id and not fired:
            fired.append(True)
            assert isinstance(entered, Clear)
            assert function.deliver(winner, b"{}")[1]["outcome"] == "completed"
        return entered

    monkeypatch.setattr(OverlapGate, "enter", racing_enter)


@pytest.mark.parametrize("policy", ["wait", "forbid"])
def test_a_fresh_loser_is_deleted_and_its_retry_runs(
    function: InProcessFunction, store: FirestoreRunStore, ledger: Path,
    monkeypatch: pytest.MonkeyPatch, policy: str
) -> None:
    # A re-run (watchdog delivery): under forbid it would otherwise be skipped for good.
    interloper(monkeypatch, function, key(T2, 1), headers(T3, policy))
    status, body = function.deliver(headers(T2, policy, **DELIVERY), b"{}")
    assert (status, body["outcome"]) == (409, "in_progress")
    assert store.get(key(T2, 1).run_id) is None  # no outcome: the watchdog delivers again
    status, body = function.deliver(headers(T2, policy, **DELIVERY), b"{}")
    assert (status, body["outcome"]) == (200, "completed")
    done = store.get(key(T2, 1).run_id)
    assert done is not None and done.record.attempts == 1
    assert len(read_ledger(str(ledger))) == 2


@pytest.mark.parametrize("forced_runs", ["separate", "replaceNext"])
def test_run_now_losing_the_race_under_forbid_is_refused_unrecorded_and_runs_when_pressed_again(
    function: InProcessFunction, store: FirestoreRunStore, ledger: Path,
    monkeypatch: pytest.MonkeyPatch, forced_runs: str
) -> None:
    next_tick = (datetime.now(UTC) + timedelta(hours=1)).replace(microsecond=0)
    pressed = RunKey(PROJECT, LOCATION, JOB, next_tick, forced=forced_runs == "separate")
    press = headers(next_tick, "forbid", **{"X-Dedup-Forced-Runs": forced_runs})
    interloper(monkeypatch, function, pressed, headers(T3, "forbid"))
    status, body = function.deliver(press, b"{}")
    assert (status, body["outcome"], body["run_id"]) == (200, "skipped", pressed.run_id)
    # Nothing recorded: neither the next press nor (replaceNext) the scheduled run is consumed.
    assert store.get(pressed.run_id) is None
    status, body = function.deliver(press, b"{}")
    assert (status, body["outcome"], body["run_id"]) == (200, "completed", pressed.run_id)
    assert [e["run_id"] for e in read_ledger(str(ledger))] == [key(T3).run_id, pressed.run_id]


def test_a_retried_loser_restores_the_failed_record_it_took_over(
    function: InProcessFunction, store: FirestoreRunStore, ledger: Path,
    monkeypatch: pytest.MonkeyPatch
) -> None:
    status, body = function.deliver(headers(T2, "wait"), json.dumps({"fail": True}).encode())
    assert (status, body["outcome"]) == (500, "failed")
    before = store.get(key(T2).run_id)
    assert before is not None and before.record.status is RunStatus.FAILED
    interloper(monkeypatch, function, key(T2), headers(T3, "wait"))
    status, body = function.deliver(headers(T2, "wait"), b"{}")
    assert (status, body["outcome"]) == (409, "in_progress")
    after = store.get(key(T2).run_id)
    assert after is not None and after.record == before.record  # as it was: one failure
    status, body = function.deliver(headers(T2, "wait"), b"{}")
    assert (status, body["outcome"]) == (200, "completed")
    done = store.get(key(T2).run_id)
    assert done is not None and done.record.attempts == 2


def test_a_loser_that_took_over_a_lapsed_claim_restores_it_lapsed(
    function: InProcessFunction, store: FirestoreRunStore, ledger: Path,
    monkeypatch: pytest.MonkeyPatch
) -> None:
    now = datetime.now(UTC)
    crashed = RunRecord.claim(key(T2), "crashed", 1, 1.0, now + timedelta(days=1), now)
    store.create(key(T2).run_id, crashed)
    lease_lapsed(store, key(T2).run_id)
    interloper(monkeypatch, function, key(T2), headers(T3, "forbid"))
    status, body = function.deliver(headers(T2, "forbid"), b"{}")
    assert (status, body["outcome"]) == (409, "in_progress")  # not skipped: it has a record
    after = store.get(key(T2).run_id)
    assert after is not None and after.record.attempt_id == "crashed"
    assert after.record.attempts == 1 and after.record.unfinished_attempts == ()
    assert after.record.status is RunStatus.IN_PROGRESS and after.lease_expired
    # It blocks nothing: its retry takes it over at once (attempt 1 did not finish).
    status, body = function.deliver(headers(T2, "forbid"), b"{}")
    assert (status, body["outcome"]) == (200, "completed")
    done = store.get(key(T2).run_id)
    assert done is not None and done.record.attempts == 2


# -- 3. a latest-run write of unknown outcome: the give-back is retried -----------------

def test_an_unknown_take_is_given_back_through_a_stall_leaving_no_phantom_claim(
    function: InProcessFunction, store: FirestoreRunStore, ledger: Path,
    monkeypatch: pytest.MonkeyPatch
) -> None:
    put, delete = FirestoreLatestRunStore.put, FirestoreRunStore.delete
    deletes: list[str] = []

    def lost_put(self: FirestoreLatestRunStore, job_doc: str, latest: LatestRun,
                 if_version: datetime | None) -> datetime:
        put(self, job_doc, latest, if_version)  # it lands; the reply is lost
        raise StoreUnavailable("injected: the latest run's reply was lost")

    def stalled_delete(self: FirestoreRunStore, run_id: str, if_version: datetime) -> None:
        deletes.append(run_id)
        if len(deletes) <= 2:
            raise StoreUnavailable("injected: the store stalls")
        delete(self, run_id, if_version)

    monkeypatch.setattr(FirestoreLatestRunStore, "put", lost_put)
    monkeypatch.setattr(FirestoreRunStore, "delete", stalled_delete)
    status, body = function.deliver(headers(T1, "forbid"), b"{}")
    assert (status, body["outcome"]) == (500, "store_unavailable")
    assert len(deletes) == 3 and store.get(key(T1).run_id) is None
    monkeypatch.setattr(FirestoreLatestRunStore, "put", put)
    # The job's document names T1, which is not live: the next run is not skipped.
    assert function.deliver(headers(T2, "forbid"), b"{}")[1]["outcome"] == "completed"
    assert function.deliver(headers(T1, "forbid"), b"{}")[1]["outcome"] == "completed"
    assert len(read_ledger(str(ledger))) == 2


# -- 4. forbid keeps a run's own failure evidence ---------------------------------------

def test_forbid_does_not_skip_a_run_that_failed_it_waits_and_keeps_its_record(
    function: InProcessFunction, pool: ThreadPoolExecutor, ledger: Path,
    store: FirestoreRunStore
) -> None:
    assert function.deliver(headers(T2, "forbid"),
                            json.dumps({"fail": True}).encode())[1]["outcome"] == "failed"
    before = store.get(key(T2).run_id)
    assert before is not None
    live = running(function, pool, ledger, headers(T3, "forbid"))
    status, body = function.deliver(headers(T2, "forbid"), b"{}")
    assert (status, body["outcome"]) == (409, "in_progress")
    after = store.get(key(T2).run_id)
    assert after is not None and after.record == before.record
    assert classify_run(WATCHED, T2, after, T2 + timedelta(hours=1), 60, OLD) == FAILED
    assert live.finish()[1]["outcome"] == "completed"
    status, body = function.deliver(headers(T2, "forbid"), b"{}")
    assert (status, body["outcome"]) == (200, "completed")
    done = store.get(key(T2).run_id)
    assert done is not None and done.record.attempts == 2


# -- 5. a new life past expiry does not inherit blocked_by / replaced_by ----------------

@pytest.mark.parametrize("status", [RunStatus.SKIPPED, RunStatus.FAILED])
def test_a_new_life_past_expiry_clears_blocked_by_and_replaced_by(
    function: InProcessFunction, store: FirestoreRunStore, status: RunStatus
) -> None:
    now = datetime.now(UTC)
    old = replace(RunRecord.claim(key(T1), "old", 1, 60, now - timedelta(seconds=1), now),
                  status=status, blocked_by="run-a", replaced_by="run-b")
    store.create(key(T1).run_id, old)
    status_code, body = function.deliver(scheduler_headers(JOB, z(T1)), b"{}")
    assert (status_code, body["outcome"]) == (200, "completed")
    stored = store.get(key(T1).run_id)
    assert stored is not None and stored.record.status is RunStatus.COMPLETED
    assert (stored.record.blocked_by, stored.record.replaced_by) == (None, None)
    assert classify_run(WATCHED, T1, stored, T1 + timedelta(hours=1), 60, OLD) == FINE


def test_a_replaced_run_keeps_replaced_by_when_it_ends(
    collection_name: str, ledger: Path, pool: ThreadPoolExecutor
) -> None:
    function = in_process_function(collection_name, default_job="local_stack.interval_job:run",
                                   lease_seconds=3)
    first = pool.submit(function.deliver, headers(T1, "replace"),
                        json.dumps({"sleep": 120}).encode())
    wait_until(lambda: executions(str(ledger)), what="T1's job to start")
    assert until_200(function, headers(T2, "replace"))[-1] == (200, "completed")
    assert first.result()[1]["outcome"] == "failed"
    stored = FirestoreRunStore(function.client, collection_name, 5).get(key(T1).run_id)
    assert stored is not None and stored.record.replaced_by == key(T2).run_id


# -- config ----------------------------------------------------------------------------

@pytest.mark.parametrize("where", ["job", "stack"])
def test_replace_with_more_than_one_backfill_in_flight_is_refused(where: str) -> None:
    raw = base_config()
    change: Callable[[Any], None] = (
        set_job("overlap", "replace") if where == "job"
        else set_key("scheduler-dedup:overlap", "replace"))
    change(raw)
    set_key("scheduler-dedup:watchdog", {"backfillInFlight": 2})(raw)
    with pytest.raises(ConfigError) as caught:
        load_config(raw)
    message = str(caught.value)
    assert ("scheduler-dedup:jobs[0].overlap" if where == "job"
            else "scheduler-dedup:overlap") in message
    assert "watchdog.backfillInFlight" in message
    set_key("scheduler-dedup:watchdog", {"backfillInFlight": 1})(raw)
    assert load_config(raw).jobs[0].overlap == "replace"


# -- 6. replace: which run is newer ----------------------------------------------------

def test_replace_orders_runs_by_business_instant_and_a_forced_run_before_its_time() -> None:
    # A forced run carries the job's next schedule time and was pressed before it came:
    # newer than every earlier run, older than the scheduled run of that time.
    assert run_order(T1, False, None) < run_order(T2, True, None) < run_order(T2, False, None)
    # Europe/Berlin skips 02:00-03:00 on 2026-03-29: under dstSkipped shift, 02:00 and
    # 02:30 are both due at the change (01:00 UTC); their local times order them.
    berlin = business_schedule("0,30 1,2 * * *", "Europe/Berlin", None, "shift")
    at = [datetime(2026, 3, 29, h, m, tzinfo=UTC) for h, m in ((0, 30), (1, 0), (1, 30))]
    orders = [run_order(t, False, berlin) for t in at]
    assert orders[1][0] == orders[2][0] == at[1]  # both due at the change
    assert orders == sorted(orders) and len(set(orders)) == 3
