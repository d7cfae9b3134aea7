"""Forced runs ("Run now", `gcloud scheduler jobs run`): Scheduler delivers them with the
job's *next* schedule time, so the function keys them apart from that scheduled run.
RunKey's identity is pinned; deliveries go through the handler in-process against the real
Firestore emulator; the watchdog never counts a forced record as a scheduled run."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from google.cloud import firestore

from dedup.keys import RunKey, format_instant, is_forced_run
from dedup.outcomes import Outcome
from dedup.run_context import RunContext
from dedup.settings import Settings
from local_stack.deliveries import (
    LOCATION,
    PROJECT,
    in_process_function,
    scheduler_headers,
)
from local_stack.steered_job import read_ledger
from tests.function.test_watchdog import TEN_MINUTES, Runs, Watch, at, problems

pytestmark = pytest.mark.usefixtures("firestore_emulator")

JOB = "nightly-export"
# The run_id of (PROJECT, LOCATION, JOB, 2026-10-16T12:00:00Z) as computed before forced
# runs existed: every record written since must keep its ID.
KNOWN_SCHEDULED_RUN_ID = "e00248cd737c46d5e7b22f2e8d4c22de329a416cd189936e7128eb87a17c03a0"


def document(collection: str, run_id: str) -> dict[str, Any] | None:
    snapshot: Any = firestore.Client(project=PROJECT).collection(collection).document(
        run_id).get()
    return snapshot.to_dict() if snapshot.exists else None


# -- identity -------------------------------------------------------------------------------

def test_a_scheduled_run_keeps_its_run_id_and_a_forced_run_gets_its_own() -> None:
    scheduled = RunKey(PROJECT, LOCATION, JOB, datetime(2026, 10, 16, 12, 0, tzinfo=UTC))
    assert scheduled.run_id == KNOWN_SCHEDULED_RUN_ID
    forced = replace(scheduled, forced=True)
    assert forced.run_id != KNOWN_SCHEDULED_RUN_ID
    assert len(forced.run_id) == 64 and int(forced.run_id, 16) >= 0
    # Deterministic, and still one ID per schedule time.
    assert forced.run_id == RunKey(PROJECT, LOCATION, JOB, scheduled.schedule_time, True).run_id
    later = replace(forced, schedule_time=scheduled.schedule_time + timedelta(minutes=1))
    assert later.run_id != forced.run_id
    assert (scheduled.trigger, forced.trigger) == ("scheduled", "forced")


def test_only_a_schedule_time_beyond_the_margin_is_a_forced_run() -> None:
    now = datetime(2026, 10, 16, 12, 0, tzinfo=UTC)
    margin = 10.0
    assert not is_forced_run(now - timedelta(hours=1), now, margin)  # a late delivery
    assert not is_forced_run(now, now, margin)
    assert not is_forced_run(now + timedelta(seconds=margin), now, margin)  # skew allowance
    assert is_forced_run(now + timedelta(seconds=margin, microseconds=1), now, margin)
    assert is_forced_run(now + timedelta(hours=20), now, margin)
    assert is_forced_run(now + timedelta(microseconds=1), now, 0)
    assert not is_forced_run(now, now, 0)


def test_the_margin_setting_defaults_to_ten_seconds_and_takes_zero() -> None:
    base = {"DEDUP_PROJECT": PROJECT, "DEDUP_LOCATION": LOCATION}
    assert Settings.from_env(base).forced_run_margin_seconds == 10
    assert Settings.from_env(
        {**base, "DEDUP_FORCED_RUN_MARGIN_SECONDS": "0"}).forced_run_margin_seconds == 0
    assert Settings.from_env(
        {**base, "DEDUP_FORCED_RUN_MARGIN_SECONDS": "2.5"}).forced_run_margin_seconds == 2.5


# -- through the handler ----------------------------------------------------------------------

def test_a_forced_run_executes_once_and_the_scheduled_run_of_its_time_still_executes(
    collection_name: str, ledger: Path
) -> None:
    next_tick = (datetime.now(UTC) + timedelta(hours=1)).replace(microsecond=0)
    headers = scheduler_headers(schedule_time=format_instant(next_tick))
    forced_id = RunKey(PROJECT, LOCATION, JOB, next_tick, forced=True).run_id
    scheduled_id = RunKey(PROJECT, LOCATION, JOB, next_tick).run_id

    function = in_process_function(collection_name)
    status, body = function.deliver(headers, b'{"result": "run now"}')
    assert (status, body["outcome"], body["trigger"], body["run_id"]) == (
        200, "completed", "forced", forced_id)
    # A second press before the same tick, or a retry: the same forced run, not run again.
    status, again = function.deliver(headers, b'{"result": "pressed again"}')
    assert (status, again) == (200, {
        "outcome": "duplicate", "run_id": forced_id, "trigger": "forced",
        "result": {"echo": "run now", "claim_lost": False},
    })
    stored = document(collection_name, forced_id)
    assert stored is not None
    assert (stored["status"], stored["forced"], stored["job"]) == ("completed", True, JOB)
    assert document(collection_name, scheduled_id) is None  # the scheduled run is untouched

    lines = [e for e in function.logs if e.get("run_id") == forced_id]
    assert [(e["outcome"], e["trigger"]) for e in lines] == [
        ("completed", "forced"), ("duplicate", "forced")]
    assert lines[0]["message"].endswith("completed (forced run)")
    assert lines[0]["schedule_time"] == format_instant(next_tick)

    # At its time the scheduled delivery (same headers) executes under the scheduled ID. An
    # instance whose margin covers the hour stands in for waiting an hour (the served test
    # waits for real).
    on_time = in_process_function(collection_name, forced_run_margin_seconds=7200)
    status, body = on_time.deliver(headers, b'{"result": "scheduled"}')
    assert (status, body["outcome"], body["trigger"], body["run_id"]) == (
        200, "completed", "scheduled", scheduled_id)
    status, body = on_time.deliver(headers, b"")
    assert (status, body["outcome"], body["run_id"]) == (200, "duplicate", scheduled_id)
    scheduled = document(collection_name, scheduled_id)
    assert scheduled is not None and "forced" not in scheduled  # as before forced runs

    executions = [(e["run_id"], e["forced"], e["schedule_time"]) for e in read_ledger(str(ledger))]
    assert executions == [
        (forced_id, True, next_tick.isoformat()), (scheduled_id, False, next_tick.isoformat())]


@pytest.mark.parametrize("ahead_seconds", [-3600.0, -1.0, 0.0, 5.0, 10.0])
def test_a_delivery_on_time_is_never_taken_for_a_forced_run(
    collection_name: str, ledger: Path, ahead_seconds: float
) -> None:
    """Late, on time, or up to the margin (10 s) early by this instance's clock."""
    when = datetime.now(UTC) + timedelta(seconds=ahead_seconds)
    function = in_process_function(collection_name)
    status, body = function.deliver(scheduler_headers(schedule_time=format_instant(when)))
    key = RunKey(PROJECT, LOCATION, JOB, when)
    assert (status, body["outcome"], body["trigger"], body["run_id"]) == (
        200, "completed", "scheduled", key.run_id)
    [execution] = read_ledger(str(ledger))
    assert execution["forced"] is False
    stored = document(collection_name, key.run_id)
    assert stored is not None and "forced" not in stored


