"""The watchdog's own deliveries: one run POSTed to the job's function as Scheduler sends it.

Catch-up (a `missed` run of a job with `catchUp`) and operator re-runs (`make rerun`) are
both delivered here, one way: the job's Scheduler headers (X-CloudScheduler-JobName = the
deployed job ID, X-CloudScheduler-ScheduleTime = the run's original schedule time,
X-Dedup-Project/Location and Content-Type as infra declares them for the job), its body,
X-Dedup-Generation for a re-run, and an ID token for the target URL from the runtime's
credentials (DEDUP_WATCH_TARGET_AUTH=none: no token, for the demo and tests). The dedup
protocol on the receiving side makes any number of such deliveries (and Scheduler's own
late retries) execute the run at most once per generation.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Protocol
from urllib.parse import urlsplit

import requests

from dedup.settings import SettingsError

TARGET_URL_ENV = "DEDUP_WATCH_TARGET_URL"
TARGET_AUTH_ENV = "DEDUP_WATCH_TARGET_AUTH"
# Outcomes (dedup.outcomes.Outcome values) after which there is nothing more to deliver:
# the run has executed for good, or (`skipped`, overlap) never will. All answered 2xx.
EXECUTED = frozenset({"completed", "duplicate", "completed_unrecorded", "claim_lost",
                      "skipped"})
IN_PROGRESS = "in_progress"
# Handed to a queue that delivers it (dedup/watchdog/cloud_tasks.py): the outcome is the
# run's record.
QUEUED = "queued"
ERROR = "error"


class TargetAuth(StrEnum):
    ID_TOKEN = "id_token"  # an ID token for the target URL (the default, on Cloud Run)
    NONE = "none"  # no Authorization header (the demo and tests)


def target_auth_setting(env: Mapping[str, str]) -> TargetAuth:
    raw = env.get(TARGET_AUTH_ENV) or TargetAuth.ID_TOKEN.value
    try:
        return TargetAuth(raw)
    except ValueError:
        choices = ", ".join(a.value for a in TargetAuth)
        raise SettingsError(f"{TARGET_AUTH_ENV}={raw!r} must be one of: {choices}") from None


def audience_of(url: str) -> str:
    """The ID token audience for a delivery to `url`: its origin (scheme://host[:port]).
    Cloud Run checks a token's audience against the service's run.app URL; a team
    service's job is delivered to a path of it (infra/watch_table.py). The kit's own
    functions' URLs have no path: for them it is the URL itself, as given."""
    parts = urlsplit(url)
    if not (parts.scheme and parts.netloc) or parts.path in ("", "/"):
        return url
    return f"{parts.scheme}://{parts.netloc}"


@dataclass(frozen=True)
class RunDelivery:
    """One run to deliver: where, as which job, which schedule time and generation."""

    url: str
    job_id: str  # the deployed Scheduler job ID
    schedule_time: datetime
    headers: Mapping[str, str]  # the job's own headers (Content-Type, X-Dedup-*)
    body: str | None = None
    generation: int = 0
    timeout_seconds: float = 180.0
    run_id: str = ""  # the run_id of this generation (keys.RunKey): a queued task's name
    attempt_deadline_seconds: float = 180.0  # the job's: how long a queue waits for a reply
    # How many deliveries of this run came before (a pending catch-up delivered again): a
    # queued task of a later one needs a name of its own (a used name is refused ~1 h).
    number: int = 0
    # X-Dedup-Deliver-Within: a queued delivery later than this after its task's ETA runs
    # nothing (dedup/entry/http.py): the watchdog reports the run once that bound is over.
    deliver_within_seconds: float | None = None

    def request_headers(self) -> dict[str, str]:
        headers = {
            **self.headers,
            "X-CloudScheduler-JobName": self.job_id,
            "X-CloudScheduler-ScheduleTime": self.schedule_time.astimezone(UTC).strftime(
                "%Y-%m-%dT%H:%M:%S.%fZ"
            ),
            "User-Agent": "scheduler-dedup-watchdog",
        }
        if self.generation:
            headers["X-Dedup-Generation"] = str(self.generation)
        if self.deliver_within_seconds is not None:
            headers["X-Dedup-Deliver-Within"] = f"{max(0.0, self.deliver_within_seconds):.0f}"
        return headers


@dataclass(frozen=True)
class DeliveryResult:
    """What the function answered: `status` is its outcome (completed, duplicate,
    in_progress, failed, ...) or `error` when there was no usable answer."""

    status: str
    http_status: int | None = None
    error: str | None = None

    @property
    def executed(self) -> bool:
        """The run has executed (now or before): nothing more to deliver."""
        return self.status in EXECUTED

    @property
    def in_progress(self) -> bool:
        return self.status == IN_PROGRESS

    @property
    def queued(self) -> bool:
        return self.status == QUEUED


class DeliversRuns(Protocol):
    """The one seam for deliveries: a direct POST (HttpDeliverer: the demo, tests) or a
    queue that POSTs with its own retries (dedup/watchdog/cloud_tasks.py: what infra deploys)."""

    # True when `deliver` only hands the run over (answers QUEUED): what became of it is
    # read from the run's record at the next ticks, while the queue may still retry it.
    asynchronous: bool

    def deliver(self, delivery: RunDelivery) -> DeliveryResult:
        ...


IdTokenFetcher = Callable[[str], str]


def fetch_id_token(audience: str) -> str:
    """An ID token for `audience` from the runtime's credentials (the metadata server on
    Cloud Run, a service account key or impersonation elsewhere)."""
    import google.auth.transport.requests
    import google.oauth2.id_token

    token: str = google.oauth2.id_token.fetch_id_token(  # type: ignore[no-untyped-call]
        google.auth.transport.requests.Request(), audience
    )
    return token


class HttpDeliverer:
    """POSTs runs with `requests`; one ID token per target URL, fetched when first needed
    (google-auth's tokens live an hour; a watchdog instance refetches after 45 minutes)."""

    TOKEN_REUSE_SECONDS = 45 * 60
    asynchronous = False

    def __init__(
        self,
        auth: TargetAuth,
        fetch_token: IdTokenFetcher = fetch_id_token,
        session: requests.Session | None = None,
        monotonic: Callable[[], float] | None = None,
    ) -> None:
        import time

        self._auth = auth
        self._fetch = fetch_token
        self._session = session or requests.Session()
        self._monotonic = monotonic or time.monotonic
        self._tokens: dict[str, tuple[str, float]] = {}
        self._lock = threading.Lock()

    def _authorization(self, url: str) -> dict[str, str]:
        if self._auth is TargetAuth.NONE:
            return {}
        with self._lock:
            audience = audience_of(url)
            cached = self._tokens.get(audience)
            if cached is None or self._monotonic() - cached[1] > self.TOKEN_REUSE_SECONDS:
                cached = (self._fetch(audience), self._monotonic())
                self._tokens[audience] = cached
        return {"Authorization": f"Bearer {cached[0]}"}

    def deliver(self, delivery: RunDelivery) -> DeliveryResult:
        try:
            headers = {**delivery.request_headers(), **self._authorization(delivery.url)}
        except Exception as exc:  # google.auth errors: no credentials, metadata server down
            return DeliveryResult(
                ERROR, error=f"no ID token for {delivery.url}: {brief_error(exc)}"
            )
        try:
            reply = self._session.post(
                delivery.url, headers=headers,
                data=(delivery.body or "").encode(), timeout=delivery.timeout_seconds,
            )
        except requests.Timeout:
            return DeliveryResult(
                ERROR, error=f"no answer within {delivery.timeout_seconds:g}s (the run may "
                "still be executing: its record tells)",
            )
        except requests.RequestException as exc:
            return DeliveryResult(ERROR, error=f"POST {delivery.url} failed: {brief_error(exc)}")
        body = json_or_none(reply)
        outcome = body.get("outcome") if isinstance(body, dict) else None
        if isinstance(outcome, str) and (reply.ok or outcome == IN_PROGRESS):
            return DeliveryResult(outcome, reply.status_code)
        detail = body.get("error") or body.get("detail") if isinstance(body, dict) else None
        return DeliveryResult(
            outcome if isinstance(outcome, str) else ERROR, reply.status_code,
            f"HTTP {reply.status_code}: {detail or reply.text[:200]!s}",
        )


def json_or_none(reply: requests.Response) -> Any:
    try:
        return reply.json()
    except ValueError:
        return None


def brief_error(exc: BaseException) -> str:
    text = str(exc).strip()
    return (text.splitlines()[0][:300] if text else type(exc).__name__)
