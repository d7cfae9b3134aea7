"""Declared silence windows (maintenance windows): when a job's problems page nobody.

A window is declared in the stack config (infra/config/silences.py validates it; infra
writes it into the job table's `silences` of a job, or DEDUP_WATCH_SILENCES for every job)
in one of two forms, each with its `reason`:

- dated: `start` and `end`, RFC 3339 instants with their offset;
- recurring: `schedule` (5-field unix-cron, read in `timeZone`), `durationSeconds`: each
  occurrence silences from its start for that long (every Sunday 02:00-04:00 Europe/Berlin
  is `0 2 * * 0`, 7200, Europe/Berlin).

What a silence does at a tick is dedup/watchdog/silences.py's; this module only says whether
an instant is inside a window, and until when. Any mistake stops the start-up with a
message naming the window (the config's validation catches it first).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Final
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import croniter

from dedup.settings import SettingsError

SILENCES_ENV: Final = "DEDUP_WATCH_SILENCES"
"""The stack's windows (`watchdog.silences`), a JSON list: they silence every job."""
MAX_WINDOWS: Final = 50
"""Windows per job and for the stack: a few maintenance windows, not a calendar."""
MAX_DURATION_SECONDS: Final = 31 * 86400
"""A recurring window's longest occurrence (a month); a longer silence is `paused`."""
MAX_REASON_LENGTH: Final = 500
WINDOW_KEYS: Final = frozenset({"start", "end", "schedule", "durationSeconds", "timeZone",
                                "reason"})


@dataclass(frozen=True)
class Window:
    """One declared window: dated (`start`, `end`) or recurring (`schedule` in
    `time_zone`, each occurrence `duration_seconds` long)."""

    reason: str
    start: datetime | None = None
    end: datetime | None = None
    schedule: str | None = None
    duration_seconds: float = 0.0
    time_zone: str = "Etc/UTC"

    def until(self, instant: datetime) -> datetime | None:
        """The end of the occurrence `instant` is in (start <= instant < end), else None."""
        if self.schedule is None:
            assert self.start is not None and self.end is not None
            return self.end if self.start <= instant < self.end else None
        zone = ZoneInfo(self.time_zone)
        # The latest occurrence that began at or before `instant` (a later one ends later,
        # so it alone decides whether `instant` is covered).
        occurrences = croniter(self.schedule, instant.astimezone(zone) + timedelta(minutes=1))
        began: datetime = occurrences.get_prev(datetime)
        while began > instant:
            began = occurrences.get_prev(datetime)
        end = began.astimezone(UTC) + timedelta(seconds=self.duration_seconds)
        return end if instant < end else None

    def describe(self) -> str:
        if self.schedule is None:
            assert self.start is not None and self.end is not None
            return f"{self.start.isoformat()} to {self.end.isoformat()}"
        return (f"'{self.schedule}' {self.time_zone} for {self.duration_seconds:g}s")


def checked_schedule(entry: Mapping[str, Any], where: str) -> tuple[str, str]:
    """A table entry's `schedule` (5-field unix-cron) and `timeZone` (IANA, default
    Etc/UTC), as a job entry and a recurring window both carry them; SettingsError naming
    the key otherwise."""
    schedule = entry.get("schedule")
    if not isinstance(schedule, str) or len(schedule.split()) != 5 or not (
            croniter.is_valid(schedule)):
        raise SettingsError(f"{where}.schedule {schedule!r} is not 5-field unix-cron")
    zone = entry.get("timeZone", "Etc/UTC")
    try:
        ZoneInfo(zone)
    except (ZoneInfoNotFoundError, ValueError, TypeError):
        raise SettingsError(f"{where}.timeZone {zone!r} is not an IANA time zone") from None
    return schedule, zone


def parse_windows(raw: Any, where: str) -> tuple[Window, ...]:
    """A JSON list of windows (None: none); SettingsError naming `where[i]` and the fix."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise SettingsError(f"{where} must be a JSON list of windows")
    if len(raw) > MAX_WINDOWS:
        raise SettingsError(f"{where} lists {len(raw)} windows, more than {MAX_WINDOWS}")
    return tuple(_window(entry, f"{where}[{i}]") for i, entry in enumerate(raw))


def silences_setting(env: Mapping[str, str]) -> tuple[Window, ...]:
    """DEDUP_WATCH_SILENCES: the stack's windows (every job); unset: none."""
    raw = (env.get(SILENCES_ENV) or "").strip()
    if not raw:
        return ()
    try:
        entries = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise SettingsError(f"{SILENCES_ENV} is not valid JSON ({exc})") from None
    return parse_windows(entries, SILENCES_ENV)


def parse_instant(text: Any) -> datetime | None:
    """An RFC 3339 instant with its offset, in UTC; None if `text` is none."""
    if not isinstance(text, str):
        return None
    try:
        value = datetime.fromisoformat(text.strip().replace("z", "Z"))
    except ValueError:
        return None
    return value.astimezone(UTC) if value.tzinfo is not None else None


def _window(entry: Any, where: str) -> Window:
    if not isinstance(entry, dict):
        raise SettingsError(f"{where} must be a JSON object")
    unknown = sorted(set(entry) - WINDOW_KEYS)
    if unknown:
        raise SettingsError(f"{where} has unknown keys {unknown}: allowed are "
                            f"{sorted(WINDOW_KEYS)}")
    reason = entry.get("reason")
    if not isinstance(reason, str) or not reason.strip() or len(reason) > MAX_REASON_LENGTH:
        raise SettingsError(f"{where}.reason must say why (1 to {MAX_REASON_LENGTH} characters)")
    if "schedule" in entry:
        schedule, zone = checked_schedule(entry, where)
        duration = entry.get("durationSeconds")
        if isinstance(duration, bool) or not isinstance(duration, int | float) or not (
                math.isfinite(duration) and 0 < duration <= MAX_DURATION_SECONDS):
            raise SettingsError(f"{where}.durationSeconds must be a number of seconds from 1 "
                                f"to {MAX_DURATION_SECONDS}")
        if "start" in entry or "end" in entry:
            raise SettingsError(f"{where} has a schedule and start/end: give one of the two")
        return Window(reason, schedule=schedule, duration_seconds=float(duration),
                      time_zone=zone)
    start, end = parse_instant(entry.get("start")), parse_instant(entry.get("end"))
    if start is None or end is None:
        raise SettingsError(f"{where} needs start and end (RFC 3339 with an offset, e.g. "
                            "2026-12-06T02:00:00+01:00), or schedule and durationSeconds")
    if end <= start:
        raise SettingsError(f"{where}.end is not after its start")
    return Window(reason, start, end)