def test_a_forced_run_is_told_to_the_job_and_a_failed_one_is_retried_under_its_own_key(
    collection_name: str, ledger: Path
) -> None:
    next_tick = (datetime.now(UTC) + timedelta(minutes=30)).replace(microsecond=0)
    headers = scheduler_headers(schedule_time=format_instant(next_tick))
    function = in_process_function(collection_name)
    status, body = function.deliver(headers, b'{"fail": true}')
    assert (status, body["outcome"], body["trigger"]) == (500, "failed", "forced")
    status, body = function.deliver(headers, b'{"result": "retried"}')
    assert (status, body["outcome"], body["trigger"]) == (200, "completed", "forced")
    forced_id = RunKey(PROJECT, LOCATION, JOB, next_tick, forced=True).run_id
    assert [(e["run_id"], e["attempt"], e["forced"]) for e in read_ledger(str(ledger))] == [
        (forced_id, 1, True), (forced_id, 2, True)]
    stored = document(collection_name, forced_id)
    assert stored is not None and (stored["status"], stored["forced"]) == ("completed", True)


def test_a_forced_runs_retry_after_its_time_is_the_scheduled_delivery_of_that_time(
    collection_name: str, ledger: Path
) -> None:
    """Headers cannot tell them apart: the late retry runs the scheduled run, Scheduler's
    own delivery of that time is its duplicate, and the forced record stays failed."""
    next_tick = (datetime.now(UTC) + timedelta(minutes=30)).replace(microsecond=0)
    headers = scheduler_headers(schedule_time=format_instant(next_tick))
    forced_id = RunKey(PROJECT, LOCATION, JOB, next_tick, forced=True).run_id
    scheduled_id = RunKey(PROJECT, LOCATION, JOB, next_tick).run_id
    status, body = in_process_function(collection_name).deliver(headers, b'{"fail": true}')
    assert (status, body["trigger"], body["run_id"]) == (500, "forced", forced_id)

    # Past the tick (an instance whose margin covers the 30 minutes stands in for waiting).
    later = in_process_function(collection_name, forced_run_margin_seconds=3600)
    status, body = later.deliver(headers, b'{"result": "late retry"}')
    assert (status, body["outcome"], body["trigger"], body["run_id"]) == (
        200, "completed", "scheduled", scheduled_id)
    status, body = later.deliver(headers, b'{"result": "the tick"}')
    assert (status, body["outcome"], body["run_id"]) == (200, "duplicate", scheduled_id)
    assert body["result"]["echo"] == "late retry"

    forced = document(collection_name, forced_id)
    assert forced is not None and (forced["status"], forced["forced"]) == ("failed", True)
    assert [(e["run_id"], e["forced"]) for e in read_ledger(str(ledger))] == [
        (forced_id, True), (scheduled_id, False)]


