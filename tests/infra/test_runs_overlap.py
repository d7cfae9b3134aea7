"""`make runs` shows a run that the job's overlap policy skipped as `skipped`, never
`missed`, with the run that held it off on a line under its row."""

from __future__ import annotations

from pathlib import Path

import pytest

from dedup.cache import CompletedRunCache
from dedup.entry.app import overlap_gate
from dedup.outcomes import Delivery, Outcome
from dedup.protocol import Deduplicator
from dedup.run_context import RunContext
from dedup.settings import Settings
from operator_tools import runs
from tests.infra.test_runs import NOW, REGION, Protocol, at, rows_by_time, run_main, stack_file

pytestmark = pytest.mark.usefixtures("firestore_emulator")

PROJECT = "dedup-kit-test"


def test_a_skipped_run_is_shown_skipped_with_the_run_that_held_it_off(
    tmp_path: Path, collection_name: str
) -> None:
    path = stack_file(tmp_path, collection_name)
    cfg = runs.stack_config(str(path))
    hourly = Protocol(cfg, "hourly-sync")
    settings = Settings(project=PROJECT, location=REGION, collection=cfg.dedup.collection,
                        retention_seconds=3650 * 86400)
    dedup = Deduplicator(hourly.store, lease_seconds=60, retention_seconds=3650 * 86400,
                         cache=CompletedRunCache(0, 3600), wall_clock=lambda: at(9, 7),
                         overlap=overlap_gate(hourly.store, settings))
    inner: list[Delivery] = []

    def long_run(context: RunContext) -> str:
        # Still running when the next run of the job is delivered (overlap: forbid).
        inner.append(dedup.run(hourly.key(at(10, 7)), lambda _: "ran", b"", {},
                               overlap="forbid"))
        return "ok"

    first = dedup.run(hourly.key(at(9, 7)), long_run, b"", {}, overlap="forbid")
    assert (first.outcome, inner[0].outcome) == (Outcome.COMPLETED, Outcome.SKIPPED)

    code, out, err = run_main(str(path), "--last", "4", "--job", "hourly-sync", now=NOW)
    assert (code, err) == (0, ""), err
    rows = rows_by_time(out)
    assert rows["2026-10-16 10:07:00Z"][5] == "skipped"
    assert rows["2026-10-16 10:07:00Z"][-1] == "skipped"  # the verdict: never missed
    lines = out.splitlines()
    row = next(i for i, line in enumerate(lines) if line.startswith("  2026-10-16 10:07:00Z"))
    assert lines[row + 1] == (f"    skipped (overlap: forbid): run {first.run_id} of the job "
                              "held a claim")
