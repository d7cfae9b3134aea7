"""Silences (maintenance windows): problems judged, recorded and logged, nothing paged.

A job is silenced at a tick when `now` is inside one of its declared windows or the
stack's (dedup/watchdog/windows.py, from the stack config), or before the `until` of an
operator silence of the job or of the whole stack (`make silence`, operator_tools/silence.py).
Operator silences are documents of `<collection>_silences` in the watchdog's own database
(DEDUP_WATCH_DATABASE), which only the watchdog's account and the operators write: job
code, running as another account, can neither silence its own failures nor lift a silence.
Each says who asked and why; one per job (`job:<name>`) and one for the stack (`stack`),
replaced by the next `make silence` of the same scope. One the watchdog cannot read is
reported `malformed` (which alerts) and silences nothing.

During a silence the runs run as ever (nothing is paused), and each problem is judged,
recorded and logged as ever, its line marked `silenced: true` with the silence's reason,
end and author. What pages is an `incident_opened` line (infra/monitoring.py): one that
opens while its job is silenced is held instead, in the job's cursor (`held`), committed
with the cursor's move as its outbox is (dedup/watchdog/outbox.py), so a page owed after
the window is in durable state and never lost. At the first tick the job is silenced no
more, a held incident whose streak is still open is moved into the outbox and logged then
(paged, the line saying since when it was held); one whose streak resolved meanwhile is
dropped with its `incident_resolved` (a problem resolved within the window never pages),
leaving an INFO line that says so. An incident paged before the silence began is resolved
as ever (its `incident_resolved` closes a page). A `malformed` document still alerts: it
is no run's problem but a write nobody should make.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from dedup.store.firestore import FirestoreRunStore
from dedup.watchdog.cursors import Cursor
from dedup.watchdog.due import WatchedJob, rfc3339
from dedup.watchdog.incidents import OPENED, RESOLVED, Transition
from dedup.watchdog.outbox import Line, transition_line
from dedup.watchdog.reruns import MalformedDocument
from dedup.watchdog.windows import MAX_REASON_LENGTH, Window

SILENCES_SUFFIX: Final = "_silences"
STACK_SCOPE: Final = "stack"
"""The document ID of an operator silence of every job."""
DECLARED: Final = "config"
"""Who set a declared window (its `silenced_by`): the stack config."""
RESOLVED_WITHIN: Final = "incident_silenced"
"""The `outcome` of the line that says an incident resolved within a silence, never paged."""


def silences_collection(collection: str) -> str:
    return collection + SILENCES_SUFFIX


def silence_id(job: str | None) -> str:
    """An operator silence's document ID: `job:<name>`, or `stack` for every job."""
    return STACK_SCOPE if job is None else f"job:{job}"


@dataclass(frozen=True)
class OperatorSilence:
    """`make silence`: the job (None: every job of the stack) silenced until `until`."""

    job: str | None
    until: datetime
    reason: str
    requested_by: str
    requested_at: datetime

    def to_document(self) -> dict[str, Any]:
        return {"job": self.job, "until": self.until, "reason": self.reason,
                "requested_by": self.requested_by, "requested_at": self.requested_at}

    @classmethod
    def from_document(cls, data: Mapping[str, Any], document_id: str) -> OperatorSilence:
        """MalformedDocument naming the field if `data` is no silence (or not its ID's)."""
        job = data.get("job")
        if job is not None and not (isinstance(job, str) and job and "/" not in job):
            raise MalformedDocument("job is not a job name")
        if silence_id(job) != document_id:
            raise MalformedDocument(f"its ID is not {silence_id(job)!r}, its job's")
        instants = {}
        for key in ("until", "requested_at"):
            value = data.get(key)
            if not isinstance(value, datetime) or value.tzinfo is None:
                raise MalformedDocument(f"{key} is not a timestamp")
            instants[key] = value
        reason, by = data.get("reason"), data.get("requested_by")
        if not isinstance(reason, str) or not reason.strip() or len(reason) > (
                MAX_REASON_LENGTH):
            raise MalformedDocument(f"reason is not 1 to {MAX_REASON_LENGTH} characters")
        if not isinstance(by, str) or not by:
            raise MalformedDocument("requested_by is not text")
        return cls(job, instants["until"], reason, by, instants["requested_at"])


@dataclass(frozen=True)
class Silence:
    """The silence a job is in at a tick: why, until when, and who set it."""

    reason: str
    until: datetime
    by: str

    def mark(self, line: Line) -> Line:
        """A problem line logged during the silence: marked, still logged and counted."""
        return {**line, "silenced": True, "silence_reason": self.reason,
                "silenced_until": rfc3339(self.until), "silenced_by": self.by}