# -- the watchdog ------------------------------------------------------------------------------

def _forced_completed(runs: Runs, job: str, t: datetime) -> None:
    """A forced run of schedule time `t`, recorded by the real protocol."""
    delivery = runs._dedup(t).run(RunKey(PROJECT, LOCATION, job, t, forced=True), _ok, b"", {})
    assert delivery.outcome is Outcome.COMPLETED


def _ok(context: RunContext) -> str:
    assert context.forced
    return "ok"


def test_the_watchdog_never_counts_a_forced_record_as_the_scheduled_run(
    collection_name: str,
) -> None:
    runs = Runs(collection_name)
    job = TEN_MINUTES.name
    runs.completed(job, at(10, 0), at(10, 10))
    # 10:20 was only run by hand ("Run now" before that tick): the scheduled run is missed.
    _forced_completed(runs, job, at(10, 20))
    runs.completed(job, at(10, 30), at(10, 40), at(10, 50), at(11, 0), at(11, 10), at(11, 20),
                   at(11, 30), at(11, 40))
    # A job only ever run by hand has never run on its schedule: the forced records are
    # not its first run.
    by_hand = replace(TEN_MINUTES, name="by-hand")
    for t in (at(10, 0), at(11, 0), at(12, 0)):
        _forced_completed(runs, by_hand.name, t)

    watch = Watch(collection_name, [TEN_MINUTES, by_hand])
    status, body = watch.tick(at(12, 0))
    assert (status, problems(body)) == (200, [("missed", job, "2026-10-16T10:20:00Z")])
    # A run scheduled since the watchdog began watching is due: by-hand never ran.
    runs.completed(job, at(11, 50), at(12, 0))
    status, body = watch.tick(at(12, 20))
    assert (status, problems(body)) == (200, [("never_ran", "by-hand", None)])


