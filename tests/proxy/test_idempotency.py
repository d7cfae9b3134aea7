"""The downstream idempotency helper against the Firestore emulator: one token, one
state-changing step, whatever the concurrency (threads, processes, instances)."""

from __future__ import annotations

import multiprocessing
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from google.cloud import firestore

from dedup.idempotency import ForgedToken, IdempotencyGuard, StepInProgress, StepOutcome
from dedup.outcomes import Outcome
from dedup.proxy.tokens import TOKEN_SECRET_ENV, mint_token
from dedup.run_context import RunContext
from dedup.settings import SettingsError
from local_stack.deliveries import PROJECT, settings_for
from local_stack.rpc_counter import RpcCounter
from local_stack.steered_job import read_ledger
from tests.proxy import helper_worker
from tests.proxy.support import TOKEN_SECRET, run_id, token_for
from tests.waiting import job_works_for, wait_until

pytestmark = pytest.mark.usefixtures("firestore_emulator")

TOKEN = token_for("export-workflow")  # what the proxy sends: the run's key and its HMAC
OTHER_TOKEN = token_for("export-run-job")


def guard(collection: str, step: str = "charge", **overrides: Any) -> IdempotencyGuard:
    settings = settings_for(collection, **overrides)
    return IdempotencyGuard.from_settings(
        settings, step=step, client=firestore.Client(project=PROJECT),
        token_secret=TOKEN_SECRET.encode(),
    )


class Ledger:
    """Counts executions of the state-changing step."""

    def __init__(self, works_for: float = 0.0) -> None:
        self.entries: list[str] = []
        self._lock = threading.Lock()
        self._works_for = works_for

    def step(self, context: RunContext) -> dict[str, Any]:
        with self._lock:
            self.entries.append(context.attempt_id)
        job_works_for(self._works_for)
        return {"invoice": "INV-1", "attempt": context.attempt}


def test_concurrent_threads_with_one_token_perform_the_step_once(collection_name: str) -> None:
    helper = guard(collection_name)
    ledger = Ledger(works_for=0.3)

    def call(_: int) -> StepOutcome | str:
        try:
            return helper.run_once(TOKEN, ledger.step)
        except StepInProgress:
            return "in_progress"

    with ThreadPoolExecutor(max_workers=16) as pool:
        outcomes = list(pool.map(call, range(32)))
    assert len(ledger.entries) == 1
    ran = [o for o in outcomes if isinstance(o, StepOutcome) and o.ran]
    assert len(ran) == 1 and ran[0].result == {"invoice": "INV-1", "attempt": 1}
    others = Counter(o if isinstance(o, str) else o.outcome.value for o in outcomes if o not in ran)
    assert set(others) <= {"in_progress", "duplicate"}
    later = helper.run_once(TOKEN, ledger.step)
    assert (later.ran, later.result, later.outcome) == (False, ran[0].result, Outcome.DUPLICATE)
    assert len(ledger.entries) == 1


def test_waiting_callers_all_get_the_one_result(collection_name: str) -> None:
    helpers = [guard(collection_name) for _ in range(4)]  # four instances
    ledger = Ledger(works_for=0.5)
    with ThreadPoolExecutor(max_workers=12) as pool:
        outcomes = list(pool.map(
            lambda i: helpers[i % 4].run_once(TOKEN, ledger.step, wait_seconds=20), range(12)))
    assert len(ledger.entries) == 1
    assert sum(o.ran for o in outcomes) == 1
    assert all(o.result == {"invoice": "INV-1", "attempt": 1} for o in outcomes)


def test_concurrent_processes_with_one_token_perform_the_step_once(
    collection_name: str, tmp_path: Path
) -> None:
    ledger = tmp_path / "charges.jsonl"
    context = multiprocessing.get_context("spawn")
    workers = 4
    barrier = context.Barrier(workers)
    out: Any = context.Queue()
    processes = [
        context.Process(target=helper_worker.charge,
                        args=(collection_name, TOKEN, str(ledger), barrier, out))
        for _ in range(workers)
    ]
    for process in processes:
        process.start()
    results = [out.get(timeout=120) for _ in processes]
    for process in processes:
        process.join(timeout=30)
        assert process.exitcode == 0
    assert len(read_ledger(str(ledger))) == 1
    assert sum(r["ran"] for r in results) == 1
    [charger] = [r["pid"] for r in results if r["ran"]]
    assert all(r["result"] == {"charged_by": charger} for r in results)


def test_a_failing_step_releases_the_token_and_raises(collection_name: str) -> None:
    helper = guard(collection_name)
    calls: list[int] = []

    def flaky(context: RunContext) -> str:
        calls.append(context.attempt)
        if len(calls) == 1:
            raise ConnectionError("payment provider unreachable")
        return "charged"

    with pytest.raises(ConnectionError, match="payment provider unreachable"):
        helper.run_once(TOKEN, flaky)
    client = firestore.Client(project=PROJECT)
    snapshot: Any = client.collection(collection_name).document(helper.record_id(TOKEN)).get()
    kept = snapshot.to_dict()  # kept, marked failed: the retry runs at once
    assert kept["status"] == "failed" and kept["attempts"] == 1
    assert kept["error"] == "ConnectionError: payment provider unreachable"
    assert helper.run_once(TOKEN, flaky).result == "charged"
    assert helper.run_once(TOKEN, flaky).ran is False
    assert calls == [1, 2]  # the retry took the failed record over: attempt 2


