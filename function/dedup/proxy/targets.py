"""The Google Cloud APIs the proxy starts executions on, as plain REST calls.

Each start request carries the run's dedup key as an idempotency token, because these
APIs have no request ID of their own and start a new execution on every call:

- Workflows: POST {base}/v1/projects/P/locations/L/workflows/W/executions
  body Execution {"argument": "<JSON object as a string>"}, the token inside the argument;
  answers the Execution {"name": ".../executions/ID", ...}.
- Cloud Run jobs: POST {base}/v2/projects/P/locations/L/jobs/J:run
  body RunJobRequest {"overrides": {"containerOverrides": [{"env": [{name, value}]}]}},
  the token as an environment variable (merged into the container's env);
  answers an Operation whose `metadata` is the Execution (".../jobs/J/executions/ID").
- Cloud Build triggers: not through Cloud Build's API (`triggers.run` needs
  `cloudbuild.builds.create` on the project, which also creates arbitrary builds running
  as the project's build account). The trigger listens to a Pub/Sub topic of its own
  (`pubsubConfig`) and the proxy publishes one message to it, holding only
  `roles/pubsub.publisher` on that topic:
  POST {base}/v1/projects/P/topics/T:publish body {"messages": [{"data": base64(JSON
  {"<tokenName>": token, "job", "schedule_time"}), "attributes": {...}}]}; the trigger
  binds the substitution, e.g. `_DEDUP_TOKEN: $(body.message.data._DEDUP_TOKEN)`;
  answers {"messageIds": [ID]} (the build's name is not known to the proxy).

No HTTP retries happen here (a retried POST could start a second execution): a failure
is classified as retryable or not, and the dedup protocol decides what Scheduler sees.
"""

from __future__ import annotations

import base64
import ipaddress
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any
from urllib.parse import urlsplit

import requests
from google.auth import exceptions as auth_exceptions

from dedup.settings import SettingsError


class TargetKind(StrEnum):
    WORKFLOW = "workflow"
    RUN_JOB = "run_job"
    BUILD_TRIGGER = "build_trigger"


DEFAULT_API_BASE = {
    TargetKind.WORKFLOW: "https://workflowexecutions.googleapis.com",
    TargetKind.RUN_JOB: "https://run.googleapis.com",
    TargetKind.BUILD_TRIGGER: "https://pubsub.googleapis.com",  # the trigger's topic
}
DEFAULT_TOKEN_NAME = {
    TargetKind.WORKFLOW: "dedup_token",  # key inside the execution argument
    TargetKind.RUN_JOB: "DEDUP_TOKEN",  # environment variable of the job's container
    TargetKind.BUILD_TRIGGER: "_DEDUP_TOKEN",  # user-defined substitution
}
_SHAPE = {
    TargetKind.WORKFLOW: "projects/PROJECT/locations/LOCATION/workflows/WORKFLOW",
    TargetKind.RUN_JOB: "projects/PROJECT/locations/LOCATION/jobs/JOB",
    TargetKind.BUILD_TRIGGER: "projects/PROJECT/locations/LOCATION/triggers/TRIGGER_ID",
}
_PROJECT = r"(?:[a-z0-9.-]+:)?[a-z][a-z0-9-]{4,28}[a-z0-9]|[0-9]{1,20}"
_LOCATION = r"[a-z][a-z0-9-]{1,62}"
_RESOURCE = {
    TargetKind.WORKFLOW: re.compile(
        rf"projects/({_PROJECT})/locations/({_LOCATION})/workflows/([A-Za-z][A-Za-z0-9_-]{{0,127}})"
    ),
    TargetKind.RUN_JOB: re.compile(
        rf"projects/({_PROJECT})/locations/({_LOCATION})/jobs/([a-z](?:[a-z0-9-]{{0,61}}[a-z0-9])?)"
    ),
    TargetKind.BUILD_TRIGGER: re.compile(
        rf"projects/({_PROJECT})/locations/({_LOCATION})/triggers/([A-Za-z0-9][A-Za-z0-9_.-]{{0,127}})"
    ),
}
# Cloud Build user substitutions: an underscore, then upper-case letters, digits, underscores.
_SUBSTITUTION = re.compile(r"_[A-Z0-9_]{1,99}")
_TOPIC = re.compile(rf"projects/({_PROJECT})/topics/([A-Za-z][A-Za-z0-9._~+%-]{{2,254}})")
# What the proxy itself puts beside the token in the downstream's input: a token name
# among them would overwrite (or be overwritten by) it, and every run would then carry the
# same token. infra/config/jobs.py keeps the same table (tests/infra/test_proxy.py compares).
RESERVED_TOKEN_NAMES: dict[TargetKind, frozenset[str]] = {
    TargetKind.WORKFLOW: frozenset({"job", "schedule_time", "payload"}),
    TargetKind.RUN_JOB: frozenset({"DEDUP_SCHEDULE_TIME"}),
    TargetKind.BUILD_TRIGGER: frozenset({"job", "schedule_time"}),
}
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,254}")
_ARGUMENT_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")
# Workflows rejects an execution argument over 32 KiB.
MAX_WORKFLOW_ARGUMENT_BYTES = 32 * 1024
_REASON_CHARS = 300


