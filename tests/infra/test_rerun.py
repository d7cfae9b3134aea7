"""`make rerun` (python -m operator_tools rerun) and the generations `make runs` shows, against the
real Firestore emulator with records written by the real protocol."""

from __future__ import annotations

import io
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from google.cloud import firestore

from dedup.cache import CompletedRunCache
from dedup.claim import Claim
from dedup.keys import RunKey
from dedup.outcomes import Outcome
from dedup.protocol import Deduplicator
from dedup.run_context import PermanentFailure, RunContext
from dedup.store.firestore import FirestoreRunStore
from dedup.watchdog.reruns import DONE, REFUSED, FirestoreRerunQueue, reruns_collection
from operator_tools import rerun, runs
from tests.function.helpers import lease_lapsed
from tests.infra.test_runs import DATABASE, NOW, PROJECT, REGION, Protocol, at, run_main

pytestmark = pytest.mark.usefixtures("firestore_emulator")

JOB = "hourly-sync"


def stack_file(tmp_path: Path, collection: str, *, reruns: bool = True) -> Path:
    config: dict[str, Any] = {
        "gcp:project": PROJECT,
        "gcp:region": REGION,
        "scheduler-dedup:namePrefix": "sched-dedup-runs",
        "scheduler-dedup:databaseName": DATABASE,
        "scheduler-dedup:collection": collection,
        "scheduler-dedup:storeTimeoutSeconds": 2,
        "scheduler-dedup:watchdog": {"reruns": reruns},
        "scheduler-dedup:jobs": [
            {"name": JOB, "schedule": "7 * * * *", "timeZone": "Europe/Berlin",
             "attemptDeadlineSeconds": 120},
        ],
    }
    path = tmp_path / "Pulumi.rerun-test.yaml"
    path.write_text(yaml.safe_dump({"config": config}), encoding="utf-8")
    return path


def own_queue(collection: str) -> FirestoreRerunQueue:
    """The requests, in the watchdog's own database (`<databaseName>-watchdog`)."""
    client = firestore.Client(project=PROJECT, database=f"{DATABASE}-watchdog")
    return FirestoreRerunQueue(FirestoreRunStore(client, collection, 5),
                               reruns_collection(collection))


def test_make_rerun_writes_the_watchdogs_own_database_only(
    tmp_path: Path, collection_name: str,
) -> None:
    """Issue 25 (2): the request is in the database only the watchdog and the operators
    write, not in the dedup database (which job code writes)."""
    path = stack_file(tmp_path, collection_name)
    hourly = Protocol(runs.stack_config(str(path)), JOB)
    hourly.completed(at(9, 7))
    assert ask(path, "2026-10-16T09:07:00Z")[0] == 0
    [request] = own_queue(collection_name).for_job(hourly.job_id)
    assert request.generation == 1
    dedup = FirestoreRerunQueue(hourly.store, reruns_collection(collection_name))
    assert dedup.for_job(hourly.job_id) == []


def rerun_main(*argv: str, now: datetime = NOW) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = rerun.main(list(argv), out=out, err=err, now=now)
    return code, out.getvalue(), err.getvalue()


def ask(
    path: Path, time: str, reason: str = "ledger import fixed", now: datetime = NOW,
    *, again: bool = False,
) -> tuple[int, str, str]:
    return rerun_main(str(path), "--job", JOB, "--time", time, "--reason", reason,
                      "--requested-by", "ops@example.com", *(["--again"] if again else []),
                      now=now)


