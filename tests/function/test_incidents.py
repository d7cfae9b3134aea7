"""Alerts that page once per problem: incident streaks on synthetic run histories, against
the real Firestore emulator (where the streaks are stored, in the watchdog's cursors), with
retried and overlapping ticks; and `ran_twice` from records the real protocol wrote."""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

import pytest
from google.cloud import firestore

from dedup.cache import CompletedRunCache
from dedup.claim import Claim
from dedup.keys import RunKey
from dedup.outcomes import Delivery, Outcome
from dedup.protocol import Deduplicator
from dedup.run_context import RunContext
from dedup.settings import SettingsError
from dedup.store import MalformedRun, StoredRun, StoreUnavailable
from dedup.store.firestore import FirestoreRunStore
from dedup.watchdog.cursors import Cursor, CursorMoved, WatchStore
from dedup.watchdog.due import WatchedJob
from dedup.watchdog.incidents import (
    FAILING,
    OPENED,
    RAN_TWICE,
    RESOLVED,
    Observation,
    Streak,
    Thresholds,
    advance,
    incident_id,
)
from dedup.watchdog.outbox import FOLDED, MAX_PROBLEM_LINES
from dedup.watchdog.settings import parse_watch_jobs
from dedup.watchdog.tick import build_watchdog_handler
from local_stack.deliveries import LOCATION, PROJECT
from local_stack.processes import FirestoreEmulator
from local_stack.store_faults import StoreFaultProxy
from tests.function.faulty_store import CursorCommitFaults, FaultyStore
from tests.function.test_watchdog import TEN_MINUTES, Runs, Watch, at
from tests.waiting import wait_until

pytestmark = pytest.mark.usefixtures("firestore_emulator")

JOB = TEN_MINUTES.name
OK, FAIL, MISS = "ok", "failed", "missed"
# Thresholds 3 and 2: a streak of two failures opens nothing; the third in a row opens one
# incident; one good run between failures does not close it, two do.
HISTORY = {
    at(10, 0): OK,
    at(10, 10): FAIL,
    at(10, 20): MISS,
    at(10, 30): OK,  # two bad runs, then a good one: under the threshold, nothing opens
    at(10, 40): FAIL,
    at(10, 50): MISS,
    at(11, 0): FAIL,  # the third bad run in a row: opened (began 10:40)
    at(11, 10): MISS,  # the same streak: no second notification
    at(11, 20): OK,
    at(11, 30): FAIL,  # recovery interrupted after one good run
    at(11, 40): OK,
    at(11, 50): OK,  # two good runs in a row: resolved
    at(12, 0): OK,
}


def write_history(runs: Runs, history: Mapping[datetime, str]) -> None:
    for t, verdict in history.items():
        if verdict == OK:
            runs.completed(JOB, t)
        elif verdict == FAIL:
            runs.failed(JOB, t, retries=2)


def incident_lines(watch: Watch) -> list[Mapping[str, Any]]:
    return [e for e in watch.logs if "event" in e]


def summary_of(line: Mapping[str, Any]) -> tuple[str, str, str, int]:
    return (line["event"], line["incident_kind"], line["schedule_time"], line["runs"])


