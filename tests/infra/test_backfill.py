"""`make backfill` (python -m operator_tools backfill): which runs of a range it queues, as which
generation, what it refuses, and that asking twice queues nothing twice; against the real
Firestore emulator with records written by the real protocol."""

from __future__ import annotations

import io
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
import yaml
from google.cloud import firestore

from dedup.keys import RunKey
from dedup.settings import SettingsError
from dedup.store.firestore import FirestoreRunStore
from dedup.watchdog.backfills import (
    ACTIVE,
    CANCELLED,
    FINISHED,
    MAX_BACKFILL_RUNS,
    Backfill,
    BackfillSettings,
    FirestoreBackfills,
    backfills_collection,
)
from operator_tools import backfill, runs
from operator_tools.rerun import RerunRefused
from tests.infra.test_rerun import own_queue
from tests.infra.test_runs import DATABASE, NOW, PROJECT, REGION, Protocol, at

pytestmark = pytest.mark.usefixtures("firestore_emulator")

JOB = "hourly-sync"


def stack_file(tmp_path: Path, collection: str, *, schedule: str = "7 * * * *",
               time_zone: str = "Europe/Berlin") -> Path:
    job: dict[str, Any] = {"name": JOB, "schedule": schedule, "timeZone": time_zone,
                           "attemptDeadlineSeconds": 120}
    config: dict[str, Any] = {
        "gcp:project": PROJECT, "gcp:region": REGION,
        "scheduler-dedup:namePrefix": "sched-dedup-runs",
        "scheduler-dedup:databaseName": DATABASE,
        "scheduler-dedup:collection": collection,
        "scheduler-dedup:storeTimeoutSeconds": 2,
        "scheduler-dedup:watchdog": {"reruns": True},
        "scheduler-dedup:jobs": [job],
    }
    path = tmp_path / "Pulumi.backfill-test.yaml"
    path.write_text(yaml.safe_dump({"config": config}), encoding="utf-8")
    return path


def main(*argv: str, now: datetime = NOW) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = backfill.main([*argv, "--requested-by", "ops@example.com"], out=out, err=err,
                         now=now)
    return code, out.getvalue(), err.getvalue()


def own_backfills(collection: str) -> FirestoreBackfills:
    client = firestore.Client(project=PROJECT, database=f"{DATABASE}-watchdog")
    return FirestoreBackfills(FirestoreRunStore(client, collection, 5),
                              backfills_collection(collection))


def outage_day(path: Path) -> Protocol:
    """00:07 to 11:07Z: completed, but 03:07, 04:07, 05:07 (an outage) and 07:07 (failed)."""
    hourly = Protocol(runs.stack_config(str(path)), JOB)
    for hour in range(12):
        if hour in (3, 4, 5):
            continue
        if hour == 7:
            hourly.failed(at(7, 7), attempts=1)
        else:
            hourly.completed(at(hour, 7))
    return hourly


def test_a_dry_run_prints_exactly_the_runs_it_would_queue_and_writes_nothing(
    tmp_path: Path, collection_name: str,
) -> None:
    path = stack_file(tmp_path, collection_name)
    hourly = outage_day(path)
    code, out, err = main(str(path), "--job", JOB, "--from", "2026-10-16T00:00:00Z",
                          "--to", "2026-10-16T11:59:00Z", "--dry-run")
    assert (code, err) == (0, "")
    assert out == (
        f"dry run: backfill of {hourly.job_id} from 2026-10-16T02:00+02:00 "
        "(2026-10-16T00:00:00Z) to 2026-10-16T13:59+02:00 (2026-10-16T11:59:00Z), mode "
        "missing, forward: 12 scheduled run(s), 3 to queue, 0 skipped\n"
        "  queue 2026-10-16T05:07:00+02:00 (2026-10-16T03:07:00Z) generation 0 (no record)\n"
        "  queue 2026-10-16T06:07:00+02:00 (2026-10-16T04:07:00Z) generation 0 (no record)\n"
        "  queue 2026-10-16T07:07:00+02:00 (2026-10-16T05:07:00Z) generation 0 (no record)\n"
        "dry run: nothing written\n"
    )
    assert own_queue(collection_name).for_job(hourly.job_id) == []
    assert own_backfills(collection_name).get(hourly.job_id) is None


