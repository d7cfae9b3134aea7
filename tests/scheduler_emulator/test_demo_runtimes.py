"""`make demo` and `make serve` with runtimes (demo/local_runtimes.py): each runtime served as
its own function, with its demoSettings over its settings and its secrets' values from the
stack's local, git-ignored secrets file; the Scheduler emulator delivering each job to the
function it runs in; a runtime's records in its own database; the named errors for a
missing file, a missing secret and a secret file that cannot be written; and the demo of
the retail example passing with nothing of a secret's value in its report or logs."""

from __future__ import annotations

import base64
import io
import json
import os
import shutil
import subprocess
import sys
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest
import requests
import yaml
from google.cloud import firestore

from dedup.keys import RunKey
from dedup.store.firestore import FirestoreRunStore
from demo.local_runtimes import (
    LocalRuntime,
    LocalSecretsError,
    NeededSecret,
    check_secret_files,
    local_runtimes,
    local_secrets_file,
    remove_secret_files,
    secret_file_marker,
    secret_files_written,
    team_code_warning,
    write_secret_files,
)
from demo.options import DemoOptions
from demo.outcome import DemoOutcome
from demo.record_stores import emulator_env
from demo.report import render
from demo.report_json import outcome_json
from demo.run import run_demo
from demo.serve import ServedStack
from example_jobs.retail import fingerprint
from local_stack import FirestoreEmulator
from local_stack.deliveries import scheduler_headers
from operator_tools import rerun
from scheduler_emulator import SchedulerEmulator
from scheduler_emulator.faults import FaultPlan
from scheduler_emulator.oidc import scheduler_token
from scheduler_emulator.stack import Job, Stack, load_stack
from tests.scheduler_emulator.target import RecordingTarget
from tests.stacks import fixture_stack_file

# A value that must never leave the secrets file but as the job's environment.
TOKEN = f"local-token-{uuid.uuid4().hex}"
DEMO_URL = "http://127.0.0.1:8099/v2"  # the retail stack's demoSettings
SYNC_DATABASE = "retail-sync"  # <databaseName>-<runtime> of the retail stack (databaseName: retail)


