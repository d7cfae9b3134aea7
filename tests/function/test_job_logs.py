"""Job code's `logging` output: one structured JSON line per record, at the level the job
used, with its run's fields (dedup/logs.py), in process and as the served function."""

from __future__ import annotations

import json
import logging
import textwrap
import threading
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import requests

from dedup.job_logic import JobRegistry
from dedup.logs import JsonLineHandler, configure_logging, current_run_fields, severity
from dedup.run_context import RunContext
from local_stack import FunctionServer
from local_stack.deliveries import function_env, scheduler_headers
from tests.waiting import wait_until

JOB_LOGGER = "tests.function.logging_job"


def logging_job(context: RunContext) -> str:
    log = logging.getLogger(JOB_LOGGER)
    log.debug("not shown at INFO")
    log.info("syncing %s", context.job_name)
    log.warning("3 invoices skipped")
    return "done"


def context(forced: bool = False) -> RunContext:
    return RunContext(
        run_id="r" * 64, job_name="sched-dedup-dev-invoices",
        schedule_time=datetime(2026, 10, 16, 12, tzinfo=UTC), attempt_id="a1", attempt=2,
        project="p", location="l", body=b"", headers={}, forced=forced,
    )


@pytest.fixture
def entries() -> Iterator[list[Mapping[str, Any]]]:
    """What the job logs through a JsonLineHandler on its logger, at INFO."""
    found: list[Mapping[str, Any]] = []
    logger = logging.getLogger(JOB_LOGGER)
    handler = JsonLineHandler(found.append)
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield found
    finally:
        logger.removeHandler(handler)
        logger.setLevel(logging.NOTSET)


def test_a_jobs_log_lines_carry_its_run_and_level(entries: list[Mapping[str, Any]]) -> None:
    job = JobRegistry(logging_job, {}).for_job("sched-dedup-dev-invoices")
    assert job(context()) == "done"
    run = {"run_id": "r" * 64, "job": "sched-dedup-dev-invoices", "attempt": 2,
           "trigger": "scheduled"}
    assert entries == [
        {"severity": "INFO", "message": "syncing sched-dedup-dev-invoices",
         "logger": JOB_LOGGER, **run},
        {"severity": "WARNING", "message": "3 invoices skipped", "logger": JOB_LOGGER, **run},
    ]
    assert current_run_fields() == {}, "the fields end with the job call"


def test_a_forced_run_says_so_and_a_traceback_stays_in_its_line(
    entries: list[Mapping[str, Any]],
) -> None:
    def failing(context: RunContext) -> None:
        try:
            raise KeyError("API_KEY")
        except KeyError:
            logging.getLogger(JOB_LOGGER).exception("cannot sync")
        raise RuntimeError("boom")

    job = JobRegistry(failing, {}).for_job("any")
    with pytest.raises(RuntimeError, match="boom"):
        job(context(forced=True))
    [entry] = entries
    assert (entry["severity"], entry["trigger"]) == ("ERROR", "forced")
    assert entry["message"].startswith("cannot sync\nTraceback (most recent call last):")
    assert "KeyError: 'API_KEY'" in entry["message"]
    assert current_run_fields() == {}


def test_threads_started_by_the_job_keep_its_fields_only_if_given_its_context(
    entries: list[Mapping[str, Any]],
) -> None:
    def threaded(context: RunContext) -> None:
        import contextvars

        worker = threading.Thread(
            target=contextvars.copy_context().run,
            args=(logging.getLogger(JOB_LOGGER).info, "from a worker"),
        )
        worker.start()
        worker.join()

    JobRegistry(threaded, {}).for_job("any")(context())
    assert entries[0]["run_id"] == "r" * 64


def test_severity_follows_pythons_levels() -> None:
    assert [severity(level) for level in (5, 10, 20, 25, 30, 40, 50)] == [
        "DEBUG", "DEBUG", "INFO", "INFO", "WARNING", "ERROR", "CRITICAL"
    ]


def test_configure_logging_adds_one_handler_however_often_called() -> None:
    root = logging.getLogger()
    before, level = list(root.handlers), root.level
    try:
        configure_logging(lambda entry: None)
        configure_logging(lambda entry: None)
        added = [h for h in root.handlers if h not in before]
        assert len(added) == 1 and isinstance(added[0], JsonLineHandler)
        assert root.level == logging.INFO
    finally:
        root.handlers[:] = before
        root.setLevel(level)


# --- the served function: functions-framework, as Cloud Run runs it ---------------------

JOB_MODULE = '''
import logging

log = logging.getLogger(__name__)


def run(context):
    log.debug("not shown at INFO")
    log.info("syncing %s", context.job_name)
    log.warning("3 invoices skipped")
    return {"ok": True}
'''


def json_lines(text: str) -> list[dict[str, Any]]:
    found = []
    for line in text.splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict):
            found.append(entry)
    return found


@pytest.mark.usefixtures("firestore_emulator")
def test_the_served_function_writes_a_jobs_log_lines_as_json(
    collection_name: str, tmp_path: Path
) -> None:
    (tmp_path / "logging_job.py").write_text(textwrap.dedent(JOB_MODULE))
    env = function_env(collection_name, tmp_path / "ledger.jsonl", DEDUP_JOB="logging_job:run")
    with FunctionServer(env, workers=1, threads=2, extra_pythonpath=[tmp_path]) as server:
        reply = requests.post(server.url, headers=scheduler_headers(), data="{}", timeout=30)
        assert reply.status_code == 200, reply.text
        run_id = reply.json()["run_id"]

        def logged() -> tuple[list[dict[str, Any]], list[dict[str, Any]]] | None:
            written = json_lines(server.log_text)
            lines = [e for e in written if e.get("logger") == "logging_job"]
            request_log = [e for e in written if e.get("outcome") == "completed"]
            return (lines, request_log) if len(lines) >= 2 and request_log else None

        lines, request_log = wait_until(
            logged, what="the job's two lines and the request's own line in the log")
    assert [(e["severity"], e["message"]) for e in lines] == [
        ("INFO", "syncing nightly-export"),
        ("WARNING", "3 invoices skipped"),
    ]
    for entry in lines:
        assert (entry["run_id"], entry["job"], entry["attempt"], entry["trigger"]) == (
            run_id, "nightly-export", 1, "scheduled"
        )
    assert [e["run_id"] for e in request_log] == [run_id], "the request's own line is intact"
