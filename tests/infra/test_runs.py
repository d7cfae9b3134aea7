"""`make runs`: a stack's last expected runs, read from the real Firestore emulator, with
records written by the real protocol and the watchdog's own verdicts."""

from __future__ import annotations

import io
import socket
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import google.auth.exceptions
import pytest
import yaml
from google.cloud import firestore

from dedup.cache import CompletedRunCache
from dedup.claim import Claim
from dedup.keys import RunKey
from dedup.outcomes import Outcome
from dedup.protocol import Deduplicator
from dedup.run_context import RunContext
from dedup.store.firestore import FirestoreRunStore
from infra.config import StackConfig
from operator_tools import runs
from tests.stacks import FIXTURE_STACKS_DIR

pytestmark = pytest.mark.usefixtures("firestore_emulator")

PROJECT = "dedup-kit-test"
REGION = "europe-west1"
DATABASE = "sched-dedup-runs"
NOW = datetime(2026, 10, 16, 12, 0, tzinfo=UTC)  # Berlin is on CEST (UTC+2)


def at(hour: int, minute: int) -> datetime:
    return datetime(2026, 10, 16, hour, minute, tzinfo=UTC)


def stack_file(tmp_path: Path, collection: str, *, proxied: bool = False) -> Path:
    config: dict[str, object] = {
        "gcp:project": PROJECT,
        "gcp:region": REGION,
        "scheduler-dedup:namePrefix": "sched-dedup-runs",
        "scheduler-dedup:databaseName": DATABASE,
        "scheduler-dedup:collection": collection,
        "scheduler-dedup:deleteProtection": False,
        "scheduler-dedup:storeTimeoutSeconds": 2,
        "scheduler-dedup:jobs": [
            {"name": "hourly-sync", "schedule": "7 * * * *", "timeZone": "Europe/Berlin",
             "attemptDeadlineSeconds": 120,
             "retry": {"retryCount": 3, "maxRetryDurationSeconds": 600,
                       "minBackoffSeconds": 10, "maxBackoffSeconds": 60}},
            {"name": "heartbeat", "schedule": "*/5 * * * *", "timeZone": "Etc/UTC",
             "attemptDeadlineSeconds": 30, "retry": {"retryCount": 0}},
        ],
    }
    if proxied:  # a third job, started through the idempotent proxy
        config["scheduler-dedup:jobs"] = [*config["scheduler-dedup:jobs"], {  # type: ignore[misc]
            "name": "report", "schedule": "0 * * * *", "attemptDeadlineSeconds": 120,
            "retry": {"retryCount": 0},
            "proxy": {"target": "workflow", "resource":
                      f"projects/{PROJECT}/locations/{REGION}/workflows/daily-report"},
        }]
    path = tmp_path / "Pulumi.runs-test.yaml"
    path.write_text(yaml.safe_dump({"config": config}), encoding="utf-8")
    return path


class Protocol:
    """Records written through the real protocol, with its wall clock set per step."""

    def __init__(self, cfg: StackConfig, job: str, database: str = DATABASE) -> None:
        client = firestore.Client(project=PROJECT, database=database)
        self.store = FirestoreRunStore(client, cfg.dedup.collection, timeout_seconds=5)
        self.job_id = f"{cfg.name_prefix}-{job}"

    def _dedup(self, clock: datetime) -> Deduplicator:
        return Deduplicator(
            self.store, lease_seconds=60, retention_seconds=3650 * 86400,
            cache=CompletedRunCache(0, 3600), wall_clock=lambda: clock,
        )

    def key(self, t: datetime) -> RunKey:
        return RunKey(PROJECT, REGION, self.job_id, t)

    def completed(self, t: datetime) -> None:
        self.completed_key(self.key(t), t)

    def completed_key(self, key: RunKey, clock: datetime) -> None:
        """Any run (a re-run's generation too), completed at `clock`."""
        assert self._dedup(clock).run(key, _ok, b"", {}).outcome is Outcome.COMPLETED

    def failed(self, t: datetime, attempts: int) -> None:
        for _ in range(attempts):
            assert self._dedup(t).run(self.key(t), _boom, b"", {}).outcome is Outcome.FAILED

    def in_progress(self, t: datetime, claimed_at: datetime) -> None:
        assert isinstance(self._dedup(claimed_at).claim(self.key(t)), Claim)


