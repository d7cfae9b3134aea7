"""The watchdog ticks on POST only, as Cloud Run serves it (functions-framework with --target
watch_scheduled_runs, the real Firestore emulator): GET, HEAD, PUT and OPTIONS, even with
the watchdog's own token, get a 405 with `Allow: POST` and read nothing; POST still ticks."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import requests
from google.cloud import firestore

from local_stack import FunctionServer
from local_stack.deliveries import LOCATION, PROJECT, bearer
from local_stack.tables import write_job_tables
from tests.function.test_watchdog import INVOKER, Runs

pytestmark = pytest.mark.usefixtures("firestore_emulator")

WATCHED = [{
    "name": "minutely", "schedule": "* * * * *", "timeZone": "Etc/UTC",
    "attemptDeadlineSeconds": 60, "retryWindowSeconds": 0, "paused": False,
}]
REFUSED_METHODS = ("GET", "HEAD", "PUT", "OPTIONS")


def watchdog_env(collection: str, tables: Path) -> dict[str, str]:
    return {
        "DEDUP_PROJECT": PROJECT,
        "DEDUP_LOCATION": LOCATION,
        "DEDUP_COLLECTION": collection,
        "DEDUP_STORE_TIMEOUT_SECONDS": "5",
        "DEDUP_ALLOWED_CALLERS": INVOKER,
        **write_job_tables(tables, watch_jobs=WATCHED),
        "DEDUP_WATCH_LOOKBACK_SECONDS": "900",
        "DEDUP_WATCH_GRACE_SECONDS": "200",
        "FIRESTORE_EMULATOR_HOST": os.environ["FIRESTORE_EMULATOR_HOST"],
        "GOOGLE_CLOUD_PROJECT": PROJECT,
    }


def test_only_post_ticks(collection_name: str, tmp_path: Path) -> None:
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    minutes = [now - timedelta(minutes=k) for k in range(1, 9)]
    missed = now - timedelta(minutes=5)
    Runs(collection_name).completed("minutely", *(t for t in minutes if t != missed))
    cursors = firestore.Client(project=PROJECT).collection(f"{collection_name}_watchdog")
    token = {"Authorization": bearer(INVOKER)}  # the one caller a tick would be run for

    env = watchdog_env(collection_name, tmp_path)
    with FunctionServer(env, target="watch_scheduled_runs") as server:
        for method in REFUSED_METHODS:
            reply = requests.request(method, server.url, headers=token, timeout=30)
            assert reply.status_code == 405, (method, reply.text)
            assert reply.headers["Allow"] == "POST"
            if method != "HEAD":  # a HEAD reply has no body
                assert reply.json() == {
                    "error": f"method {method} not allowed: only POST runs this entry point"
                }
                assert "\n" not in reply.text
        # No tick ran: no cursor written, no summary logged, and the missed run is still
        # unreported, so the first POST reports it.
        assert list(cursors.stream()) == []
        refusals = [json.loads(line) for line in server.log_text.splitlines()
                    if line.startswith("{") and "method_not_allowed" in line]
        # (The server's readiness probe, a GET, is one of them.)
        assert {(e["severity"], e["status"]) for e in refusals} == {("WARNING", 405)}
        assert {e["message"].split()[3] for e in refusals} == set(REFUSED_METHODS)
        assert "watchdog summary" not in server.log_text

        ticked = requests.post(server.url, headers=token, timeout=30)
        assert ticked.status_code == 200, ticked.text
        assert [(p["kind"], p["schedule_time"]) for p in ticked.json()["problems"]] == [
            ("missed", missed.strftime("%Y-%m-%dT%H:%M:%SZ"))
        ]
        assert [c.id for c in cursors.stream()] == ["minutely"]
        assert server.log_text.count("watchdog summary") == 1