def retail_copy(directory: Path, secrets: str | None = None, collection: str | None = None) -> Path:
    """The example retail stack file in `directory` (its records in `collection`, if
    given), with a local secrets file beside it holding `secrets` (none: no file)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "Pulumi.retail.yaml"
    shutil.copy(fixture_stack_file("retail"), path)
    if collection is not None:
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
        document["config"]["scheduler-dedup:collection"] = collection
        path.write_text(yaml.safe_dump(document), encoding="utf-8")
    if secrets is not None:
        local_secrets_file(path).write_text(secrets, encoding="utf-8")
    return path


# -- the secrets, checked before anything starts -------------------------------------------


def test_a_missing_secrets_file_is_a_named_error_with_the_fix(tmp_path: Path) -> None:
    stack = load_stack(retail_copy(tmp_path))
    with pytest.raises(LocalSecretsError) as raised:
        local_runtimes(stack)
    message = str(raised.value)
    assert str(tmp_path / "retail.local-secrets.yaml") in message  # <stack dir>/<stack>.local-...
    assert "no such file" in message and "'inventory-api-token'" in message
    assert "runtime 'sync' needs it as environment variable INVENTORY_API_TOKEN" in message
    assert "`inventory-api-token: <value>`" in message and "never commit it" in message
    # Only the runtimes of the jobs replayed need their secrets: the export runtime has none.
    assert local_runtimes(stack.only(["nightly-export"]))[0].name == "export"


def test_a_secret_the_file_lacks_is_a_named_error_and_no_value_is_shown(tmp_path: Path) -> None:
    other = f"other-value-{uuid.uuid4().hex}"
    stack = load_stack(retail_copy(tmp_path, f"some-other-secret: {other}\n"))
    with pytest.raises(LocalSecretsError) as raised:
        local_runtimes(stack)
    message = str(raised.value)
    assert "has no value for secret 'inventory-api-token', which runtime 'sync' needs it as " \
        "environment variable INVENTORY_API_TOKEN: add `inventory-api-token: <value>`" in message
    assert other not in message
    local_secrets_file(tmp_path / "Pulumi.retail.yaml").write_text(
        "inventory-api-token: 0123\n", encoding="utf-8")  # YAML reads an octal number
    with pytest.raises(LocalSecretsError, match="is not text: quote it"):
        local_runtimes(stack)


def test_a_runtime_gets_its_demo_settings_and_its_local_secret_and_never_shows_it(
    tmp_path: Path,
) -> None:
    stack = load_stack(retail_copy(tmp_path, f"inventory-api-token: {TOKEN}\n"))
    sync, export = local_runtimes(stack)
    base = {"DEDUP_DATABASE": "retail", "DEMO_LEDGER": "/ledger", "DEDUP_JOB": "wrapper:run"}
    env = sync.environment(base, tables_dir=tmp_path / "tables", job="wrapper:run",
                           job_logic_env="LOGIC")
    assert env["INVENTORY_API_URL"] == DEMO_URL and env["INVENTORY_API_TOKEN"] == TOKEN
    assert env["DEDUP_DATABASE"] == SYNC_DATABASE and env["DEMO_LEDGER"] == "/ledger"
    assert json.loads(env["LOGIC"]) == {
        "retail-inventory-sync": "example_jobs.retail:sync_inventory"}
    table = json.loads(next((tmp_path / "tables").iterdir()).read_text())
    assert table == {"retail-inventory-sync": "wrapper:run"}  # only its own jobs
    assert env["DEDUP_ALLOWED_CALLERS"] == "retail-invoker@acme-retail-prod.iam.gserviceaccount.com"
    # export has catchUp: the watchdog delivers its runs, so the function admits it too
    assert export.allowed_callers[1].startswith("retail-watchdog@")
    assert export.settings == {"EXPORT_BUCKET": "acme-retail-exports-demo"}
    for shown in (repr(sync), sync.describe(), json.dumps(sync.to_json())):
        assert TOKEN not in shown
    assert "INVENTORY_API_URL (demoSettings)" in sync.describe()
    warning = team_code_warning(stack)
    assert warning is not None and "runtime sync" in warning and "demoSettings" in warning


def file_runtime(name: str, path: Path, value: str) -> LocalRuntime:
    return LocalRuntime(
        name=name, database=f"runs-{name}", job_routes={}, settings={}, demo_settings=(),
        secrets=(NeededSecret(name, "api-key", None, str(path)),), allowed_callers=(),
        max_instances=1, secret_files={str(path): value})


def test_a_file_secret_is_written_before_and_removed_after_or_named_when_it_cannot_be(
    tmp_path: Path,
) -> None:
    path = tmp_path / "secrets" / "api" / "key"
    created = write_secret_files([file_runtime("sync", path, TOKEN)])
    assert path.read_text() == TOKEN and path.stat().st_mode & 0o777 == 0o600
    marker = yaml.safe_load(secret_file_marker(path).read_text())
    assert marker["pid"] == os.getpid() and marker["secret"] == "api-key"
    assert TOKEN not in secret_file_marker(path).read_text()
    remove_secret_files(created)
    assert list(tmp_path.iterdir()) == []  # the file, its marker and the folders it made
    blocked = tmp_path / "blocked"
    blocked.write_text("a file where the secret's folder should be")
    with pytest.raises(LocalSecretsError) as raised:
        write_secret_files([file_runtime("sync", blocked / "key", TOKEN)])
    message = str(raised.value)
    assert f"runtime 'sync' reads a secret as the file {blocked / 'key'}" in message
    assert f"create the folder {blocked} writable by you" in message and "`env:`" in message
    assert TOKEN not in message
    with pytest.raises(LocalSecretsError, match="both read a secret file at"):
        write_secret_files([file_runtime("a", path, "one"), file_runtime("b", path, "two")])
    assert list(tmp_path.iterdir()) == [blocked]


def test_a_file_already_at_a_secret_path_is_a_named_error_and_left_untouched(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    mine = tmp_path / "home" / ".bashrc"  # (the config refuses /tmp paths: not its stack)
    mine.parent.mkdir()
    mine.write_text("export PATH=...\n")
    mine.chmod(0o644)
    runtimes = (file_runtime("sync", tmp_path / "free" / "key", TOKEN),
                file_runtime("export", mine, TOKEN))
    with pytest.raises(LocalSecretsError) as raised:
        check_secret_files(runtimes)  # what local_runtimes runs, before anything starts
    message = str(raised.value)
    assert message.startswith(
        f"runtime 'export' reads secret 'api-key' as the file {mine}, which already exists "
        "and is not a secret file a demo wrote (no .bashrc.written-by-demo beside it)")
    assert "never over a file of yours" in message and "Move it aside" in message
    built: list[object] = []
    monkeypatch.setattr("demo.serve.LocalFunction", lambda *a, **k: built.append(a))
    stack = load_stack(retail_copy(tmp_path / "stack", f"inventory-api-token: {TOKEN}\n"))
    with pytest.raises(LocalSecretsError, match="already exists"):
        ServedStack(stack, "127.0.0.1:1", workdir=tmp_path / "serve", runtimes=runtimes).start()
    assert built == []  # nothing served
    assert mine.read_text() == "export PATH=...\n" and mine.stat().st_mode & 0o777 == 0o644
    assert sorted(p.name for p in mine.parent.iterdir()) == [".bashrc"]  # no marker either
    assert not (tmp_path / "free").exists()  # nor the other runtime's file


def test_a_secret_file_a_killed_demo_left_is_named_by_its_marker_with_the_fix(
    tmp_path: Path,
) -> None:
    path = tmp_path / "secrets" / "key"
    write_secret_files([file_runtime("sync", path, TOKEN)])  # and never removed: "killed"
    marker = secret_file_marker(path)
    with pytest.raises(LocalSecretsError) as raised:  # its writer (this process) still runs
        write_secret_files([file_runtime("sync", path, "another")])
    assert f"a demo still running wrote it (process {os.getpid()}, says {marker})" in str(
        raised.value)
    finished = subprocess.Popen(["true"])
    finished.wait()
    document = yaml.safe_load(marker.read_text())
    marker.write_text(yaml.safe_dump({**document, "pid": finished.pid}))
    with pytest.raises(LocalSecretsError) as raised:
        write_secret_files([file_runtime("sync", path, "another")])
    message = str(raised.value)
    assert f"a demo that was killed (process {finished.pid}, says {marker}; it is gone) " \
        f"left {path} and {marker} behind: remove it: `rm {path} {marker}`" in message
    assert path.read_text() == TOKEN and TOKEN not in message
    path.unlink()  # killed between removing the file and its marker: the marker alone
    with pytest.raises(LocalSecretsError, match=f"left {marker} behind: remove it: `rm {marker}`"):
        write_secret_files([file_runtime("sync", path, "another")])
    marker.unlink()  # the fix done: written again
    remove_secret_files(write_secret_files([file_runtime("sync", path, "another")]))
    assert not path.exists() and not marker.exists()


def test_secret_files_are_removed_when_serving_fails_after_writing_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    path = tmp_path / "secrets" / "key"
    runtimes = (file_runtime("sync", path, TOKEN),)
    with pytest.raises(RuntimeError, match="the demo failed"), secret_files_written(runtimes):
        assert path.read_text() == TOKEN
        raise RuntimeError("the demo failed")  # make demo: its `with` block
    assert list(tmp_path.iterdir()) == []
    seen: list[str] = []

    class FailingFunction:  # make serve: the function fails to start, the files written
        def __init__(self, *args: object, **kwargs: object) -> None:
            seen.append(path.read_text())
            raise RuntimeError("the function did not start")

    monkeypatch.setattr("demo.serve.LocalFunction", FailingFunction)
    stack = load_stack(retail_copy(tmp_path / "stack", f"inventory-api-token: {TOKEN}\n"))
    with pytest.raises(RuntimeError, match="did not start"):
        ServedStack(stack, "127.0.0.1:1", workdir=tmp_path / "serve", runtimes=runtimes).start()
    assert seen == [TOKEN]
    assert not (tmp_path / "secrets").exists()


def test_the_command_stops_before_anything_starts_without_the_secrets_file(
    tmp_path: Path, kit_checkout: Path
) -> None:
    stack = retail_copy(tmp_path)
    done = subprocess.run(
        [sys.executable, "-m", "operator_tools", "demo", "--stack", str(stack)],
        cwd=kit_checkout, env=dict(os.environ), capture_output=True, text=True, timeout=120,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert "WARNING: this runs your jobs' real code on this machine" in done.stderr
    assert "error: " in done.stderr and "retail.local-secrets.yaml: no such file" in done.stderr
    assert "Firestore emulator" not in done.stderr  # nothing started


# -- the emulator delivers each job to its own function -------------------------------------


def test_the_emulator_delivers_a_runtime_job_to_its_runtimes_url() -> None:
    stack = Stack("p", "r", (Job("plain", "*/5 * * * *"),
                             Job("synced", "*/5 * * * *", runtime="sync")),
                  invoker_email="inv@p.iam")
    default, runtime = RecordingTarget(), RecordingTarget()
    with default.serving(), runtime.serving():
        SchedulerEmulator(default.url, stack, runtime_urls={"sync": runtime.url}, ticks=1,
                          time_scale=0.001).run()
    assert [r.header("X-CloudScheduler-JobName") for r in default.received] == [
        "projects/p/locations/r/jobs/plain"]
    [synced] = runtime.received
    assert synced.header("X-CloudScheduler-JobName") == "projects/p/locations/r/jobs/synced"
    payload = (synced.header("Authorization") or "").split(".")[1]
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    assert (claims["aud"], claims["email"]) == (runtime.url, "inv@p.iam")  # its own audience
    with pytest.raises(ValueError, match=r"synced \(runtime sync\)"):
        SchedulerEmulator(default.url, stack, runtime_urls={}, ticks=1)


# -- the retail demo, served and replayed -----------------------------------------------------


@pytest.fixture(scope="module")
def retail_demo(
    firestore_emulator: FirestoreEmulator, tmp_path_factory: pytest.TempPathFactory
) -> tuple[DemoOutcome, Path, str]:
    """The demo of the retail example's runtime jobs (a few runs, Scheduler's faults, the
    watchdog's scenes), with its logs kept; and its own collection."""
    directory = tmp_path_factory.mktemp("retail")
    stack = retail_copy(directory, f"inventory-api-token: {TOKEN}\n")
    collection = f"runs_{uuid.uuid4().hex[:12]}"
    outcome = run_demo(DemoOptions(
        stack_path=stack, jobs=("inventory-sync", "nightly-export"), ticks=3, workers=2,
        threads=4, faults=FaultPlan.parse(["duplicate=0.3", "lost-ack=0.3"], seed=5),
        firestore_host=firestore_emulator.host, paths=False, collection=collection,
        logs_dir=directory / "logs",
    ))
    return outcome, directory / "logs", collection