def _ok(context: RunContext) -> str:
    return "ok"


def _boom(context: RunContext) -> None:
    raise RuntimeError("ledger locked")


def run_main(
    *argv: str, now: datetime | None = None,
    client_factory: Callable[..., firestore.Client] | None = None,
) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = runs.main(list(argv), out=out, err=err, now=now, client_factory=client_factory)
    return code, out.getvalue(), err.getvalue()


def rows_by_time(output: str) -> dict[str, list[str]]:
    return {line.split()[0] + " " + line.split()[1]: line.split()
            for line in output.splitlines() if line.startswith("  2026-")}


def test_each_run_with_status_attempts_duration_and_verdict(
    tmp_path: Path, collection_name: str
) -> None:
    path = stack_file(tmp_path, collection_name)
    cfg = runs.stack_config(str(path))
    hourly = Protocol(cfg, "hourly-sync")
    # 06:07 has no record and is before the job's first run; 08:07 is missed.
    hourly.completed(at(7, 7))
    hourly.failed(at(9, 7), attempts=3)
    hourly.in_progress(at(10, 7), claimed_at=at(10, 7))  # never finished: overlong
    hourly.in_progress(at(11, 7), claimed_at=at(11, 58))  # a late retry, still running
    hourly.completed(at(11, 52))  # not a scheduled time of the job: never shown

    code, out, err = run_main(str(path), "--last", "6", "--job", "hourly-sync", now=NOW)
    print(out)
    assert (code, err) == (0, "")
    assert "sched-dedup-runs-hourly-sync  (7 * * * *, Europe/Berlin" in out
    assert "heartbeat" not in out
    header = next(line for line in out.splitlines() if "SCHEDULED (UTC)" in line).split()
    assert header == ["SCHEDULED", "(UTC)", "LOCAL", "STATUS", "ATTEMPTS", "DURATION",
                      "VERDICT"]
    rows = rows_by_time(out)
    assert list(rows) == [f"2026-10-16 {h:02d}:07:00Z" for h in (11, 10, 9, 8, 7, 6)]
    row = rows["2026-10-16 07:07:00Z"]
    assert row[2:5] == ["2026-10-16", "09:07", "CEST"]  # the job's local time
    assert row[5:7] == ["completed", "1"] and row[7].endswith("s") and row[8] == "ok"
    assert rows["2026-10-16 08:07:00Z"][5:] == ["-", "-", "-", "missed"]
    assert rows["2026-10-16 09:07:00Z"][5:7] == ["failed", "3"]
    assert rows["2026-10-16 09:07:00Z"][8] == "failed"
    assert rows["2026-10-16 10:07:00Z"][5:] == ["in_progress", "1", "1h53m+", "overlong"]
    assert rows["2026-10-16 11:07:00Z"][5:] == ["in_progress", "1", "2m00s+", "running"]
    assert rows["2026-10-16 06:07:00Z"][5:] == ["-", "-", "-", "before_first_run"]


def test_runs_not_yet_due_and_a_job_that_never_ran(tmp_path: Path, collection_name: str) -> None:
    path = stack_file(tmp_path, collection_name)
    code, out, _ = run_main(str(path), "--last", "4", now=NOW)
    assert code == 0
    # Every job of the stack; heartbeat's latest runs are inside their retry window + grace,
    # the earlier ones are due and the job has no record at all.
    start, end = out.index("sched-dedup-runs-heartbeat"), out.index("sched-dedup-runs-hourly")
    rows = rows_by_time(out[start:end])
    assert rows["2026-10-16 12:00:00Z"][-1] == "not_due"
    assert rows["2026-10-16 11:45:00Z"][-1] == "never_ran"


