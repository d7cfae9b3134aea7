"""A silence window (`jobs[].silences[]`, `watchdog.silences[]`): a maintenance window in
which the watchdog still judges, records and logs a job's problems but pages nobody; an
incident still open at its end pages then (function/dedup/watchdog/silences.py). Dated
(`start`, `end`) or recurring (`schedule` + `durationSeconds` in `timeZone`), each with its
`reason`. The watchdog reads the same keys from its job table and DEDUP_WATCH_SILENCES
(function/dedup/watchdog/windows.py); `make silence` sets one at run time, without a deploy.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any, ClassVar

from pydantic import Field, field_validator, model_validator

from dedup.watchdog.windows import (
    MAX_DURATION_SECONDS,
    MAX_REASON_LENGTH,
    SILENCES_ENV,
    parse_instant,
)
from infra.config.errors import ProblemList, invalid
from infra.config.fields import ConfigModel, Hint, Int
from infra.config.hints import DEFAULT_TIME_ZONE, checked_cron, checked_time_zone

SILENCES_TEXT = (
    "dated (start, end) or recurring (schedule, durationSeconds, timeZone) windows, each "
    "with a reason, in which problems are judged, logged and shown but nothing is paged; an "
    "incident still open at a window's end pages then (`make silence` sets one without a "
    "deploy)")
RFC3339_FIX = "give an RFC 3339 time with its offset, e.g. 2026-12-06T02:00:00+01:00"


class SilenceWindow(ConfigModel):
    """One maintenance window: problems are logged and shown, nothing is paged."""

    setting_of: ClassVar[str] = "a silence setting"
    reason: str = Field(
        min_length=1, max_length=MAX_REASON_LENGTH,
        description="Why the window is silenced (on every line it marks)",
        json_schema_extra=Hint(fix="say why, e.g. 'database maintenance'",
                               unset_fix="add reason: why the window is silenced"))
    start: str | None = Field(
        default=None, description="A dated window's first instant (RFC 3339 with offset); "
        "with `end`, not with `schedule`", json_schema_extra=Hint("an RFC 3339 time",
                                                                  RFC3339_FIX))
    end: str | None = Field(
        default=None, description="A dated window's end (RFC 3339 with offset, after "
        "`start`)", json_schema_extra=Hint("an RFC 3339 time", RFC3339_FIX))
    schedule: str | None = Field(
        default=None, description="A recurring window: when each occurrence begins "
        "(5-field unix-cron in `timeZone`), with `durationSeconds`",
        json_schema_extra=Hint(fix="use a 5-field unix-cron expression, e.g. '0 2 * * 0' "
                               "(Sundays 02:00)"))
    duration_seconds: Int = Field(
        default=0, ge=60, le=MAX_DURATION_SECONDS,
        description="A recurring window: how long each occurrence lasts",
        json_schema_extra=Hint(default="required with schedule"))
    time_zone: str = Field(default=DEFAULT_TIME_ZONE,
                           description="IANA time zone of a recurring window's `schedule`")

    @field_validator("start", "end")
    @classmethod
    def _instant(cls, value: str) -> str:
        if parse_instant(value) is None:
            raise invalid(f"{value!r} is not an RFC 3339 time with its offset", RFC3339_FIX)
        return value

    @field_validator("schedule")
    @classmethod
    def _unix_cron(cls, schedule: str) -> str:
        return checked_cron(schedule, "'0 2 * * 0'")

    @field_validator("time_zone")
    @classmethod
    def _iana(cls, time_zone: str) -> str:
        return checked_time_zone(time_zone)

    @model_validator(mode="after")
    def _one_form(self) -> SilenceWindow:
        problems = ProblemList()
        dated = self.start is not None or self.end is not None
        if self.schedule is not None:
            if dated:
                problems.add("schedule", "is set with start/end", "give either start and end "
                             "(a dated window) or schedule and durationSeconds (a recurring one)")
            if not self.duration_seconds:
                problems.add("durationSeconds", "is missing for a recurring window",
                             "add durationSeconds: how long each occurrence lasts, e.g. 7200")
        elif self.start is None or self.end is None:
            problems.add("end" if self.start is not None else "start",
                         "is missing: a window is dated (start and end) or recurring "
                         "(schedule and durationSeconds)", f"add it: {RFC3339_FIX}")
        else:
            first, last = self.first, self.last
            if first is not None and last is not None and last <= first:
                problems.add("end", f"{self.end!r} is not after start ({self.start!r})",
                             "make end later than start")
        if self.duration_seconds and self.schedule is None:
            problems.add("durationSeconds", "applies only to a recurring window",
                         "remove durationSeconds, or give schedule")
        problems.raise_any()
        return self

    @property
    def first(self) -> datetime | None:
        return parse_instant(self.start)

    @property
    def last(self) -> datetime | None:
        return parse_instant(self.end)

    def table_entry(self) -> dict[str, Any]:
        """The window as the watchdog reads it (its job table, DEDUP_WATCH_SILENCES)."""
        return self.model_dump(by_alias=True, exclude_none=True,
                               exclude={"duration_seconds", "time_zone"} if self.schedule is None
                               else set())


def silences_environment(windows: Sequence[SilenceWindow]) -> dict[str, str]:
    """DEDUP_WATCH_SILENCES: the stack's windows (`watchdog.silences`), of every job, as
    the watchdog reads them; none: unset."""
    if not windows:
        return {}
    return {SILENCES_ENV: json.dumps([window.table_entry() for window in windows],
                                     sort_keys=True, separators=(",", ":"))}