def z(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def cursor_document(cursors: Any, job: str) -> dict[str, Any]:
    """The job's cursor document as stored (the sync client's stubs admit async types)."""
    snapshot: Any = cursors.document(job).get()
    return dict(snapshot.to_dict() or {})


EXPECTED = [
    (OPENED, FAILING, z(at(11, 0)), 3),
    (RESOLVED, FAILING, z(at(11, 50)), 2),
]


def job_with(failure: int, recovery: int) -> WatchedJob:
    return replace(TEN_MINUTES, thresholds=Thresholds(failure, recovery))


# -- the streak itself ---------------------------------------------------------------------

def test_a_streak_opens_at_its_threshold_and_resolves_after_its_recovery() -> None:
    limits = Thresholds(3, 2)
    seen = [Observation(t, v != OK, problem=None if v == OK else v) for t, v in HISTORY.items()]
    streak, made = advance(JOB, FAILING, Streak(), seen, limits, at(12, 30))
    assert [(t.event, z(t.last) if t.last else None, t.runs) for t in made] == [
        (OPENED, z(at(11, 0)), 3), (RESOLVED, z(at(11, 50)), 2),
    ]
    opened, resolved = made
    assert opened.incident == resolved.incident == incident_id(JOB, FAILING, at(10, 40))
    assert (opened.began, opened.problem, opened.threshold) == (at(10, 40), FAIL, 3)
    assert streak == Streak(good=2 + 0 + 1)  # closed; 11:40, 11:50, 12:00 good in a row
    # Fed one run at a time (a tick per run), the same transitions.
    one_by_one: list[str] = []
    streak = Streak()
    for observation in seen:
        streak, step = advance(JOB, FAILING, streak, [observation], limits, at(12, 30))
        one_by_one += [t.event for t in step]
    assert one_by_one == [OPENED, RESOLVED]


def test_threshold_one_pages_every_streak_and_never_twice_within_one() -> None:
    bad = [Observation(at(10, m), True, problem=FAIL) for m in (0, 10, 20)]
    good = [Observation(at(10, m), False) for m in (30,)]
    again = [Observation(at(10, m), True, problem=MISS) for m in (40, 50)]
    _, made = advance(JOB, FAILING, Streak(), [*bad, *good, *again], Thresholds(), at(11, 0))
    assert [(t.event, t.last) for t in made] == [
        (OPENED, at(10, 0)), (RESOLVED, at(10, 30)), (OPENED, at(10, 40)),
    ]
    assert made[0].incident != made[2].incident  # a new streak is a new incident


def test_an_observation_that_opens_at_once_ignores_the_threshold() -> None:
    _, made = advance(JOB, FAILING, Streak(),
                      [Observation(None, True, problem="never_ran", opens=True)],
                      Thresholds(5, 1), at(11, 0))
    assert [t.event for t in made] == [OPENED]


@pytest.mark.parametrize("failure, recovery", [(0, 1), (1, 0), (1001, 1), (True, 1), (1.5, 1)])
def test_thresholds_out_of_range_are_refused(failure: Any, recovery: Any) -> None:
    with pytest.raises(ValueError, match="threshold"):
        Thresholds(failure, recovery)


def test_the_job_table_carries_the_thresholds_and_refuses_bad_ones() -> None:
    [job] = parse_watch_jobs('[{"name": "a", "schedule": "* * * * *", '
                             '"failureThreshold": 3, "recoveryThreshold": 2}]')
    assert job.thresholds == Thresholds(3, 2)
    [default] = parse_watch_jobs('[{"name": "a", "schedule": "* * * * *"}]')
    assert default.thresholds == Thresholds(1, 1)
    with pytest.raises(SettingsError, match=r"\[0\].*failure threshold 0"):
        parse_watch_jobs('[{"name": "a", "schedule": "* * * * *", "failureThreshold": 0}]')


# -- synthetic run histories, through the watchdog and its stored streaks -------------------

def test_one_tick_over_a_history_pages_once_per_streak(collection_name: str) -> None:
    write_history(Runs(collection_name), HISTORY)
    watch = Watch(collection_name, [job_with(3, 2)])
    status, body = watch.tick(at(12, 20))  # 12:00's verdict is due at 12:15
    assert status == 200
    assert [summary_of(line) for line in incident_lines(watch)] == EXPECTED
    # Each problem is still a line of its own (for the logs and the dashboard).
    assert sum(1 for p in body["problems"] if p["kind"] in (FAIL, MISS)) == 7
    opened, resolved = incident_lines(watch)
    assert (opened["severity"], resolved["severity"]) == ("ERROR", "NOTICE")
    assert "kind" not in opened  # never counted as a problem line
    assert opened["began"] == z(at(10, 40)) and opened["problem"] == FAIL
    summary = watch.summary()
    assert (summary["incidents_opened"], summary["incidents_resolved"]) == (1, 1)
    # Nothing new: nothing logged again.
    watch.tick(at(12, 30))
    assert incident_lines(watch) == []


def test_a_tick_every_ten_minutes_keeps_the_streak_in_the_watchdogs_database(
    collection_name: str,
) -> None:
    write_history(Runs(collection_name), HISTORY)
    watch = Watch(collection_name, [job_with(3, 2)])
    seen: list[tuple[str, str, str, int]] = []
    cursors = firestore.Client(project=PROJECT).collection(f"{collection_name}_watchdog")
    for minutes in range(20, 141, 10):  # 10:20 .. 12:20
        watch.tick(at(10, 0) + timedelta(minutes=minutes))
        seen += [summary_of(line) for line in incident_lines(watch)]
        if watch.now == at(11, 20):  # 11:00 judged, 11:10 not yet: the incident is open
            stored = cursor_document(cursors, JOB)
            assert stored["incidents"][FAILING]["open"] is True
            assert stored["incidents"][FAILING]["bad"] == 3
    assert seen == EXPECTED
    stored = cursor_document(cursors, JOB)
    assert stored["incidents"][FAILING]["open"] is False


def test_never_ran_opens_at_once_and_its_first_run_resolves_it(collection_name: str) -> None:
    watch = Watch(collection_name, [job_with(5, 1)])
    watch.tick(at(12, 0))  # watching starts now
    watch.tick(at(12, 40))  # 12:10's and 12:20's verdicts are due: no record at all
    assert [(e["event"], e["problem"]) for e in incident_lines(watch)] == [(OPENED, "never_ran")]
    Runs(collection_name).completed(JOB, at(12, 30))
    watch.tick(at(12, 50))
    assert [e["event"] for e in incident_lines(watch)] == [RESOLVED]


# -- retried and overlapping ticks ----------------------------------------------------------

def test_a_tick_that_fails_after_logging_repeats_the_same_incident_once(
    collection_name: str,
) -> None:
    """The transition is logged only once the cursor holding it was written (its outbox,
    dedup/watchdog/outbox.py): a tick whose cursor write failed answers 500 and logs no
    incident (none is open anywhere: a page for it could never be resolved); its retry
    opens it, once; the tick after logs nothing."""
    write_history(Runs(collection_name), HISTORY)
    watch = Watch(collection_name, [job_with(3, 2)])
    handler = watch.handler()
    store = handler._watchdog._store  # the FirestoreWatchStore
    real_put = store.put_cursors

    def failing_put(cursors: Mapping[str, Cursor], now: datetime) -> dict[str, datetime]:
        raise StoreUnavailable("cursor write lost")

    store.put_cursors = failing_put  # type: ignore[method-assign]
    watch.now = at(11, 20)
    assert handler.handle({}, b"").status == 500
    assert incident_lines(watch) == []
    store.put_cursors = real_put  # type: ignore[method-assign]
    watch.logs.clear()
    assert handler.handle({}, b"").status == 200
    assert [summary_of(e) for e in incident_lines(watch)] == [EXPECTED[0]]
    watch.logs.clear()
    assert handler.handle({}, b"").status == 200
    assert incident_lines(watch) == []


def test_a_cursor_changed_by_another_write_is_cursor_moved(collection_name: str) -> None:
    """A guarded cursor write that meets another write's document raises CursorMoved (a
    write that meets its own, landed, is recognised: the next test)."""
    watch = Watch(collection_name, [TEN_MINUTES])
    watch.tick(at(11, 0))
    store = watch.handler()._watchdog._store
    [(job, cursor)] = store.get_cursors([JOB]).items()
    store.put_cursors({job: cursor}, at(11, 10))  # lands: the document has moved on
    with pytest.raises(CursorMoved, match="changed since this tick read it"):
        store.put_cursors({job: cursor}, at(11, 20))  # still guarded by the old version
    fresh = Cursor()  # one that thinks there is no document yet
    with pytest.raises(CursorMoved):
        store.put_cursors({job: fresh}, at(11, 30))


def test_a_cursor_reply_dropped_by_the_store_opens_the_incident_once(
    collection_name: str, firestore_emulator: FirestoreEmulator,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Through the store-fault proxy (local_stack.store_faults): the store's replies are
    held and dropped while the tick commits its cursor, so the commit lands and the tick
    is told it failed (or its client's retry meets its own write). However the tick ends,
    the incident is opened once: its retry judges from the cursor that landed."""
    write_history(Runs(collection_name), HISTORY)
    watch = Watch(collection_name, [job_with(3, 2)])
    watch.tick(at(11, 0))  # the cursor exists before the fault
    with StoreFaultProxy(firestore_emulator.host) as proxy:
        monkeypatch.setenv("FIRESTORE_EMULATOR_HOST", proxy.host)
        handler = build_watchdog_handler(
            watch.settings(), firestore.Client(project=PROJECT), watch.logs.append,
            wall_clock=lambda: watch.now)
        store = handler._watchdog._store
        real_put = store.put_cursors

        def dropped_reply(cursors: Mapping[str, Cursor], now: datetime) -> dict[str, datetime]:
            proxy.stall(2, drop=True)  # from now on: the commit lands, its reply is lost
            return real_put(cursors, now)

        store.put_cursors = dropped_reply  # type: ignore[method-assign]
        watch.logs.clear()
        watch.now = at(11, 20)
        statuses = [handler.handle({}, b"").status]
        proxy.heal()
        store.put_cursors = real_put  # type: ignore[method-assign]
        statuses.append(handler.handle({}, b"").status)  # Scheduler's retry, or the next
    monkeypatch.setenv("FIRESTORE_EMULATOR_HOST", firestore_emulator.host)
    assert statuses[-1] == 200
    opened = [summary_of(e) for e in incident_lines(watch)]
    assert opened == [EXPECTED[0]], statuses
    # Its own write, recognised (its written_by mark): not taken for another tick's.
    assert not any(e.get("outcome") == "overlapped" for e in watch.logs)
    stored = cursor_document(
        firestore.Client(project=PROJECT).collection(f"{collection_name}_watchdog"), JOB)
    assert stored["incidents"][FAILING]["open"] is True


@dataclass
class HeldAfterRead:
    """A WatchStore that holds its tick between reading the cursors and writing them,
    until `release` is set: the tick overlaps whatever runs meanwhile."""

    inner: WatchStore
    read: threading.Event
    release: threading.Event

    def get_many(self, run_ids: Sequence[str], database: str | None = None
                 ) -> Mapping[str, StoredRun | MalformedRun]:
        return self.inner.get_many(run_ids, database)

    def get_cursors(self, jobs: Sequence[str]) -> dict[str, Cursor]:
        found = self.inner.get_cursors(jobs)
        self.read.set()
        return found

    def put_cursors(self, cursors: Mapping[str, Cursor], now: datetime) -> dict[str, datetime]:
        assert self.release.wait(60)
        return self.inner.put_cursors(cursors, now)

    def clear_outboxes(self, versions: Mapping[str, datetime]) -> None:
        self.inner.clear_outboxes(versions)


def test_overlapping_ticks_open_one_incident_and_the_late_one_writes_nothing(
    collection_name: str,
) -> None:
    """Two ticks at once (a Scheduler retry next to a slow tick), on two handlers and two
    clients against the emulator: both judge the same streak; the one that writes second
    finds its cursor moved (guarded write) and writes nothing, so it cannot roll the
    other's cursor back (and re-count its runs later), and logs nothing of it (the other
    tick committed and logged the same incident); it says so and answers 200 (nothing is
    left undone: the other tick judged the same runs)."""
    write_history(Runs(collection_name), HISTORY)
    slow, fast = Watch(collection_name, [job_with(3, 2)]), Watch(collection_name,
                                                                [job_with(3, 2)])
    slow.now = fast.now = at(11, 20)
    slow_handler = slow.handler()
    read, release = threading.Event(), threading.Event()
    slow_handler._watchdog._store = HeldAfterRead(slow_handler._watchdog._store, read, release)
    replies: list[int] = []
    thread = threading.Thread(target=lambda: replies.append(slow_handler.handle({}, b"").status))
    thread.start()
    assert read.wait(60)
    assert fast.handler().handle({}, b"").status == 200  # runs entirely inside the slow one
    fast_lines = incident_lines(fast)
    fast.now = at(11, 30)  # and a later tick too, which judges 11:10 (missed)
    assert fast.handler().handle({}, b"").status == 200
    release.set()
    thread.join(60)
    assert replies == [200]
    [overlapped] = [e for e in slow.logs if e.get("outcome") == "overlapped"]
    assert overlapped["severity"] == "WARNING"
    assert "changed since this tick read it" in overlapped["message"]
    assert [summary_of(e) for e in fast_lines] == [EXPECTED[0]]
    assert incident_lines(slow) == []
    assert {e["incident"] for e in fast_lines} == {
        incident_id(JOB, FAILING, at(10, 40))}
    # The slow tick did not roll the later cursor back: the next tick goes on from 11:30's
    # (11:10 is not judged, nor counted, again).
    cursors = firestore.Client(project=PROJECT).collection(f"{collection_name}_watchdog")
    stored = cursor_document(cursors, JOB)
    assert stored["judged_through"] == at(11, 15)
    assert stored["incidents"][FAILING]["bad"] == 4
    _, body = fast.tick(at(11, 40))
    assert [p["schedule_time"] for p in body["problems"]] == []  # 11:20 was a good run
    assert incident_lines(fast) == []


# -- ran_twice -----------------------------------------------------------------------------

def _dedup(store: Any, lease_seconds: float) -> Deduplicator:
    return Deduplicator(store, lease_seconds=lease_seconds, retention_seconds=3650 * 86400,
                        cache=CompletedRunCache(0, 3600), settle_seconds=0.2)


def run_twice_via_unrecorded_completion(collection: str, t: datetime) -> list[str]:
    """A completed_unrecorded run delivered again, by the real protocol: the first
    attempt runs the job, then cannot record it (the store refuses every write for longer
    than its 2 s lease); a later delivery takes the lapsed claim over and runs it again."""
    client = firestore.Client(project=PROJECT)
    faulty = FaultyStore(FirestoreRunStore(client, collection, timeout_seconds=5))
    executions: list[str] = []

    def job(context: RunContext) -> str:
        executions.append(context.attempt_id)
        return "ok"

    key = RunKey(PROJECT, LOCATION, JOB, t)
    faulty.break_("replace")
    first = _dedup(faulty, 2).run(key, job, b"", {})
    assert first.outcome is Outcome.COMPLETED_UNRECORDED
    faulty.heal("replace")

    def delivered_again() -> Delivery | None:  # 409s until the lapsed lease lets it in
        again = _dedup(faulty, 2).run(key, job, b"", {})
        return None if again.outcome is Outcome.IN_PROGRESS else again

    again = wait_until(delivered_again, what="the late delivery to take the claim over",
                       poll=0.2)
    assert again.outcome is Outcome.COMPLETED
    return executions


def test_a_completed_unrecorded_run_delivered_again_is_ran_twice(collection_name: str) -> None:
    runs = Runs(collection_name)
    runs.completed(JOB, at(10, 0))
    assert len(run_twice_via_unrecorded_completion(collection_name, at(10, 10))) == 2
    stored = runs.store.get(RunKey(PROJECT, LOCATION, JOB, at(10, 10)).run_id)
    assert stored is not None and stored.record.unfinished_attempts == (1,)
    runs.failed(JOB, at(10, 20), retries=1)
    runs.completed(JOB, at(10, 20))  # failed, then retried: one execution that finished
    runs.completed(JOB, at(10, 30), at(10, 40))
    # A high failure threshold changes nothing: ran_twice always pages.
    watch = Watch(collection_name, [job_with(5, 2)])
    status, body = watch.tick(at(10, 50))
    assert status == 200
    [twice] = [p for p in body["problems"] if p["kind"] == RAN_TWICE]
    assert (twice["schedule_time"], twice["attempts"]) == (z(at(10, 10)), 2)
    assert "taking over attempt(s) 1" in twice["error"]
    [line] = [e for e in watch.logs if e.get("kind") == RAN_TWICE]
    assert line["severity"] == "ERROR"
    assert [summary_of(e) for e in incident_lines(watch)] == [
        (OPENED, RAN_TWICE, z(at(10, 10)), 1), (RESOLVED, RAN_TWICE, z(at(10, 30)), 2),
    ]


def test_a_run_taken_over_after_a_failure_is_not_ran_twice(collection_name: str) -> None:
    runs = Runs(collection_name)
    runs.failed(JOB, at(10, 0), retries=2)
    runs.completed(JOB, at(10, 0))
    stored = runs.store.get(RunKey(PROJECT, LOCATION, JOB, at(10, 0)).run_id)
    assert stored is not None and (stored.record.attempts, stored.record.unfinished_attempts) \
        == (3, ())
    watch = Watch(collection_name, [TEN_MINUTES])
    _, body = watch.tick(at(10, 20))
    assert body["problems"] == [] and incident_lines(watch) == []


def test_a_watched_run_that_finishes_after_a_takeover_is_ran_twice(
    collection_name: str,
) -> None:
    """Still in progress when first judged (watched), finished by a later attempt that
    took its claim over: judged ran_twice when the watchdog sees it finished."""
    runs = Runs(collection_name)
    runs.completed(JOB, at(10, 0))
    client = firestore.Client(project=PROJECT)
    store = FirestoreRunStore(client, collection_name, timeout_seconds=5)
    key = RunKey(PROJECT, LOCATION, JOB, at(10, 10))
    claim = _dedup(store, 1).claim(key)
    assert isinstance(claim, Claim)
    watch = Watch(collection_name, [TEN_MINUTES])
    _, body = watch.tick(at(10, 30))  # 10:10 is in progress: watched, not judged yet
    assert body["problems"] == []

    def taken_over() -> Delivery | None:  # 409s until the 1 s lease lapses
        taken = _dedup(store, 60).run(key, lambda c: "ok", b"", {})
        return None if taken.outcome is Outcome.IN_PROGRESS else taken

    taken = wait_until(taken_over, what="a later attempt to take the claim over", poll=0.2)
    assert taken.outcome is Outcome.COMPLETED
    _, body = watch.tick(at(10, 40))
    assert [p["schedule_time"] for p in body["problems"] if p["kind"] == RAN_TWICE] == [
        z(at(10, 10))]


# -- announced from durable state (dedup/watchdog/outbox.py; issue 37, items 3 and 6) ------

def test_a_missed_run_is_reported_when_the_tick_fails_right_after_its_cursor_commit(
    collection_name: str,
) -> None:
    """Item 3: the tick's cursor commit lands, then the store goes away (its reply is lost
    and cannot be resolved): the tick answers 500. The missed run's line was committed
    with the cursor, so the retry, which judges from the moved cursor, still logs it;
    the tick after logs nothing again. (Before: logged after the commit by the failed
    tick only, so never.)"""
    runs = Runs(collection_name)
    runs.completed(JOB, at(10, 40), at(10, 50), at(11, 0))  # 11:10 missed
    watch = Watch(collection_name, [TEN_MINUTES], now=at(11, 30))
    handler = watch.handler()
    handler._watchdog._store = CursorCommitFaults(handler._watchdog._store, landed=1)
    assert handler.handle({}, b"").status == 500
    assert missed_lines(watch) == []
    assert handler.handle({}, b"").status == 200  # Scheduler's retry
    assert missed_lines(watch) == [z(at(11, 10))]
    watch.logs.clear()
    assert handler.handle({}, b"").status == 200
    assert missed_lines(watch) == []
    cursors = firestore.Client(project=PROJECT).collection(f"{collection_name}_watchdog")
    assert cursor_document(cursors, JOB)["outbox"] == []  # acknowledged


def test_an_incident_whose_cursor_write_failed_is_never_paged_if_the_run_then_completed(
    collection_name: str,
) -> None:
    """Item 6: a tick opens an incident (threshold 1) and its cursor write fails; by its
    retry the late run completed. Nothing was paged: the incident was only in the cursor
    that never landed, and a page for it could never be resolved. (Before: paged at once,
    then in no cursor.)"""
    runs = Runs(collection_name)
    runs.completed(JOB, at(10, 40), at(10, 50), at(11, 0))
    watch = Watch(collection_name, [job_with(1, 1)], now=at(11, 30))
    handler = watch.handler()
    handler._watchdog._store = CursorCommitFaults(handler._watchdog._store, unreached=1)
    assert handler.handle({}, b"").status == 500
    runs.completed(JOB, at(11, 10))  # late, but it ran
    assert handler.handle({}, b"").status == 200
    assert incident_lines(watch) == [] and missed_lines(watch) == []
    cursors = firestore.Client(project=PROJECT).collection(f"{collection_name}_watchdog")
    assert not any(s["open"] for s in cursor_document(cursors, JOB)["incidents"].values())


def missed_lines(watch: Watch) -> list[str]:
    return [str(e["schedule_time"]) for e in watch.logs if e.get("kind") == "missed"]


def test_a_job_with_hundreds_of_problems_at_one_tick_keeps_its_cursor_small(
    collection_name: str,
) -> None:
    """A job every minute, judged again six hours after its last tick (the watchdog was
    down): 360 missed runs at one tick (two days' would be 2,880, whose lines would
    outgrow the cursor document, 1 MiB, and fail every commit). The first
    MAX_PROBLEM_LINES are logged one by one, the rest counted in one line, and the
    incident still opens."""
    every_minute = replace(TEN_MINUTES, name="every-minute", schedule="* * * * *",
                           thresholds=Thresholds(3, 2))
    watch = Watch(collection_name, [every_minute], now=at(11, 0))
    Runs(collection_name).completed(every_minute.name, at(10, 59))
    assert watch.tick()[0] == 200  # watching from here
    status, _ = watch.tick(at(17, 0))  # six hours later, nothing ran since
    assert status == 200
    missed = [e for e in watch.logs if e.get("kind") == "missed"]
    [fold] = [e for e in watch.logs if e.get("outcome") == FOLDED]
    assert len(missed) == MAX_PROBLEM_LINES
    assert len(missed) + fold["folded"]["missed"] > 340  # 11:00 to 16:4x, as due
    assert [e["event"] for e in incident_lines(watch)] == [OPENED]