def test_the_retail_demo_passes_and_its_report_and_logs_hold_no_secret_value(
    retail_demo: tuple[DemoOutcome, Path, str],
) -> None:
    outcome, logs, _ = retail_demo
    text = render(outcome)
    assert outcome.ok, "\n".join(text)
    assert text[-1].startswith("RESULT: PASS")
    assert any(line.startswith("runtime sync: its own function http://127.0.0.1:")
               and "records database retail-sync" in line
               and "INVENTORY_API_URL (demoSettings)" in line
               and "inventory-api-token as INVENTORY_API_TOKEN" in line for line in text)
    # The runtime's catch-up job: re-run and backfilled through its own function and database.
    assert outcome.watch is not None and outcome.watch.rerun is not None
    assert outcome.watch.rerun.job == "nightly-export" and outcome.watch.rerun.ok
    assert outcome.backfill is not None and outcome.backfill.ok
    assert {j.job for j in outcome.jobs} == {"inventory-sync", "nightly-export"}
    assert {p.name for p in logs.iterdir()} >= {"function.log", "runtime-sync.log",
                                                  "runtime-export.log"}
    shown = ["\n".join(text), json.dumps(outcome_json(outcome), default=str),
             *(p.read_text() for p in logs.iterdir())]
    assert not [s for s in shown if TOKEN in s]


