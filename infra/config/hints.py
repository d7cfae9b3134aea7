"""Google Cloud's own rules for a few values, with fixes that fit the mistake: a unix-cron
schedule (a seconds or year field, the legacy "every 5 minutes" form) and a time zone (an
abbreviation or fixed offset instead of a place, a near miss) for Cloud Scheduler, on
`infra.scheduler_rules`; and the Firestore locations a database may be in.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Final
from zoneinfo import available_timezones

from infra.config.errors import did_you_mean, invalid
from infra.scheduler_rules import ScheduleError, validate_cron, validate_time_zone

DEFAULT_TIME_ZONE: Final = "Etc/UTC"


def checked_cron(schedule: str, example: str) -> str:
    """A job's or the watchdog's unix-cron schedule; the fix names `example` (or fits the
    mistake: a seconds or year field, the legacy "every 5 minutes" form)."""
    try:
        validate_cron(schedule)
    except ScheduleError as exc:
        raise invalid(str(exc), _cron_fix(schedule, example)) from None
    return schedule


def _cron_fix(schedule: str, example: str) -> str:
    fields = schedule.split()
    five = "use the 5 fields 'minute hour day-of-month month day-of-week'"
    if len(fields) in (6, 7):
        # Quartz/croniter style: seconds first (and a year last): unix-cron has neither.
        dropped = " ".join(fields[1:6])
        try:
            validate_cron(dropped)
        except ScheduleError:
            return f"unix-cron has no seconds or year field: {five}, such as {example}"
        return (f"unix-cron has no seconds or year field: drop the first field ('{dropped}'), "
                f"or {five}")
    if schedule.strip().lower().startswith("every"):
        return (f"the legacy 'every 5 minutes' form gives no reliable schedule time: {five}, "
                "e.g. '*/5 * * * *'")
    return f"{five}, such as {example}"


# Time zone names that are abbreviations or fixed offsets, not places: EST, MST and HST
# have no daylight saving time (an "EST" job runs at 07:00 New York time all summer), and
# the POSIX-style ones are legacy aliases. Each maps to the place most likely meant.
_ZONE_ABBREVIATIONS: Final[Mapping[str, str]] = {
    "EST": "America/New_York", "EDT": "America/New_York", "EST5EDT": "America/New_York",
    "CST": "America/Chicago", "CDT": "America/Chicago", "CST6CDT": "America/Chicago",
    "MST": "America/Denver", "MDT": "America/Denver", "MST7MDT": "America/Denver",
    "PST": "America/Los_Angeles", "PDT": "America/Los_Angeles",
    "PST8PDT": "America/Los_Angeles", "HST": "Pacific/Honolulu",
    "CET": "Europe/Berlin", "CEST": "Europe/Berlin", "MET": "Europe/Berlin",
    "EET": "Europe/Athens", "WET": "Europe/Lisbon", "BST": "Europe/London",
    "IST": "Asia/Kolkata", "JST": "Asia/Tokyo", "AEST": "Australia/Sydney",
}
_FIXED_OFFSET_ZONE = re.compile(r"^(?:Etc/)?GMT[+-](?:[1-9]|1[0-4])$")  # not GMT+0: UTC


def checked_time_zone(time_zone: str) -> str:
    """An IANA time zone of a place (or UTC), with a suggestion for a near miss."""
    place = _ZONE_ABBREVIATIONS.get(time_zone.upper())
    if place is not None:
        raise invalid(f"{time_zone!r} is a time zone abbreviation, not a place: it does not "
                      "follow daylight saving time changes the way the place does",
                      f"use the IANA name of the place, e.g. {place}")
    if _FIXED_OFFSET_ZONE.match(time_zone):
        raise invalid(f"{time_zone!r} is a fixed offset without daylight saving time (and "
                      "'Etc/GMT+5' means UTC-5: POSIX inverts the sign)",
                      "use the IANA name of the place, e.g. America/New_York, or Etc/UTC "
                      "with the schedule's hours in UTC")
    try:
        validate_time_zone(time_zone)
    except ScheduleError as exc:
        raise invalid(str(exc), did_you_mean("time zone", time_zone, sorted(available_timezones()))
                      + "use an IANA name such as Etc/UTC or America/New_York") from None
    return time_zone


# Firestore's locations (https://cloud.google.com/firestore/docs/locations): its
# multi-regions and the regions it offers. Google adds regions now and then: a location
# missing here is rejected with this list; add it here once Firestore offers it.
FIRESTORE_MULTI_REGIONS: Final = ("eur3", "nam5", "nam7")
FIRESTORE_REGIONS: Final = (
    "africa-south1", "asia-east1", "asia-east2", "asia-northeast1", "asia-northeast2",
    "asia-northeast3", "asia-south1", "asia-south2", "asia-southeast1", "asia-southeast2",
    "asia-southeast3", "australia-southeast1", "australia-southeast2", "europe-central2",
    "europe-north1", "europe-north2", "europe-southwest1", "europe-west1", "europe-west10",
    "europe-west12", "europe-west15", "europe-west2", "europe-west3", "europe-west4",
    "europe-west6", "europe-west8", "europe-west9", "me-central1", "me-central2", "me-west1",
    "northamerica-northeast1", "northamerica-northeast2", "northamerica-south1",
    "southamerica-east1", "southamerica-west1", "us-central1", "us-east1", "us-east4",
    "us-east5", "us-south1", "us-west1", "us-west2", "us-west3", "us-west4",
)
FIRESTORE_LOCATIONS: Final = frozenset((*FIRESTORE_MULTI_REGIONS, *FIRESTORE_REGIONS))


def firestore_location_problem(location: str) -> tuple[str, str] | None:
    """(what is wrong, fix) if `location` is not a Firestore location, else None."""
    if location in FIRESTORE_LOCATIONS:
        return None
    return (f"{location!r} is not a Firestore location",
            did_you_mean("location", location, sorted(FIRESTORE_LOCATIONS)) + "use a region such "
            "as europe-west1 or us-central1, or a multi-region: "
            f"{', '.join(FIRESTORE_MULTI_REGIONS)} (infra/config/hints.py FIRESTORE_REGIONS "
            "lists the regions)")
