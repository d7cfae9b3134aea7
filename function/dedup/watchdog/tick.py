"""One tick of the run watchdog, and the HTTP handler its entry point calls.

Each tick, for every job that is not paused, judges the runs whose verdict became due
(dedup/watchdog/judging.py), delivers the catch-up runs it set aside
(dedup/watchdog/catch_up.py), its backfills' runs and the pending re-runs
(dedup/watchdog/rerun_deliveries.py), moves the incident streaks (dedup/watchdog/
incidents.py), and writes each job's cursor (dedup/watchdog/cursors.py). Deliveries land
before any cursor moves; problem and incident lines are committed with the cursor and logged
after (dedup/watchdog/outbox.py): a tick that fails halfway answers 500 and the retry may
report a problem a second time, never zero times, and nothing is paged that no cursor holds. A
document it cannot read (a cursor or a request with a field missing or of the wrong type, a
cursor judged beyond now, a run record job code wrote into its own records database) is
reported `malformed`, naming it, and never trusted: the job is judged afresh over the
lookback, the request is refused, the run is not judged; the other jobs (and runs) are
judged as ever, and the tick answers 200.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import requests
from google.cloud import firestore

from dedup.beyond import BEYOND_PROBLEMS
from dedup.entry.http import HttpReply, emit_log_line, refuse_caller
from dedup.keys import FORCED_SEPARATE, RunKey, lower_keys
from dedup.store import StoredRun, StoreError, StoreUnavailable
from dedup.store.firestore import FirestoreRunStore
from dedup.watchdog.backfills import BackfillPacer, FirestoreBackfills, backfills_collection
from dedup.watchdog.beyond import RunsBeyond
from dedup.watchdog.cloud_tasks import CloudTasksDeliverer
from dedup.watchdog.cursors import Cursor, CursorMoved, FirestoreWatchStore, WatchStore
from dedup.watchdog.deliveries import CAUGHT_UP, CAUGHT_UP_SEVERITY, Delivered
from dedup.watchdog.delivery import QUEUED, DeliversRuns, HttpDeliverer, TargetAuth
from dedup.watchdog.due import WatchedJob, rfc3339
from dedup.watchdog.incidents import OPENED, RESOLVED, Transition, judge_streaks
from dedup.watchdog.judging import JobJudging
from dedup.watchdog.outbox import Line, folded, problem_line
from dedup.watchdog.ran_twice import RAN_TWICE
from dedup.watchdog.rerun_deliveries import RERUN_WAITING, RerunDeliveries
from dedup.watchdog.reruns import FirestoreRerunQueue, RerunQueue, RerunRequest
from dedup.watchdog.settings import WatchSettings
from dedup.watchdog.silences import (
    FirestoreSilences,
    Silence,
    SilenceBook,
    settle_incidents,
    silences_collection,
)
from dedup.watchdog.verdicts import (
    MALFORMED,
    MISSED,
    PROBLEM_SEVERITY,
    ForcedRun,
    JobTick,
    Problem,
)


@dataclass
class TickResult:
    checked: int
    problems: list[Problem]
    counts: dict[str, int]
    caught_up: list[Delivered] = field(default_factory=list)
    reruns: list[Delivered] = field(default_factory=list)
    forced: list[ForcedRun] = field(default_factory=list)
    transitions: list[Transition] = field(default_factory=list)
    overlapped: str | None = None  # why its cursors were not written (another tick's were)
    backfills: list[dict[str, Any]] = field(default_factory=list)  # each one's progress
    # Problems in no cursor's outbox (dedup/watchdog/outbox.py): the handler logs them.
    unannounced: list[Problem] = field(default_factory=list)


class Watchdog(JobJudging, RerunDeliveries, RunsBeyond):
    """One tick over every job; `now` is the instance's wall clock (minutes of grace make
    its skew irrelevant)."""

    def __init__(
        self,
        settings: WatchSettings,
        store: WatchStore,
        wall_clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        deliverer: DeliversRuns | None = None,
        reruns: RerunQueue | None = None,
        backfills: BackfillPacer | None = None,
        silences: FirestoreSilences | None = None,
    ) -> None:
        self._settings = settings
        # `make silence`'s silences (dedup/watchdog/silences.py); None: declared ones only.
        self._silences = silences
        self._store = store
        self._now = wall_clock
        # Catch-up and re-runs need both a deliverer and a target URL (settings.delivers).
        self._deliverer = deliverer if settings.delivers else None
        self._reruns = reruns if self._deliverer is not None else None
        self._backfills = backfills if self._reruns is not None else None
        # This tick's pending catch-ups (run_id -> job, schedule time), set before re-runs.
        self._catching_up: dict[str, tuple[WatchedJob, datetime]] = {}
        # Where a tick's problem and incident lines are logged, once the cursors that hold
        # them were written (WatchdogHandler sets it); None: only returned in TickResult.
        self.announce: Callable[[Sequence[Line]], None] | None = None
        # The re-run requests one delivery pass finished, written together at its end.
        self._finishing: list[tuple[RerunRequest, str, str]] = []
        # This tick's ran_twice problems of re-run and backfill generations (a request that
        # settled on a record showing a second execution): put into their job's streak.
        self._generation_problems: list[Problem] = []
        # The requests whose settling this tick found a problem: finished only once the
        # cursor that carries the problem's line was written (dedup/watchdog/outbox.py).
        self._finish_after_commit: list[tuple[RerunRequest, str, str]] = []

    def tick(self) -> tuple[int, list[Problem], dict[str, int]]:
        """(runs judged, problems, counts) for every job; StoreUnavailable on an outage."""
        result = self.run_tick()
        return result.checked, result.problems, result.counts

    def run_tick(self) -> TickResult:
        """One tick: judge every job, deliver its catch-up runs and the pending re-runs."""
        now = self._now()
        active = [job for job in self._settings.jobs if not job.paused]
        paused = [job for job in self._settings.jobs if job.paused]
        cursors = self._store.get_cursors([job.name for job in self._settings.jobs])
        counts = {"jobs": len(active), "paused": len(paused), "reads": len(cursors)}
        checked, problems = 0, self._refuse_malformed_cursors(cursors, now)
        silenced = self._silenced(now, problems)
        for job in paused:
            # Scheduler delivers nothing while paused: move the cursor past those runs, so
            # that resuming the job does not report them as missed.
            cursor = cursors.setdefault(job.name, Cursor())
            cursor.judged_through = self._horizon(job, now)
            cursor.watch_from = cursor.watch_from or now
        watched = [(job, cursors.get(job.name, Cursor())) for job in active]
        reads = [self._reads(job, cursor, now) for job, cursor in watched]
        found = self._read_all([job for job, _ in watched], reads)
        judged = [
            (job, cursor, self._judge_job(job, cursor, now, planned, found))
            for (job, cursor), planned in zip(watched, reads, strict=True)
        ]
        self._runs_beyond(judged, now)  # unexplained and forced runs (watchdog/beyond.py)
        # Deliveries land before any cursor moves: a tick that fails halfway leaves the
        # runs to the retry, which delivers them again (the dedup protocol runs them once).
        caught_up = self._catch_up(judged, now)
        # A re-run waits while a catch-up of its run may still execute (a queued retry of
        # a delivery whose instance died): both could run otherwise.
        self._catching_up = {
            run_id: (job, cursor.watching[run_id])
            for job, cursor, _ in judged for run_id in cursor.catch_ups
            if run_id in cursor.watching
        }
        # Backfills first: they deliver their own requests, by ID; then the pending ones.
        self._generation_problems = []
        self._finish_after_commit = []
        backfilled, backfills = self._advance_backfills(now, problems)
        reruns = self._deliver_reruns(now, problems)  # a store error here, too, leaves
        # every cursor as it was
        # A request delivered twice in one tick (one still waiting) is listed once, as it ended.
        reruns = list({d.run_id: d for d in [*backfilled, *reruns]}.values())
        ticks = {job.name: tick for job, _, tick in judged}
        for problem in self._generation_problems:  # reported, and counted in its streak
            if problem.job in ticks:
                ticks[problem.job].problems.append(problem)
            else:
                problems.append(problem)  # a paused job's: reported (its cursor stands)
        transitions_of = self._advance_streaks(judged, now)
        # Paused jobs' cursors too: one commit carries every job's lines (outbox.py).
        written = {job.name: cursor for job, cursor, _ in judged} | {
            job.name: cursors[job.name] for job in paused}
        incident_lines: dict[str, list[Line]] = {}
        quiet: set[str] = set()
        for name, cursor in written.items():  # held during a silence, or paged
            incident_lines[name], not_logged = settle_incidents(
                cursor, transitions_of.get(name, []), silenced.get(name), now)
            quiet |= not_logged
        unannounced = self._fill_outboxes(
            written, [*problems, *(p for _, _, t in judged for p in t.problems)],
            incident_lines, silenced)
        overlapped = self._commit_and_announce(written, now)
        forced: list[ForcedRun] = self._forced_before_missed(judged)
        counts["reads"] += len(forced)
        for _, _, result in judged:
            checked += result.checked
            counts["reads"] += result.reads
            counts["skipped"] = counts.get("skipped", 0) + result.skipped
            problems.extend(result.problems)
            forced.extend(result.forced)
        counts["forced"] = len(forced)
        logged = [line.get("event") for lines in incident_lines.values() for line in lines]
        counts["incidents_opened"] = logged.count(OPENED)
        counts["incidents_resolved"] = logged.count(RESOLVED)
        counts["incidents_held"] = sum(len(c.held) for c in written.values())
        counts["silenced"] = sum(s is not None for s in silenced.values())
        paged = [t for transitions in transitions_of.values() for t in transitions
                 if t.incident not in quiet]
        return TickResult(checked, problems, counts, caught_up, reruns, forced, paged,
                          overlapped, backfills, unannounced)

    def _silenced(self, now: datetime, problems: list[Problem]) -> dict[str, Silence | None]:
        """The silence each job is in now (dedup/watchdog/silences.py); an operator
        silence the watchdog cannot read is reported `malformed` and silences nothing."""
        operator, refused = self._silences.read_all() if self._silences else ([], [])
        for document, why in refused:
            problems.append(Problem(
                document.removeprefix("job:"), None, MALFORMED,
                error=f"silence refused, nothing is silenced by it: {why}",
                document=f"{silences_collection(self._settings.store.collection)}/{document}",
            ))
        book = SilenceBook(self._settings.silences, operator, now)
        return {job.name: book.of(job) for job in self._settings.jobs}

    def _fill_outboxes(
        self, written: Mapping[str, Cursor], problems: Sequence[Problem],
        incident_lines: Mapping[str, Sequence[Line]], silenced: Mapping[str, Silence | None],
    ) -> list[Problem]:
        """Put this tick's problem and incident lines into the outbox of the cursor of
        their job (dedup/watchdog/outbox.py), after what an earlier tick left there
        unlogged, a problem of a silenced job marked so; the problems of no cursor this
        tick writes (a request naming no watched job), which the handler logs as before."""
        unannounced: list[Problem] = []
        for problem in problems:
            cursor = written.get(problem.job)
            silence = silenced.get(problem.job)
            if cursor is None:
                unannounced.append(problem)
            elif silence is not None and problem.kind != MALFORMED:  # a write nobody
                cursor.outbox.append(silence.mark(problem_line(problem)))  # should make
            else:
                cursor.outbox.append(problem_line(problem))
        for job, lines in incident_lines.items():
            written[job].outbox.extend(lines)
        for job, cursor in written.items():
            cursor.outbox = folded(cursor.outbox, job)
        return unannounced

    def _commit_and_announce(self, written: Mapping[str, Cursor], now: datetime) -> str | None:
        """Write the cursors with their outboxes, then log each written cursor's lines and
        clear them; then finish the re-run requests whose verdict those lines carry (a
        request left pending is judged again, never lost). Why not, if another tick moved
        a cursor since this tick read it: that tick judged from the same cursor (else its
        own guarded write would have failed) and committed the same lines, which it logs;
        its cursor stands, so a stale tick never rolls a later one back (and re-counts its
        runs into the streaks)."""
        try:
            versions = self._store.put_cursors(written, now)
        except CursorMoved as exc:
            return str(exc)
        lines = [line for job in versions for line in written[job].outbox]
        if lines and self.announce is not None:
            self.announce(lines)
        if lines:
            # Not cleared (the store failed): logged already, the next tick logs them again
            # (twice, never zero times).
            with contextlib.suppress(StoreError):
                self._store.clear_outboxes(
                    {job: v for job, v in versions.items() if written[job].outbox})
        if self._finish_after_commit and self._reruns is not None:
            self._reruns.finish_all(self._finish_after_commit, now)
        return None

    def _advance_streaks(
        self, judged: Sequence[tuple[WatchedJob, Cursor, JobTick]], now: datetime
    ) -> dict[str, list[Transition]]:
        """Each job's incident streaks moved by its verdicts of this tick (in its cursor,
        written with it); the incidents they opened or resolved, by job (in `judged`'s
        order: a tick settles each job's own, and a list to filter per job costs jobs x
        transitions after an outage that opens every job's incident)."""
        made: dict[str, list[Transition]] = {}
        # A re-run or backfill generation is counted when it settled (now), after the runs
        # this tick judged: a run scheduled days ago must not be resolved at once by them.
        settled = {p.run_id for p in self._generation_problems}
        for job, cursor, tick in judged:
            problems = [(now if p.run_id in settled else p.schedule_time, p.run_id, p.kind)
                        for p in tick.problems
                        if (p.kind == RAN_TWICE or p.run_id not in tick.counted)
                        and (p.kind not in BEYOND_PROBLEMS or job.beyond_pages)]
            good = {r: t for r, t in tick.good.items() if r not in tick.counted}
            cursor.incidents, made[job.name] = judge_streaks(
                job.name, job.thresholds, cursor.incidents, problems, good, now)
        return made

    def _forced_before_missed(
        self, judged: Sequence[tuple[WatchedJob, Cursor, JobTick]]
    ) -> list[ForcedRun]:
        """The forced runs kept apart ("Run now", forcedRuns separate) that carry the time
        of a run this tick reports missed: read only for those (a read per due run would
        double every tick's reads), shown next to the missed run, never counted as it."""
        wanted = [
            (job, problem.schedule_time,
             RunKey(self._project, self._location, job.name, problem.schedule_time,
                    forced=True).run_id)
            for job, _, tick in judged if job.forced_runs == FORCED_SEPARATE
            for problem in tick.problems
            if problem.kind == MISSED and problem.schedule_time is not None
        ]
        read = self._records([(job, run_id) for job, _, run_id in wanted]) if wanted else {}
        found = {r: stored for r, stored in read.items() if isinstance(stored, StoredRun)}
        return [ForcedRun(job.name, t, str(found[run_id].record.status), False, run_id)
                for job, t, run_id in wanted if run_id in found]

    def _refuse_malformed_cursors(
        self, cursors: dict[str, Cursor], now: datetime
    ) -> list[Problem]:
        """Each cursor document that is none (or judged beyond now, which would hide runs
        until then) is reported `malformed` and replaced by a fresh cursor: the job is
        judged afresh over the lookback (a problem reported twice, never zero times)."""
        problems: list[Problem] = []
        for job in self._settings.jobs:
            cursor = cursors.get(job.name)
            if cursor is None:
                continue
            why = cursor.malformed
            if why is None:
                late = [(k, v) for k, v in (("judged_through", cursor.judged_through),
                                            ("watch_from", cursor.watch_from)) if v and v > now]
                if late:
                    key, value = late[0]
                    why = f"{key} {rfc3339(value)} is after now ({rfc3339(now)})"
            if why is None:
                continue
            cursors[job.name] = Cursor(version=cursor.version)
            problems.append(Problem(
                job.name, None, MALFORMED,
                error=f"cursor refused, the job is judged afresh: {why}",
                document=f"{self._settings.cursor_collection}/{job.name}",
            ))
        return problems


def build_watchdog_handler(
    settings: WatchSettings,
    client: firestore.Client | None = None,
    emit: Callable[[Mapping[str, Any]], None] = emit_log_line,
    wall_clock: Callable[[], datetime] = lambda: datetime.now(UTC),
) -> WatchdogHandler:
    store = settings.store
    client = client or firestore.Client(project=store.project, database=store.database)
    runs = FirestoreRunStore(client, store.collection, store.store_timeout_seconds)
    # A client per other database its jobs name (the proxy's, the runtimes'), on the same
    # project and credentials (and emulator, in tests); a job may name its own database too.
    by_database = {store.database: runs} | {
        database: FirestoreRunStore(
            firestore.Client(project=client.project, database=database),
            store.collection, store.store_timeout_seconds,
        )
        for database in settings.other_databases
    }
    # Its cursors and the re-run queue: in its own database, which job code cannot write.
    own = runs if settings.watch_database is None else FirestoreRunStore(
        firestore.Client(project=client.project, database=settings.watch_database),
        store.collection, store.store_timeout_seconds,
    )
    watch_store = FirestoreWatchStore(runs, settings.cursor_collection, by_database, own)
    deliverer: DeliversRuns | None = None
    if settings.delivers:
        if settings.queue is None:
            deliverer = HttpDeliverer(settings.target_auth)
        else:  # DEDUP_WATCH_TARGET_AUTH=none: no credentials at all (a local fake's queue)
            plain = requests.Session() if settings.target_auth is TargetAuth.NONE else None
            deliverer = CloudTasksDeliverer(settings.queue, plain, emit)
    reruns = FirestoreRerunQueue(own, settings.reruns_collection)
    backfills = BackfillPacer(
        settings.backfill, FirestoreBackfills(own, backfills_collection(store.collection)),
        reruns, store.retention_seconds,
    )
    silences = FirestoreSilences(own, silences_collection(store.collection))
    watchdog = Watchdog(settings, watch_store, wall_clock, deliverer, reruns, backfills,
                        silences)
    return WatchdogHandler(settings, watchdog, emit)


def build_watchdog_handler_from_env(environ: Mapping[str, str] | None = None) -> WatchdogHandler:
    return build_watchdog_handler(WatchSettings.from_env(environ))


class WatchdogHandler:
    """The `watch_scheduled_runs` entry point: the same caller check as the job functions,
    then one tick; 200 with the problems, 500 (retryable) if the store failed."""

    def __init__(
        self,
        settings: WatchSettings,
        watchdog: Watchdog,
        emit: Callable[[Mapping[str, Any]], None] = emit_log_line,
    ) -> None:
        self._settings = settings
        self._watchdog = watchdog
        self._emit = emit
        watchdog.announce = self._emit_lines

    def _emit_lines(self, lines: Sequence[Line]) -> None:
        for line in lines:
            self._emit(line)

    def handle(self, headers: Mapping[str, str], body: bytes) -> HttpReply:
        started = time.perf_counter()
        forbidden = refuse_caller(
            lower_keys(headers), self._settings.store.allowed_callers, self._emit, started,
            self._settings.store.verify_token_audience,
        )
        if forbidden is not None:
            return forbidden
        try:
            result = self._watchdog.run_tick()
        except (StoreUnavailable, StoreError) as exc:
            detail = str(exc) or repr(exc)
            self._emit({
                "severity": "ERROR",
                "message": f"watchdog store_unavailable: {detail}",
                "component": "watchdog",
                "outcome": "store_unavailable",
                "status": 500,
                "latency_ms": _ms_since(started),
            })
            return HttpReply(500, {"error": "store_unavailable", "detail": detail})
        checked, problems, counts = result.checked, result.problems, result.counts
        for delivered in [*result.caught_up, *result.reruns]:
            self._emit_delivered(delivered)
        for progress in result.backfills:
            self._emit({
                "severity": "INFO",
                "message": f"watchdog backfill: {progress['job']}: {progress['state']}, "
                f"{progress['done']} done, {progress['failed']} failed, "
                f"{progress['refused']} refused, {progress['in_flight']} in flight, "
                f"{progress['released']}/{progress['total']} released",
                "component": "watchdog",
                "outcome": "backfill",
                **progress,
            })
        for run in result.forced:
            how = "replaced the scheduled run" if run.replaced else "kept apart"
            self._emit({
                "severity": "INFO",
                "message": f"watchdog forced run ({how}): {run.job} @ "
                f"{rfc3339(run.schedule_time)}: {run.status}",
                "component": "watchdog",
                "kind": "forced",
                **run.to_json(),
            })
        for problem in result.unannounced:
            self._emit(problem_line(problem))
        if result.overlapped is not None:
            self._emit({
                "severity": "WARNING",
                "message": f"watchdog overlapped another tick: {result.overlapped}",
                "component": "watchdog",
                "outcome": "overlapped",
            })
        by_kind = {kind: 0 for kind in PROBLEM_SEVERITY}
        for problem in problems:
            by_kind[problem.kind] += 1
        self._emit({
            "severity": "INFO",
            "message": f"watchdog summary: {checked} runs checked, {len(problems)} problems",
            "component": "watchdog",
            "checked": checked,
            "problems": len(problems),
            **by_kind,
            CAUGHT_UP: len(result.caught_up),
            "reruns": len(result.reruns),
            **counts,
            "latency_ms": _ms_since(started),
        })
        reply: dict[str, Any] = {
            "checked": checked, "problems": [p.to_json() for p in problems],
        }
        if result.forced:
            reply["forced"] = [run.to_json() for run in result.forced]
        if result.transitions:
            reply["incidents"] = [t.to_json() for t in result.transitions]
        if result.overlapped is not None:
            reply["overlapped"] = result.overlapped
        if self._settings.delivers:  # a watchdog given a target delivers, and says what
            reply[CAUGHT_UP] = [d.to_json() for d in result.caught_up]
            reply["reruns"] = [d.to_json() for d in result.reruns]
        if result.backfills:
            reply["backfills"] = result.backfills
        return HttpReply(200, reply)

    def _emit_delivered(self, delivered: Delivered) -> None:
        """One line per delivery: caught_up is WARNING (a run was late); a re-run INFO
        once executed, WARNING while it could not be (it stays pending)."""
        when = rfc3339(delivered.schedule_time)
        if delivered.kind == CAUGHT_UP:
            severity, what = CAUGHT_UP_SEVERITY, f"watchdog caught_up: {delivered.job} @ {when}"
        else:
            ok = delivered.status in ("completed", "duplicate", QUEUED, RERUN_WAITING)
            severity = "INFO" if ok else "WARNING"
            what = (f"watchdog rerun: {delivered.job} @ {when} generation "
                    f"{delivered.generation}")
        self._emit({
            "severity": severity,
            "message": f"{what}: {delivered.status}",
            "component": "watchdog",
            # `outcome`, not `kind`: the problem metric counts lines with a `kind`.
            "outcome": delivered.kind,
            "run_id": delivered.run_id,
            **delivered.to_json(),
        })


def _ms_since(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 2)
