"""Silences (issue 40): during a maintenance window problems are judged, recorded and logged
(marked `silenced`) and nothing pages; an incident still open when the window ends pages at
the first tick after it, one resolved within it never. Against the real Firestore emulator:
the watchdog wired as deployed (build_watchdog_handler), its cursors (where a held incident
waits) and `make silence`'s silences in its own database."""

from __future__ import annotations

import io
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from google.cloud import firestore

from dedup.settings import SettingsError
from dedup.store import StoreUnavailable
from dedup.store.firestore import FirestoreRunStore
from dedup.watchdog.cursors import Cursor
from dedup.watchdog.incidents import OPENED, RESOLVED
from dedup.watchdog.settings import WatchSettings, parse_watch_jobs
from dedup.watchdog.silences import (
    RESOLVED_WITHIN,
    FirestoreSilences,
    OperatorSilence,
    silence_id,
    silences_collection,
)
from dedup.watchdog.verdicts import MALFORMED, MISSED
from dedup.watchdog.windows import Window, parse_windows, silences_setting
from local_stack.deliveries import PROJECT
from operator_tools import runs, silence
from tests.function.test_watchdog import TEN_MINUTES, Runs, Watch, at

pytestmark = pytest.mark.usefixtures("firestore_emulator")

JOB = TEN_MINUTES.name
WATCH_DATABASE = "watchdog-silence-test"


@dataclass
class OwnWatch(Watch):
    """The watchdog with its own database (cursors, silences), as deployed."""

    def settings(self) -> WatchSettings:
        return replace(super().settings(), watch_database=WATCH_DATABASE)

    def page_lines(self) -> list[Mapping[str, Any]]:
        """What pages: the lines the incident-opened alert policy counts."""
        return [e for e in self.logs if e.get("event") == OPENED]

    def problem_lines(self) -> list[Mapping[str, Any]]:
        return [e for e in self.logs if "kind" in e]


def own_silences(collection: str) -> FirestoreSilences:
    client = firestore.Client(project=PROJECT, database=WATCH_DATABASE)
    return FirestoreSilences(FirestoreRunStore(client, collection, 5),
                             silences_collection(collection))


def silence_until(collection: str, until: datetime, job: str | None = JOB) -> None:
    own_silences(collection).put(OperatorSilence(job, until, "database upgrade",
                                                 "ops@example.com", at(9, 0)))


def held_lines(collection: str) -> list[dict[str, Any]]:
    client = firestore.Client(project=PROJECT, database=WATCH_DATABASE)
    snapshot: Any = client.collection(f"{collection}_watchdog").document(JOB).get()
    return list((snapshot.to_dict() or {}).get("held", []))


def missed_from_10_20(collection: str, *, back_at: datetime | None = None) -> None:
    """Completed at 10:00 and 10:10, then missed (until `back_at`, completed from then)."""
    runs = Runs(collection)
    runs.completed(JOB, at(10, 0), at(10, 10))
    if back_at is not None:
        t = back_at
        while t <= at(12, 0):
            runs.completed(JOB, t)
            t += timedelta(minutes=10)


# -- a silence over a missed run ------------------------------------------------------------

def test_a_silence_over_a_missed_run_pages_nothing_then_pages_after_the_window(
    collection_name: str,
) -> None:
    missed_from_10_20(collection_name)
    silence_until(collection_name, at(11, 0))
    watch = OwnWatch(collection_name, [TEN_MINUTES])
    watch.tick(at(10, 20))  # 10:00 and 10:10 judged: fine
    status, _ = watch.tick(at(10, 40))  # 10:20's verdict is due at 10:35: missed
    assert status == 200
    [line] = watch.problem_lines()
    assert (line["kind"], line["schedule_time"], line["silenced"]) == (
        MISSED, "2026-10-16T10:20:00Z", True)
    assert (line["silence_reason"], line["silenced_by"], line["silenced_until"]) == (
        "database upgrade", "ops@example.com", "2026-10-16T11:00:00Z")
    assert watch.page_lines() == []
    assert watch.summary()["incidents_held"] == 1
    assert [h["event"] for h in held_lines(collection_name)] == [OPENED]  # durable
    watch.tick(at(10, 50))  # 10:30 missed too: logged, still nothing paged
    assert [e["silenced"] for e in watch.problem_lines()] == [True]
    assert watch.page_lines() == []
    watch.tick(at(11, 10))  # the silence is over, the streak still open: paged now
    [page] = watch.page_lines()
    assert (page["began"], page["held_at"], page["released_at"]) == (
        "2026-10-16T10:20:00Z", "2026-10-16T10:40:00Z", "2026-10-16T11:10:00Z")
    assert "silenced" not in page
    assert [e.get("silenced") for e in watch.problem_lines()] == [None, None]  # 10:40, 10:50
    assert held_lines(collection_name) == []
    watch.tick(at(11, 20))  # paged once
    assert watch.page_lines() == []


