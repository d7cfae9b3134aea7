"""Pure rules of the proxy: request shapes, answer parsing, failure classes, settings."""

from __future__ import annotations

import json
from typing import Any

import pytest

from dedup.proxy import ProxySettings
from dedup.settings import SettingsError
from dedup.targets import (
    MAX_WORKFLOW_ARGUMENT_BYTES,
    DownstreamError,
    StartInfo,
    TargetKind,
    classify_failure,
    parse_target,
    start_request,
    started_from_response,
)
from tests.proxy.support import RESOURCES, target

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


def test_build_trigger_start_request_passes_the_token_as_a_substitution() -> None:
    path, body = start_request(target("build_trigger"), INFO)
    assert path == f"/v1/{RESOURCES['build_trigger']}:run"
    assert body == {
        "projectId": "dedup-kit-test",
        "triggerId": "release-trigger",
        "source": {"substitutions": {"_DEDUP_TOKEN": TOKEN}},
    }


@pytest.mark.parametrize(
    ("kind", "answer", "execution", "operation"),
    [
        ("workflow", {"name": "projects/p/locations/l/workflows/w/executions/e1"},
         "projects/p/locations/l/workflows/w/executions/e1", None),
        ("run_job", {"name": "projects/p/locations/l/operations/o1",
                     "metadata": {"name": "projects/p/locations/l/jobs/j/executions/j-abc"}},
         "projects/p/locations/l/jobs/j/executions/j-abc", "projects/p/locations/l/operations/o1"),
        ("build_trigger", {"name": "projects/p/locations/l/operations/o2", "metadata": {
            "build": {"id": "b1", "name": "projects/p/locations/l/builds/b1"}}},
         "projects/p/locations/l/builds/b1", "projects/p/locations/l/operations/o2"),
        ("build_trigger", {"name": "op", "metadata": {"build": {"id": "b2"}}},
         "projects/dedup-kit-test/locations/europe-west1/builds/b2", "op"),
    ],
)
def test_execution_names_are_read_from_each_api_answer(
    kind: str, answer: dict[str, Any], execution: str, operation: str | None
) -> None:
    started = started_from_response(target(kind), answer)
    assert (started.execution, started.operation, started.note) == (execution, operation, None)


@pytest.mark.parametrize("answer", [None, [], "text", {}, {"metadata": "x"}])
def test_a_2xx_answer_without_a_name_is_still_a_start(answer: Any) -> None:
    for kind in ("workflow", "run_job", "build_trigger"):
        started = started_from_response(target(kind), answer)
        assert started.execution is None and started.note


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


ENV_OK = {"DEDUP_PROXY_TARGET": "workflow", "DEDUP_PROXY_RESOURCE": RESOURCES["workflow"]}


def test_proxy_settings_from_env() -> None:
    settings = ProxySettings.from_env({
        **ENV_OK,
        "DEDUP_PROXY_ROUTES": json.dumps({
            "build": {"target": "build_trigger", "resource": RESOURCES["build_trigger"],
                      "tokenName": "_RUN_TOKEN"},
            "job": {"target": "run_job", "resource": RESOURCES["run_job"], "container": "c"},
        }),
        "DEDUP_PROXY_TIMEOUT_SECONDS": "12.5",
        "DEDUP_PROXY_API_BASE": "http://127.0.0.1:8085/",
    })
    assert settings.default is not None and settings.default.kind is TargetKind.WORKFLOW
    assert settings.routes["build"].token_name == "_RUN_TOKEN"
    assert settings.routes["job"].container == "c"
    assert (settings.timeout_seconds, settings.api_base) == (12.5, "http://127.0.0.1:8085")
    only_routes = ProxySettings.from_env({"DEDUP_PROXY_ROUTES": json.dumps(
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
          "DEDUP_PROXY_TOKEN_NAME": "dedup_token"}, "must be a user substitution"),
        ({"DEDUP_PROXY_TOKEN_NAME": "X"}, "DEDUP_PROXY_TOKEN_NAME is set but"),
        ({**ENV_OK, "DEDUP_PROXY_TIMEOUT_SECONDS": "soon"}, "is not a number of seconds"),
        ({**ENV_OK, "DEDUP_PROXY_TIMEOUT_SECONDS": "0"}, "must be between 0.1 and 600"),
        ({**ENV_OK, "DEDUP_PROXY_API_BASE": "ftp://x"}, "must be a base URL"),
        ({"DEDUP_PROXY_ROUTES": "{"}, "DEDUP_PROXY_ROUTES is not valid JSON"),
        ({"DEDUP_PROXY_ROUTES": "[]"}, "must be a JSON object"),
        ({"DEDUP_PROXY_ROUTES": '{"a/b": {}}'}, "is not a Cloud Scheduler job ID"),
        ({"DEDUP_PROXY_ROUTES": '{"j": "workflow"}'}, "must be an object"),
        ({"DEDUP_PROXY_ROUTES": '{"j": {"target": "workflow"}}'},
         "needs both 'target' and 'resource'"),
        ({"DEDUP_PROXY_ROUTES": json.dumps({"j": {"target": "workflow", "resource":
          RESOURCES["workflow"], "tokenname": "x"}})}, "unknown key(s) tokenname"),
        ({"DEDUP_PROXY_ROUTES": json.dumps({"j": {"target": "workflow", "resource":
          RESOURCES["workflow"], "container": "c"}})}, "'container' applies only to target"),
        ({"DEDUP_PROXY_ROUTES": json.dumps({"j": {"target": "workflow", "resource": 3}})},
         "'resource' must be a string"),
    ],
)
def test_bad_proxy_settings_fail_start_up_with_a_clear_message(
    env: dict[str, str], message: str
) -> None:
    with pytest.raises(SettingsError) as raised:
        ProxySettings.from_env(env)
    assert message in str(raised.value)