def test_a_rerun_is_recorded_refused_while_pending_and_shown_by_make_runs(
    tmp_path: Path, collection_name: str,
) -> None:
    path = stack_file(tmp_path, collection_name)
    cfg = runs.stack_config(str(path))
    hourly = Protocol(cfg, JOB)
    hourly.completed(at(9, 7))

    code, out, err = ask(path, "2026-10-16T11:07:00+02:00")  # 09:07Z in Berlin time
    assert (code, err) == (0, "")
    generation_1 = RunKey(PROJECT, REGION, hourly.job_id, at(9, 7), generation=1).run_id
    assert out.startswith(
        f"re-run requested: {hourly.job_id} @ 2026-10-16T09:07:00Z, generation 1 (run_id "
        f"{generation_1}); latest before: completed; asked by ops@example.com: ledger "
        "import fixed\n"
    )
    code, _, err = ask(path, "2026-10-16T09:07:00Z", reason="again")
    assert code == 2
    assert err.startswith(f"make rerun: a re-run of {hourly.job_id} @ 2026-10-16T11:07+02:00 "
                          "(2026-10-16T09:07:00Z) (generation 1, asked by ops@example.com")
    assert "is still pending" in err

    code, out, _ = run_main(str(path), "--last", "3", "--job", JOB, now=NOW)
    assert code == 0
    lines = out.splitlines()
    row = next(i for i, line in enumerate(lines) if line.startswith("  2026-10-16 09:07:00Z"))
    assert lines[row + 1] == (
        "    + generation 1: request pending; asked by ops@example.com at 2026-10-16 12:00Z: "
        "ledger import fixed"
    )

    # The watchdog delivered it: generation 1 ran, and the request is done.
    rerun_key = RunKey(PROJECT, REGION, hourly.job_id, at(9, 7), generation=1)
    hourly.completed_key(rerun_key, at(12, 1))
    queue = own_queue(collection_name)
    [request] = queue.for_job(hourly.job_id)
    # Deleted by the TTL policy with the runs it asked for (the stack's retention).
    assert request.expire_at == NOW + timedelta(seconds=cfg.dedup.retention_seconds)
    queue.finish(request, DONE, "completed", at(12, 1))
    code, out, _ = run_main(str(path), "--last", "3", "--job", JOB, now=NOW)
    [line] = [line for line in out.splitlines() if "+ generation 1" in line]
    assert line.startswith("    + generation 1: completed, 1 attempt(s), ")
    # Generation 0's row is unchanged, and a further re-run, confirmed, is generation 2.
    assert ask(path, "2026-10-16T09:07:00Z")[0] == 2  # not confirmed: refused
    assert ask(path, "2026-10-16T09:07:00Z", again=True)[1].startswith(
        f"re-run requested: {hourly.job_id} @ 2026-10-16T09:07:00Z, generation 2 ")


def test_refusals_name_what_is_wrong_and_write_nothing(
    tmp_path: Path, collection_name: str,
) -> None:
    path = stack_file(tmp_path, collection_name)
    cfg = runs.stack_config(str(path))
    hourly = Protocol(cfg, JOB)
    hourly.in_progress(at(11, 7), claimed_at=datetime(2026, 10, 16, 11, 59, tzinfo=UTC))

    code, _, err = ask(path, "2026-10-16T11:07:00Z")
    assert code == 2 and "generation 0 of sched-dedup-runs-hourly-sync @ " in err
    assert "is in progress (attempt 1): wait until it has finished" in err
    code, _, err = ask(path, "2026-10-16T11:00:00Z")
    assert (code, err) == (2, (
        "make rerun: 2026-10-16T13:00+02:00 (2026-10-16T11:00:00Z) is not a scheduled time "
        "of job sched-dedup-runs-hourly-sync ('7 * * * *' in Europe/Berlin): the nearest are "
        "2026-10-16T12:07+02:00 (2026-10-16T10:07:00Z) and 2026-10-16T13:07+02:00 "
        "(2026-10-16T11:07:00Z)\n"
    ))
    code, _, err = ask(path, "2026-10-16T12:07:00Z")
    assert code == 2 and "is in the future: only a run that was due can be re-run" in err
    code, _, err = rerun_main(str(path), "--job", "nope", "--time", "2026-10-16T09:07:00Z",
                              "--reason", "x")
    assert (code, err) == (2, "make rerun: no job 'nope' in the stack (jobs: hourly-sync)\n")
    code, _, err = ask(stack_file(tmp_path, collection_name, reruns=False),
                       "2026-10-16T09:07:00Z")
    assert code == 2 and "set watchdog.reruns: true in the stack file" in err
    queue = own_queue(collection_name)
    assert queue.for_job(hourly.job_id) == []


# -- re-runs never overlap Scheduler's own retries ---------------------------------------------
# The stack's job: 3 retries 30..300 s apart of 120 s attempts, a retry window of 690 s; with
# the watchdog's grace (300 s), Scheduler may retry the 11:07Z run until 11:23:30Z.
RETRIED_UNTIL = at(11, 23) + timedelta(seconds=30)


def lapsed_claim(hourly: Protocol, t: datetime) -> None:
    """Attempt 1 of run `t` claimed it and its instance was killed: the lease (1 s, by the
    store's clock) lapses with the record still in progress."""
    dedup = Deduplicator(hourly.store, lease_seconds=1, retention_seconds=3650 * 86400,
                         cache=CompletedRunCache(0, 3600), wall_clock=lambda: t)
    assert isinstance(dedup.claim(hourly.key(t)), Claim)
    lease_lapsed(hourly.store, hourly.key(t).run_id)