def test_a_problem_resolved_within_the_window_never_pages(collection_name: str) -> None:
    missed_from_10_20(collection_name, back_at=at(10, 30))
    silence_until(collection_name, at(11, 0))
    watch = OwnWatch(collection_name, [TEN_MINUTES])
    watch.tick(at(10, 20))
    watch.tick(at(10, 40))  # 10:20 missed: held
    assert watch.page_lines() == [] and len(held_lines(collection_name)) == 1
    watch.tick(at(10, 50))  # 10:30 completed: the streak resolved within the window
    assert [e for e in watch.logs if e.get("event") == RESOLVED] == []  # no "recovered"
    [dropped] = [e for e in watch.logs if e.get("outcome") == RESOLVED_WITHIN]
    assert dropped["severity"] == "INFO" and "incident_kind" not in dropped
    assert held_lines(collection_name) == []
    for minute in (10, 20):  # after the window: nothing owed, nothing paged
        watch.tick(at(11, minute))
        assert [e for e in watch.logs if "event" in e] == []


def test_an_incident_paged_before_the_silence_resolves_as_ever(collection_name: str) -> None:
    missed_from_10_20(collection_name, back_at=at(10, 40))
    watch = OwnWatch(collection_name, [TEN_MINUTES])
    watch.tick(at(10, 20))
    watch.tick(at(10, 40))  # 10:20 missed, no silence yet: paged
    assert len(watch.page_lines()) == 1
    silence_until(collection_name, at(12, 0))
    watch.tick(at(11, 0))  # 10:30 missed (silenced), 10:40 completed: resolved, logged
    assert [e["event"] for e in watch.logs if "event" in e] == [RESOLVED]
    assert [e["silenced"] for e in watch.problem_lines()] == [True]


def test_a_declared_recurring_window_and_the_stacks_silence_every_job(
    collection_name: str,
) -> None:
    """A job's own window (daily 10:00 for an hour, Berlin: 08:00-09:00Z in October) and
    the stack's (DEDUP_WATCH_SILENCES, dated) hold the incident the same way."""
    daily = Window("nightly maintenance", schedule="0 12 * * *", duration_seconds=3600,
                   time_zone="Europe/Berlin")  # 12:00 CEST = 10:00Z
    assert daily.until(at(10, 40)) == at(11, 0) and daily.until(at(11, 0)) is None
    own = OwnWatch(collection_name, [replace(TEN_MINUTES, silences=(daily,))])
    missed_from_10_20(collection_name)
    own.tick(at(10, 20))
    own.tick(at(10, 40))
    assert own.page_lines() == [] and own.problem_lines()[0]["silenced_by"] == "config"
    own.tick(at(11, 10))
    assert len(own.page_lines()) == 1

    other = f"{collection_name}-stack"
    Runs(other).completed(JOB, at(10, 0), at(10, 10))
    stack = OwnWatch(other, [TEN_MINUTES])
    stack_window = Window("region migration", at(10, 30), at(11, 0))
    base = stack.settings()
    stack.settings = lambda: replace(base, silences=(stack_window,))  # type: ignore[method-assign]
    stack.tick(at(10, 20))
    stack.tick(at(10, 40))
    assert stack.page_lines() == [] and stack.problem_lines()[0]["silenced"] is True
    stack.tick(at(11, 0))  # the window's end is exclusive: paged at the first tick after
    assert len(stack.page_lines()) == 1


# -- announced from durable state ------------------------------------------------------------