def test_a_proxied_jobs_runs_are_read_from_the_proxys_own_database(
    tmp_path: Path, collection_name: str
) -> None:
    path = stack_file(tmp_path, collection_name, proxied=True)
    cfg = runs.stack_config(str(path))
    assert cfg.dedup.proxy_database_name == f"{DATABASE}-proxy"
    Protocol(cfg, "report", cfg.dedup.proxy_database_name).completed(at(10, 0))
    Protocol(cfg, "report").completed(at(9, 0))  # the dedup database: not the proxy's record

    code, out, err = run_main(str(path), "--last", "4", "--job", "report", now=NOW)
    assert (code, err) == (0, "")
    assert f"records in database {DATABASE}-proxy" in out
    rows = rows_by_time(out)
    assert rows["2026-10-16 10:00:00Z"][5:7] == ["completed", "1"]
    assert rows["2026-10-16 09:00:00Z"][5:] == ["-", "-", "-", "before_first_run"]


def test_unknown_stack_and_unknown_job(tmp_path: Path, collection_name: str) -> None:
    code, out, err = run_main("no-such-stack")
    assert code == 2 and out == ""
    assert err.startswith("make runs: unknown stack 'no-such-stack' (stacks: ")
    assert err.count("\n") == 1
    known = r"unknown stack 'no-such-stack' \(stacks: dev, prod, retail\)"
    with pytest.raises(runs.RunsError, match=known):
        runs.stack_config("no-such-stack", FIXTURE_STACKS_DIR)
    code, _, err = run_main(str(stack_file(tmp_path, collection_name)), "--job", "nightly")
    assert code == 2
    assert err == "make runs: no job 'nightly' in the stack (jobs: heartbeat, hourly-sync)\n"


def test_no_credentials_is_one_line_with_the_fix(tmp_path: Path, collection_name: str) -> None:
    def no_adc(**_: object) -> firestore.Client:
        raise google.auth.exceptions.DefaultCredentialsError(  # type: ignore[no-untyped-call]
            "Your default credentials were not found.\nSee https://example.invalid"
        )

    code, out, err = run_main(str(stack_file(tmp_path, collection_name)),
                              client_factory=no_adc)
    assert code == 2 and out == ""
    assert err.count("\n") == 1
    assert "no Google Cloud credentials (Your default credentials were not found.)" in err
    assert "gcloud auth application-default login" in err
    assert "FIRESTORE_EMULATOR_HOST" in err


