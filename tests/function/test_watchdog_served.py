"""The watchdog as Cloud Run serves it: functions-framework with --target
watch_scheduled_runs, settings from the environment, the real Firestore emulator."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime, timedelta

import pytest
import requests

from local_stack import FunctionServer
from local_stack.deliveries import LOCATION, PROJECT, bearer
from local_stack.tables import job_tables_env
from tests.function.test_watchdog import INVOKER, Runs

pytestmark = pytest.mark.usefixtures("firestore_emulator")


def test_served_watchdog_reports_the_missed_run_once(collection_name: str) -> None:
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    minutes = [now - timedelta(minutes=k) for k in range(1, 9)]
    missed = now - timedelta(minutes=5)
    Runs(collection_name).completed("minutely", *(t for t in minutes if t != missed))
    env = {
        "DEDUP_PROJECT": PROJECT,
        "DEDUP_LOCATION": LOCATION,
        "DEDUP_COLLECTION": collection_name,
        "DEDUP_STORE_TIMEOUT_SECONDS": "5",
        # The readiness probe (no token) is refused: the first tick is the test's.
        "DEDUP_ALLOWED_CALLERS": INVOKER,
        **job_tables_env(watch_jobs=[{
            "name": "minutely", "schedule": "* * * * *", "timeZone": "Etc/UTC",
            "attemptDeadlineSeconds": 60, "retryWindowSeconds": 0, "paused": False,
        }]),
        "DEDUP_WATCH_LOOKBACK_SECONDS": "900",
        "DEDUP_WATCH_GRACE_SECONDS": "200",
        "FIRESTORE_EMULATOR_HOST": os.environ["FIRESTORE_EMULATOR_HOST"],
        "GOOGLE_CLOUD_PROJECT": PROJECT,
    }
    with FunctionServer(env, target="watch_scheduled_runs") as server:
        refused = requests.post(server.url, timeout=30)
        assert refused.status_code == 403
        headers = {"Authorization": bearer(INVOKER)}
        reply = requests.post(server.url, headers=headers, timeout=30)
        assert reply.status_code == 200, reply.text
        body = reply.json()
        assert body["problems"] == [{
            "job": "minutely", "schedule_time": missed.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "kind": "missed",
            "run_id": body["problems"][0]["run_id"],
        }]
        assert body["checked"] >= 4
        again = requests.post(server.url, headers=headers, timeout=30)
        assert (again.status_code, again.json()["problems"]) == (200, [])
        lines = [json.loads(line) for line in server.log_text.splitlines()
                 if line.startswith("{") and "watchdog" in line]
        assert [(e["severity"], e.get("kind")) for e in lines if "kind" in e] == [
            ("ERROR", "missed")
        ]
        summaries = [e for e in lines if e["message"].startswith("watchdog summary")]
        assert [e["problems"] for e in summaries] == [1, 0]
