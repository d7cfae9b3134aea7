"""The invariants checked at the end of every seed (docs/protocol.md, "Checked by
simulation").

1. once: each run (one run_id: one generation of one business run, or a forced run the kit
   took as a business run; a Run now kept apart is no business run and is not judged)
   executes at most once (an execution: a job body that returned, or was killed before it
   returned; one that raised is a failed attempt, retried by design), unless the watchdog
   logged `ran_twice` for it. A run still `in_progress` at the end, or whose last
   execution ended in the last three ticks, is not judged yet.
2. reported: each business run of the span (the watchdog's own schedule arithmetic,
   WatchedJob.business) whose verdict is due before the quiet end, scheduled no earlier than
   the job's first recorded run, not asked again by an operator (then its request judges
   it), not a catch-up still inside its bound at the end, and whose last attempt did not
   end in the last three ticks, either executed, or the
   watchdog logged a problem naming it (missed, failed, overlong, ran_twice, malformed), or
   it was skipped with its reason: recorded `skipped` by a delivery of its own (forbid:
   another run held the job when its time came), or replaced by a *newer* run (replace).
   A run skipped by a forced run, or replaced by an older one, was dropped. Likewise each
   re-run an operator asked for: executed, or its end was told, by the watchdog or by its
   request's durable status `failed`/`refused` with why (what `make runs` shows; a
   backfill's runs once it finished; a request still pending at the end is not judged).
3. incidents: each incident opened (`incident_opened`) is resolved (`incident_resolved`)
   or still open in its job's cursor at the end; and no second incident of the same job
   and kind is opened while one is open (one problem, one page; the same incident
   announced again by a retried tick is the same page).
4. bounded claims: a delivery answered 409 because of another attempt's claim (the reply
   names that attempt) comes at most one lease (+ a few seconds of slack) after that
   attempt ended: its delivery answered, or its instance died. Only a commit of that
   attempt's that the store held (stalled) and landed later may extend it, and never
   after a 5xx, which promises that nothing blocks the retry.
5. silences: no `incident_opened` line is decided by a tick that surely saw a silence of
   its job (a declared window its `now` is in; a `make silence` whose write had landed
   before the tick read the silences, and whose removal had not begun when the read
   ended; of the job or of the stack); each problem line such a tick logs is marked
   `silenced: true`, and one logged by a tick that surely saw none is not. A line is the
   tick's own unless it was in the outbox of the cursor the tick read (committed by an
   earlier tick, logged now). An incident whose streak opened at a tick that surely saw
   a silence is, at the first tick after the silence's end that surely sees no silence
   of its job, either still open in the cursor that tick wrote (then an
   `incident_opened` line names it after the end: paged then), or not (then no
   `incident_opened` line ever names it: resolved within the window, never paged).
   Invariants 2 and 3 hold through silences as ever.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta

from dedup.keys import RunKey
from dedup.store import RunStatus
from dedup.watchdog.due import verdict_due_at
from simulation.watch import carried_key
from simulation.world import FORCED_DELIVERY, LOCATION, PROJECT, SeedRun, SilenceSpec

PROBLEM_KINDS = frozenset({"missed", "failed", "overlong", "ran_twice", "malformed"})
OPENED, RESOLVED = "incident_opened", "incident_resolved"
SLACK_SECONDS = 5.0


@dataclass(frozen=True)
class Violation:
    invariant: str  # once, reported, incidents, bounded
    run_id: str | None
    text: str
    actors: tuple[str, ...] = ()
    since: float = 0.0  # the trace's watchdog events from here (simulated seconds)


def check(run: SeedRun) -> list[Violation]:
    violations = [Violation("simulation", None, error) for error in run.errors]
    violations += (_once(run) + _reported(run) + _reruns_reported(run) + _incidents(run)
                   + _bounded(run) + _silences(run))
    return violations


def _problem_runs(run: SeedRun) -> dict[str, set[str]]:
    """run_id -> the problem kinds the watchdog logged for it."""
    found: dict[str, set[str]] = defaultdict(set)
    for line in run.recorder.lines:
        kind = line.entry.get("kind")
        if line.entry.get("component") == "watchdog" and kind in PROBLEM_KINDS:
            run_id = line.entry.get("run_id")
            if run_id:
                found[run_id].add(kind)
    return found


def _once(run: SeedRun) -> list[Violation]:
    problems = _problem_runs(run)
    by_run: dict[str, list[str]] = defaultdict(list)
    began: dict[str, float] = {}
    last: dict[str, float] = {}
    for execution in run.recorder.executions:
        if execution.how != "raised":
            by_run[execution.run_id].append(execution.actor)
            began.setdefault(execution.run_id, execution.started)
            last[execution.run_id] = max(last.get(execution.run_id, 0.0),
                                         execution.ended or execution.started)
    judged_until = run.spec.end - 3 * run.spec.tick_every
    asked = {run_id for run_id, _, _ in run.recorder.requested}
    business = {run_id for _, _, run_id in business_runs(run, due_only=False)}
    violations = []
    for run_id, actors in by_run.items():
        record = run.records.get(run_id)
        if len(actors) < 2 or "ran_twice" in problems.get(run_id, set()):
            continue
        if record is not None and record.forced and run_id not in business | asked:
            # A Run now kept apart (forcedRuns: separate) is no business run: the watchdog
            # judges none (docs/protocol.md, "What it does not cover"); its record shows a
            # takeover (`make runs`), no ran_twice line does.
            continue
        if record is not None and record.status is RunStatus.IN_PROGRESS:
            continue  # not judged yet (reported overlong, if it stays so)
        if last[run_id] > judged_until:
            continue  # ended too near the end for the watchdog to have judged it
        violations.append(Violation(
            "once", run_id, f"{'re-run' if run_id in asked else 'run'} {run_id} executed "
            f"{len(actors)} times and no ran_twice "
            f"was logged (record: {record.status.value if record else 'none'})",
            tuple(actors), since=began[run_id]))
    return violations


def business_runs(run: SeedRun, due_only: bool = True) -> list[tuple[str, datetime, str]]:
    """(job, key time, run_id) of every business run of the span whose verdict is due
    before the watchdog's last ticks (every one of the span: `due_only=False`)."""
    spec = run.spec
    until = spec.start + timedelta(seconds=spec.span)
    cutoff = spec.start + timedelta(seconds=spec.end - 2 * spec.tick_every)
    runs = []
    for job in spec.jobs:
        watched = job.watched()
        for business in watched.business.runs(spec.start, until):
            t = business.key_time
            if not due_only or verdict_due_at(watched, t, spec.grace) <= cutoff:
                runs.append((job.name, t, RunKey(PROJECT, LOCATION, job.name, t).run_id))
    return runs