@dataclass(frozen=True)
class Target:
    """One downstream resource and how the token reaches it."""

    kind: TargetKind
    resource: str  # projects/P/locations/L/{workflows|jobs|triggers}/ID
    token_name: str
    container: str | None = None  # run_job: which container gets the env override
    topic: str | None = None  # build_trigger: projects/P/topics/T the trigger listens to

    @property
    def project(self) -> str:
        return self.resource.split("/")[1]

    @property
    def resource_id(self) -> str:
        return self.resource.rsplit("/", 1)[1]

    @property
    def location(self) -> str:
        return self.resource.split("/")[3]


def parse_target(
    kind: str, resource: str, token_name: str | None, container: str | None, setting: str,
    topic: str | None = None,
) -> Target:
    """Validate a target's settings; every error names `setting` and the expected shape."""
    try:
        target_kind = TargetKind(kind)
    except ValueError:
        choices = ", ".join(k.value for k in TargetKind)
        raise SettingsError(f"{setting}: target {kind!r} must be one of: {choices}") from None
    if not _RESOURCE[target_kind].fullmatch(resource):
        raise SettingsError(
            f"{setting}: resource {resource!r} is not a {target_kind.value} name: expected "
            f"{_SHAPE[target_kind]}"
        )
    name = token_name or DEFAULT_TOKEN_NAME[target_kind]
    pattern, what = {
        TargetKind.WORKFLOW: (_ARGUMENT_KEY, "an argument key (letters, digits, underscores)"),
        TargetKind.RUN_JOB: (_ENV_NAME, "an environment variable name"),
        TargetKind.BUILD_TRIGGER: (
            _SUBSTITUTION,
            "a user substitution: '_' then upper-case letters, digits or underscores",
        ),
    }[target_kind]
    if not pattern.fullmatch(name):
        raise SettingsError(f"{setting}: token name {name!r} must be {what}")
    reserved = RESERVED_TOKEN_NAMES[target_kind]
    if name in reserved:
        raise SettingsError(
            f"{setting}: token name {name!r} is reserved: the proxy already sends "
            f"{', '.join(sorted(reserved))} to a {target_kind.value}; pick another name, "
            f"e.g. the default {DEFAULT_TOKEN_NAME[target_kind]!r}"
        )
    if container is not None and target_kind is not TargetKind.RUN_JOB:
        raise SettingsError(f"{setting}: 'container' applies only to target run_job")
    if target_kind is TargetKind.BUILD_TRIGGER:
        if topic is None or not _TOPIC.fullmatch(topic):
            raise SettingsError(
                f"{setting}: a build_trigger needs 'topic', the Pub/Sub topic its trigger "
                f"listens to (projects/PROJECT/topics/TOPIC), not {topic!r}"
            )
    elif topic is not None:
        raise SettingsError(f"{setting}: 'topic' applies only to target build_trigger")
    return Target(target_kind, resource, name, container, topic)