def test_a_crashed_holder_is_taken_over_only_after_its_lease(
    collection_name: str, tmp_path: Path
) -> None:
    ledger = tmp_path / "charges.jsonl"
    holder = multiprocessing.get_context("spawn").Process(
        target=helper_worker.hold, args=(collection_name, TOKEN, str(ledger)))
    holder.start()
    try:
        wait_until(lambda: read_ledger(str(ledger)), what="the holder to start its step")
        helper = guard(collection_name, lease_seconds=2.0, retention_seconds=60.0)
        with pytest.raises(StepInProgress):  # the holder's heartbeat keeps its lease alive
            helper.run_once(TOKEN, Ledger().step)
        holder.kill()  # crash: no release, no more renewals
        holder.join()

        def taken_over() -> StepOutcome | None:  # in progress until the 6 s lease lapses
            try:
                return helper.run_once(TOKEN, Ledger().step)
            except StepInProgress:
                return None

        outcome = wait_until(taken_over, what="a takeover once the holder's lease lapsed",
                             poll=0.1)
    finally:
        holder.kill()
        holder.join()
    assert outcome.ran and outcome.result["attempt"] == 2  # a takeover, not a fresh claim
    assert len(read_ledger(str(ledger))) == 1


def test_steps_and_tokens_are_independent_and_records_use_the_protocol_format(
    collection_name: str
) -> None:
    charge, notify = guard(collection_name, "charge"), guard(collection_name, "notify")
    ledger = Ledger()
    assert charge.run_once(TOKEN, ledger.step).ran
    assert notify.run_once(TOKEN, ledger.step).ran  # another step, same token
    assert charge.run_once(OTHER_TOKEN, ledger.step).ran
    assert not charge.run_once(TOKEN, ledger.step).ran
    assert len(ledger.entries) == 3
    client = firestore.Client(project=PROJECT)
    record: Any = client.collection(collection_name).document(charge.record_id(TOKEN)).get()
    data = record.to_dict()
    assert set(data) == {
        "status", "attempt_id", "attempts", "lease_seconds", "expire_at", "job",
        "schedule_time", "project", "location", "result_json",
        "claimed_at", "finished_at", "duration_seconds", "failed_at", "error", "permanent",
        "unfinished_attempts", "blocked_by", "replaced_by",
    }
    assert (data["status"], data["job"], data["attempts"]) == ("completed", "charge", 1)
    # The token is the scheduled run's own ID, yet the records never collide.
    assert charge.record_id(TOKEN) not in (TOKEN, notify.record_id(TOKEN))


def test_a_duplicate_costs_at_most_two_rpcs_on_another_instance(collection_name: str) -> None:
    guard(collection_name).run_once(TOKEN, Ledger().step)
    client = firestore.Client(project=PROJECT)
    counter = RpcCounter(client)
    other = IdempotencyGuard.from_settings(settings_for(collection_name), step="charge",
                                           client=client, token_secret=TOKEN_SECRET.encode())
    assert other.run_once(TOKEN, Ledger().step).ran is False
    assert counter.counts == Counter({"commit": 1, "batch_get_documents": 1})
    counter.reset()
    assert other.run_once(TOKEN, Ledger().step).ran is False
    assert counter.total == 0  # remembered by this instance


def test_decorator_form(collection_name: str) -> None:
    helper = guard(collection_name)
    charged: list[tuple[str, int]] = []

    @helper.once("token", step="invoice")
    def send_invoice(customer: str, token: str, amount: int = 10) -> dict[str, int]:
        charged.append((customer, amount))
        return {"amount": amount}

    first = send_invoice("acme", TOKEN, amount=25)
    again = send_invoice("acme", token=TOKEN, amount=99)
    assert (first.ran, first.result) == (True, {"amount": 25})
    assert (again.ran, again.result) == (False, {"amount": 25})
    assert charged == [("acme", 25)]
    with pytest.raises(ValueError, match="printable ASCII"):
        send_invoice("acme", "has space")
    with pytest.raises(TypeError, match="has no parameter 'token'"):
        helper.once()(lambda other: other)


def test_a_forged_token_is_refused_before_anything_is_read_or_written(
    collection_name: str,
) -> None:
    """The bare run ID (computable from the stack file) and a token under another secret
    are refused; the genuine token of the same run is then accepted."""
    helper = guard(collection_name)
    client = firestore.Client(project=PROJECT)
    counter = RpcCounter(client)
    ledger = Ledger()
    for forged in (run_id("export-workflow"), mint_token(b"k" * 40, run_id("export-workflow"))):
        with pytest.raises(ForgedToken) as raised:
            helper.run_once(forged, ledger.step)
        assert "\n" not in str(raised.value)
    assert ledger.entries == [] and counter.total == 0
    assert list(client.collection(collection_name).stream()) == []
    assert helper.run_once(TOKEN, ledger.step).ran and len(ledger.entries) == 1


def test_from_env_requires_the_token_secret(collection_name: str) -> None:
    env = {"DEDUP_PROJECT": PROJECT, "DEDUP_LOCATION": "europe-west1",
           "DEDUP_COLLECTION": collection_name}
    with pytest.raises(SettingsError, match="DEDUP_TOKEN_SECRET is not set"):
        IdempotencyGuard.from_env(step="charge", environ=env)
    with pytest.raises(SettingsError, match="at least 32"):
        IdempotencyGuard.from_env(step="charge", environ={**env, TOKEN_SECRET_ENV: "short"})


def test_a_guard_without_a_secret_checks_only_the_shape(collection_name: str) -> None:
    """For tokens of the caller's own (not the proxy's): token_secret=None, stated."""
    unsigned = IdempotencyGuard.from_settings(
        settings_for(collection_name), step="own", token_secret=None,
        client=firestore.Client(project=PROJECT),
    )
    assert unsigned.run_once("order-42", Ledger().step).ran