def _reported(run: SeedRun) -> list[Violation]:
    problems = _problem_runs(run)
    executed = {e.run_id for e in run.recorder.executions if e.how != "raised"}
    runs = business_runs(run)
    when = _schedule_times_of(run)
    # How the kit took each delivery of a run: (actor, run_id) -> its line's trigger.
    triggers = {(line.actor, str(line.entry["run_id"])): str(line.entry.get("trigger"))
                for line in run.recorder.lines if line.entry.get("trigger")}
    # A run an operator asked for again (`make rerun`, `make backfill`: a request of its
    # own) is judged by its request (_reruns_reported), and its record, written by that
    # request, is no evidence of when the job first ran for the watchdog.
    requested = set(run.requests)
    # A run whose last attempt ended (or failed) in the watchdog's last ticks, such as a
    # catch-up delivered again and again at the end, is not judged yet: the tick after the
    # end would report it.
    judged_until = run.spec.end - 3 * run.spec.tick_every
    last_end: dict[str, float] = {}
    for execution in run.recorder.executions:
        ended = execution.ended if execution.ended is not None else execution.started
        last_end[execution.run_id] = max(last_end.get(execution.run_id, 0.0), ended)
    first_record: dict[str, datetime] = {}
    for job_name, t, run_id in runs:
        if run_id in run.records and run_id not in requested and (
                job_name not in first_record or t < first_record[job_name]):
            first_record[job_name] = t
    violations = []
    for job_name, t, run_id in runs:
        if job_name not in first_record or t < first_record[job_name]:
            continue  # before the job's first recorded run: not judged (docs)
        if run_id in requested or run_id in run.pending_catch_ups or (
                last_end.get(run_id, 0.0) > judged_until):
            continue  # judged by its request; or not judged yet (a catch-up inside its
            # bound, or a last attempt that ended too late to judge)
        if run_id in executed or problems.get(run_id):
            continue
        record = run.records.get(run_id)
        writer = run.recorder.made_by.get(getattr(record, "attempt_id", "") or "")
        why = _dropped(record, writer, triggers.get((writer or "", run_id)), when, t)
        if why is not None:
            violations.append(Violation(
                "reported", run_id, f"{job_name} @ {t:%Y-%m-%dT%H:%MZ} ({run_id}): {why}",
                since=(t - run.spec.start).total_seconds()))
    return violations