@dataclass(frozen=True)
class StartInfo:
    """What the downstream execution is told besides the token."""

    token: str
    job: str
    schedule_time: str  # RFC 3339, UTC
    payload: bytes  # the Scheduler job's body


@dataclass(frozen=True)
class Started:
    execution: str | None  # the execution's resource name (not known for a build)
    operation: str | None = None  # the long-running operation, for run_job
    note: str | None = None
    message_id: str | None = None  # build_trigger: the Pub/Sub message that starts it


class DownstreamError(Exception):
    """The start request failed. `retryable`: nothing is known to have started for good,
    so the claim is released and Scheduler retries; otherwise nothing started and no retry
    could succeed: the run is recorded failed for good (permanent), so Scheduler stops."""

    def __init__(self, reason: str, *, retryable: bool, status: int | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retryable = retryable
        self.status = status


def start_request(target: Target, info: StartInfo) -> tuple[str, dict[str, Any]]:
    """(path, JSON body) of the start request for one target."""
    try:
        return _start_request(target, info)
    except RecursionError:
        # A body nested deeper than Python's JSON codec allows can never be sent: record
        # it as a non-retryable error rather than release it to be retried forever.
        raise DownstreamError(
            "the Scheduler job's body nests too deeply to pass on as JSON: flatten it",
            retryable=False,
        ) from None


def _start_request(target: Target, info: StartInfo) -> tuple[str, dict[str, Any]]:
    if target.kind is TargetKind.WORKFLOW:
        argument = json.dumps(
            {
                target.token_name: info.token,
                "job": info.job,
                "schedule_time": info.schedule_time,
                "payload": _payload_value(info.payload),
            },
            separators=(",", ":"),
        )
        if len(argument.encode()) > MAX_WORKFLOW_ARGUMENT_BYTES:
            raise DownstreamError(
                f"the execution argument is {len(argument.encode())} bytes; Workflows accepts "
                f"at most {MAX_WORKFLOW_ARGUMENT_BYTES}: shorten the Scheduler job's body",
                retryable=False,
            )
        return f"/v1/{target.resource}/executions", {"argument": argument}
    if target.kind is TargetKind.RUN_JOB:
        container: dict[str, Any] = {
            "env": [
                {"name": target.token_name, "value": info.token},
                {"name": "DEDUP_SCHEDULE_TIME", "value": info.schedule_time},
            ]
        }
        if target.container:
            container["name"] = target.container
        return f"/v2/{target.resource}:run", {"overrides": {"containerOverrides": [container]}}
    message = json.dumps(
        {target.token_name: info.token, "job": info.job, "schedule_time": info.schedule_time},
        separators=(",", ":"),
    )
    return f"/v1/{target.topic}:publish", {
        "messages": [{
            "data": base64.b64encode(message.encode()).decode(),
            # Also as attributes: a subscription filter or a trigger's filter can use them.
            "attributes": {"dedup_job": info.job, "dedup_trigger": target.resource},
        }]
    }


def _payload_value(payload: bytes) -> Any:
    if not payload:
        return None
    try:
        return json.loads(payload)
    except ValueError:
        return payload.decode(errors="replace")


def started_from_response(target: Target, body: Any) -> Started:
    """The execution's name from a 2xx answer. Never raises: the execution started."""
    if not isinstance(body, dict):
        return Started(None, note="started, but the answer was not a JSON object")
    missing = "started, but the answer named no execution"
    if target.kind is TargetKind.WORKFLOW:
        name = body.get("name")
        return Started(name, None) if isinstance(name, str) else Started(None, note=missing)
    if target.kind is TargetKind.BUILD_TRIGGER:
        ids = body.get("messageIds")
        if isinstance(ids, list) and ids and isinstance(ids[0], str):
            return Started(None, message_id=ids[0])
        return Started(None, note="published, but the answer named no message ID")
    operation = body.get("name") if isinstance(body.get("name"), str) else None
    metadata = body.get("metadata")
    execution: str | None = None
    if isinstance(metadata, dict):
        candidate = metadata.get("name")
        execution = candidate if isinstance(candidate, str) else None
    return Started(execution, operation, None if execution else missing)


def classify_failure(status: int, text: str) -> DownstreamError:
    """Retryable: 408, 429, 5xx, 409 ABORTED, and any non-error non-2xx answer (nothing was
    created). Not retryable: every other 4xx (permission, not found, invalid argument)."""
    google_status, message = _google_error(text)
    reason = f"HTTP {status}"
    if google_status:
        reason += f" {google_status}"
    if message:
        reason += f": {message}"
    retryable = (
        status in (408, 429)
        or status >= 500
        or status < 400
        or (status == 409 and google_status == "ABORTED")
    )
    return DownstreamError(reason, retryable=retryable, status=status)


def _google_error(text: str) -> tuple[str | None, str | None]:
    """(status, message) from Google's JSON error body, else (None, the text's start)."""
    try:
        body = json.loads(text)
    except ValueError:
        snippet = " ".join(text.split())[:_REASON_CHARS]
        return None, snippet or None
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict):
        return None, None
    status = error.get("status")
    message = error.get("message")
    return (
        status if isinstance(status, str) else None,
        message[:_REASON_CHARS] if isinstance(message, str) else None,
    )


