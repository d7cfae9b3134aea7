"""`make runs`, `make rerun` and `make backfill` on the retail example stack (runtimes `sync`
and `export`, a proxied job), against the real Firestore emulator with records written by
the real protocol: a runtime job's records are read from its runtime's own database
(StackConfig.records_database_of), never from the dedup database, and the output names
the runtime."""

from __future__ import annotations

import io
from datetime import UTC, datetime
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
from dedup.run_context import RunContext
from dedup.store.firestore import FirestoreRunStore
from dedup.watchdog.backfills import FirestoreBackfills, backfills_collection
from dedup.watchdog.reruns import FirestoreRerunQueue, reruns_collection
from infra.config import StackConfig
from operator_tools import backfill, migrate_records, rerun, runs
from operator_tools.offline import load_stack_config
from tests.infra.test_runs import rows_by_time
from tests.stacks import FIXTURE_STACKS_DIR

pytestmark = pytest.mark.usefixtures("firestore_emulator")

NOW = datetime(2026, 10, 16, 12, 0, tzinfo=UTC)
SYNC, EXPORT, REPORT = "inventory-sync", "nightly-export", "weekly-report"


def retail_stack(tmp_path: Path, collection: str) -> Path:
    """The retail example stack in a collection of the test's own, re-runs on (so the
    watchdog delivers every job's runs, the sync runtime's too)."""
    config: dict[str, Any] = load_stack_config("retail", FIXTURE_STACKS_DIR)
    config.update({
        "scheduler-dedup:collection": collection,
        "scheduler-dedup:storeTimeoutSeconds": 2,
        "scheduler-dedup:watchdog": {"reruns": True},
    })
    path = tmp_path / "Pulumi.retail-test.yaml"
    path.write_text(yaml.safe_dump({"config": config}), encoding="utf-8")
    return path


class Records:
    """One job's records in one database, written through the real protocol."""

    def __init__(self, cfg: StackConfig, job: str, database: str) -> None:
        client = firestore.Client(project=cfg.project, database=database)
        self.store = FirestoreRunStore(client, cfg.dedup.collection, timeout_seconds=5)
        self.cfg = cfg
        self.job_id = f"{cfg.name_prefix}-{job}"

    def key(self, t: datetime, generation: int = 0) -> RunKey:
        return RunKey(self.cfg.project, self.cfg.region, self.job_id, t,
                      generation=generation)

    def _dedup(self, clock: datetime) -> Deduplicator:
        return Deduplicator(self.store, lease_seconds=600, retention_seconds=3650 * 86400,
                            cache=CompletedRunCache(0, 3600), wall_clock=lambda: clock)

    def completed(self, t: datetime) -> None:
        assert self._dedup(t).run(self.key(t), _ok, b"", {}).outcome is Outcome.COMPLETED

    def in_progress(self, t: datetime, claimed_at: datetime) -> None:
        assert isinstance(self._dedup(claimed_at).claim(self.key(t)), Claim)


def _ok(context: RunContext) -> str:
    return "ok"


def at(day: int, hour: int, minute: int) -> datetime:
    return datetime(2026, 10, day, hour, minute, tzinfo=UTC)