def test_a_served_runtime_records_its_setting_and_secret_in_its_own_database(
    retail_demo: tuple[DemoOutcome, Path, str],
) -> None:
    outcome, _, collection = retail_demo
    stack = outcome.stack
    first = next(s for s in outcome.summaries
                 if s.job == "inventory-sync" and s.executions == 1 and not s.forced)
    assert first.schedule_time is not None
    run_id = RunKey(stack.project, stack.region, "retail-inventory-sync",
                    first.schedule_time).run_id

    def record(database: str) -> dict[str, object] | None:
        with emulator_env(outcome.firestore_host):
            client = firestore.Client(project=stack.project, database=database)
        try:
            stored = FirestoreRunStore(client, collection, 10.0).get(run_id)
        finally:
            client.close()  # type: ignore[no-untyped-call]
        return None if stored is None else json.loads(stored.record.result_json or "null")

    result = record(SYNC_DATABASE)
    assert result is not None
    assert (result["api"], result["token"]) == (DEMO_URL, fingerprint(TOKEN))
    assert record(stack.database_name) is None  # not in the dedup function's database


def test_make_serve_serves_each_runtime_and_delivers_its_rerun_to_it(
    tmp_path: Path, firestore_emulator: FirestoreEmulator, collection_name: str,
) -> None:
    path = retail_copy(tmp_path, f"inventory-api-token: {TOKEN}\n", collection_name)
    stack = load_stack(path)
    (tmp_path / "no-secret").mkdir()
    with pytest.raises(LocalSecretsError, match="no value for secret 'inventory-api-token'"):
        ServedStack(load_stack(retail_copy(tmp_path / "no-secret", "")),
                    firestore_emulator.host, workdir=tmp_path / "never")
    first = datetime(2026, 11, 2, 1, 30, tzinfo=UTC)  # a nightly-export run, 02:30 Berlin
    lines: list[str] = []
    with ServedStack(stack, firestore_emulator.host, workdir=tmp_path / "serve",
                     scheduler=False, workers=1, log=lines.append) as served:
        assert served.function is not None
        urls = served.function.runtime_urls
        assert set(urls) == {"sync", "export"}
        assert any(line.startswith(f"runtime sync: its own function serving on {urls['sync']}")
                   and "INVENTORY_API_URL (demoSettings)" in line for line in lines)
        url = urls["export"]
        reply = requests.post(url, headers=scheduler_headers(
            "projects/acme-retail-prod/locations/us-west1/jobs/retail-nightly-export",
            first.strftime("%Y-%m-%dT%H:%M:%SZ"), project=stack.project, location=stack.region,
            authorization=f"Bearer {scheduler_token(url, stack.invoker_email)}",
        ), timeout=30)
        assert reply.json()["outcome"] == "completed", served.function.log_text[-3000:]
        # `make rerun ... NOW=1`: the served watchdog reads the run in the export runtime's
        # database and delivers generation 1 to the export runtime's function.
        out, err = io.StringIO(), io.StringIO()
        code = rerun.main([str(path), "--job", "nightly-export", "--time",
                           first.strftime("%Y-%m-%dT%H:%M:%SZ"), "--reason", "rehearsal",
                           "--now", served.watchdog_url], out=out, err=err)
        assert (code, err.getvalue()) == (0, ""), out.getvalue()
        assert out.getvalue().splitlines()[-1] == (
            "tick now: the watchdog delivered 1 re-run(s): retail-nightly-export @ "
            f"{first:%Y-%m-%dT%H:%M:%SZ} generation 1: completed")
        assert TOKEN not in served.function.log_text