def _reruns_reported(run: SeedRun) -> list[Violation]:
    """Each re-run an operator asked for (its request written) executed, or its end was
    told: the watchdog logged it (a `rerun` line past queued/waiting, or a problem naming
    it), or its request ended with why (`failed` or `refused` and its outcome: durable in
    the watchdog's database, what `make runs` and `make backfill-status` show the operator
    who asked; the log line is told at most once, from a tick that may die after the
    request's end was written). A backfill's runs are judged once the watchdog logged the
    backfill finished (it releases them a few per tick: the rest are not due yet)."""
    executed = {e.run_id for e in run.recorder.executions if e.how != "raised"}
    told: set[str] = {request_id for request_id, (status, outcome) in run.requests.items()
                      if status in ("failed", "refused") and outcome}
    finished: dict[str, list[float]] = defaultdict(list)  # job -> when a backfill ended
    for line in run.recorder.lines:
        entry = line.entry
        if entry.get("component") != "watchdog":
            continue
        if entry.get("outcome") == "backfill" and entry.get("state") in (
                "finished", "cancelled"):
            finished[str(entry.get("job"))].append(line.at)
        if not entry.get("run_id"):
            continue
        if entry.get("kind") in PROBLEM_KINDS or (
                entry.get("outcome") == "rerun"
                and entry.get("status") not in ("queued", "waiting")):
            told.add(str(entry["run_id"]))
    cutoff = run.spec.end - 3 * run.spec.tick_every
    violations = []
    for run_id, at, backfill in run.recorder.requested:
        if run_id in executed or run_id in told:
            continue
        if run.requests.get(run_id, ("", ""))[0] == "pending":
            continue  # still waiting its turn at the end (overlap: wait): not judged yet
        due = (any(t > at for t in finished[backfill]) if backfill is not None
               else at < cutoff)
        if due:
            violations.append(Violation(
                "reported", run_id, f"re-run {run_id} asked at {at:.0f}s"
                f"{' (a backfill)' if backfill else ''}: not executed, and the watchdog "
                "never said how it ended", since=at))
    return violations


def _schedule_times_of(run: SeedRun) -> dict[str, datetime]:
    """run_id -> schedule time of every run of the jobs from the start to a day after the
    end, scheduled or forced (what `replaced_by` may name)."""
    spec = run.spec
    until = spec.start + timedelta(seconds=spec.end, days=1)
    when = {}
    for job in spec.jobs:
        for business in job.watched().business.runs(spec.start - timedelta(days=1), until):
            t = business.key_time
            for instant in {t, *business.deliveries}:
                for forced in (False, True):
                    when[RunKey(PROJECT, LOCATION, job.name, instant, forced).run_id] = t
    return when


def _dropped(record: object, writer: str | None, trigger: str | None,
             when: dict[str, datetime], t: datetime) -> str | None:
    """Why a run that did not execute and was not reported was dropped; None: skipped
    with its reason. `writer`: the actor whose attempt wrote the record; `trigger`: how
    the kit took that delivery (a "Run now" retried once its time has come is taken as
    the scheduled run itself: keys.is_forced_run)."""
    if record is None:
        return "no record, not executed, never reported missed"
    status = record.status  # type: ignore[attr-defined]
    replaced_by = getattr(record, "replaced_by", None)
    if status is RunStatus.SKIPPED:
        # Legitimate when a delivery of the run itself recorded it: Scheduler's (named
        # "<instance>:<job>@<time> attempt n"), not "Run now" (" run-now@").
        if writer is not None and (FORCED_DELIVERY not in writer or trigger == "scheduled"):
            return None
        return (f"recorded skipped by {writer or 'an unknown writer'}, not by a delivery "
                "of the run itself, and never reported")
    if replaced_by is not None and status is RunStatus.FAILED:
        newer = when.get(replaced_by)
        if newer is not None and newer > t:
            return None
        return (f"replaced by run {replaced_by} "
                f"({'older or the same time' if newer else 'unknown'}) and never reported")
    return f"record {status.value}, not executed, never reported"