class FirestoreSilences:
    """`<collection>_silences` of the watchdog's own database, through a RunStore's client,
    timeouts and error mapping (the watchdog reads it; `make silence` writes it)."""

    def __init__(self, store: FirestoreRunStore, collection: str) -> None:
        self._store = store
        self._collection = store.client.collection(collection)
        self.path = collection

    def read_all(self) -> tuple[list[OperatorSilence], list[tuple[str, str]]]:
        """Every operator silence, and (document ID, why) of each document that is none."""
        def op() -> tuple[list[OperatorSilence], list[tuple[str, str]]]:
            found: list[OperatorSilence] = []
            refused: list[tuple[str, str]] = []
            snapshots: Any = self._collection.stream(retry=self._store.retry,
                                                     timeout=self._store.timeout)
            for snapshot in snapshots:
                try:
                    found.append(OperatorSilence.from_document(snapshot.to_dict() or {},
                                                               snapshot.id))
                except MalformedDocument as exc:
                    refused.append((snapshot.id, str(exc)))
            return found, refused

        return self._store.call(op)

    def put(self, silence: OperatorSilence) -> None:
        """Write it, in place of the scope's previous one."""
        def op() -> None:
            self._collection.document(silence_id(silence.job)).set(
                silence.to_document(), retry=self._store.retry, timeout=self._store.timeout)

        self._store.call(op)

    def remove(self, job: str | None) -> OperatorSilence | None:
        """Delete the scope's silence; the one removed (None: there was none)."""
        reference = self._collection.document(silence_id(job))

        def op() -> OperatorSilence | None:
            snapshot: Any = reference.get(retry=self._store.retry, timeout=self._store.timeout)
            if not snapshot.exists:
                return None
            reference.delete(retry=self._store.retry, timeout=self._store.timeout)
            try:
                return OperatorSilence.from_document(snapshot.to_dict() or {}, snapshot.id)
            except MalformedDocument:
                return None

        return self._store.call(op)


class SilenceBook:
    """Which silence each job is in at one tick: its own windows and the stack's, and the
    operator silences of it and of the stack; the one that lasts longest wins."""

    def __init__(self, stack_windows: Sequence[Window],
                 operator: Sequence[OperatorSilence], now: datetime) -> None:
        self._now = now
        self._stack = self._latest([self._declared(w) for w in stack_windows] + [
            self._asked(s) for s in operator if s.job is None])
        self._by_job: dict[str, Silence] = {}
        for silence in operator:
            asked = self._asked(silence)
            if silence.job is not None and asked is not None:
                self._by_job[silence.job] = asked

    def of(self, job: WatchedJob) -> Silence | None:
        return self._latest([self._stack, self._by_job.get(job.name),
                             *(self._declared(w) for w in job.silences)])

    def _declared(self, window: Window) -> Silence | None:
        until = window.until(self._now)
        return None if until is None else Silence(window.reason, until, DECLARED)

    def _asked(self, silence: OperatorSilence) -> Silence | None:
        if not silence.requested_at <= self._now < silence.until:
            return None
        return Silence(silence.reason, silence.until, silence.requested_by)

    @staticmethod
    def _latest(silences: Sequence[Silence | None]) -> Silence | None:
        found = [s for s in silences if s is not None]
        return max(found, key=lambda s: s.until) if found else None


def settle_incidents(
    cursor: Cursor, transitions: Sequence[Transition], silence: Silence | None, now: datetime,
) -> tuple[list[Line], set[str]]:
    """One job's incident lines to log this tick (for its outbox), and the incidents of
    `transitions` it did not log (held, or resolved while held); `cursor.held` updated
    (written with the cursor): an opening during a silence held, a held one paged once the
    silence is over and its streak still open, dropped (with its resolution) if the streak
    resolved first."""
    held = {str(line.get("incident")): line for line in cursor.held}
    lines: list[Line] = []
    quiet: set[str] = set()
    for transition in transitions:
        if transition.event == OPENED and silence is not None:
            held[transition.incident] = {**silence.mark(transition_line(transition)),
                                         "held_at": rfc3339(now)}
            quiet.add(transition.incident)
        elif transition.event == RESOLVED and transition.incident in held:
            held.pop(transition.incident)
            quiet.add(transition.incident)
            lines.append(_resolved_within(transition.job, transition.kind, transition.incident))
        else:
            lines.append(transition_line(transition))
    if silence is None:
        for incident, line in held.items():
            streak = cursor.incidents.get(str(line.get("incident_kind")))
            if streak is not None and streak.open and streak.incident == incident:
                lines.append(_released(line, now))
            else:  # its streak is gone (the cursor was judged afresh): no page owed
                lines.append(_resolved_within(str(line.get("job")),
                                              str(line.get("incident_kind")), incident))
        held = {}
    cursor.held = list(held.values())
    return lines, quiet


def _released(line: Line, now: datetime) -> Line:
    """A held `incident_opened` line, logged (paged) now that its silence is over."""
    released = {k: v for k, v in line.items() if k not in ("silenced", "silenced_until")}
    released["message"] = (f"{line['message']} (held during a silence since "
                           f"{line.get('held_at')}; still open at its end)")
    released["released_at"] = rfc3339(now)
    return released


def _resolved_within(job: str, kind: str, incident: str) -> Line:
    # `outcome`, neither `event` nor `kind`: no alert policy or problem metric counts it.
    return {
        "severity": "INFO",
        "message": f"watchdog incident of {job} {kind} resolved within its silence: "
                   "never paged",
        "component": "watchdog",
        "outcome": RESOLVED_WITHIN,
        "job": job,
        "streak": kind,  # not `incident_kind`: the incidents metric counts those lines
        "incident": incident,
    }