def test_a_page_owed_after_the_window_survives_a_failed_commit(collection_name: str) -> None:
    """The release moves the held line into the outbox in the cursor's commit: a tick whose
    commit failed pages nothing and keeps it held; its retry pages it, once."""
    missed_from_10_20(collection_name)
    silence_until(collection_name, at(11, 0))
    watch = OwnWatch(collection_name, [TEN_MINUTES])
    watch.tick(at(10, 20))
    watch.tick(at(10, 40))
    handler = watch.handler()
    store = handler._watchdog._store
    real_put = store.put_cursors

    def failing_put(cursors: Mapping[str, Cursor], now: datetime) -> dict[str, datetime]:
        raise StoreUnavailable("cursor write lost")

    store.put_cursors = failing_put  # type: ignore[method-assign]
    watch.now, watch.logs[:] = at(11, 10), []
    assert handler.handle({}, b"").status == 500
    assert watch.page_lines() == [] and len(held_lines(collection_name)) == 1
    store.put_cursors = real_put  # type: ignore[method-assign]
    assert handler.handle({}, b"").status == 200
    assert len(watch.page_lines()) == 1
    watch.tick(at(11, 20))
    assert watch.page_lines() == []


# -- who may silence -------------------------------------------------------------------------

def test_a_silence_job_code_writes_in_the_dedup_database_silences_nothing(
    collection_name: str,
) -> None:
    """Job code can write the dedup database only: a silence there is never read."""
    missed_from_10_20(collection_name)
    forged = FirestoreSilences(
        FirestoreRunStore(firestore.Client(project=PROJECT), collection_name, 5),
        silences_collection(collection_name))
    forged.put(OperatorSilence(None, at(23, 0), "hide my failures", "job-code", at(9, 0)))
    watch = OwnWatch(collection_name, [TEN_MINUTES])
    watch.tick(at(10, 20))
    watch.tick(at(10, 40))
    assert len(watch.page_lines()) == 1
    assert "silenced" not in watch.problem_lines()[0]


def test_an_unreadable_silence_is_reported_and_silences_nothing(collection_name: str) -> None:
    missed_from_10_20(collection_name)
    client = firestore.Client(project=PROJECT, database=WATCH_DATABASE)
    client.collection(silences_collection(collection_name)).document(silence_id(JOB)).set(
        {"job": JOB, "until": "tomorrow", "reason": "x", "requested_by": "ops"})
    watch = OwnWatch(collection_name, [TEN_MINUTES])
    watch.tick(at(10, 20))
    status, body = watch.tick(at(10, 40))
    assert status == 200
    [refused] = [p for p in body["problems"] if p["kind"] == MALFORMED]
    assert "until is not a timestamp" in refused["error"]
    assert refused["document"] == f"{collection_name}_silences/job:{JOB}"
    assert len(watch.page_lines()) == 1


# -- make silence -----------------------------------------------------------------------------

def stack_file(tmp_path: Path, collection: str) -> Path:
    config = {
        "gcp:project": PROJECT, "gcp:region": "europe-west1",
        "scheduler-dedup:namePrefix": "sched-dedup",
        "scheduler-dedup:databaseName": "sched-dedup-silence",
        "scheduler-dedup:collection": collection,
        "scheduler-dedup:storeTimeoutSeconds": 2,
        "scheduler-dedup:jobs": [{"name": "nightly", "schedule": "0 3 * * *"}],
    }
    path = tmp_path / "Pulumi.silence-test.yaml"
    path.write_text(yaml.safe_dump({"config": config}), encoding="utf-8")
    return path


