"""Catch-up: the watchdog delivers a missed run of a `catchUp` job to the function itself.

The function is served (functions-framework, the ledger job counting executions) against the
real Firestore emulator; the watchdog runs in-process with the HTTP deliverer pointed at it
(DEDUP_WATCH_TARGET_AUTH=none). Schedule times are real recent minutes: the served function
takes a schedule time ahead of its clock for a forced run.
"""

from __future__ import annotations

import json
import os
import threading
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import requests
from google.cloud import firestore

from dedup.cache import CompletedRunCache
from dedup.claim import Claim
from dedup.keys import RunKey
from dedup.protocol import Deduplicator
from dedup.settings import Settings, SettingsError
from dedup.store import RunStatus
from dedup.store.firestore import FirestoreRunStore
from dedup.watchdog.cursors import FirestoreWatchStore
from dedup.watchdog.deliveries import CAUGHT_UP
from dedup.watchdog.delivery import (
    DeliversRuns,
    DeliveryResult,
    HttpDeliverer,
    RunDelivery,
    TargetAuth,
)
from dedup.watchdog.due import WatchedJob
from dedup.watchdog.reruns import FirestoreRerunQueue, RerunRequest, reruns_collection
from dedup.watchdog.settings import WatchSettings
from dedup.watchdog.tick import Watchdog, WatchdogHandler
from local_stack import FunctionServer, free_port
from local_stack.deliveries import (
    INVOKER,
    LOCATION,
    PROJECT,
    bearer,
    function_env,
    scheduler_headers,
)
from local_stack.processes import REPO_ROOT
from local_stack.steered_job import read_ledger
from local_stack.tables import job_tables_env
from scheduler_emulator.oidc import forwarded_token, oidc_claims
from tests.function.helpers import lease_lapsed
from tests.function.test_watchdog import Runs
from tests.waiting import wait_until

pytestmark = pytest.mark.usefixtures("firestore_emulator")

JOB_HEADERS = (
    ("Content-Type", "application/json"), ("X-Dedup-Location", LOCATION),
    ("X-Dedup-Project", PROJECT),
)
# Long enough that two deliveries of one run overlap.
SLOW_BODY = json.dumps({"sleep": 0.6, "result": "caught up"})


@dataclass
class Served:
    """One served function (its own collection and ledger) shared by a module's tests."""

    server: FunctionServer
    collection: str
    ledger: Path

    def executions(self, job: str) -> list[dict[str, Any]]:
        return [e for e in read_ledger(str(self.ledger)) if e["job"] == job]


