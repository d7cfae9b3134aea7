"""`make demo DEMO_ARGS=--keep`: the demo on a Firestore emulator kept running after the
report, with the `make runs` commands that read its records."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from demo.record_stores import emulator_env
from local_stack import FirestoreEmulator, LocalStackError
from scheduler_emulator.stack import resolve_stack

KEEP = "--keep"


def kept_at(stack_file: Path, firestore_host: str) -> dict[str, datetime]:
    """Per job of the stack file with records (jobs[].name), the instant `make runs --at`
    reads its replayed runs at: the verdict of its latest recorded business run due (its retry
    window + the watchdog's grace after it), as the demo's watchdog judges each job at the
    end of its own window; a later run, never replayed, is not judged yet."""
    from dedup.watchdog.due import verdict_due_at
    from operator_tools.runs import open_store, stack_config, watched_jobs  # the Pulumi program

    cfg = stack_config(str(stack_file))
    grace = float(cfg.watchdog.grace_seconds)
    documents: dict[int, list[dict[str, Any]]] = {}
    at: dict[str, datetime] = {}
    with emulator_env(firestore_host):
        stores = open_store(cfg)
        for job in watched_jobs(cfg):
            store = stores.records(job)
            if id(store) not in documents:  # one read of each database's collection
                documents[id(store)] = [
                    snapshot.to_dict() or {}
                    for snapshot in store.client.collection(cfg.dedup.collection).stream()
                ]
            # Business runs only: the extra-run scene's record (demo.extra_run) is none.
            times = [d["schedule_time"] for d in documents[id(store)]
                     if d.get("job") == job.name and d.get("project") == cfg.project
                     and isinstance(d.get("schedule_time"), datetime)
                     and job.is_scheduled(d["schedule_time"])]
            if times:
                due = verdict_due_at(job, max(times), grace)
                whole = due.replace(microsecond=0)
                at[job.name.removeprefix(f"{cfg.name_prefix}-")] = (
                    whole if whole == due else whole + timedelta(seconds=1))
    return at


def kept_commands(stack_file: Path, firestore_host: str, at: dict[str, datetime]) -> str:
    """The `make runs` commands that read the kept records, one per job (each at the end
    of its own replayed window)."""
    from operator_tools.stack_files import display_path

    stack = display_path(stack_file)
    lines = [f"  FIRESTORE_EMULATOR_HOST={firestore_host} make runs STACK={stack} "
             f'RUNS_ARGS="--job {job} --at {when:%Y-%m-%dT%H:%M:%SZ}"'
             for job, when in sorted(at.items())]
    return "\n".join(lines or [f"  (no records of the jobs of {stack})"]) + "\n"


def main_keeping_firestore(
    argv: list[str],
    demo_main: Callable[[list[str]], int],
    *,
    out: Any = None,
    wait: Callable[[], None] | None = None,
) -> int:
    """`make demo DEMO_ARGS=--keep`: the demo (`demo_main`, demo.cli's) on a Firestore
    emulator started here and kept running after the report, until Ctrl-C (or SIGTERM),
    with the `make runs` commands that read its records (`--at`: the demo replays a window
    ahead of the clock). Without --keep, just the demo. With --firestore-host, the demo's
    records stay in that emulator: the commands are printed, and it returns."""
    out = out or sys.stderr
    if "-h" in argv or "--help" in argv:
        try:
            return demo_main(argv)
        finally:
            print(f"\n{KEEP}: keep the Firestore emulator, with the demo's records, running "
                  "after the report until Ctrl-C, and print the `make runs` commands that "
                  "read them (make demo DEMO_ARGS=--keep)")
    if KEEP not in argv:
        return demo_main(argv)
    rest = [arg for arg in argv if arg != KEEP]
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--stack", default="dev")
    pre.add_argument("--firestore-host")
    pre.add_argument("--firestore-port", type=int)
    known, _ = pre.parse_known_args(rest)
    try:
        stack_file = resolve_stack(known.stack)
    except ValueError:
        return demo_main(rest)  # the demo says what is wrong with it
    if known.firestore_host:
        code = demo_main(rest)
        if code in (0, 1):
            out.write(f"\nThe demo's records are in the Firestore emulator on "
                      f"{known.firestore_host}. To read them:\n\n"
                      + kept_commands(stack_file, known.firestore_host,
                                      kept_at(stack_file, known.firestore_host)))
        return code
    out.write("starting the Firestore emulator to keep (gcloud emulators firestore start) ...\n")
    out.flush()
    emulator = FirestoreEmulator(port=known.firestore_port)
    code = 130  # until the demo has run
    try:
        try:
            emulator.start()
        except LocalStackError as exc:
            out.write(f"error: {exc}\n")
            return 2
        code = demo_main([*rest, "--firestore-host", emulator.host])
        if code not in (0, 1):
            return code
        at = kept_at(stack_file, emulator.host)
        out.write(f"\nKept the Firestore emulator on {emulator.host}, with the demo's records, "
                  "until Ctrl-C. In another shell:\n\n"
                  + kept_commands(stack_file, emulator.host, at))
        out.flush()
        (wait or _wait_forever)()
        return code
    except KeyboardInterrupt:
        out.write("stopped the kept Firestore emulator\n")
        return code if code in (0, 1) else 130
    finally:
        emulator.stop()


def _wait_forever() -> None:
    while True:
        time.sleep(3600)
