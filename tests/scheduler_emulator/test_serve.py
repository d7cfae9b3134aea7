"""`make serve` (demo.serve): the stack served locally, on the real clock, with its
watchdog ticking; a missed run driven to its catch-up and a run to its re-run, read back
by `make runs` and asked for by `make rerun` as an operator would."""

from __future__ import annotations

import io
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import requests
import yaml

from demo.serve import ServedStack, instructions
from infra import rerun, runs
from local_stack.deliveries import scheduler_headers
from scheduler_emulator.oidc import scheduler_token
from scheduler_emulator.stack import load_stack

pytestmark = pytest.mark.usefixtures("firestore_emulator")

PROJECT = "dedup-kit-serve"
REGION = "europe-west1"
PREFIX = "sched-serve"
JOB = "five-minutely"
JOB_ID = f"{PREFIX}-{JOB}"


def stack_file(tmp_path: Path, collection: str) -> Path:
    config = {
        "gcp:project": PROJECT,
        "gcp:region": REGION,
        "scheduler-dedup:namePrefix": PREFIX,
        "scheduler-dedup:databaseName": "sched-serve-runs",
        "scheduler-dedup:collection": collection,
        "scheduler-dedup:deleteProtection": False,
        "scheduler-dedup:watchdog": {"reruns": True},
        "scheduler-dedup:jobs": [
            {"name": JOB, "schedule": "*/5 * * * *", "timeZone": "Etc/UTC",
             "attemptDeadlineSeconds": 60, "retry": {"retryCount": 0},
             "catchUp": True, "catchUpWithinSeconds": 3600},
        ],
    }
    path = tmp_path / "Pulumi.serve-test.yaml"
    path.write_text(yaml.safe_dump({"config": config}), encoding="utf-8")
    return path


def z(instant: datetime) -> str:
    return instant.strftime("%Y-%m-%dT%H:%M:%SZ")


def test_make_serve_catches_a_missed_run_up_and_delivers_a_rerun(
    tmp_path: Path, collection_name: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("CONFIRM", raising=False)
    path = stack_file(tmp_path, collection_name)
    stack = load_stack(path)
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    first = now - timedelta(minutes=now.minute % 5 + 20)  # delivered by "Scheduler"
    missed = first + timedelta(minutes=5)  # never delivered: caught up by the watchdog
    host = os.environ["FIRESTORE_EMULATOR_HOST"]
    lines: list[str] = []
    with ServedStack(stack, host, workdir=tmp_path / "serve", scheduler=False, workers=1,
                     log=lines.append) as served:
        assert served.function is not None
        told = instructions(served, str(path))
        assert f"export FIRESTORE_EMULATOR_HOST={host}" in told
        assert f"WATCHDOG_URL={served.watchdog_url}" in told
        url = served.function.url
        reply = requests.post(url, headers=scheduler_headers(
            f"projects/{PROJECT}/locations/{REGION}/jobs/{JOB_ID}", z(first),
            project=PROJECT, location=REGION,
            authorization=f"Bearer {scheduler_token(url, stack.invoker_email)}",
        ), data=b"{}", timeout=30)
        assert reply.json()["outcome"] == "completed", served.function.log_text[-3000:]

        result = served.tick()
        caught = {d.schedule_time: d.status for d in result.caught_up}
        assert caught.get(missed) == "completed", (caught, lines)
        assert f"watchdog caught_up: {JOB_ID} @ {z(missed)}: completed" in lines

        code, out, err = run_main(str(path), "--job", JOB, "--last", "8")
        assert (code, err) == (0, "")
        row = next(line for line in out.splitlines()
                   if line.startswith(f"  {missed:%Y-%m-%d %H:%M:%S}Z"))
        assert row.split()[5] == "completed" and row.split()[-1] == "ok", out

        # `make rerun ... NOW=1 WATCHDOG_URL=...`: delivered by the served watchdog at once.
        code, out, err = rerun_main(str(path), "--job", JOB, "--time", z(first), "--reason",
                                    "rehearsal", "--now", served.watchdog_url)
        assert (code, err) == (0, "")
        assert out.splitlines()[-1] == (f"tick now: the watchdog delivered 1 re-run(s): "
                                        f"{JOB_ID} @ {z(first)} generation 1: completed")
        # A second one asks first.
        code, _, err = rerun_main(str(path), "--job", JOB, "--time", z(first), "--reason",
                                  "again")
        assert code == 2 and "has been re-run already: generation 1 completed" in err
        code, out, _ = run_main(str(path), "--job", JOB, "--last", "8")
        assert "    + generation 1: completed, 1 attempt(s)" in out


def run_main(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    return runs.main(list(argv), out=out, err=err), out.getvalue(), err.getvalue()


def rerun_main(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    return rerun.main(list(argv), out=out, err=err), out.getvalue(), err.getvalue()