def _incidents(run: SeedRun) -> list[Violation]:
    violations = []
    opened: dict[str, tuple[str, str, float]] = {}
    resolved: set[str] = set()
    open_now: dict[tuple[str, str], str] = {}
    for line in run.recorder.lines:
        entry = line.entry
        event, incident = entry.get("event"), entry.get("incident")
        if not incident:
            continue
        key = (str(entry.get("job")), str(entry.get("incident_kind")))
        if event == OPENED:
            holder = open_now.get(key)
            if holder is not None and holder != incident:
                violations.append(Violation(
                    "incidents", entry.get("run_id"),
                    f"incident {incident} ({key[0]} {key[1]}) opened while {holder} was open",
                    since=opened[holder][2]))
            open_now[key] = str(incident)
            opened.setdefault(str(incident), (*key, line.at))
        elif event == RESOLVED:
            resolved.add(str(incident))
            if open_now.get(key) == incident:
                del open_now[key]
    for incident, (job, kind, at) in opened.items():
        if incident not in resolved and incident not in run.open_incidents:
            violations.append(Violation(
                "incidents", None, f"incident {incident} ({job} {kind}, opened at {at:.0f}s) "
                "is neither resolved nor open in the job's cursor", since=at))
    return violations


def _bounded(run: SeedRun) -> list[Violation]:
    lease = run.spec.lease
    answered_5xx: dict[str, float] = {}
    for line in run.recorder.lines:
        status = line.entry.get("status")
        if line.entry.get("run_id") and isinstance(status, int) and status >= 500:
            answered_5xx.setdefault(line.actor, line.at)
    violations = []
    for line in run.recorder.lines:
        entry = line.entry
        if entry.get("status") != 409 or entry.get("outcome") != "in_progress":
            continue
        attempt = entry.get("attempt_id")
        holder = run.recorder.made_by.get(str(attempt)) if attempt else None
        if holder is None or holder == line.actor:
            continue
        ended = run.ended.get(holder)
        if ended is None:
            continue
        if holder not in answered_5xx:
            ended = max(ended, run.recorder.late_landings.get(holder, ended))
        if line.at > ended + lease + SLACK_SECONDS:
            violations.append(Violation(
                "bounded", str(entry.get("run_id")),
                f"409 at {line.at:.1f}s for run {entry.get('run_id')}: the claim of attempt "
                f"{attempt} blocks {line.at - ended:.1f}s after {holder} ended "
                f"({'answered 5xx' if holder in answered_5xx else 'answered or died'}); "
                f"bound: one lease ({lease:g}s)", (holder, line.actor)))
    return violations


@dataclass(frozen=True)
class _Silenced:
    """A silence as it went: declared (in force from `requested` until `until` for a tick
    whose `now` is in it), or `make silence` (written between `landed_from` and
    `landed_by`, removed between `removed_from` and `removed_by` if it was)."""

    job: str | None
    declared: bool
    requested: float
    until: float
    landed_from: float = 0.0
    landed_by: float = 0.0
    removed_from: float = float("inf")
    removed_by: float = float("inf")

    def covers(self, job: str) -> bool:
        return self.job is None or self.job == job

    def over(self) -> float:
        """From when every tick sees it over."""
        return min(self.until, self.removed_by)

    def may_end(self) -> float:
        """From when a tick may see it over."""
        return min(self.until, self.removed_from)

    def surely_seen(self, began: float, read: tuple[float, float] | None) -> bool:
        if not self.requested <= began < self.until:
            return False
        if self.declared:
            return True
        return read is not None and self.landed_by <= read[0] and read[1] < self.removed_from

    def surely_unseen(self, began: float, read: tuple[float, float] | None) -> bool:
        if not self.requested <= began < self.until:
            return True
        if self.declared:
            return False
        return read is not None and (read[1] < self.landed_from
                                     or read[0] >= self.removed_by)

    def describe(self) -> str:
        return SilenceSpec(self.job, self.declared, self.requested, self.until).describe()


def _silences_as_they_went(run: SeedRun) -> list[_Silenced]:
    ops = {(scope, what): (first, done)
           for scope, what, first, done in run.recorder.silence_ops}
    found = []
    for silence in run.spec.silences:
        if silence.declared:
            found.append(_Silenced(silence.job, True, silence.begin, silence.until))
            continue
        put = ops.get((silence.job or "", "put"))
        if put is None:
            continue  # a kit without silences: nothing was written
        removal = ops.get((silence.job or "", "remove"), (float("inf"), float("inf")))
        found.append(_Silenced(silence.job, False, put[0], silence.until, put[0], put[1],
                               *removal))
    return found