def test_each_mode_picks_its_runs_in_order_or_reversed(
    tmp_path: Path, collection_name: str,
) -> None:
    path = stack_file(tmp_path, collection_name)
    cfg = runs.stack_config(str(path))
    outage_day(path)

    def planned(mode: str, order: str = "forward") -> list[tuple[int, int | None]]:
        plan = backfill.plan_backfill(
            cfg, runs.open_store(cfg), job_name=JOB, first_text="2026-10-16T00:00:00Z",
            last_text="2026-10-16T11:07:00Z", mode=mode, order=order, reason="outage",
            requested_by="ops", now=NOW)
        return [(c.schedule_time.hour, c.generation) for c in plan.chosen]

    assert planned("missing") == [(3, 0), (4, 0), (5, 0)]
    assert planned("failed") == [(7, 1)]
    assert planned("all") == [(h, 0 if h in (3, 4, 5) else 1) for h in range(12)]
    assert planned("all", "reverse") == planned("all")[::-1]
    with pytest.raises(RerunRefused, match="MODE 'completed' is not one of missing, failed, all"):
        planned("completed")


def test_the_same_backfill_asked_again_queues_nothing_and_another_waits_for_it(
    tmp_path: Path, collection_name: str,
) -> None:
    path = stack_file(tmp_path, collection_name)
    hourly = outage_day(path)
    args = (str(path), "--job", JOB, "--from", "2026-10-16T00:00:00Z", "--to",
            "2026-10-16T11:59:00Z", "--reason", "outage 03:00-06:00")
    code, out, err = main(*args)
    assert (code, err) == (0, "")
    assert "3 to queue" in out and "\nqueued: backfill " in out
    stored = own_backfills(collection_name).get(hourly.job_id)
    assert stored is not None and stored.value.state == ACTIVE  # type: ignore[union-attr]
    assert stored.value.total == 3  # type: ignore[union-attr]

    code, out, _ = main(*args)  # a re-run of the command (after a kill, say)
    assert code == 0
    assert "\nalready queued: backfill " in out and out.count("nothing queued again") == 1
    assert own_backfills(collection_name).get(hourly.job_id) == stored  # unchanged

    code, _, err = main(*args[:-2], "--reason", "other", "--mode", "all")
    assert code == 2
    assert err.startswith(f"make backfill: job {hourly.job_id} has an active backfill already")
    assert err.rstrip().endswith("or cancel it (make backfill-cancel)")

    code, out, _ = main(str(path), "--job", JOB, "--status")
    assert code == 0 and out.startswith(f"backfill {stored.value.backfill_id[:12]} of "  # type: ignore[union-attr]
                                        f"{hourly.job_id} 2026-10-16T00:00Z..2026-10-16T11:59Z, "
                                        "mode missing, forward: active, 0 done")
    assert "asked by ops@example.com at 2026-10-16 12:00Z: outage 03:00-06:00" in out
    code, out, _ = main(str(path), "--job", JOB, "--cancel")
    assert code == 0 and out.startswith("cancelled: backfill ")
    after = own_backfills(collection_name).get(hourly.job_id)
    assert after is not None and after.value.state == CANCELLED  # type: ignore[union-attr]
    code, out, err = main(*args[:-2], "--reason", "every run", "--mode", "all")
    assert (code, err) == (0, "") and "12 to queue" in out  # replaces the cancelled one