@pytest.fixture
def unreachable_firestore(monkeypatch: pytest.MonkeyPatch) -> None:
    """FIRESTORE_EMULATOR_HOST set to a port nobody listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.setenv("FIRESTORE_EMULATOR_HOST", f"127.0.0.1:{port}")


@pytest.mark.usefixtures("unreachable_firestore")
def test_unreachable_firestore_is_one_line(tmp_path: Path, collection_name: str) -> None:
    code, _, err = run_main(str(stack_file(tmp_path, collection_name)), now=NOW)
    assert code == 1
    assert err.count("\n") == 1
    # the watchdog's own database too: its cursors and the re-run requests
    assert err.startswith(f"make runs: cannot read the runs in databases '{DATABASE}' and "
                          f"'{DATABASE}-watchdog' of project '{PROJECT}': ")
    assert "gcloud auth application-default login" in err


@pytest.mark.usefixtures("unreachable_firestore")
def test_unreachable_firestore_names_the_proxys_database_too(
    tmp_path: Path, collection_name: str
) -> None:
    """A stack with proxied jobs reads two databases: the line names both."""
    path = stack_file(tmp_path, collection_name, proxied=True)
    code, _, err = run_main(str(path), "--job", "report", now=NOW)
    assert code == 1
    assert err.count("\n") == 1
    assert err.startswith(f"make runs: cannot read the runs in databases '{DATABASE}', "
                          f"'{DATABASE}-proxy' and '{DATABASE}-watchdog' of project "
                          f"'{PROJECT}': ")


def test_a_failed_run_shows_its_last_error_on_a_line_under_its_row(
    tmp_path: Path, collection_name: str
) -> None:
    path = stack_file(tmp_path, collection_name)
    cfg = runs.stack_config(str(path))
    hourly = Protocol(cfg, "hourly-sync")
    hourly.completed(at(8, 7))
    hourly.failed(at(9, 7), attempts=2)
    hourly.in_progress(at(11, 7), claimed_at=at(11, 58))

    code, out, err = run_main(str(path), "--last", "4", "--job", "hourly-sync", now=NOW)
    assert (code, err) == (0, "")
    lines = out.splitlines()
    row = next(i for i, line in enumerate(lines) if line.startswith("  2026-10-16 09:07:00Z"))
    assert lines[row].split()[5:7] == ["failed", "2"]  # the table's columns are unchanged
    assert lines[row + 1] == "    last error (attempt 2): RuntimeError: ledger locked"
    # Only the failed run has one.
    assert sum("last error" in line for line in lines) == 1
    assert rows_by_time(out)["2026-10-16 09:07:00Z"][-1] == "failed"


def test_a_run_taken_over_unfinished_is_shown_ran_twice() -> None:
    """A finished record with an attempt taken over unfinished (dedup.watchdog.ran_twice) gets the
    watchdog's `+ran_twice`; one retried after a failure does not."""
    from dataclasses import replace as changed
    from datetime import timedelta

    from dedup.store import RunRecord, RunStatus, StoredRun
    from dedup.watchdog.due import WatchedJob

    job = WatchedJob("sched-dedup-runs-hourly", "7 * * * *", retry_window_seconds=600)
    t1, t2 = at(9, 7), at(10, 7)

    def done(t: datetime, unfinished: tuple[int, ...]) -> StoredRun:
        key = RunKey(PROJECT, REGION, job.name, t)
        record = changed(RunRecord.claim(key, "a" * 32, 2, 60, t + timedelta(days=7), t),
                         status=RunStatus.COMPLETED, unfinished_attempts=unfinished)
        return StoredRun(record, t + timedelta(minutes=1), NOW)

    found = {RunKey(PROJECT, REGION, job.name, t1).run_id: done(t1, (1,)),
             RunKey(PROJECT, REGION, job.name, t2).run_id: done(t2, ())}
    rows = runs.job_table(job, PROJECT, REGION, found, [t2, t1], NOW, 300, t1)
    assert [row[-1] for row in rows] == ["ok", "ok+ran_twice"]


def test_a_malformed_record_is_shown_malformed_with_why_and_the_other_runs_as_ever(
    tmp_path: Path, collection_name: str
) -> None:
    """A document job code wrote at a run's ID that is no run record: its row says
    `malformed` (the watchdog's verdict), the reason on a line under it."""
    path = stack_file(tmp_path, collection_name)
    cfg = runs.stack_config(str(path))
    hourly = Protocol(cfg, "hourly-sync")
    for hour in (8, 10, 11):
        hourly.completed(at(hour, 7))
    broken = hourly.key(at(9, 7)).run_id
    hourly.store.client.collection(collection_name).document(broken).set({"status": "x"})

    code, out, err = run_main(str(path), "--last", "4", "--job", "hourly-sync", now=NOW)
    assert (code, err) == (0, "")
    rows = rows_by_time(out)
    assert rows["2026-10-16 09:07:00Z"][5:] == ["malformed", "-", "-", "malformed"]
    assert [rows[f"2026-10-16 {h:02d}:07:00Z"][-1] for h in (8, 10, 11)] == ["ok"] * 3
    lines = out.splitlines()
    row = next(i for i, line in enumerate(lines) if line.startswith("  2026-10-16 09:07:00Z"))
    assert lines[row + 1] == (f"    run record {collection_name}/{broken} is malformed: status "
                              "is str 'x', not one of ['completed', 'failed', 'in_progress', "
                              "'skipped']: not judged")