class _Views:
    """Which silences of a job a tick surely saw, or surely did not."""

    def __init__(self, run: SeedRun, silences: list[_Silenced]) -> None:
        self._recorder = run.recorder
        self._silences = silences

    def seen(self, tick: str, job: str) -> list[_Silenced]:
        began = self._recorder.tick_began.get(tick)
        read = self._recorder.silences_read.get(tick)
        return [] if began is None else [
            w for w in self._silences if w.covers(job) and w.surely_seen(began, read)]

    def unseen(self, tick: str, job: str) -> bool:
        began = self._recorder.tick_began.get(tick)
        read = self._recorder.silences_read.get(tick)
        return began is not None and all(
            w.surely_unseen(began, read) for w in self._silences if w.covers(job))


def _silences(run: SeedRun) -> list[Violation]:
    silences = _silences_as_they_went(run)
    if not silences:
        return []
    recorder = run.recorder
    views = _Views(run, silences)
    # Every problem kind but malformed (a write nobody should make) is marked in a silence.
    from dedup.watchdog.verdicts import PROBLEM_SEVERITY
    marked = set(PROBLEM_SEVERITY) - {"malformed"}
    violations = []
    paged: dict[str, list[float]] = defaultdict(list)  # incident -> when it was logged
    for line in recorder.lines:
        entry, tick = line.entry, line.actor
        if entry.get("component") != "watchdog" or not tick.startswith("watchdog:"):
            continue
        job, key = str(entry.get("job")), carried_key(entry)
        if entry.get("event") == OPENED:
            paged[str(entry.get("incident"))].append(line.at)
        if key is None or key in recorder.carried.get(tick, {}).get(job, set()):
            continue  # not this tick's: an earlier tick committed it
        during = views.seen(tick, job)
        what = (f"incident {entry.get('incident')} of {job}" if entry.get("event") == OPENED
                else f"{entry.get('kind')} of run {entry.get('run_id')}")
        if entry.get("event") == OPENED and during:
            violations.append(Violation(
                "silences", entry.get("run_id"), f"{what} paged at {line.at:.0f}s by "
                f"{tick}, inside the {during[0].describe()}", since=line.at))
        elif entry.get("kind") in marked:
            if during and not entry.get("silenced"):
                violations.append(Violation(
                    "silences", entry.get("run_id"), f"{what} logged at {line.at:.0f}s "
                    f"inside the {during[0].describe()}, not marked silenced",
                    since=line.at))
            elif entry.get("silenced") and views.unseen(tick, job):
                violations.append(Violation(
                    "silences", entry.get("run_id"), f"{what} logged at {line.at:.0f}s "
                    "marked silenced, outside every silence of its job", since=line.at))
    return violations + _paged_after(run, views, paged)


def _paged_after(run: SeedRun, views: _Views, paged: dict[str, list[float]]
                 ) -> list[Violation]:
    """An incident whose streak opened at a tick that surely saw a silence: paged after
    it if still open at the first tick that surely sees none, else never."""
    writes = run.recorder.cursor_writes
    first_open: dict[tuple[str, str], int] = {}  # (job, incident) -> first write showing it
    for index, (_, _, states) in enumerate(writes):
        for job, state in states.items():
            for incident in state.open | state.held:
                first_open.setdefault((job, incident), index)
    judged_until = run.spec.end - 2 * run.spec.tick_every
    violations = []
    for (job, incident), index in first_open.items():
        tick, at, _ = writes[index]
        during = views.seen(tick, job)
        if not during:
            continue
        window = max(during, key=lambda w: w.over())
        after = next(((t, when, states) for t, when, states in writes[index:]
                      if when >= window.over() and job in states and views.unseen(t, job)),
                     None)
        if after is None or after[1] > judged_until:
            continue  # the seed ended first
        tick_after, when, states = after
        if incident in states[job].open:
            if not any(t >= window.may_end() for t in paged[incident]):
                violations.append(Violation(
                    "silences", None, f"incident {incident} of {job} opened at {at:.0f}s "
                    f"in the {window.describe()}, still open at {tick_after} "
                    f"({when:.0f}s), never paged after it", since=at))
        elif paged[incident]:
            violations.append(Violation(
                "silences", None, f"incident {incident} of {job} opened at {at:.0f}s in "
                f"the {window.describe()} and closed by {when:.0f}s, yet paged at "
                f"{paged[incident][0]:.0f}s", since=at))
    return violations