@pytest.mark.parametrize("attempt_1", ["failed", "killed"])
def test_a_rerun_while_scheduler_may_retry_the_run_is_refused_until_its_window_passed(
    tmp_path: Path, collection_name: str, attempt_1: str,
) -> None:
    path = stack_file(tmp_path, collection_name)
    cfg = runs.stack_config(str(path))
    hourly = Protocol(cfg, JOB)
    [job] = runs.watched_jobs(cfg, JOB)
    assert (job.retry_window_seconds, cfg.watchdog.grace_seconds) == (690, 300)
    if attempt_1 == "failed":
        hourly.failed(at(11, 7), attempts=1)  # the job raised: Scheduler retries it
    else:
        lapsed_claim(hourly, at(11, 7))  # the next retry takes generation 0 over

    status = "failed" if attempt_1 == "failed" else "in_progress, its lease lapsed"
    for now in (at(11, 9), RETRIED_UNTIL - timedelta(seconds=1)):
        code, out, err = ask(path, "2026-10-16T11:07:00Z", now=now)
        assert (code, out) == (2, "")
        assert err == (
            f"make rerun: {hourly.job_id} @ 2026-10-16T13:07+02:00 (2026-10-16T11:07:00Z) "
            f"has not completed ({status}) and Scheduler may still retry it until its retry "
            "window (690 s) + the watchdog's grace (300 s) have passed: a re-run now could "
            "execute next to that retry; ask again at or after 2026-10-16T13:23:30+02:00 "
            "(2026-10-16T11:23:30Z)\n"
        )
    queue = own_queue(collection_name)
    assert queue.for_job(hourly.job_id) == []  # nothing for the watchdog to deliver

    code, out, err = ask(path, "2026-10-16T11:07:00Z", now=RETRIED_UNTIL)
    assert (code, err) == (0, "")
    assert f"{hourly.job_id} @ 2026-10-16T11:07:00Z, generation 1 " in out
    assert [r.generation for r in queue.for_job(hourly.job_id)] == [1]


def _refused_start(context: RunContext) -> None:
    raise PermanentFailure("the downstream refused the start: HTTP 403")


@pytest.mark.parametrize("attempt_1", ["completed", "failed for good"])
def test_a_run_answered_2xx_can_be_rerun_at_once(
    tmp_path: Path, collection_name: str, attempt_1: str,
) -> None:
    # Scheduler stops retrying a run once it got a 2xx: no window to wait for. A run failed
    # for good (`permanent`) was answered 200 too, and every later delivery is the same.
    path = stack_file(tmp_path, collection_name)
    hourly = Protocol(runs.stack_config(str(path)), JOB)
    if attempt_1 == "completed":
        hourly.completed(at(11, 7))
    else:
        dedup = Deduplicator(hourly.store, lease_seconds=60, retention_seconds=3650 * 86400,
                             cache=CompletedRunCache(0, 3600), wall_clock=lambda: at(11, 7))
        delivery = dedup.run(hourly.key(at(11, 7)), _refused_start, b"", {})
        assert delivery.outcome is Outcome.FAILED_PERMANENT
    code, out, err = ask(path, "2026-10-16T11:07:00Z", now=at(11, 8))
    assert (code, err) == (0, "")
    before = "completed" if attempt_1 == "completed" else "failed"
    assert "generation 1 " in out and f"latest before: {before}" in out


def test_after_a_refused_request_the_next_rerun_asks_for_the_next_generation(
    tmp_path: Path, collection_name: str,
) -> None:
    # The watchdog refused generation 1 (say, a job it did not watch then): no record for
    # it, and the next `make rerun` asks for generation 2 rather than meeting the request.
    path = stack_file(tmp_path, collection_name)
    cfg = runs.stack_config(str(path))
    hourly = Protocol(cfg, JOB)
    hourly.completed(at(9, 7))
    queue = own_queue(collection_name)

    assert ask(path, "2026-10-16T09:07:00Z")[0] == 0
    [first] = queue.for_job(hourly.job_id)
    queue.finish(first, REFUSED, "job not watched by this watchdog", at(12, 1))
    code, out, err = ask(path, "2026-10-16T09:07:00Z", reason="again")
    assert (code, err) == (0, "")
    assert "generation 2 " in out
    assert [(r.generation, r.status) for r in queue.for_job(hourly.job_id)] == [
        (1, REFUSED), (2, "pending")]

    # A missed run's generation-0 request refused: the next one is generation 1.
    code, out, _ = ask(path, "2026-10-16T10:07:00Z")
    assert code == 0 and "generation 0 " in out and "latest before: no record" in out
    [missed] = [r for r in queue.for_job(hourly.job_id) if r.schedule_time == at(10, 7)]
    queue.finish(missed, REFUSED, "job not watched by this watchdog", at(12, 1))
    code, out, err = ask(path, "2026-10-16T10:07:00Z", reason="again")
    assert (code, err) == (0, "")
    assert "generation 1 " in out