@pytest.fixture(scope="module")
def served(firestore_emulator: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    collection = f"runs_{uuid.uuid4().hex[:12]}"
    ledger = tmp_path_factory.mktemp("catch-up") / "ledger.jsonl"
    with FunctionServer(
        function_env(collection, ledger), workers=2, threads=8, extra_pythonpath=[REPO_ROOT],
    ) as server:
        yield Served(server, collection, ledger)


def recent_minutes(count: int) -> tuple[datetime, list[datetime]]:
    """The current minute (the watchdog's `now`) and the `count` minutes before it, oldest
    first: real instants, so the served function never takes them for forced runs."""
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    return now, [now - timedelta(minutes=k) for k in range(count, 0, -1)]


def minutely(name: str, *, catch_up: bool = True, within: float = 1800) -> WatchedJob:
    return WatchedJob(
        name, "* * * * *", "Etc/UTC", attempt_deadline_seconds=60, retry_window_seconds=0,
        catch_up=catch_up, catch_up_within_seconds=within, body=SLOW_BODY,
        headers=JOB_HEADERS,
    )


@dataclass
class Watch:
    """An in-process watchdog delivering to `url`, with a clock the test sets."""

    collection: str
    jobs: Sequence[WatchedJob]
    url: str
    now: datetime
    grace_seconds: float = 30
    logs: list[Mapping[str, Any]] = field(default_factory=list)
    delivery_timeout_seconds: float = 20
    deliverer: DeliversRuns | None = None  # default: HttpDeliverer, no token

    def settings(self) -> WatchSettings:
        store = Settings(
            project=PROJECT, location=LOCATION, collection=self.collection,
            store_timeout_seconds=5,
        )
        return WatchSettings(
            store, tuple(self.jobs), lookback_seconds=3600, grace_seconds=self.grace_seconds,
            target_url=self.url, target_auth=TargetAuth.NONE,
            delivery_timeout_seconds=self.delivery_timeout_seconds,
        )

    def handler(self) -> WatchdogHandler:
        """A fresh watchdog 'instance' (its own client, store and deliverer)."""
        settings = self.settings()
        client = firestore.Client(project=PROJECT)
        runs = FirestoreRunStore(client, self.collection, 5)
        watchdog = Watchdog(
            settings, FirestoreWatchStore(runs, settings.cursor_collection), lambda: self.now,
            self.deliverer or HttpDeliverer(TargetAuth.NONE),
            FirestoreRerunQueue(runs, reruns_collection(self.collection)),
        )
        return WatchdogHandler(settings, watchdog, self.logs.append)

    def tick(self) -> dict[str, Any]:
        reply = self.handler().handle({}, b"")
        assert reply.status == 200, reply.body
        return dict(reply.body)


def z(instant: datetime) -> str:
    return instant.strftime("%Y-%m-%dT%H:%M:%SZ")


def kinds(body: Mapping[str, Any]) -> list[tuple[str, str]]:
    return sorted((p["kind"], p["schedule_time"]) for p in body["problems"])


def test_each_missed_run_is_delivered_once_across_concurrent_and_repeated_ticks(
    served: Served,
) -> None:
    job = minutely(f"catch-{uuid.uuid4().hex[:6]}")
    now, times = recent_minutes(8)
    missed = [times[2], times[4]]
    Runs(served.collection).completed(job.name, *(t for t in times if t not in missed))
    watch = Watch(served.collection, [job], served.server.url, now=now)

    # Four watchdog instances tick at once (a Scheduler retry racing a slow tick, say).
    start = threading.Barrier(4)

    def tick() -> dict[str, Any]:
        handler = watch.handler()
        start.wait()
        reply = handler.handle({}, b"")
        assert reply.status == 200, reply.body
        return dict(reply.body)

    with ThreadPoolExecutor(4) as pool:
        bodies = list(pool.map(lambda _: tick(), range(4)))
    bodies += [watch.tick(), watch.tick()]  # and the later ticks

    executions = served.executions(job.name)
    assert Counter(e["schedule_time"] for e in executions) == {
        t.isoformat(): 1 for t in missed
    }, executions
    assert all(e["generation"] == 0 and not e["forced"] for e in executions)
    # Never reported missed: each concurrent tick either caught the run up (completed by
    # one, duplicate for a later one) or found it in progress and watched it.
    assert [kinds(b) for b in bodies] == [[]] * 6
    caught = [(c["schedule_time"], c["status"]) for b in bodies for c in b[CAUGHT_UP]]
    assert {t for t, _ in caught} == {z(t) for t in missed}
    assert Counter(s for _, s in caught)["completed"] == 2  # one execution per run
    assert set(s for _, s in caught) <= {"completed", "duplicate"}
    lines = [e for e in watch.logs if e.get("outcome") == CAUGHT_UP]
    assert lines and {e["severity"] for e in lines} == {"WARNING"}
    assert all("kind" not in e for e in lines)  # not counted as a watchdog problem


def test_a_catch_up_racing_schedulers_late_retry_executes_the_run_once(
    served: Served,
) -> None:
    job = minutely(f"race-{uuid.uuid4().hex[:6]}")
    now, times = recent_minutes(4)
    missed = times[1]
    Runs(served.collection).completed(job.name, *(t for t in times if t != missed))
    watch = Watch(served.collection, [job], served.server.url, now=now)
    late_retry = scheduler_headers(job.name, z(missed), authorization=None)
    start = threading.Barrier(3)

    def scheduler() -> int:
        start.wait()
        return requests.post(served.server.url, headers=late_retry, data=SLOW_BODY,
                             timeout=30).status_code

    def watchdog() -> dict[str, Any]:
        handler = watch.handler()
        start.wait()
        return dict(handler.handle({}, b"").body)

    with ThreadPoolExecutor(3) as pool:
        retries = [pool.submit(scheduler), pool.submit(scheduler)]
        body = pool.submit(watchdog).result()
        statuses = sorted(r.result() for r in retries)
    assert set(statuses) <= {200, 409}
    assert kinds(body) == []  # caught up, or watched while the late retry runs it
    after = watch.tick()
    assert kinds(after) == []
    assert [e["schedule_time"] for e in served.executions(job.name)] == [missed.isoformat()]


def test_only_missed_runs_within_catch_up_within_seconds_are_delivered(
    served: Served,
) -> None:
    job = minutely(f"bound-{uuid.uuid4().hex[:6]}", within=240)
    now, times = recent_minutes(9)
    old, recent = times[1], times[-3]  # 8 and 3 minutes ago
    Runs(served.collection).completed(job.name, *(t for t in times if t not in (old, recent)))
    watch = Watch(served.collection, [job], served.server.url, now=now)
    body = watch.tick()
    assert kinds(body) == [("missed", z(old))]
    [missed] = body["problems"]
    assert "error" not in missed  # not delivered at all: beyond the bound
    assert [(c["schedule_time"], c["status"]) for c in body[CAUGHT_UP]] == [
        (z(recent), "completed")
    ]
    assert [e["schedule_time"] for e in served.executions(job.name)] == [recent.isoformat()]


def test_nothing_is_caught_up_for_a_job_without_catch_up(served: Served) -> None:
    job = minutely(f"plain-{uuid.uuid4().hex[:6]}", catch_up=False)
    now, times = recent_minutes(4)
    Runs(served.collection).completed(job.name, *(t for t in times if t != times[1]))
    watch = Watch(served.collection, [job], served.server.url, now=now)
    body = watch.tick()
    assert kinds(body) == [("missed", z(times[1]))]
    assert body[CAUGHT_UP] == []
    assert served.executions(job.name) == []


def test_a_catch_up_that_cannot_be_delivered_is_pending_then_missed_with_its_error(
    served: Served,
) -> None:
    """Delivered again at each tick while inside catchUpWithinSeconds, reported `missed`
    with its last error once the bound is over: never dropped after one failure."""
    job = minutely(f"down-{uuid.uuid4().hex[:6]}", within=300)
    now, times = recent_minutes(4)
    Runs(served.collection).completed(job.name, *(t for t in times if t != times[1]))
    nobody = f"http://127.0.0.1:{free_port()}/"  # the function is down
    watch = Watch(served.collection, [job], nobody, now=now)
    first = watch.tick()
    assert first["problems"] == []
    assert [(c["schedule_time"], c["status"]) for c in first[CAUGHT_UP]] == [
        (z(times[1]), "error")]
    second = watch.tick()  # delivered again: still inside its bound
    assert second["problems"] == [] and len(second[CAUGHT_UP]) == 1
    watch.now = times[1] + timedelta(seconds=301)
    [problem] = [p for p in watch.tick()["problems"] if p["schedule_time"] == z(times[1])]
    assert problem["kind"] == "missed"
    assert problem["error"].startswith("delivered 2 time(s), never executed: POST http://")
    assert [p for p in watch.tick()["problems"] if p["schedule_time"] == z(times[1])] == []
    assert served.executions(job.name) == []


@dataclass
class FailsFirst:
    """The first delivery of each run fails without executing it: `500 store_unavailable`
    with nothing written, or (`claims`) its instance claims the run and is killed."""

    inner: DeliversRuns
    collection: str
    claims: bool = False
    asynchronous = False
    seen: set[str] = field(default_factory=set)

    def deliver(self, delivery: RunDelivery) -> DeliveryResult:
        if delivery.run_id in self.seen:
            return self.inner.deliver(delivery)
        self.seen.add(delivery.run_id)
        if self.claims:  # a claim whose holder dies: its 1 s lease lapses, nothing renews it
            store = FirestoreRunStore(firestore.Client(project=PROJECT), self.collection, 5)
            dedup = Deduplicator(store, lease_seconds=1, retention_seconds=86400,
                                 cache=CompletedRunCache(0, 60))
            key = RunKey(PROJECT, LOCATION, delivery.job_id, delivery.schedule_time)
            assert isinstance(dedup.claim(key), Claim)
            return DeliveryResult("error", error="connection reset by peer")
        return DeliveryResult("store_unavailable", 500, "HTTP 500: store_unavailable")


@pytest.mark.parametrize("claims", [False, True], ids=["5xx-nothing-written", "instance-killed"])
def test_a_catch_up_that_did_not_execute_is_delivered_again_and_executes_once(
    served: Served, claims: bool,
) -> None:
    job = minutely(f"again-{uuid.uuid4().hex[:6]}")
    now, times = recent_minutes(4)
    Runs(served.collection).completed(job.name, *(t for t in times if t != times[1]))
    deliverer = FailsFirst(HttpDeliverer(TargetAuth.NONE), served.collection, claims)
    watch = Watch(served.collection, [job], served.server.url, now=now, deliverer=deliverer)
    assert watch.tick()["problems"] == []  # pending, not missed
    assert served.executions(job.name) == []
    if claims:  # the dead instance's lease lapses, by Firestore's clock
        store = FirestoreRunStore(firestore.Client(project=PROJECT), served.collection, 5)
        lease_lapsed(store, RunKey(PROJECT, LOCATION, job.name, times[1]).run_id)
    second = watch.tick()
    assert second["problems"] == []
    assert [(c["schedule_time"], c["status"]) for c in second[CAUGHT_UP]] == [
        (z(times[1]), "completed")]
    assert [e["schedule_time"] for e in served.executions(job.name)] == [times[1].isoformat()]
    third = watch.tick()
    assert (third["problems"], third[CAUGHT_UP]) == ([], [])


@dataclass
class LostReplies:
    """Delivers for real, then loses the function's answer: the run landed, and the
    watchdog is told the delivery failed."""

    inner: DeliversRuns
    asynchronous = False

    def deliver(self, delivery: RunDelivery) -> DeliveryResult:
        self.inner.deliver(delivery)
        return DeliveryResult("error", error="connection reset by peer")


def test_a_catch_up_whose_reply_is_lost_is_caught_up_not_missed(served: Served) -> None:
    job = minutely(f"lost-{uuid.uuid4().hex[:6]}")
    now, times = recent_minutes(4)
    Runs(served.collection).completed(job.name, *(t for t in times if t != times[1]))
    watch = Watch(served.collection, [job], served.server.url, now=now,
                  deliverer=LostReplies(HttpDeliverer(TargetAuth.NONE)))
    body = watch.tick()
    assert body["problems"] == []  # no false alarm: its record says it ran
    [caught] = body[CAUGHT_UP]
    assert (caught["schedule_time"], caught["status"]) == (z(times[1]), "completed")
    assert caught["error"] == (
        "no answer (connection reset by peer), but its record is completed")
    assert len(served.executions(job.name)) == 1
    assert watch.tick()["problems"] == []
    assert len(served.executions(job.name)) == 1


def test_a_catch_up_answered_too_late_is_watched_not_missed(served: Served) -> None:
    """The watchdog stops waiting before the run ends (its 4 s job outlasts a 2 s delivery
    timeout): the run is in progress, watched, and ends quietly. The timeout is also the
    time the served function has to land its claim before the watchdog reads the record
    (None there would be a catch-up that never reached the function): 2 s, not 0.2 s, on
    a loaded machine."""
    job = replace(minutely(f"late-{uuid.uuid4().hex[:6]}"),
                  body=json.dumps({"sleep": 4.0, "result": "caught up"}))
    now, times = recent_minutes(4)
    Runs(served.collection).completed(job.name, *(t for t in times if t != times[1]))
    watch = Watch(served.collection, [job], served.server.url, now=now,
                  delivery_timeout_seconds=2.0)
    body = watch.tick()
    assert (body["problems"], body[CAUGHT_UP]) == ([], [])
    assert watch.tick()["problems"] == []  # running (a live lease): watched, no new delivery
    runs = FirestoreRunStore(firestore.Client(project=PROJECT), served.collection, 5)
    run_id = RunKey(PROJECT, LOCATION, job.name, times[1]).run_id
    wait_until(lambda: (stored := runs.get(run_id)) is not None
               and stored.record.status is RunStatus.COMPLETED,
               what="the caught-up run to complete", poll=0.1)
    assert watch.tick()["problems"] == []  # ended: judged good, quietly
    assert len(served.executions(job.name)) == 1


# -- settings -------------------------------------------------------------------------------

def _env(jobs: list[dict[str, Any]], **extra: str) -> dict[str, str]:
    return {
        "DEDUP_PROJECT": PROJECT, "DEDUP_LOCATION": LOCATION,
        **job_tables_env(watch_jobs=jobs), "DEDUP_WATCH_LOOKBACK_SECONDS": "86400",
        **extra,
    }


CATCH_UP_JOB = {
    "name": "sync", "schedule": "*/5 * * * *", "catchUp": True, "catchUpWithinSeconds": 3600,
    "body": '{"a":1}', "headers": dict(JOB_HEADERS),
}


def test_catch_up_settings_are_read_from_the_watch_jobs_entries() -> None:
    settings = WatchSettings.from_env(_env(
        [CATCH_UP_JOB, {**CATCH_UP_JOB, "name": "proxied", "url": "https://proxy.run.app"}],
        DEDUP_WATCH_TARGET_URL="https://dedup.run.app", DEDUP_WATCH_TARGET_AUTH="none",
    ))
    sync, proxied = settings.jobs
    assert (sync.catch_up, sync.catch_up_within_seconds, sync.body) == (True, 3600, '{"a":1}')
    assert dict(sync.headers)["X-Dedup-Project"] == PROJECT
    assert settings.delivery_url(sync) == "https://dedup.run.app"
    assert settings.delivery_url(proxied) == "https://proxy.run.app"
    assert settings.target_auth is TargetAuth.NONE
    assert replace(settings, target_url=None).delivers  # a job's own url is a target too


@pytest.mark.parametrize(("jobs", "extra", "message"), [
    ([CATCH_UP_JOB], {}, "has catchUp but no url, and DEDUP_WATCH_TARGET_URL is not set"),
    ([{**CATCH_UP_JOB, "catchUpWithinSeconds": 86400}],
     {"DEDUP_WATCH_TARGET_URL": "https://dedup.run.app"},
     "catchUpWithinSeconds=86400 is not shorter than DEDUP_WATCH_LOOKBACK_SECONDS"),
    ([{**CATCH_UP_JOB, "catchUp": "yes"}], {}, "catchUp must be true or false"),
    ([CATCH_UP_JOB], {"DEDUP_WATCH_TARGET_URL": "dedup.run.app"}, "is not a URL"),
    ([CATCH_UP_JOB], {"DEDUP_WATCH_TARGET_URL": "https://d.run.app",
                      "DEDUP_WATCH_TARGET_AUTH": "oidc"}, "must be one of: id_token, none"),
])
def test_bad_catch_up_settings_stop_the_start_up(
    jobs: list[dict[str, Any]], extra: dict[str, str], message: str
) -> None:
    with pytest.raises(SettingsError, match=message.replace("(", r"\(")):
        WatchSettings.from_env(_env(jobs, **extra))


def served_watchdog_setup(
    served: Served, **settings: str
) -> tuple[WatchedJob, list[datetime], dict[str, str]]:
    """A minutely catchUp job whose run of times[1] was missed, and the environment of a
    watchdog served for it (functions-framework, DEDUP_WATCH_* as infra sets them, plus
    `settings`) delivering to `served`."""
    job = minutely(f"served-{uuid.uuid4().hex[:6]}")
    now, times = recent_minutes(4)
    # The watchdog's clock is real: the minutes it may reach by the time it ticks have run.
    later = [now, now + timedelta(minutes=1)]
    Runs(served.collection).completed(job.name, *(t for t in times if t != times[1]), *later)
    entry = {
        "name": job.name, "schedule": job.schedule, "timeZone": job.time_zone,
        "attemptDeadlineSeconds": 60, "retryWindowSeconds": 0, "paused": False,
        "catchUp": True, "catchUpWithinSeconds": 600, "body": SLOW_BODY,
        "headers": dict(JOB_HEADERS),
    }
    env = {
        "DEDUP_PROJECT": PROJECT, "DEDUP_LOCATION": LOCATION,
        "DEDUP_COLLECTION": served.collection, "DEDUP_STORE_TIMEOUT_SECONDS": "5",
        **job_tables_env(watch_jobs=[entry]), "DEDUP_WATCH_LOOKBACK_SECONDS": "900",
        "DEDUP_WATCH_GRACE_SECONDS": "30", "DEDUP_WATCH_TARGET_URL": served.server.url,
        "DEDUP_WATCH_TARGET_AUTH": "none",
        # The readiness probe (no token) is refused: the first tick is the test's.
        "DEDUP_ALLOWED_CALLERS": INVOKER,
        "FIRESTORE_EMULATOR_HOST": os.environ["FIRESTORE_EMULATOR_HOST"],
        "GOOGLE_CLOUD_PROJECT": PROJECT,
        **settings,
    }
    return job, times, env


def test_the_served_watchdog_catches_up_with_its_settings_from_the_environment(
    served: Served,
) -> None:
    """functions-framework --target watch_scheduled_runs, DEDUP_WATCH_* as infra sets them."""
    job, times, env = served_watchdog_setup(served)
    as_invoker = {"Authorization": bearer(INVOKER)}
    with FunctionServer(env, target="watch_scheduled_runs") as watchdog:
        reply = requests.post(watchdog.url, headers=as_invoker, timeout=60)
        assert reply.status_code == 200, reply.text
        body = reply.json()
        assert (body["problems"], body["reruns"]) == ([], [])
        assert [(c["job"], c["schedule_time"], c["status"]) for c in body[CAUGHT_UP]] == [
            (job.name, z(times[1]), "completed")
        ]
        again = requests.post(watchdog.url, headers=as_invoker, timeout=60)
        assert again.json()[CAUGHT_UP] == []
        lines = [json.loads(line) for line in watchdog.log_text.splitlines()
                 if line.startswith("{") and CAUGHT_UP in line]
        assert [(e["severity"], e["outcome"]) for e in lines if "status" in e] == [
            ("WARNING", CAUGHT_UP)
        ]
    assert [e["schedule_time"] for e in served.executions(job.name)] == [times[1].isoformat()]


def test_deliveries_carry_an_id_token_for_the_target_url(
    firestore_emulator: Any, tmp_path: Path,
) -> None:
    """The function serves the watchdog's account (DEDUP_ALLOWED_CALLERS); the token comes
    from the runtime's credentials (here a stand-in minting forwarded tokens), once per URL."""
    watchdog_account = f"scheduler-dedup-watchdog@{PROJECT}.iam.gserviceaccount.com"
    ledger = tmp_path / "ledger.jsonl"
    env = function_env(f"runs_{uuid.uuid4().hex[:12]}", ledger,
                       DEDUP_ALLOWED_CALLERS=f"{INVOKER},{watchdog_account}")
    audiences: list[str] = []

    def token_of(account: str) -> Callable[[str], str]:
        def fetch(audience: str) -> str:
            audiences.append(audience)
            return forwarded_token(oidc_claims(account, audience))
        return fetch

    _, times = recent_minutes(3)
    with FunctionServer(env, extra_pythonpath=[REPO_ROOT]) as function:
        def delivery(t: datetime) -> RunDelivery:
            return RunDelivery(function.url, "tokens", t, dict(JOB_HEADERS), SLOW_BODY)

        as_watchdog = HttpDeliverer(TargetAuth.ID_TOKEN, token_of(watchdog_account))
        first, second = (as_watchdog.deliver(delivery(t)) for t in times[:2])
        assert (first.status, first.http_status, second.status) == ("completed", 200,
                                                                    "completed")
        assert audiences == [function.url]  # fetched once, for the target URL
        stranger_account = f"stranger@{PROJECT}.iam.gserviceaccount.com"
        stranger = HttpDeliverer(TargetAuth.ID_TOKEN, token_of(stranger_account))
        refused = stranger.deliver(delivery(times[2]))
        assert (refused.status, refused.http_status) == ("error", 403)
        assert refused.error is not None and refused.error.startswith("HTTP 403: ")
        no_token = HttpDeliverer(TargetAuth.NONE).deliver(delivery(times[2]))
        assert no_token.http_status == 403
        broken = HttpDeliverer(TargetAuth.ID_TOKEN, _no_credentials).deliver(delivery(times[2]))
        assert broken.status == "error" and broken.error is not None
        assert broken.error.startswith(f"no ID token for {function.url}: ")
    assert [e["schedule_time"] for e in read_ledger(str(ledger))] == [
        t.isoformat() for t in times[:2]
    ]


def _no_credentials(audience: str) -> str:
    raise RuntimeError("Your default credentials were not found")


def test_a_caught_up_run_whose_job_fails_is_reported_failed_once(served: Served) -> None:
    job = replace(minutely(f"fails-{uuid.uuid4().hex[:6]}"), body=json.dumps({"fail": True}))
    now, times = recent_minutes(4)
    Runs(served.collection).completed(job.name, *(t for t in times if t != times[1]))
    watch = Watch(served.collection, [job], served.server.url, now=now)
    body = watch.tick()
    [problem] = body["problems"]
    assert (problem["kind"], problem["schedule_time"]) == ("failed", z(times[1]))
    assert problem["error"].startswith("caught up, then failed: HTTP 500: ")
    assert body[CAUGHT_UP] == []
    assert watch.tick()["problems"] == []  # reported once, not delivered again
    assert len(served.executions(job.name)) == 1


@dataclass
class DiesHoldingTheClaim:
    """Each run's catch-up (generation 0) is claimed by an instance that dies, its claim
    live for a minute; re-runs are delivered for real."""

    inner: DeliversRuns
    collection: str
    asynchronous = False

    def deliver(self, delivery: RunDelivery) -> DeliveryResult:
        if delivery.generation:
            return self.inner.deliver(delivery)
        store = FirestoreRunStore(firestore.Client(project=PROJECT), self.collection, 5)
        dedup = Deduplicator(store, lease_seconds=60, retention_seconds=86400,
                             cache=CompletedRunCache(0, 60))
        claim = dedup.claim(RunKey(PROJECT, LOCATION, delivery.job_id, delivery.schedule_time))
        assert isinstance(claim, Claim)
        return DeliveryResult("error", error="connection reset by peer")


def test_a_rerun_waits_while_a_catch_up_of_its_run_is_pending(served: Served) -> None:
    """A catch-up whose instance died holding the claim may still execute (delivered again
    once the claim lapses): a re-run of that run delivered now could run next to it. It
    waits, and says until when; nothing of either generation ran."""
    job = replace(minutely(f"held-{uuid.uuid4().hex[:6]}", within=300), reruns=True)
    now, times = recent_minutes(4)
    Runs(served.collection).completed(job.name, *(t for t in times if t != times[1]))
    deliverer = DiesHoldingTheClaim(HttpDeliverer(TargetAuth.NONE), served.collection)
    watch = Watch(served.collection, [job], served.server.url, now=now, deliverer=deliverer)
    assert watch.tick()["problems"] == []  # pending: its claim is live
    queue = FirestoreRerunQueue(
        FirestoreRunStore(firestore.Client(project=PROJECT), served.collection, 5),
        reruns_collection(served.collection))
    queue.create(RerunRequest(PROJECT, LOCATION, job.name, times[1], 1, "ops@example.com",
                              "missed", now, expire_at=now + timedelta(days=1)))
    [rerun] = watch.tick()["reruns"]
    assert rerun["status"] == "waiting" and "pending catch-up" in rerun["error"]
    until = times[1] + timedelta(seconds=300)
    assert rerun["error"].endswith(until.strftime("%Y-%m-%dT%H:%M:%SZ"))
    assert served.executions(job.name) == []