def test_a_range_it_cannot_judge_or_too_large_is_refused_with_the_fix(
    tmp_path: Path, collection_name: str,
) -> None:
    path = stack_file(tmp_path, collection_name)

    def refused(*argv: str, now: datetime = NOW) -> str:
        code, out, err = main(str(path), "--job", JOB, *argv, "--reason", "r", now=now)
        assert (code, out) == (2, ""), err
        return err.removeprefix("make backfill: ").rstrip("\n")

    assert refused("--from", "2026-10-01T00:00:00Z", "--to", "2026-10-16T00:00:00Z") == (
        "FROM 2026-10-01T02:00+02:00 (2026-10-01T00:00:00Z) is older than the records' "
        "retention (604800 s): the TTL policy may have deleted the records of runs before "
        "2026-10-09T14:00+02:00 (2026-10-09T12:00:00Z), so MODE=missing cannot tell what "
        "became of them; give FROM at or after 2026-10-09T14:00+02:00 "
        "(2026-10-09T12:00:00Z), or MODE=all to re-run every run of the range whatever its "
        "records say")
    assert "is in the future: give TO at or before now" in refused(
        "--from", "2026-10-16T00:00:00Z", "--to", "2026-10-16T12:30:00Z")
    assert refused("--from", "2026-10-16T10:00:00Z", "--to", "2026-10-16T09:00:00Z").startswith(
        "FROM 2026-10-16T12:00+02:00 (2026-10-16T10:00:00Z) is after TO")
    assert refused("--from", "2026-10-16T10:08:00Z", "--to", "2026-10-16T11:06:00Z").startswith(
        "job sched-dedup-runs-hourly-sync ('7 * * * *' in Europe/Berlin) has no scheduled run")
    assert "has no UTC offset" in refused("--from", "2026-10-16T10:00:00", "--to",
                                          "2026-10-16T11:00:00Z")
    code, _, err = main(str(path), "--job", JOB, "--from", "2026-10-16T10:00:00Z", "--to",
                        "2026-10-16T11:00:00Z")
    assert code == 2 and "REASON is required" in err
    # At most MAX_BACKFILL_RUNS runs: a minutely job over 14 days holds more.
    minutely = stack_file(tmp_path, collection_name, schedule="* * * * *")
    code, _, err = main(str(minutely), "--job", JOB, "--from", "2026-10-02T00:00:00Z", "--to",
                        "2026-10-16T11:00:00Z", "--mode", "all", "--reason", "r")
    last = datetime(2026, 10, 2, tzinfo=UTC) + timedelta(minutes=MAX_BACKFILL_RUNS - 1)
    assert code == 2 and err.startswith(
        f"make backfill: the range holds more than {MAX_BACKFILL_RUNS} scheduled runs of "
        "sched-dedup-runs-hourly-sync (the most one backfill queues): split it, e.g. FROM="
        "2026-10-02T02:00+02:00 (2026-10-02T00:00:00Z) TO="
        f"{last.astimezone(ZoneInfo('Europe/Berlin')).isoformat(timespec='minutes')}")


def test_runs_that_fail_make_reruns_checks_are_skipped_with_why(
    tmp_path: Path, collection_name: str,
) -> None:
    path = stack_file(tmp_path, collection_name)
    cfg = runs.stack_config(str(path))
    hourly = outage_day(path)
    hourly.completed_key(RunKey(PROJECT, REGION, hourly.job_id, at(8, 7), generation=1),
                         at(9, 0))  # re-run already
    hourly.in_progress(at(4, 7), claimed_at=NOW - timedelta(seconds=10))  # delivered late

    def plan(**options: Any) -> backfill.Planned:
        return backfill.plan_backfill(
            cfg, runs.open_store(cfg), job_name=JOB, first_text="2026-10-16T03:00:00Z",
            last_text="2026-10-16T11:07:00Z", mode="all", reason="r", requested_by="ops",
            now=NOW, **options)

    planned = plan()
    skipped = {c.schedule_time.hour: c.skipped for c in planned.skipped}
    assert sorted(skipped) == [4, 8]
    assert "has been re-run already: generation 1 completed" in str(skipped[8])
    assert "ask again with CONFIRM=1" in str(skipped[8])
    assert "generation 0 of sched-dedup-runs-hourly-sync @ 2026-10-16T06:07+02:00" in str(
        skipped[4]) and "is in progress" in str(skipped[4])
    assert [(c.schedule_time.hour, c.generation) for c in plan(again=True).queued] == [
        (3, 0), (5, 0), (6, 1), (7, 1), (8, 2), (9, 1), (10, 1), (11, 1)]


