"""`make migrate-proxy-records` (operator_tools/migrate_records.py): the upgrade that gives the
proxy a database of its own, against the real Firestore emulator with records written by
the real protocol in the old place (the dedup database)."""

from __future__ import annotations

import io
from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from dedup.keys import RunKey
from dedup.store import RunStatus
from dedup.store.firestore import FirestoreRunStore
from infra.config import StackConfig
from operator_tools import migrate_records, runs
from tests.infra.test_runs import DATABASE, PROJECT, REGION, Protocol, at, stack_file

pytestmark = pytest.mark.usefixtures("firestore_emulator")

REPORT = "report"  # the proxied job of test_runs.stack_file(proxied=True)


def migrate(path: Path) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = migrate_records.main([str(path)], out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def proxy_store(cfg: StackConfig) -> FirestoreRunStore:
    stores = runs.open_store(cfg)
    [proxied] = [job for job in runs.watched_jobs(cfg) if job.database is not None]
    return stores.records(proxied)


def status(store: FirestoreRunStore, cfg: StackConfig, job: str, t: datetime) -> str | None:
    stored = store.get(RunKey(PROJECT, REGION, f"{cfg.name_prefix}-{job}", t).run_id)
    return None if stored is None else stored.record.status.value


def test_the_proxied_jobs_records_are_copied_once_and_the_proxys_own_are_kept(
    tmp_path: Path, collection_name: str,
) -> None:
    path = stack_file(tmp_path, collection_name, proxied=True)
    cfg = runs.stack_config(str(path))
    old_report = Protocol(cfg, REPORT)  # where the proxy kept its records before
    old_report.completed(at(8, 0))
    old_report.failed(at(9, 0), attempts=2)
    old_report.completed_key(RunKey(PROJECT, REGION, old_report.job_id, at(8, 0),
                                    generation=1), at(9, 30))  # a re-run's generation
    Protocol(cfg, "hourly-sync").completed(at(8, 7))  # the dedup function's: stays put
    new_report = Protocol(cfg, REPORT, cfg.dedup.proxy_database_name)
    new_report.completed(at(10, 0))  # written by the upgraded proxy itself
    old_report.in_progress(at(10, 0), claimed_at=at(10, 0))  # the old copy of that run

    code, out, err = migrate(path)
    assert (code, err) == (0, "")
    assert out == (
        f"proxied jobs sched-dedup-runs-report: 3 record(s) copied from database {DATABASE} "
        f"to {DATABASE}-proxy, 0 brought up to date, 1 already there (kept)\n"
    )
    target = proxy_store(cfg)
    assert status(target, cfg, REPORT, at(8, 0)) == "completed"
    assert status(target, cfg, REPORT, at(9, 0)) == "failed"
    assert status(target, cfg, REPORT, at(10, 0)) == "completed"  # its own, not the copy
    assert target.get(RunKey(PROJECT, REGION, old_report.job_id, at(8, 0),
                             generation=1).run_id) is not None
    assert status(target, cfg, "hourly-sync", at(8, 7)) is None
    # Unchanged, expire_at too (the TTL policy deletes it when it would have).
    source = old_report.store.get(old_report.key(at(9, 0)).run_id)
    copied = target.get(old_report.key(at(9, 0)).run_id)
    assert source is not None and copied is not None and copied.record == source.record

    # Again: nothing is copied twice.
    code, out, _ = migrate(path)
    assert code == 0
    assert "0 record(s) copied" in out and "4 already there (kept)" in out


def test_a_copied_in_progress_run_that_finished_since_is_brought_up_to_date(
    tmp_path: Path, collection_name: str,
) -> None:
    path = stack_file(tmp_path, collection_name, proxied=True)
    cfg = runs.stack_config(str(path))
    old_report = Protocol(cfg, REPORT)
    old_report.in_progress(at(11, 0), claimed_at=at(11, 0))
    assert migrate(path)[0] == 0
    target = proxy_store(cfg)
    assert status(target, cfg, REPORT, at(11, 0)) == "in_progress"

    # The old proxy's attempt finishes in the old database after the first copy.
    run_id = old_report.key(at(11, 0)).run_id
    stored = old_report.store.get(run_id)
    assert stored is not None
    done = replace(stored.record, status=RunStatus.COMPLETED,
                   finished_at=at(11, 0) + timedelta(seconds=3))
    old_report.store.replace(run_id, done, stored.version)

    code, out, _ = migrate(path)
    assert code == 0 and "1 brought up to date" in out
    assert status(target, cfg, REPORT, at(11, 0)) == "completed"


def test_a_stack_without_proxied_jobs_has_nothing_to_copy(
    tmp_path: Path, collection_name: str,
) -> None:
    code, out, err = migrate(stack_file(tmp_path, collection_name))
    assert (code, out) == (0, "")
    assert "has no proxied job: nothing to copy" in err
