"""`make demo DEMO_ARGS=--keep`: the demo's Firestore emulator outlives its report, until
Ctrl-C, and the `make runs` command it prints (`--at`: the end of the window the demo
replayed, ahead of the clock) reads the demo's records."""

from __future__ import annotations

import io
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from infra import KIT_ROOT
from operator_tools import runs
from tests.stacks import fixture_stack_file

# The fixture dev stack as the demo's project (a clone of the kit) holds it.
DEV_STACK = fixture_stack_file("dev").relative_to(KIT_ROOT)
# The silence scene's missed run (demo/silence.py), in the report.
SILENCE_MISSED = re.compile(r"^  heartbeat @ (\S+), never delivered \(missed\)", re.MULTILINE)
KEPT = re.compile(r"^  FIRESTORE_EMULATOR_HOST=(\S+) make runs STACK=(\S+) RUNS_ARGS=\"(.*)\"$")


def port_open(host: str) -> bool:
    address, port = host.rsplit(":", 1)
    with socket.socket() as sock:
        return sock.connect_ex((address, int(port))) == 0


def test_make_demo_keep_leaves_its_records_for_make_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kit_checkout: Path,
) -> None:
    report = tmp_path / "report.txt"
    with report.open("w") as stdout:
        proc = subprocess.Popen(
            [sys.executable, "-m", "operator_tools", "demo", "--keep",
             "--stack", str(kit_checkout / DEV_STACK), "--job", "heartbeat", "--ticks", "4",
             "--no-faults", "--no-paths", "--no-proxied-job"],
            cwd=kit_checkout, stdout=stdout, stderr=subprocess.PIPE, text=True,
        )
    try:
        assert proc.stderr is not None
        lines: list[str] = []
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and not any(KEPT.match(line) for line in lines):
            line = proc.stderr.readline()
            if not line:
                break
            lines.append(line.rstrip("\n"))
        text = "\n".join(lines)
        assert "until Ctrl-C. In another shell:" in text, text + report.read_text()
        assert "RESULT: PASS" in report.read_text()
        [(host, stack, args)] = [m.groups() for line in lines if (m := KEPT.match(line))]
        assert stack == "examples/stacks/Pulumi.dev.yaml"
        assert args.startswith("--job heartbeat --at ")
        at = datetime.fromisoformat(args.split()[-1])
        assert at > datetime.now(UTC)  # the replayed window lies ahead of the clock
        assert port_open(host)  # the report is out; the emulator is still up

        # `make runs` as printed, in-process: the four replayed runs, each completed once;
        # the run after them (never replayed) not due yet at --at, none before them judged.
        monkeypatch.setenv("FIRESTORE_EMULATOR_HOST", host)
        out, err = io.StringIO(), io.StringIO()
        assert runs.main([str(kit_checkout / stack), *shlex.split(args)], out=out, err=err) == 0, (
            err.getvalue())
        rows = [line.split() for line in out.getvalue().splitlines()
                if re.match(r"^  \d{4}-", line)]
        verdicts = [(r[5], r[6], r[-1]) for r in rows]
        # The replayed runs (and the demo's backfill of a simulated outage after them, and
        # the runs of its silence scene): each completed once; the run after them not due
        # yet at --at; nothing missed but the run the silence scene left undelivered.
        assert verdicts[0] == ("-", "-", "not_due"), out.getvalue()
        recorded = [v for v in verdicts if v[0] != "-"]
        assert len(recorded) >= 4 and set(recorded) == {("completed", "1", "ok")}, (
            out.getvalue())
        [silenced] = SILENCE_MISSED.findall(report.read_text())
        missed = [f"{r[0]}T{r[1]}" for r in rows if r[-1] == "missed"]
        assert missed == [silenced], out.getvalue()
        assert {v[2] for v in verdicts} <= {"ok", "not_due", "before_first_run", "missed"}, (
            out.getvalue())
        # Without --at ("now"), the last replayed run is still ahead of the clock: not shown.
        out = io.StringIO()
        assert runs.main([str(kit_checkout / stack), "--job", "heartbeat"], out=out, err=err) == 0
        assert f"  {rows[1][0]} {rows[1][1]}" not in out.getvalue(), out.getvalue()

        proc.send_signal(signal.SIGINT)
        _, rest = proc.communicate(timeout=60)
        assert proc.returncode == 0, rest
        assert "stopped the kept Firestore emulator" in rest
        assert not port_open(host)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_make_runs_at_needs_an_instant_with_its_offset(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert runs.instant("2026-12-02T03:00:00+01:00") == datetime(2026, 12, 2, 2, tzinfo=UTC)
    for bad, why in (("2026-12-02T03:00:00", "has no UTC offset"),
                     ("tomorrow", "is not an RFC 3339 time")):
        with pytest.raises(SystemExit) as exited:
            runs.main([str(DEV_STACK), "--at", bad])
        assert exited.value.code == 2 and why in capsys.readouterr().err