def test_business_runs_count_a_dst_change_once(tmp_path: Path, collection_name: str) -> None:
    """A daily 01:30 Europe/London job: its local time happens twice on 25 October 2026
    and is one run (dstRepeated once, BSD cron's -s): a week is seven runs."""
    path = stack_file(tmp_path, collection_name, schedule="30 1 * * *",
                      time_zone="Europe/London")
    cfg = runs.stack_config(str(path))
    planned = backfill.plan_backfill(
        cfg, runs.open_store(cfg), job_name=JOB, first_text="2026-10-22T00:00:00Z",
        last_text="2026-10-28T23:59:00Z", mode="all", reason="r", requested_by="ops",
        now=datetime(2026, 10, 29, 12, 0, tzinfo=UTC))
    times = [c.schedule_time for c in planned.queued]
    assert planned.scheduled == 7 and len(times) == 7
    assert datetime(2026, 10, 25, 0, 30, tzinfo=UTC) in times  # the first 01:30 (BST)
    assert datetime(2026, 10, 25, 1, 30, tzinfo=UTC) not in times


@pytest.mark.parametrize(("env", "error"), [
    ({"DEDUP_WATCH_BACKFILL_IN_FLIGHT": "0"}, "DEDUP_WATCH_BACKFILL_IN_FLIGHT"),
    ({"DEDUP_WATCH_BACKFILL_RUNS_PER_TICK": "2.5"}, "must be whole numbers of runs"),
])
def test_a_bad_backfill_rate_setting_stops_the_watchdog_naming_it(
    env: dict[str, str], error: str,
) -> None:
    with pytest.raises(SettingsError, match=error):
        BackfillSettings.from_env(env)
    assert BackfillSettings.from_env({}) == BackfillSettings(20, 1)


def test_the_same_backfill_once_finished_is_planned_afresh(
    tmp_path: Path, collection_name: str,
) -> None:
    path = stack_file(tmp_path, collection_name)
    hourly = outage_day(path)
    args = (str(path), "--job", JOB, "--from", "2026-10-16T00:00:00Z", "--to",
            "2026-10-16T11:59:00Z", "--reason", "outage")
    assert main(*args)[0] == 0
    backfills = own_backfills(collection_name)
    stored = backfills.get(hourly.job_id)
    assert stored is not None and isinstance(stored.value, Backfill)
    stored.value.state = FINISHED  # as the watchdog leaves it (its runs never delivered here)
    backfills.update(stored.value, stored.version, NOW)
    code, out, err = main(*args)  # the runs are still missing: the same plan, written again
    assert (code, err) == (0, "") and "\nqueued: backfill " in out, out
    again = backfills.get(hourly.job_id)
    assert again is not None and isinstance(again.value, Backfill)
    assert (again.value.backfill_id, again.value.state, again.value.total) == (
        stored.value.backfill_id, ACTIVE, 3)
    assert [r.schedule_time.hour for r in backfills.page(again.value, 0)] == [3, 4, 5]


def test_stop_on_failure_is_written_with_the_backfill_and_shown(
    tmp_path: Path, collection_name: str,
) -> None:
    """`make backfill STOP_ON_FAILURE=1` (--stop-on-failure) writes it into the plan the
    watchdog reads, and the status says so; without it, it is off."""
    path = stack_file(tmp_path, collection_name)
    hourly = outage_day(path)
    args = (str(path), "--job", JOB, "--from", "2026-10-16T00:00:00Z", "--to",
            "2026-10-16T11:59:00Z", "--reason", "outage 03:00-06:00")
    code, out, err = main(*args, "--stop-on-failure")
    assert (code, err) == (0, "") and "forward, stop on failure: active" in out
    stored = own_backfills(collection_name).get(hourly.job_id)
    assert stored is not None and isinstance(stored.value, Backfill)
    assert stored.value.stop_on_failure and stored.value.stopped_at is None
    code, out, _ = main(str(path), "--job", JOB, "--status")
    assert code == 0 and "stop on failure" in out
    main(str(path), "--job", JOB, "--cancel")
    code, out, err = main(*args[:-2], "--reason", "again", "--mode", "all")
    assert (code, err) == (0, "")
    again = own_backfills(collection_name).get(hourly.job_id)
    assert again is not None and isinstance(again.value, Backfill)
    assert not again.value.stop_on_failure
