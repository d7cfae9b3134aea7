"""Pure rules of the proxy: request shapes, answer parsing, failure classes, settings."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest

from dedup.proxy.handler import ProxySettings
from dedup.proxy.targets import (
    MAX_WORKFLOW_ARGUMENT_BYTES,
    DownstreamError,
    StartInfo,
    TargetKind,
    classify_failure,
    parse_target,
    start_request,
    started_from_response,
)
from dedup.proxy.tokens import TOKEN_SECRET_ENV
from dedup.settings import SettingsError
from local_stack.tables import write_job_tables
from tests.proxy.support import BUILD_TOPIC, RESOURCES, TOKEN_SECRET, target

TOKEN = "a" * 64
INFO = StartInfo(TOKEN, "nightly-export", "2026-10-16T12:00:00.000000Z", b'{"report":"daily"}')


def test_workflow_start_request_puts_the_token_in_the_argument_json_string() -> None:
    path, body = start_request(target("workflow"), INFO)
    assert path == f"/v1/{RESOURCES['workflow']}/executions"
    assert set(body) == {"argument"} and isinstance(body["argument"], str)
    assert json.loads(body["argument"]) == {
        "dedup_token": TOKEN,
        "job": "nightly-export",
        "schedule_time": "2026-10-16T12:00:00.000000Z",
        "payload": {"report": "daily"},
    }


def test_workflow_argument_carries_a_non_json_body_as_text_and_rejects_oversize() -> None:
    _, body = start_request(target("workflow"), StartInfo(TOKEN, "j", "t", b"plain text"))
    assert json.loads(body["argument"])["payload"] == "plain text"
    huge = StartInfo(TOKEN, "j", "t", json.dumps("x" * MAX_WORKFLOW_ARGUMENT_BYTES).encode())
    with pytest.raises(DownstreamError) as raised:
        start_request(target("workflow"), huge)
    assert not raised.value.retryable and "32768" in raised.value.reason


def test_run_job_start_request_overrides_the_container_env() -> None:
    path, body = start_request(target("run_job"), INFO)
    assert path == f"/v2/{RESOURCES['run_job']}:run"
    assert body == {"overrides": {"containerOverrides": [{"env": [
        {"name": "DEDUP_TOKEN", "value": TOKEN},
        {"name": "DEDUP_SCHEDULE_TIME", "value": "2026-10-16T12:00:00.000000Z"},
    ]}]}}
    named = parse_target("run_job", RESOURCES["run_job"], "RUN_TOKEN", "worker", "test")
    _, body = start_request(named, INFO)
    container = body["overrides"]["containerOverrides"][0]
    assert container["name"] == "worker" and container["env"][0]["name"] == "RUN_TOKEN"


def test_build_trigger_start_request_publishes_the_token_to_the_triggers_topic() -> None:
    path, body = start_request(target("build_trigger"), INFO)
    assert path == f"/v1/{BUILD_TOPIC}:publish"
    (message,) = body["messages"]
    # The trigger binds `_DEDUP_TOKEN: $(body.message.data._DEDUP_TOKEN)`.
    assert json.loads(base64.b64decode(message["data"])) == {
        "_DEDUP_TOKEN": TOKEN, "job": "nightly-export",
        "schedule_time": "2026-10-16T12:00:00.000000Z",
    }
    assert message["attributes"] == {
        "dedup_job": "nightly-export", "dedup_trigger": RESOURCES["build_trigger"],
    }


@pytest.mark.parametrize(
    ("kind", "answer", "execution", "operation"),
    [
        ("workflow", {"name": "projects/p/locations/l/workflows/w/executions/e1"},
         "projects/p/locations/l/workflows/w/executions/e1", None),
        ("run_job", {"name": "projects/p/locations/l/operations/o1",
                     "metadata": {"name": "projects/p/locations/l/jobs/j/executions/j-abc"}},
         "projects/p/locations/l/jobs/j/executions/j-abc", "projects/p/locations/l/operations/o1"),
    ],
)
def test_execution_names_are_read_from_each_api_answer(
    kind: str, answer: dict[str, Any], execution: str, operation: str | None
) -> None:
    started = started_from_response(target(kind), answer)
    assert (started.execution, started.operation, started.note) == (execution, operation, None)


def test_a_build_trigger_start_is_known_by_its_message_id() -> None:
    started = started_from_response(target("build_trigger"), {"messageIds": ["1234"]})
    assert (started.execution, started.message_id, started.note) == (None, "1234", None)


@pytest.mark.parametrize("answer", [None, [], "text", {}, {"metadata": "x"}])
def test_a_2xx_answer_without_a_name_is_still_a_start(answer: Any) -> None:
    for kind in ("workflow", "run_job", "build_trigger"):
        started = started_from_response(target(kind), answer)
        assert started.execution is None and started.message_id is None and started.note


@pytest.mark.parametrize(
    ("status", "google_status", "retryable"),
    [
        (400, "INVALID_ARGUMENT", False), (401, "UNAUTHENTICATED", False),
        (403, "PERMISSION_DENIED", False), (404, "NOT_FOUND", False),
        (409, "ALREADY_EXISTS", False), (412, "FAILED_PRECONDITION", False),
        (408, None, True), (409, "ABORTED", True), (429, "RESOURCE_EXHAUSTED", True),
        (500, "INTERNAL", True), (502, None, True), (503, "UNAVAILABLE", True),
        (504, "DEADLINE_EXCEEDED", True), (302, None, True),
    ],
)
def test_failure_classes(status: int, google_status: str | None, retryable: bool) -> None:
    text = (
        json.dumps({"error": {"code": status, "status": google_status, "message": "why"}})
        if google_status else "<html>oops</html>"
    )
    error = classify_failure(status, text)
    assert (error.retryable, error.status) == (retryable, status)
    assert error.reason.startswith(f"HTTP {status}")
    if google_status:
        assert error.reason == f"HTTP {status} {google_status}: why"


SECRET = {TOKEN_SECRET_ENV: TOKEN_SECRET}
# In a case's env: the raw text of the proxy's job table (proxy_routes.json), written there.
ROUTES = "<proxy_routes.json>"
ENV_OK = {**SECRET, "DEDUP_PROXY_TARGET": "workflow", "DEDUP_PROXY_RESOURCE": RESOURCES["workflow"]}


def test_proxy_settings_from_env_and_the_job_table(tmp_path: Path) -> None:
    settings = ProxySettings.from_env({
        **ENV_OK,
        **write_job_tables(tmp_path / "a", proxy_routes={
            "build": {"target": "build_trigger", "resource": RESOURCES["build_trigger"],
                      "tokenName": "_RUN_TOKEN", "topic": BUILD_TOPIC},
            "job": {"target": "run_job", "resource": RESOURCES["run_job"], "container": "c"},
        }),
        "DEDUP_PROXY_TIMEOUT_SECONDS": "12.5",
        "DEDUP_PROXY_API_BASE": "http://127.0.0.1:8085/",
    })
    assert settings.default is not None and settings.default.kind is TargetKind.WORKFLOW
    assert settings.routes["build"].token_name == "_RUN_TOKEN"
    assert settings.routes["build"].topic == BUILD_TOPIC
    assert settings.token_secret == TOKEN_SECRET.encode()
    assert settings.routes["job"].container == "c"
    assert (settings.timeout_seconds, settings.api_base) == (12.5, "http://127.0.0.1:8085")
    only_routes = ProxySettings.from_env({**SECRET, **write_job_tables(tmp_path / "b", proxy_routes=
        {"j": {"target": "workflow", "resource": RESOURCES["workflow"]}})})
    assert only_routes.default is None and set(only_routes.routes) == {"j"}


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({}, "the proxy has no target"),
        ({"DEDUP_PROXY_TARGET": "workflow"}, "DEDUP_PROXY_RESOURCE is not set"),
        ({"DEDUP_PROXY_RESOURCE": RESOURCES["workflow"]}, "DEDUP_PROXY_TARGET is not set"),
        ({**ENV_OK, "DEDUP_PROXY_TARGET": "pubsub"},
         "target 'pubsub' must be one of: workflow, run_job, build_trigger"),
        ({**ENV_OK, "DEDUP_PROXY_TARGET": "run_job"},
         "is not a run_job name: expected projects/PROJECT/locations/LOCATION/jobs/JOB"),
        ({**ENV_OK, "DEDUP_PROXY_RESOURCE": "projects/p/workflows/w"},
         "is not a workflow name"),
        ({"DEDUP_PROXY_TARGET": "build_trigger", "DEDUP_PROXY_RESOURCE": RESOURCES["build_trigger"],
          "DEDUP_PROXY_TOPIC": BUILD_TOPIC, "DEDUP_PROXY_TOKEN_NAME": "dedup_token"},
         "must be a user substitution"),
        ({"DEDUP_PROXY_TARGET": "build_trigger",
          "DEDUP_PROXY_RESOURCE": RESOURCES["build_trigger"]}, "a build_trigger needs 'topic'"),
        ({"DEDUP_PROXY_TARGET": "build_trigger", "DEDUP_PROXY_RESOURCE": RESOURCES["build_trigger"],
          "DEDUP_PROXY_TOPIC": "my-topic"}, "a build_trigger needs 'topic'"),
        ({**ENV_OK, "DEDUP_PROXY_TOPIC": BUILD_TOPIC}, "'topic' applies only to target"),
        # Reserved token names: each would overwrite what the proxy sends beside the token.
        ({**ENV_OK, "DEDUP_PROXY_TOKEN_NAME": "job"}, "token name 'job' is reserved"),
        ({**ENV_OK, "DEDUP_PROXY_TOKEN_NAME": "payload"}, "token name 'payload' is reserved"),
        ({**ENV_OK, "DEDUP_PROXY_TOKEN_NAME": "schedule_time"},
         "token name 'schedule_time' is reserved"),
        ({ROUTES: json.dumps({"j": {"target": "run_job", "resource":
          RESOURCES["run_job"], "tokenName": "DEDUP_SCHEDULE_TIME"}})},
         "token name 'DEDUP_SCHEDULE_TIME' is reserved"),
        # The token secret: required, and long enough.
        ({**ENV_OK, TOKEN_SECRET_ENV: ""}, "DEDUP_TOKEN_SECRET is not set"),
        ({**ENV_OK, TOKEN_SECRET_ENV: "short"}, "use at least 32 random"),
        ({"DEDUP_PROXY_TOKEN_NAME": "X"}, "DEDUP_PROXY_TOKEN_NAME is set but"),
        ({**ENV_OK, "DEDUP_PROXY_TIMEOUT_SECONDS": "soon"}, "is not a number of seconds"),
        ({**ENV_OK, "DEDUP_PROXY_TIMEOUT_SECONDS": "0"}, "must be between 0.1 and 600"),
        ({**ENV_OK, "DEDUP_PROXY_API_BASE": "ftp://x"}, "must be https://<name>.googleapis.com"),
        # The bearer token must never go to a foreign host, nor over plain http off-host.
        ({**ENV_OK, "DEDUP_PROXY_API_BASE": "http://evil.example.com"}, "must be https://"),
        ({**ENV_OK, "DEDUP_PROXY_API_BASE": "https://evil.example.com"}, "must be https://"),
        ({**ENV_OK, "DEDUP_PROXY_API_BASE": "http://workflowexecutions.googleapis.com"},
         "must be https://"),
        ({**ENV_OK, "DEDUP_PROXY_API_BASE": "https://googleapis.com.evil.example"},
         "must be https://"),
        ({**ENV_OK, "DEDUP_PROXY_API_BASE": "http://10.0.0.1:8080"}, "must be https://"),
        ({**ENV_OK, "DEDUP_PROXY_API_BASE": "https://user@x.googleapis.com"}, "must be https://"),
        ({ROUTES: "{"}, "proxy_routes.json is not valid JSON"),
        ({ROUTES: "[]"}, "must be a JSON object"),
        ({ROUTES: '{"a/b": {}}'}, "is not a Cloud Scheduler job ID"),
        ({ROUTES: '{"j": "workflow"}'}, "must be an object"),
        ({ROUTES: '{"j": {"target": "workflow"}}'},
         "needs both 'target' and 'resource'"),
        ({ROUTES: json.dumps({"j": {"target": "workflow", "resource":
          RESOURCES["workflow"], "tokenname": "x"}})}, "unknown key(s) tokenname"),
        ({ROUTES: json.dumps({"j": {"target": "workflow", "resource":
          RESOURCES["workflow"], "container": "c"}})}, "'container' applies only to target"),
        ({ROUTES: json.dumps({"j": {"target": "workflow", "resource": 3}})},
         "'resource' must be a string"),
    ],
)
def test_bad_proxy_settings_fail_start_up_with_a_clear_message(
    tmp_path: Path, env: dict[str, str], message: str
) -> None:
    table = env.pop(ROUTES, None)  # the routes: the proxy's job table, not a variable
    tables = write_job_tables(tmp_path, proxy_routes=table)
    with pytest.raises(SettingsError) as raised:
        ProxySettings.from_env({**SECRET, **tables, **env})
    assert message in str(raised.value)
    assert "\n" not in str(raised.value)


@pytest.mark.parametrize(
    "base",
    ["https://workflowexecutions.googleapis.com", "https://europe-west1-run.googleapis.com/",
     "http://127.0.0.1:8085", "http://localhost:9", "https://127.0.0.1", "http://[::1]:8080"],
)
def test_api_base_accepts_googleapis_over_https_and_loopback(base: str) -> None:
    settings = ProxySettings.from_env({**ENV_OK, "DEDUP_PROXY_API_BASE": base})
    assert settings.api_base == base.rstrip("/")