def call(tool: Any, *argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = tool.main(list(argv), out=out, err=err, now=NOW)
    return code, out.getvalue(), err.getvalue()


def heading(output: str, job_id: str) -> str:
    return next(line for line in output.splitlines() if line.startswith(f"{job_id}  ("))


def section(output: str, job_id: str) -> str:
    """A job's heading and rows in `make runs`' output."""
    start = output.index(f"\n{job_id}  (") + 1
    end = output.find("\n\n", start)
    return output[start:] if end < 0 else output[start:end]


def test_make_runs_reads_each_runtime_jobs_records_from_its_runtimes_database(
    tmp_path: Path, collection_name: str,
) -> None:
    path = retail_stack(tmp_path, collection_name)
    cfg = runs.stack_config(str(path))
    jobs = {job.name: job for job in cfg.jobs}
    assert cfg.records_database_of(jobs[SYNC]) == "retail-sync"
    assert cfg.records_database_of(jobs[EXPORT]) == "retail-export"
    Records(cfg, SYNC, "retail-sync").completed(at(16, 11, 0))
    # The same job's run in the dedup database (where job code of the default function
    # writes): not this job's record.
    Records(cfg, SYNC, "retail").completed(at(16, 11, 15))
    export = Records(cfg, EXPORT, "retail-export")
    export.completed(at(14, 0, 30))  # 02:30 in Berlin
    export.completed(at(16, 0, 30))
    Records(cfg, EXPORT, "retail").completed(at(15, 0, 30))

    code, out, err = call(runs, str(path), "--last", "6")
    print(out)
    assert (code, err) == (0, "")
    sync = heading(out, "retail-inventory-sync")
    assert sync.endswith(", runtime sync, records in database retail-sync)")
    assert heading(out, "retail-nightly-export").endswith(
        ", runtime export, records in database retail-export)")
    # The proxied job reads as before: no runtime, the proxy's database.
    report = heading(out, "retail-weekly-report")
    assert report.endswith(", records in database retail-proxy)") and "runtime" not in report

    sync_rows = rows_by_time(section(out, "retail-inventory-sync"))
    assert sync_rows["2026-10-16 11:00:00Z"][5:7] == ["completed", "1"]
    # Its only record of 11:15 is in the dedup database: missed, as the watchdog judges it.
    assert sync_rows["2026-10-16 11:15:00Z"][5:] == ["-", "-", "-", "missed"]
    export_rows = rows_by_time(section(out, "retail-nightly-export"))
    assert export_rows["2026-10-16 00:30:00Z"][5:7] == ["completed", "1"]
    assert export_rows["2026-10-15 00:30:00Z"][5:] == ["-", "-", "-", "missed"]


def test_make_rerun_of_a_runtime_job_is_accepted_and_judged_by_its_own_records(
    tmp_path: Path, collection_name: str,
) -> None:
    """The run completed in the runtime's database; a record of the same run_id held in
    progress in the dedup database would refuse the re-run, were it taken as the job's."""
    path = retail_stack(tmp_path, collection_name)
    cfg = runs.stack_config(str(path))
    own = Records(cfg, SYNC, "retail-sync")
    own.completed(at(16, 11, 0))
    Records(cfg, SYNC, "retail").in_progress(at(16, 11, 0), claimed_at=NOW)

    code, out, err = call(rerun, str(path), "--job", SYNC, "--time", "2026-10-16T11:00:00Z",
                          "--reason", "inventory API fixed", "--requested-by", "ops@example.com")
    assert (code, err) == (0, "")
    generation_1 = own.key(at(16, 11, 0), generation=1).run_id
    assert out.startswith(
        "re-run requested: retail-inventory-sync (runtime sync) @ 2026-10-16T11:00:00Z, "
        f"generation 1 (run_id {generation_1}); latest before: completed; asked by "
        "ops@example.com: inventory API fixed\n"
        "The watchdog delivers it to runtime sync's function retail-sync at its next tick")
    watch = firestore.Client(project=cfg.project, database="retail-watchdog")
    queue = FirestoreRerunQueue(FirestoreRunStore(watch, collection_name, 5),
                                reruns_collection(collection_name))
    [request] = queue.for_job(own.job_id)
    assert request.generation == 1

    code, out, _ = call(runs, str(path), "--last", "5", "--job", SYNC)
    assert code == 0
    lines = out.splitlines()
    row = next(i for i, line in enumerate(lines) if line.startswith("  2026-10-16 11:00:00Z"))
    assert lines[row].split()[5:7] == ["completed", "1"]
    assert lines[row + 1].startswith("    + generation 1: request pending; asked by "
                                     "ops@example.com")


def test_make_backfill_of_a_runtime_job_judges_its_own_records_and_names_the_runtime(
    tmp_path: Path, collection_name: str,
) -> None:
    path = retail_stack(tmp_path, collection_name)
    cfg = runs.stack_config(str(path))
    own = Records(cfg, EXPORT, "retail-export")
    own.completed(at(13, 0, 30))
    own.completed(at(15, 0, 30))
    Records(cfg, EXPORT, "retail").completed(at(14, 0, 30))  # not the job's: it is missing

    argv = (str(path), "--job", EXPORT, "--from", "2026-10-13T00:00:00Z",
            "--to", "2026-10-16T11:00:00Z", "--requested-by", "ops@example.com")
    code, out, err = call(backfill, *argv, "--dry-run")
    assert (code, err) == (0, "")
    assert out.startswith(
        "dry run: backfill of retail-nightly-export (runtime export) from "
        "2026-10-13T02:00+02:00 (2026-10-13T00:00:00Z) to 2026-10-16T13:00+02:00 "
        "(2026-10-16T11:00:00Z), mode missing, forward: 4 scheduled run(s), 2 to queue, "
        "0 skipped\n"
        "  queue 2026-10-14T02:30:00+02:00 (2026-10-14T00:30:00Z) generation 0 (no record)\n"
        "  queue 2026-10-16T02:30:00+02:00 (2026-10-16T00:30:00Z) generation 0 (no record)\n")

    code, out, err = call(backfill, *argv, "--reason", "bucket outage")
    assert (code, err) == (0, "")
    watch = firestore.Client(project=cfg.project, database="retail-watchdog")
    stored = FirestoreBackfills(FirestoreRunStore(watch, collection_name, 5),
                                backfills_collection(collection_name)).get(own.job_id)
    assert stored is not None and stored.value.total == 2  # type: ignore[union-attr]
    code, out, err = call(backfill, str(path), "--job", EXPORT, "--status")
    assert (code, err) == (0, "")
    assert out.splitlines()[1] == ("  runs in runtime export (function retail-export, "
                                   "records in database retail-export)")


def test_migrate_proxy_records_copies_only_the_proxied_jobs_records(
    tmp_path: Path, collection_name: str,
) -> None:
    """A runtime job's records are elsewhere than the dedup database too, but it is no
    proxied job: its old records in the dedup database are not the proxy's to take."""
    path = retail_stack(tmp_path, collection_name)
    cfg = runs.stack_config(str(path))
    report = Records(cfg, REPORT, "retail")
    report.completed(at(12, 7, 0))  # a Monday, kept by the proxy in the dedup database
    sync = Records(cfg, SYNC, "retail")
    sync.completed(at(16, 11, 0))  # before the job moved into runtime sync

    out_io, err_io = io.StringIO(), io.StringIO()
    code = migrate_records.main([str(path)], out=out_io, err=err_io)
    out, err = out_io.getvalue(), err_io.getvalue()
    assert (code, err) == (0, "")
    assert out == ("proxied jobs retail-weekly-report: 1 record(s) copied from database "
                   "retail to retail-proxy, 0 brought up to date, 0 already there (kept)\n")
    proxy = Records(cfg, REPORT, "retail-proxy").store
    assert proxy.get(report.key(at(12, 7, 0)).run_id) is not None
    assert proxy.get(sync.key(at(16, 11, 0)).run_id) is None


def test_a_firestore_failure_names_the_runtimes_databases_too(tmp_path: Path) -> None:
    cfg = runs.stack_config(str(retail_stack(tmp_path, "runs")))
    line = runs.store_failure("make runs", "read the runs", cfg, TimeoutError("no answer"))
    assert line.startswith(
        "make runs: cannot read the runs in databases 'retail', 'retail-proxy', "
        "'retail-sync', 'retail-export' and 'retail-watchdog' of project "
        "'acme-retail-prod': no answer; ")
