"""Issue 35: the watchdog watches and delivers the jobs of runtimes (RUNTIMES.md).

A job entry naming a `runtime` has its records in that runtime's own `database` and is
delivered (catch-up, re-runs) to that runtime's function, whose URL comes from
DEDUP_WATCH_RUNTIME_URLS, never to DEDUP_WATCH_TARGET_URL (the default function, which lacks
its code). The settings' checks here; then the whole path against the real Firestore
emulator, with the default function and a runtime's function served side by side.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import requests
from google.cloud import firestore

from dedup.keys import RunKey
from dedup.settings import SettingsError
from dedup.watchdog.deliveries import CAUGHT_UP
from dedup.watchdog.settings import PROXY_URL_ENV, RUNTIME_URLS_ENV, WatchSettings
from dedup.watchdog.tick import build_watchdog_handler
from dedup.watchdog.verdicts import MALFORMED
from local_stack import FunctionServer
from local_stack.deliveries import LOCATION, PROJECT, function_env, scheduler_headers
from local_stack.steered_job import read_ledger
from local_stack.tables import job_tables_env, write_job_tables
from tests.function.test_catch_up import JOB_HEADERS, recent_minutes, z
from tests.function.test_watchdog import BASE_ENV, JOB_ENTRY, Runs

TARGET = "https://dedup-abc-ew.a.run.app"
SYNC_URL = "https://dedup-sync-abc-ew.a.run.app"
SYNC = {**JOB_ENTRY, "runtime": "sync", "database": "runs-sync"}


def settings_of(tmp_path: Path, table: list[dict[str, Any]], **env: str) -> WatchSettings:
    return WatchSettings.from_env({
        **BASE_ENV, **write_job_tables(tmp_path, watch_jobs=table),
        "DEDUP_WATCH_TARGET_URL": TARGET, **env,
    })


def test_a_runtimes_jobs_are_delivered_to_its_url_and_never_to_the_default_function(
    tmp_path: Path,
) -> None:
    table = [
        {**JOB_ENTRY, "name": "default", "catchUp": True},
        {**SYNC, "name": "synced", "catchUp": True},
        {**SYNC, "name": "rerun", "reruns": True},
        {**SYNC, "name": "own", "catchUp": True, "url": "https://own.example"},
        # Neither caught up nor re-run: its runtime needs no URL, and gets none.
        {**JOB_ENTRY, "name": "quiet", "runtime": "batch", "database": "runs-batch"},
    ]
    # A runtime no job names is let be, as an unused DEDUP_WATCH_PROXY_URL is.
    urls = {"sync": SYNC_URL, "gone": "https://dedup-gone-abc-ew.a.run.app"}
    settings = settings_of(tmp_path, table, **{RUNTIME_URLS_ENV: json.dumps(urls)})
    jobs = {job.name: job for job in settings.jobs}
    assert {name: settings.delivery_url(job) for name, job in jobs.items()} == {
        "default": TARGET, "synced": SYNC_URL, "rerun": SYNC_URL,
        "own": "https://own.example", "quiet": None,
    }
    assert (jobs["synced"].runtime, jobs["synced"].database) == ("sync", "runs-sync")
    assert jobs["default"].runtime is None
    assert settings.other_databases == ("runs-batch", "runs-sync")


@pytest.mark.parametrize(("table", "env", "names"), [
    ([{**JOB_ENTRY, "runtime": "Sync", "database": "runs-sync"}], {},
     r"watch_jobs.json\[0\].runtime 'Sync' is not a runtime name"),
    ([{**JOB_ENTRY, "runtime": "sync-", "database": "runs-sync"}], {},
     r"watch_jobs.json\[0\].runtime 'sync-' is not a runtime name"),
    ([{**JOB_ENTRY, "runtime": "sync"}], {},
     r"watch_jobs.json\[0\] names runtime 'sync' but no database: .*'<databaseName>-sync'"),
    ([{**SYNC, "proxied": True}], {},
     r"watch_jobs.json\[0\] is proxied and names runtime 'sync'"),
    ([{**SYNC, "catchUp": True}], {},
     rf"{RUNTIME_URLS_ENV} has no URL for runtime\(s\) \['sync'\], whose jobs the watchdog "
     r"delivers \(catchUp or reruns; 'sync': \['nightly-export'\]\): set it to a JSON object"),
    ([{**SYNC, "reruns": True}], {RUNTIME_URLS_ENV: '{"batch": "https://b.run.app"}'},
     rf"{RUNTIME_URLS_ENV} has no URL for runtime\(s\) \['sync'\]"),
    ([SYNC], {RUNTIME_URLS_ENV: "{sync: https://s.run.app}"},
     rf"{RUNTIME_URLS_ENV} is not valid JSON .*: set it to a JSON object"),
    ([SYNC], {RUNTIME_URLS_ENV: '["https://s.run.app"]'},
     rf"{RUNTIME_URLS_ENV} is .*, not a JSON object: set it"),
    ([SYNC], {RUNTIME_URLS_ENV: '{"Sync": "https://s.run.app"}'},
     rf"{RUNTIME_URLS_ENV} names 'Sync', not a runtime name"),
    ([SYNC], {RUNTIME_URLS_ENV: '{"sync": "s.run.app"}'},
     rf"{RUNTIME_URLS_ENV} gives runtime 'sync' 's.run.app', not a URL: set it"),
    ([SYNC], {RUNTIME_URLS_ENV: '{"sync": 3}'},
     rf"{RUNTIME_URLS_ENV} gives runtime 'sync' '3', not a URL"),
])
def test_a_mistake_about_runtimes_stops_the_start_up_naming_it(
    tmp_path: Path, table: list[dict[str, Any]], env: dict[str, str], names: str,
) -> None:
    with pytest.raises(SettingsError, match=names):
        settings_of(tmp_path, table, **env)


def test_runtime_and_proxy_urls_apply_each_to_its_own_jobs(tmp_path: Path) -> None:
    proxy = "https://proxy-abc-ew.a.run.app"
    table = [
        {**JOB_ENTRY, "name": "proxied", "proxied": True, "database": "proxy-db",
         "catchUp": True},
        {**SYNC, "name": "synced", "catchUp": True},
    ]
    settings = settings_of(tmp_path, table, **{
        PROXY_URL_ENV: proxy, RUNTIME_URLS_ENV: json.dumps({"sync": SYNC_URL})})
    assert {job.name: settings.delivery_url(job) for job in settings.jobs} == {
        "proxied": proxy, "synced": SYNC_URL}


# -- the whole path, against the Firestore emulator ------------------------------------------

QUICK_BODY = json.dumps({"result": "caught up"})


@pytest.fixture
def runtime_database() -> str:
    return f"runs-sync-{uuid.uuid4().hex[:8]}"


def catch_up_entry(name: str, **extra: Any) -> dict[str, Any]:
    return {
        "name": name, "schedule": "* * * * *", "timeZone": "Etc/UTC",
        "attemptDeadlineSeconds": 60, "retryWindowSeconds": 0, "paused": False,
        "catchUp": True, "catchUpWithinSeconds": 1800, "body": QUICK_BODY,
        "headers": dict(JOB_HEADERS), **extra,
    }


@pytest.mark.usefixtures("firestore_emulator")
def test_a_runtime_jobs_missed_run_is_read_in_its_database_and_caught_up_by_its_function(
    collection_name: str, runtime_database: str, tmp_path: Path,
) -> None:
    """A default job and a runtime's job each miss one run. Each is judged by the records
    in its own database only (a decoy record of the missed run in the other database is
    never read), and each missed run is delivered to its own function: the default job's
    to DEDUP_WATCH_TARGET_URL, the runtime's job's to its runtime's URL in
    DEDUP_WATCH_RUNTIME_URLS, executed there once."""
    suffix = uuid.uuid4().hex[:6]
    plain, synced = f"plain-{suffix}", f"synced-{suffix}"
    now, times = recent_minutes(4)
    missed = times[1]
    in_default, in_runtime = Runs(collection_name), Runs(collection_name, runtime_database)
    in_default.completed(plain, *(t for t in times if t != missed))
    in_runtime.completed(synced, *(t for t in times if t != missed))
    # Decoys: the missed runs, "completed" in the database the job's records are not in.
    in_default.completed(synced, missed)
    in_runtime.completed(plain, missed)

    default_ledger, runtime_ledger = tmp_path / "default.jsonl", tmp_path / "sync.jsonl"
    default_env = function_env(collection_name, default_ledger)
    runtime_env = function_env(collection_name, runtime_ledger, DEDUP_DATABASE=runtime_database)
    with FunctionServer(default_env, threads=4) as default, \
            FunctionServer(runtime_env, threads=4) as sync:
        env = two_functions_watchdog_env(collection_name, plain, synced, runtime_database,
                                         default.url, sync.url)
        settings = WatchSettings.from_env(env)
        assert settings.other_databases == (runtime_database,)
        logs: list[Mapping[str, Any]] = []
        # As deployed (build_watchdog_handler: a client per database its jobs name).
        handler = build_watchdog_handler(
            settings, firestore.Client(project=PROJECT), logs.append, wall_clock=lambda: now,
        )
        first = handler.handle({}, b"")
        assert first.status == 200, first.body
        assert first.body["problems"] == []
        assert sorted((c["job"], c["schedule_time"], c["status"])
                      for c in first.body[CAUGHT_UP]) == [
            (plain, z(missed), "completed"), (synced, z(missed), "completed")]
        # Each executed by its own function, once.
        assert [(e["job"], e["schedule_time"]) for e in read_ledger(str(default_ledger))] == [
            (plain, missed.isoformat())]
        assert [(e["job"], e["schedule_time"]) for e in read_ledger(str(runtime_ledger))] == [
            (synced, missed.isoformat())]
        # The runtime's function wrote the caught-up run's record in its own database.
        [execution] = read_ledger(str(runtime_ledger))
        stored = in_runtime.store.get(execution["run_id"])
        assert stored is not None and stored.record.attempt_id == execution["attempt_id"]

        again = handler.handle({}, b"")
        assert again.status == 200, again.body
        assert (again.body["problems"], again.body[CAUGHT_UP]) == ([], [])
        assert len(read_ledger(str(default_ledger)) + read_ledger(str(runtime_ledger))) == 2



def two_functions_watchdog_env(
    collection: str, plain: str, synced: str, runtime_database: str, default_url: str,
    sync_url: str,
) -> dict[str, str]:
    """The watchdog's environment over two catch-up jobs: `plain` in the default function
    (at `default_url`), `synced` in runtime `sync` (its records in `runtime_database`)."""
    return {
        "DEDUP_PROJECT": PROJECT, "DEDUP_LOCATION": LOCATION,
        "DEDUP_COLLECTION": collection, "DEDUP_STORE_TIMEOUT_SECONDS": "5",
        **job_tables_env(watch_jobs=[
            catch_up_entry(plain),
            catch_up_entry(synced, runtime="sync", database=runtime_database),
        ]),
        "DEDUP_WATCH_LOOKBACK_SECONDS": "3600", "DEDUP_WATCH_GRACE_SECONDS": "30",
        "DEDUP_WATCH_DELIVERY_TIMEOUT_SECONDS": "20",
        "DEDUP_WATCH_TARGET_AUTH": "none",  # the served functions take no token
        "DEDUP_WATCH_TARGET_URL": default_url,
        RUNTIME_URLS_ENV: json.dumps({"sync": sync_url}),
    }

@pytest.mark.usefixtures("firestore_emulator")
@pytest.mark.parametrize("written_in", ["runtime", "default"])
def test_a_malformed_record_costs_only_its_own_run_a_verdict_and_every_other_run_is_judged(
    collection_name: str, runtime_database: str, tmp_path: Path, written_in: str,
) -> None:
    """Job code can write any document of its own records database, at any run ID (run
    IDs follow from the stack file): here `{"status": "x"}` at a run of the runtime's job,
    or of the default function's job. That run is reported `malformed` (ERROR, naming the
    document and its database: the problem line the malformed-document alert counts), is
    never delivered nor run over; and in the same tick every other run is judged: both
    jobs' missed runs, the victim's own included, are caught up by their functions."""
    suffix = uuid.uuid4().hex[:6]
    plain, synced = f"plain-{suffix}", f"synced-{suffix}"
    now, times = recent_minutes(4)
    missed, broken = times[1], times[2]
    in_default, in_runtime = Runs(collection_name), Runs(collection_name, runtime_database)
    in_default.completed(plain, *(t for t in times if t not in (missed, broken)))
    in_runtime.completed(synced, *(t for t in times if t not in (missed, broken)))
    victim, other = (synced, plain) if written_in == "runtime" else (plain, synced)
    victims_runs, others_runs = ((in_runtime, in_default) if written_in == "runtime"
                                 else (in_default, in_runtime))
    others_runs.completed(other, broken)
    broken_id = RunKey(PROJECT, LOCATION, victim, broken).run_id
    victims_runs.client.collection(collection_name).document(broken_id).set({"status": "x"})
    database = runtime_database if written_in == "runtime" else "(default)"

    default_ledger, runtime_ledger = tmp_path / "default.jsonl", tmp_path / "sync.jsonl"
    default_env = function_env(collection_name, default_ledger)
    runtime_env = function_env(collection_name, runtime_ledger, DEDUP_DATABASE=runtime_database)
    with FunctionServer(default_env, threads=4) as default, \
            FunctionServer(runtime_env, threads=4) as sync:
        env = two_functions_watchdog_env(collection_name, plain, synced, runtime_database,
                                         default.url, sync.url)
        logs: list[Mapping[str, Any]] = []
        handler = build_watchdog_handler(
            WatchSettings.from_env(env), firestore.Client(project=PROJECT), logs.append,
            wall_clock=lambda: now,
        )
        first = handler.handle({}, b"")
        assert first.status == 200, first.body
        [problem] = first.body["problems"]
        assert (problem["kind"], problem["job"], problem["schedule_time"], problem["run_id"]) == (
            MALFORMED, victim, z(broken), broken_id)
        assert problem["document"] == f"{collection_name}/{broken_id}"
        assert f"(database {database})" in problem["error"]
        assert "status is str 'x'" in problem["error"]
        # Every other run judged in the same tick: both missed runs caught up.
        assert sorted((c["job"], c["schedule_time"], c["status"])
                      for c in first.body[CAUGHT_UP]) == sorted([
            (plain, z(missed), "completed"), (synced, z(missed), "completed")])
        executed = read_ledger(str(default_ledger)) + read_ledger(str(runtime_ledger))
        assert sorted((e["job"], e["schedule_time"]) for e in executed) == sorted([
            (plain, missed.isoformat()), (synced, missed.isoformat())])
        # The alert path of a malformed document: its ERROR problem line, and the count.
        [line] = [e for e in logs if e.get("kind") == MALFORMED]
        assert (line["severity"], line["component"], line["job"], line["document"]) == (
            "ERROR", "watchdog", victim, problem["document"])
        [summary] = [e for e in logs if str(e["message"]).startswith("watchdog summary")]
        assert (summary[MALFORMED], summary["missed"]) == (1, 0)

        # Scheduler's retry of that run meets the document: a 500 saying why, nothing ran.
        function = sync if written_in == "runtime" else default
        retry = requests.post(function.url, headers=scheduler_headers(
            victim, z(broken), authorization=None), data=QUICK_BODY, timeout=30)
        assert (retry.status_code, retry.json()["outcome"]) == (500, "store_unavailable")
        [said] = [json.loads(text) for text in function.log_text.splitlines()
                  if text.startswith("{") and broken_id in text]
        assert (said["severity"], said["outcome"]) == ("ERROR", "store_unavailable")
        assert f"run record {problem['document']} is malformed" in said["detail"]
        assert "nothing ran" in said["detail"]
        assert "unexpected error" not in function.log_text  # answered, not a crash

        again = handler.handle({}, b"")  # reported once: the cursor moved past it
        assert again.status == 200, again.body
        assert (again.body["problems"], again.body[CAUGHT_UP]) == ([], [])
        assert len(read_ledger(str(default_ledger)) + read_ledger(str(runtime_ledger))) == 2