def make_silence(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = silence.main([*argv, "--requested-by", "ops@example.com"], out=out, err=err,
                        now=at(10, 0))
    return code, out.getvalue(), err.getvalue()


def test_make_silence_writes_who_and_why_and_its_removal_lifts_it(
    tmp_path: Path, collection_name: str,
) -> None:
    path = str(stack_file(tmp_path, collection_name))
    client = firestore.Client(project=PROJECT, database="sched-dedup-silence-watchdog")
    stored = FirestoreSilences(FirestoreRunStore(client, collection_name, 5),
                               silences_collection(collection_name))
    code, out, err = make_silence(path, "--job", "nightly", "--until",
                                  "2026-10-16T14:00:00+02:00", "--reason", "db upgrade")
    assert (code, err) == (0, "")
    assert "sched-dedup-nightly silenced until 2026-10-16T12:00:00Z by ops@example.com" in out
    code, _, _ = make_silence(path, "--until", "2026-10-16T11:00:00Z", "--reason", "region")
    assert code == 0
    found, refused = stored.read_all()
    assert refused == []
    assert sorted((s.job or "*", s.until, s.reason, s.requested_by, s.requested_at)
                  for s in found) == [
        ("*", at(11, 0), "region", "ops@example.com", at(10, 0)),
        ("sched-dedup-nightly", at(12, 0), "db upgrade", "ops@example.com", at(10, 0)),
    ]
    code, out, _ = make_silence(path, "--list")
    assert code == 0 and out.count("silenced until") == 2
    code, out, _ = make_silence(path, "--job", "nightly", "--remove")
    assert code == 0 and out.startswith("removed: sched-dedup-nightly")
    assert [s.job for s in stored.read_all()[0]] == [None]
    code, out, _ = make_silence(path, "--job", "nightly", "--remove")
    assert code == 0 and "no silence to remove" in out


@pytest.mark.parametrize(("argv", "why"), [
    (["--job", "nightly", "--until", "2026-10-16T09:00:00Z", "--reason", "x"],
     "is not in the future"),
    (["--job", "nighty", "--until", "2026-10-16T12:00:00Z", "--reason", "x"],
     "no job 'nighty' in the stack (jobs: nightly)"),
    (["--until", "2026-10-16T12:00:00", "--reason", "x"], "is not an RFC 3339 time"),
    (["--until", "2026-12-16T12:00:00Z", "--reason", "x"], "days away"),
    (["--until", "2026-10-16T12:00:00Z", "--reason", " "], "REASON must say why"),
    (["--reason", "x"], "UNTIL is required"),
])
def test_make_silence_refuses_bad_input_and_writes_nothing(
    tmp_path: Path, collection_name: str, argv: list[str], why: str,
) -> None:
    path = str(stack_file(tmp_path, collection_name))
    code, _, err = make_silence(path, *argv)
    assert code == 2 and why in err and err.startswith("make silence: "), err
    client = firestore.Client(project=PROJECT, database="sched-dedup-silence-watchdog")
    assert list(client.collection(silences_collection(collection_name)).stream()) == []


def test_make_runs_marks_the_problems_judged_in_a_silence(
    tmp_path: Path, collection_name: str,
) -> None:
    path = str(stack_file(tmp_path, collection_name))
    job = "sched-dedup-nightly"
    Runs(collection_name, database="sched-dedup-silence").completed(
        job, *(at(3, 0, day=day) for day in range(10, 14)))  # the 14th, 15th, 16th missed
    cfg = runs.stack_config(path)
    stores = runs.open_store(cfg)
    FirestoreSilences(stores.watch, silences_collection(collection_name)).put(
        OperatorSilence(job, at(12, 0), "db upgrade", "ops@example.com", at(0, 0)))
    out = io.StringIO()
    runs.show_runs(cfg, stores, last=4, now=at(10, 0), out=out)
    text = out.getvalue()
    assert "silenced until 2026-10-16T12:00:00Z by ops@example.com: db upgrade" in text
    verdicts = {line.split()[0] + " " + line.split()[1]: line.split(None, 6)[-1]
                for line in text.splitlines() if line.startswith("  2026-")}
    assert verdicts["2026-10-16 03:00:00Z"].endswith("missed (silenced)")
    assert verdicts["2026-10-15 03:00:00Z"].endswith("missed")
    assert verdicts["2026-10-13 03:00:00Z"].endswith("ok")


# -- the windows as the watchdog reads them ----------------------------------------------------

def test_the_job_table_and_environment_carry_windows_and_refuse_bad_ones() -> None:
    [job] = parse_watch_jobs('[{"name": "a", "schedule": "* * * * *", "silences": ['
                             '{"start": "2026-12-06T02:00:00+01:00", "end": '
                             '"2026-12-06T04:00:00+01:00", "reason": "upgrade"}]}]')
    assert job.silences[0].until(at(1, 30, day=6, month=12)) == at(3, 0, day=6, month=12)
    weekly = silences_setting({"DEDUP_WATCH_SILENCES": '[{"schedule": "0 2 * * 0", '
                               '"durationSeconds": 7200, "timeZone": "Europe/Berlin", '
                               '"reason": "weekly"}]'})
    sunday = at(1, 30, day=6, month=12)  # 02:30 in Berlin, a Sunday
    assert weekly[0].until(sunday) == at(3, 0, day=6, month=12)
    assert weekly[0].until(sunday + timedelta(days=1)) is None
    for raw, why in [
        ([{"start": "2026-12-06T02:00:00", "end": "2026-12-06T04:00:00Z", "reason": "x"}],
         r"w\[0\] needs start and end"),
        ([{"start": "2026-12-06T04:00:00Z", "end": "2026-12-06T02:00:00Z", "reason": "x"}],
         "end is not after its start"),
        ([{"schedule": "0 2 * * 0", "reason": "x"}], "durationSeconds must be"),
        ([{"schedule": "0 2 * * 0", "durationSeconds": 60, "reason": ""}], "reason must say"),
        ([{"schedule": "0 2 * * 0", "durationSeconds": 60, "reason": "x", "until": 1}],
         "unknown keys"),
    ]:
        with pytest.raises(SettingsError, match=why):
            parse_windows(raw, "w")


def test_the_stack_configs_windows_reach_the_watchdog_as_declared(tmp_path: Path) -> None:
    """jobs[].silences through the job table, watchdog.silences through
    DEDUP_WATCH_SILENCES (the same entries infra writes): the same windows."""
    import json

    from infra.config.silences import silences_environment
    from infra.watchdog import watch_jobs

    raw = yaml.safe_load(stack_file(tmp_path, "c").read_text())["config"]
    dated = {"start": "2026-12-06T02:00:00+01:00", "end": "2026-12-06T04:00:00+01:00",
             "reason": "ERP upgrade"}
    weekly = {"schedule": "0 2 * * 0", "durationSeconds": 7200, "timeZone": "Europe/Berlin",
              "reason": "weekly maintenance"}
    raw["scheduler-dedup:jobs"][0]["silences"] = [dated]
    raw["scheduler-dedup:watchdog"] = {"silences": [weekly]}
    path = tmp_path / "Pulumi.windows.yaml"
    path.write_text(yaml.safe_dump({"config": raw}), encoding="utf-8")
    cfg = runs.stack_config(str(path))
    [job] = parse_watch_jobs(json.dumps(watch_jobs(cfg)))
    assert job.silences == (Window("ERP upgrade", at(1, 0, day=6, month=12),
                                   at(3, 0, day=6, month=12)),)
    assert silences_setting(silences_environment(cfg.watchdog.silences)) == (
        Window("weekly maintenance", schedule="0 2 * * 0", duration_seconds=7200,
               time_zone="Europe/Berlin"),)


DATED = {"start": "2026-12-06T02:00:00Z", "end": "2026-12-06T04:00:00Z", "reason": "x"}


@pytest.mark.parametrize(("where", "windows", "key"), [
    ("job", [{**DATED, "end": "2026-12-06T01:00:00Z"}], "jobs[0].silences[0].end"),
    ("job", [{**DATED, "start": "2026-12-06T02:00:00"}], "jobs[0].silences[0].start"),
    ("job", [{"start": DATED["start"], "end": DATED["end"]}], "jobs[0].silences[0].reason"),
    ("job", [{"schedule": "0 2 * * 0", "reason": "weekly"}],
     "jobs[0].silences[0].durationSeconds"),
    ("job", [{"schedule": "0 2 * * 0", "durationSeconds": 7200, "timeZone": "CET",
              "reason": "weekly"}], "jobs[0].silences[0].timeZone"),
    ("watchdog", [{**DATED, "schedule": "0 2 * * 0", "durationSeconds": 7200}],
     "watchdog.silences[0].schedule"),
    ("no-watchdog", [DATED], "jobs[0].silences"),
])
def test_the_stack_config_refuses_a_bad_window_naming_the_key_and_the_fix(
    tmp_path: Path, where: str, windows: list[dict[str, Any]], key: str,
) -> None:
    from infra.config import ConfigError, load_config

    raw = yaml.safe_load(stack_file(tmp_path, "c").read_text())["config"]
    if where == "watchdog":
        raw["scheduler-dedup:watchdog"] = {"silences": windows}
    else:
        raw["scheduler-dedup:jobs"][0]["silences"] = windows
    if where == "no-watchdog":
        raw["scheduler-dedup:watchdog"] = {"enabled": False}
    with pytest.raises(ConfigError) as refused:
        load_config(raw)
    assert f"scheduler-dedup:{key}" in refused.value.keys, str(refused.value)
    [problem] = [p for p in refused.value.problems if p.key == f"scheduler-dedup:{key}"]
    assert problem.fix, problem