SessionFactory = Callable[[], requests.Session]


class DownstreamClient:
    """Sends one start request per call with an authorized session; classifies failures."""

    def __init__(
        self,
        sessions: SessionFactory,
        *,
        timeout_seconds: float,
        api_base: str | None = None,
    ) -> None:
        self._sessions = sessions
        self._timeout = timeout_seconds
        self._api_base = api_base

    def url(self, target: Target, path: str) -> str:
        return (self._api_base or DEFAULT_API_BASE[target.kind]) + path

    def start(self, target: Target, info: StartInfo) -> Started:
        path, body = start_request(target, info)
        url = self.url(target, path)
        try:
            response = self._sessions().post(
                url, json=body, timeout=self._timeout, allow_redirects=False
            )
        except requests.Timeout:
            raise DownstreamError(
                f"no answer from {target.kind.value} API within {self._timeout:g}s (it may "
                "have started; a retry carries the same token)",
                retryable=True,
            ) from None
        except requests.ConnectionError as exc:
            raise DownstreamError(
                f"cannot reach {target.kind.value} API: {_first_line(exc)}", retryable=True
            ) from None
        except requests.RequestException as exc:  # e.g. a broken answer: may have started
            raise DownstreamError(
                f"{target.kind.value} API call failed: {_first_line(exc)}", retryable=True
            ) from None
        except auth_exceptions.GoogleAuthError as exc:
            raise DownstreamError(
                f"cannot get an access token: {_first_line(exc)}", retryable=True
            ) from None
        if 200 <= response.status_code < 300:
            try:
                parsed: Any = response.json()
            except ValueError:
                parsed = None
            return started_from_response(target, parsed)
        raise classify_failure(response.status_code, response.text)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:_REASON_CHARS] if text else type(exc).__name__


def api_base_setting(raw: str | None, setting: str) -> str | None:
    """An override of every API's base URL: https on a `*.googleapis.com` host (e.g. a
    regional or private endpoint), or http(s) on a loopback address (local fakes in tests).
    Any other host would receive the function's bearer token (the proxy's, the watchdog's
    for Cloud Tasks), and plain http would expose it."""
    if not raw:
        return None
    usage = (
        f"{setting}={raw!r} must be https://<name>.googleapis.com or a loopback base URL "
        "like http://127.0.0.1:8080 (the function sends its access token there)"
    )
    if not re.fullmatch(r"https?://(?:[A-Za-z0-9.-]+|\[[0-9A-Fa-f:]+\])(?::[0-9]{1,5})?/?", raw):
        raise SettingsError(usage)
    parts = urlsplit(raw)
    host = (parts.hostname or "").lower()
    if not (_is_loopback(host) or (parts.scheme == "https" and _is_googleapis(host))):
        raise SettingsError(usage)
    return raw.rstrip("/")


def _is_googleapis(host: str) -> bool:
    return host.endswith(".googleapis.com") and re.fullmatch(r"[a-z0-9.-]+", host) is not None


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False

