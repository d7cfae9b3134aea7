"""`make demo` as a user runs it: the default mix of faults, store faults included,
runs every run once; clear errors; nothing left behind on Ctrl-C."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from demo.backfill import OUTAGE_RUNS
from demo.paths import path_specs
from local_stack import FirestoreEmulator
from tests.stacks import fixture_stack_file
from tests.waiting import let_time_pass

# The kit's own dev stack for its tests (never the repository's Pulumi.dev.yaml).
DEV_STACK = str(fixture_stack_file("dev"))


def demo(
    checkout: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.Popen[str]:
    """`python -m operator_tools demo` in `checkout` (a clone of the kit: the team's stacks
    of a fork are not the kit's tests' business) on the fixture dev stack unless `args`
    name another."""
    stack = [] if "--stack" in args else ["--stack", DEV_STACK]
    return subprocess.Popen(
        [sys.executable, "-m", "operator_tools", "demo", *stack, *args],
        cwd=checkout,
        env=env or dict(os.environ),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.fixture
def listening_port() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield int(sock.getsockname()[1])


def port_open(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def processes_mentioning(text: str) -> list[str]:
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if text in cmdline:
            found.append(f"{proc.name}: {cmdline}")
    return found


def test_missing_stack_file_is_a_clear_error(kit_checkout: Path) -> None:
    proc = demo(kit_checkout, "--stack", "Pulumi.nope.yaml")
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2
    assert "stack file Pulumi.nope.yaml not found; stacks: " in err
    # A stack name that no Pulumi.<name>.yaml has: one error, listing the stacks there are.
    proc = demo(kit_checkout, "--stack", "nope")
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2
    assert err.count("error:") == 1
    assert "stack 'nope' (no Pulumi.nope.yaml) not found; stacks: " in err


def test_missing_gcloud_names_how_to_install_it(tmp_path: Path, kit_checkout: Path) -> None:
    # A PATH with python but without gcloud.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python").symlink_to(sys.executable)
    env = {**os.environ, "PATH": str(bin_dir)}
    proc = demo(kit_checkout, env=env)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2, err
    assert "`gcloud` is not on PATH" in err
    assert "cloud-firestore-emulator" in err


def test_taken_firestore_port_is_a_clear_error(listening_port: int, kit_checkout: Path) -> None:
    proc = demo(kit_checkout, "--firestore-port", str(listening_port))
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2
    assert f"port {listening_port} on 127.0.0.1 is already in use" in err


# Needs the Firestore emulator: the fixture fails the test (never skips) if it is missing.
@pytest.mark.usefixtures("firestore_emulator")
def test_ctrl_c_stops_everything_and_leaves_no_process(
    listening_port: int, kit_checkout: Path
) -> None:
    proc = demo(kit_checkout, "--ticks", "100000")
    assert proc.stderr is not None
    lines: list[str] = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        lines.append(line)
        if "replaying" in line:
            break
    text = "".join(lines)
    assert "replaying" in text, text
    firestore_port = int(re.search(r"Firestore emulator on 127\.0\.0\.1:(\d+)", text)[1])  # type: ignore[index]
    function_port = int(re.search(r"function serving on http://127\.0\.0\.1:(\d+)/", text)[1])  # type: ignore[index]
    proxy_port = int(re.search(r"store-fault proxy on 127\.0\.0\.1:(\d+)", text)[1])  # type: ignore[index]
    assert port_open(firestore_port) and port_open(function_port) and port_open(proxy_port)
    let_time_pass(1.0, "the replay gets under way: SIGINT lands mid-replay (any later "
                  "moment of its 100,000 ticks would do)")
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=180)  # stopping is checked, not its speed
    assert proc.returncode == 130, err
    assert "interrupted" in err
    assert not port_open(firestore_port) and not port_open(function_port)
    assert not port_open(proxy_port)
    assert processes_mentioning(f"127.0.0.1:{firestore_port}") == []
    assert processes_mentioning(f"--port={firestore_port}") == []
    assert processes_mentioning(f"--port {function_port}") == []


def test_the_default_mix_runs_every_run_once_through_store_faults(
    firestore_emulator: FirestoreEmulator, kit_checkout: Path,
) -> None:
    # The default mix with seed 2 strikes heartbeat's first run with a store-stall and
    # hourly-sync's second with a store-outage, within three ticks. (The session's
    # emulator is reused: the runs' schedule times follow now, no other test's.)
    host = firestore_emulator.host
    # Without the demo's proxied job (its own replay, no store faults) and with two worker
    # processes: the mix and its strikes are the stack's four jobs'.
    proc = demo(kit_checkout, "--ticks", "3", "--seed", "2", "--json", "--firestore-host", host,
                "--no-paths", "--no-proxied-job", "--workers", "2")
    out, err = proc.communicate(timeout=180)
    assert proc.returncode == 0, err
    report = json.loads(out)
    assert report["ok"] and set(report["faults"]) >= {"store-stall", "store-outage"}
    injected = sorted((f["fault"], f["job"]) for f in report["store"]["injected"])
    assert injected == [("store-outage", "hourly-sync"), ("store-stall", "heartbeat")]
    assert report["store"]["summary"].startswith("1 stall-late, 0 stall-drop, 1 outage;")
    assert "EXECUTED MORE THAN ONCE" not in report["totals"]["verdicts"]
    assert all(run["executions"] <= 1 for run in report["runs"])
    assert "completed_unrecorded" not in report["function_outcomes"]
    # The outage either failed the claim with nothing left behind (500, then the retry ran
    # the job) or ended within the claim's store budget (200 at once): which one depends
    # on when gRPC reconnects, and both keep the run exactly once.
    [outage] = [f for f in report["store"]["injected"] if f["fault"] == "store-outage"]
    answered = outage["answered"]
    assert answered.startswith(("500 store_unavailable after ", "200 completed after ")), answered
    assert answered.endswith(("200 completed on retry 1", "s")), answered


def test_a_job_that_never_executes_fails_the_demo(
    firestore_emulator: FirestoreEmulator, tmp_path: Path, kit_checkout: Path
) -> None:
    # A jobLogic whose module does not exist: every attempt fails. Each run alone would
    # pass as "retries exhausted" (at most once); the job as a whole fails the demo.
    stack = tmp_path / "Pulumi.broken.yaml"
    stack.write_text(json.dumps({"config": {
        "gcp:project": "acme-broken-demo",
        "gcp:region": "europe-west1",
        "scheduler-dedup:jobs": [{
            "name": "broken",
            "schedule": "*/5 * * * *",
            "attemptDeadlineSeconds": 30,
            "retry": {"retryCount": 1, "minBackoffSeconds": 5},
            "jobLogic": "example_jobs.no_such_module:run",
        }],
    }}))
    host = firestore_emulator.host
    # One run, its text report read (what --json says of such a job: test_report_and_cli.py).
    proc = demo(kit_checkout, "--stack", str(stack), "--job", "broken", "--ticks", "3",
                "--no-faults", "--no-paths", "--firestore-host", host)
    out, err = proc.communicate(timeout=180)
    assert proc.returncode == 1, err
    assert "  result: FAIL: never executed: every attempt failed (3 run(s), 0 acknowledged, " \
        "0 executed; last error: 500 failed: ModuleNotFoundError" in out
    assert "No module named 'example_jobs.no_such_module'" in out
    assert out.rstrip().splitlines()[-1].startswith(
        "RESULT: FAIL: job broken never executed: every attempt failed"
    )


def test_the_default_demo_catches_up_the_missed_run_and_re_runs_one_once(
    kit_checkout: Path,
) -> None:
    # `make demo` as is (its own Firestore emulator, so no other test's runs share its
    # keys): the dev stack's hourly-sync has catchUp, and the default mix's `missed` fault
    # (seed 1) strikes it; the watchdog delivers that run, and re-runs one completed run
    # through `make rerun`'s code path. The ledger shows each executed exactly once.
    proc = demo(kit_checkout, "--json")
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    report = json.loads(out)
    assert report["ok"], report["watchdog"]
    watch = report["watchdog"]
    assert watch["delivers"] is True
    missed = {
        (run["job"], run["schedule_time"]) for run in report["runs"]
        if "missed" in run["faults"] and run["job"] == "hourly-sync"
    }
    assert missed, "the default mix no longer strikes hourly-sync with `missed`"
    caught_up = {(c["job"], c["schedule_time"]) for c in watch["caught_up"]}
    assert caught_up == missed
    assert all(c["executions"] == 1 and c["ok"] for c in watch["caught_up"]), watch
    # The first catch-up's instance was killed mid-job: delivered again once its lease
    # lapsed, executed once all told.
    killed = watch["killed_catch_up"]
    assert killed is not None and (killed["job"], killed["schedule_time"]) in caught_up
    # A re-run asked while Scheduler may still retry a failed run: refused, with the time.
    held = watch["held_rerun"]
    assert held is not None and held["refused"] and held["ok"], held
    # Caught up, so no longer reported missed; jobs without catchUp still are.
    found = {(f["job"].removeprefix("sched-dedup-dev-"), f["kind"]) for f in watch["findings"]}
    assert ("hourly-sync", "missed") not in found
    assert ("heartbeat", "missed") in found
    rerun = watch["rerun"]
    assert rerun is not None, "no completed run was re-run"
    assert (rerun["generation"], rerun["executions"]) == (1, 1), rerun
    assert rerun["original_kept"] and rerun["recorded"] and rerun["status"] == "completed"
    # The re-run run executed once in the replay too (its generation 0).
    [original] = [
        run for run in report["runs"]
        if (run["job"], run["schedule_time"]) == (rerun["job"], rerun["schedule_time"])
    ]
    assert original["executions"] == 1
    # The backfill of a simulated outage (demo/backfill.py): each missed run executed once.
    backfill = report["backfill"]
    assert backfill is not None and backfill["ok"], backfill
    assert len(backfill["outage"]) == OUTAGE_RUNS
    assert set(backfill["executions"].values()) == {1}
    assert backfill["progress"]["done"] == OUTAGE_RUNS
    # A silence (demo/silence.py, make silence's code path) over a job: the run during it
    # executed once, the missed one logged silenced and paged nothing during it, then once
    # after the window (its incident still open).
    silence = report["silence"]
    assert silence is not None and silence["ok"], silence
    assert silence["job"] != backfill["job"]
    assert silence["ran_executions"] == 1 and silence["silenced_lines"] == 1
    assert [silence[tick]["pages"] for tick in ("during", "after", "again")] == [0, 1, 0]
    assert [p["kind"] for p in silence["during"]["problems"]] == ["missed"]
    assert silence["during"]["problems"][0]["schedule_time"] == silence["missed"]
    # An extra run (demo/extra_run.py): a second Scheduler job sends a job's headers at a
    # time of none of its runs; with runsBeyondSchedule: page, reported and paged once.
    extra = report["extra_run"]
    assert extra is not None and extra["ok"], extra
    assert extra["job"] != silence["job"]
    assert extra["executions"] == 1
    assert extra["unexplained_run"] == [extra["schedule_time"]]
    assert [extra[tick]["pages"] for tick in ("first", "again")] == [1, 0]
    # The paths (demo/paths.py): the DST changes (Scheduler firing the repeated 01:30
    # once and twice), every forcedRuns choice, long store stalls: each business run once.
    assert [(p["path"], p["executed"] == p["runs"], p["ok"]) for p in report["paths"]] == [
        (spec.name, True, True) for spec in path_specs()]
    # demo/overlap.py: a job longer than its period, under forbid and then wait.
    assert [(o["policy"], o["overlaps"], o["ok"]) for o in report["overlap"]] == [
        ("forbid", 0, True), ("wait", 0, True)]
    assert report["real_seconds"] > 0  # its duration is reported (a figure, not a target)