def test_a_second_rerun_of_a_run_already_rerun_asks_for_confirmation(
    tmp_path: Path, collection_name: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 26 (6): a run re-run once is not queued again by a repeated `make rerun`
    unless the operator confirms (CONFIRM=1, --again); the refusal names what already ran."""
    monkeypatch.delenv("CONFIRM", raising=False)
    path = stack_file(tmp_path, collection_name)
    hourly = Protocol(runs.stack_config(str(path)), JOB)
    hourly.completed(at(9, 7))
    queue = own_queue(collection_name)
    assert ask(path, "2026-10-16T09:07:00Z")[0] == 0  # the first re-run: no question
    [first] = queue.for_job(hourly.job_id)
    hourly.completed_key(first.key, at(12, 1))  # the watchdog delivered it
    queue.finish(first, DONE, "completed", at(12, 1))

    code, out, err = ask(path, "2026-10-16T09:07:00Z", reason="again, by mistake")
    assert (code, out) == (2, "")
    assert err == (
        f"make rerun: {hourly.job_id} @ 2026-10-16T11:07+02:00 (2026-10-16T09:07:00Z) has "
        "been re-run already: generation 1 completed (asked by ops@example.com at "
        "2026-10-16 12:00Z: ledger import fixed). Another re-run executes it once more, as "
        "generation 2: if that is what you want, ask again with CONFIRM=1 (`make rerun ... "
        "CONFIRM=1`, or `scheduler-dedup rerun ... --again`)\n"
    )
    assert [r.generation for r in queue.for_job(hourly.job_id)] == [1]  # nothing queued

    # CONFIRM=1 in the environment, as `make rerun ... CONFIRM=1` passes it; CONFIRM=0 is no.
    monkeypatch.setenv("CONFIRM", "0")
    assert ask(path, "2026-10-16T09:07:00Z")[0] == 2
    monkeypatch.setenv("CONFIRM", "1")
    code, out, err = ask(path, "2026-10-16T09:07:00Z", reason="downstream lost it again")
    assert (code, err) == (0, "")
    assert f"{hourly.job_id} @ 2026-10-16T09:07:00Z, generation 2 " in out
    assert "Confirmed: this run had been re-run already (generation 1 completed" in out
    assert [r.generation for r in queue.for_job(hourly.job_id)] == [1, 2]


def test_a_missed_run_delivered_by_a_rerun_asks_before_a_second_one(
    tmp_path: Path, collection_name: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A failed re-run needs no confirmation (asking again is its remedy); a missed run's
    # generation-0 request done does.
    monkeypatch.delenv("CONFIRM", raising=False)
    path = stack_file(tmp_path, collection_name)
    hourly = Protocol(runs.stack_config(str(path)), JOB)
    hourly.completed(at(9, 7))
    queue = own_queue(collection_name)
    assert ask(path, "2026-10-16T09:07:00Z")[0] == 0
    [first] = queue.for_job(hourly.job_id)
    queue.finish(first, "failed", "failed", at(12, 1))
    code, out, _ = ask(path, "2026-10-16T09:07:00Z", reason="fixed, once more")
    assert code == 0 and "generation 2 " in out and "Confirmed" not in out

    assert ask(path, "2026-10-16T10:07:00Z")[0] == 0  # missed: generation 0, delivered late
    [missed] = [r for r in queue.for_job(hourly.job_id) if r.schedule_time == at(10, 7)]
    hourly.completed(at(10, 7))
    queue.finish(missed, DONE, "completed", at(12, 1))
    code, _, err = ask(path, "2026-10-16T10:07:00Z", reason="again")
    assert code == 2
    assert "has been re-run already: generation 0 completed (asked by ops@example.com" in err
    assert "as generation 1: if that is what you want, ask again with CONFIRM=1" in err
