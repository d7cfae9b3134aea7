"""The own-service examples served (tests/adapters/served.py): a team's Flask and FastAPI
apps, their POST /tasks/export guarded by the protocol, give the kit's answers over real
HTTP: concurrent duplicates execute once (200/409 only), a retry after completion runs
nothing, a failed run is answered 500 and its retry runs, a delivery without Scheduler's
headers is a 400 that writes nothing. test_install_bounds.py runs these same tests with the
protocol installed from its wheel at its lower bounds and at current releases."""

from __future__ import annotations

import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

from google.cloud import firestore

from local_stack.deliveries import PROJECT, scheduler_headers
from tests.adapters.served import RECORDS_DATABASE, ServedExample


def a_new_run() -> dict[str, str]:
    """Scheduler's headers for a run no other test of the module delivers, with the job's
    schedule in its time zone, as the kit's Scheduler jobs send it (its 12:00Z is 14:00
    in Paris that day): the protocol reads it with croniter, a dependency of its own."""
    return {**scheduler_headers(job=f"export-{uuid.uuid4().hex[:10]}"),
            "X-Dedup-Schedule": "0 14 * * *", "X-Dedup-Time-Zone": "Europe/Paris"}


def stored_records(example: ServedExample) -> int:
    client = firestore.Client(project=PROJECT, database=RECORDS_DATABASE)
    return len(list(client.collection(example.collection).stream()))


def test_concurrent_duplicate_deliveries_execute_once(example: ServedExample) -> None:
    headers = a_new_run()
    with ThreadPoolExecutor(max_workers=8) as pool:
        replies = list(pool.map(lambda _: example.post(headers), range(8)))
    statuses = Counter(reply.status_code for reply in replies)
    assert set(statuses) <= {200, 409}, statuses
    (run_id,) = {reply.json()["run_id"] for reply in replies if reply.status_code == 200}
    assert len(example.executions(run_id)) == 1
    results = [reply.json()["result"] for reply in replies if reply.status_code == 200]
    assert results and all(result == results[0] for result in results)


def test_a_retry_after_completion_runs_nothing(example: ServedExample) -> None:
    headers = a_new_run()
    first = example.post(headers)
    assert (first.status_code, first.json()["outcome"]) == (200, "completed")
    retry = example.post(headers)
    assert (retry.status_code, retry.json()["outcome"]) == (200, "duplicate")
    assert retry.json()["result"] == first.json()["result"]
    assert len(example.executions(first.json()["run_id"])) == 1


def test_a_failed_run_is_answered_500_and_its_retry_runs(example: ServedExample) -> None:
    headers = a_new_run()
    example.fail_file.touch()
    try:
        failed = example.post(headers)
    finally:
        example.fail_file.unlink()
    assert (failed.status_code, failed.json()["outcome"]) == (500, "failed")
    retry = example.post(headers)  # at once: the failed attempt released its claim
    assert (retry.status_code, retry.json()["outcome"]) == (200, "completed")
    run_id = retry.json()["run_id"]
    assert [line["attempt"] for line in example.executions(run_id)] == [1, 2]


def test_a_delivery_without_schedulers_headers_is_a_400_and_writes_nothing(
    example: ServedExample,
) -> None:
    executions, records = len(example.executions()), stored_records(example)
    bare = example.post({"Content-Type": "application/json"})
    assert (bare.status_code, bare.json()) == (
        400, {"error": "missing X-CloudScheduler-JobName header"})
    untimed = example.post(scheduler_headers(schedule_time=None))
    assert untimed.status_code == 400
    assert "X-CloudScheduler-ScheduleTime" in untimed.json()["error"]
    assert (len(example.executions()), stored_records(example)) == (executions, records)
