"""`make rerun` (python -m infra.rerun) and the generations `make runs` shows, against the
real Firestore emulator with records written by the real protocol."""

from __future__ import annotations

import io
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from dedup.keys import RunKey
from dedup.reruns import DONE, FirestoreRerunQueue, reruns_collection
from infra import rerun, runs
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


def rerun_main(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = rerun.main(list(argv), out=out, err=err, now=NOW)
    return code, out.getvalue(), err.getvalue()


def ask(path: Path, time: str, reason: str = "ledger import fixed") -> tuple[int, str, str]:
    return rerun_main(str(path), "--job", JOB, "--time", time, "--reason", reason,
                      "--requested-by", "ops@example.com")


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
    queue = FirestoreRerunQueue(hourly.store, reruns_collection(collection_name))
    [request] = queue.for_job(hourly.job_id)
    # Deleted by the TTL policy with the runs it asked for (the stack's retention).
    assert request.expire_at == NOW + timedelta(seconds=cfg.dedup.retention_seconds)
    queue.finish(request, DONE, "completed", at(12, 1))
    code, out, _ = run_main(str(path), "--last", "3", "--job", JOB, now=NOW)
    [line] = [line for line in out.splitlines() if "+ generation 1" in line]
    assert line.startswith("    + generation 1: completed, 1 attempt(s), ")
    # Generation 0's row is unchanged, and a further re-run is generation 2.
    assert ask(path, "2026-10-16T09:07:00Z")[1].startswith(
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
    queue = FirestoreRerunQueue(hourly.store, reruns_collection(collection_name))
    assert queue.for_job(hourly.job_id) == []