def test_the_watchdog_shows_forced_runs_kept_apart_and_those_that_replaced_a_run(
    collection_name: str,
) -> None:
    runs = Runs(collection_name)
    job = TEN_MINUTES.name
    runs.completed(job, at(10, 0), at(10, 30))
    # "Run now" before 10:10, kept apart, and the 10:10 run itself missed: shown next to it.
    _forced_completed(runs, job, at(10, 10))
    # forcedRuns replaceNext: "Run now" before 10:20 ran the 10:20 run itself.
    delivery = runs._dedup(at(10, 20)).run(
        RunKey(PROJECT, LOCATION, job, at(10, 20), early=True), lambda _: "ok", b"", {})
    assert delivery.outcome is Outcome.COMPLETED
    watch = Watch(collection_name, [TEN_MINUTES])
    status, body = watch.tick(at(10, 50))
    assert (status, problems(body)) == (200, [("missed", job, "2026-10-16T10:10:00Z")])
    assert [(f["schedule_time"], f["status"], f["replaced_scheduled_run"])
            for f in body["forced"]] == [
        ("2026-10-16T10:10:00Z", "completed", False), ("2026-10-16T10:20:00Z", "completed", True)]
    assert watch.summary()["forced"] == 2
    lines = [e for e in watch.logs if e.get("kind") == "forced"]
    assert [e["message"].split(": ")[0] for e in lines] == [
        "watchdog forced run (kept apart)", "watchdog forced run (replaced the scheduled run)"]


# -- forcedRuns: the job's choice ---------------------------------------------------------------

def _choice(headers: dict[str, str], forced_runs: str) -> dict[str, str]:
    return {**headers, "X-Dedup-Forced-Runs": forced_runs}


def test_replace_next_runs_the_upcoming_scheduled_run_now_and_its_delivery_is_a_duplicate(
    collection_name: str, ledger: Path
) -> None:
    next_tick = (datetime.now(UTC) + timedelta(hours=1)).replace(microsecond=0)
    headers = _choice(scheduler_headers(schedule_time=format_instant(next_tick)), "replaceNext")
    scheduled_id = RunKey(PROJECT, LOCATION, JOB, next_tick).run_id
    status, body = in_process_function(collection_name).deliver(headers, b'{"result": "now"}')
    assert (status, body["outcome"], body["trigger"], body["run_id"]) == (
        200, "completed", "forced", scheduled_id)
    stored = document(collection_name, scheduled_id)
    assert stored is not None and (stored["status"], stored["forced"]) == ("completed", True)
    # Its scheduled delivery, at its time: the same run, already done.
    on_time = in_process_function(collection_name, forced_run_margin_seconds=7200)
    status, body = on_time.deliver(headers, b'{"result": "scheduled"}')
    assert (status, body["outcome"], body["run_id"]) == (200, "duplicate", scheduled_id)
    assert [(e["run_id"], e["forced"]) for e in read_ledger(str(ledger))] == [
        (scheduled_id, False)]


def test_refuse_answers_a_forced_run_400_and_runs_nothing_but_the_scheduled_run_runs(
    collection_name: str, ledger: Path
) -> None:
    next_tick = (datetime.now(UTC) + timedelta(hours=1)).replace(microsecond=0)
    headers = _choice(scheduler_headers(schedule_time=format_instant(next_tick)), "refuse")
    function = in_process_function(collection_name)
    status, body = function.deliver(headers)
    assert status == 400 and "forcedRuns: refuse" in body["error"]
    assert document(collection_name, RunKey(PROJECT, LOCATION, JOB, next_tick, True).run_id) \
        is None
    assert read_ledger(str(ledger)) == []
    on_time = in_process_function(collection_name, forced_run_margin_seconds=7200)
    status, body = on_time.deliver(headers)
    assert (status, body["outcome"], body["trigger"]) == (200, "completed", "scheduled")
