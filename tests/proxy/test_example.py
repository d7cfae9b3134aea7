"""The shipped example (examples/): the workflow passes the proxy's token to the
downstream function, which applies its change once per token, end to end."""

from __future__ import annotations

import importlib.util
import json
import re
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import requests
import yaml
from google.cloud import firestore

from dedup.idempotency import ForgedToken
from dedup.proxy.tokens import TOKEN_SECRET_ENV, mint_token
from local_stack import FunctionServer
from local_stack.deliveries import LOCATION, PROJECT, scheduler_headers
from local_stack.fake_google_apis import WORKFLOW, Behaviour, FakeGoogleApis, StartRequest
from local_stack.processes import REPO_ROOT
from local_stack.steered_job import read_ledger
from tests.proxy.support import (
    JOBS,
    TOKEN_SECRET,
    proxy_env,
    run_id,
    service_account_file,
    token_for,
)

pytestmark = pytest.mark.usefixtures("firestore_emulator")

EXAMPLES = REPO_ROOT / "examples"
WORKFLOW_YAML = yaml.safe_load((EXAMPLES / "workflow.yaml").read_text())


@pytest.fixture
def ledger(tmp_path: Path) -> Path:
    return tmp_path / "applied.jsonl"


@pytest.fixture
def example(
    collection_name: str, ledger: Path, monkeypatch: pytest.MonkeyPatch
) -> ModuleType:
    """examples/downstream_function/main.py, loaded as Cloud Run would (settings from env).
    Its records are kept apart from the proxy's (a store of the downstream's own)."""
    for name, value in {"DEDUP_PROJECT": PROJECT, "DEDUP_LOCATION": LOCATION,
                        "DEDUP_COLLECTION": downstream_collection(collection_name),
                        TOKEN_SECRET_ENV: TOKEN_SECRET,
                        "EXAMPLE_LEDGER": str(ledger)}.items():
        monkeypatch.setenv(name, value)
    spec = importlib.util.spec_from_file_location(
        f"example_downstream_{collection_name}", EXAMPLES / "downstream_function" / "main.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def downstream_collection(collection: str) -> str:
    return f"{collection}_downstream"


def workflow_call_body(argument: dict[str, Any]) -> dict[str, Any]:
    """What examples/workflow.yaml posts to the downstream function for this argument:
    its `${...}` expressions evaluated (only the forms the example uses)."""
    steps = {name: spec for step in WORKFLOW_YAML["main"]["steps"] for name, spec in step.items()}
    variables: dict[str, Any] = {}
    for assignment in steps["init"]["assign"]:
        (name, expression), = assignment.items()
        variables[name] = evaluate(expression, argument, variables)
    template = steps["apply_report"]["try"]["args"]["body"]
    return {key: evaluate(value, argument, variables) for key, value in template.items()}


def evaluate(expression: str, args: dict[str, Any], variables: dict[str, Any]) -> Any:
    match = re.fullmatch(r"\$\{(.+)\}", expression)
    assert match, expression
    inner = match.group(1)
    if inner.startswith("args."):
        return args.get(inner.removeprefix("args."))
    if inner.startswith("sys.get_env("):
        return "https://downstream.example.run.app"
    return variables[inner]


def test_the_workflow_passes_the_token_from_its_argument_to_the_function() -> None:
    main = WORKFLOW_YAML["main"]
    assert main["params"] == ["args"]
    argument = {"dedup_token": "t" * 64, "job": "j", "schedule_time": "s",
                "payload": {"report": "daily"}}
    assert workflow_call_body(argument) == {"dedup_token": "t" * 64,
                                            "payload": {"report": "daily"}}
    call = main["steps"][1]["apply_report"]
    assert call["try"]["call"] == "http.post"
    assert call["try"]["args"]["auth"] == {"type": "OIDC"}
    assert call["retry"]["predicate"] == "${retry_transient_or_in_progress}"
    assert "retry_transient_or_in_progress" in WORKFLOW_YAML


TOKEN_A, TOKEN_B, TOKEN_C = (token_for(job) for job in ("job-a", "job-b", "job-c"))


def test_the_function_applies_once_per_token(example: ModuleType, ledger: Path) -> None:
    body = {"dedup_token": TOKEN_A, "payload": {"report": "daily"}}
    assert example.handle(body) == (
        {"outcome": "applied", "result": {"applied": True, "report": "daily"}}, 200)
    assert example.handle(body) == (
        {"outcome": "already_applied", "result": {"applied": True, "report": "daily"}}, 200)
    assert example.handle({"payload": {}})[1] == 400
    assert example.handle({"dedup_token": "has space"})[1] == 400
    assert example.handle(["not", "an", "object"])[1] == 400
    with ThreadPoolExecutor(max_workers=10) as pool:
        replies = list(pool.map(lambda _: example.handle({"dedup_token": TOKEN_B}), range(20)))
    assert {status for _, status in replies} <= {200, 409}
    assert sum(reply["outcome"] == "applied" for reply, _ in replies) == 1
    assert [e["token"] for e in read_ledger(str(ledger))] == [TOKEN_A, TOKEN_B]


FORGED = {
    # What the proxy sent before tokens were signed: computable from the stack file.
    "bare run ID": run_id("job-f"),
    "HMAC under another secret": mint_token(b"x" * 40, run_id("job-f")),
    "genuine HMAC of another run": f"{run_id('job-f')}.{TOKEN_A.split('.')[1]}",
    "genuine token with a flipped digit": TOKEN_A[:-1] + ("0" if TOKEN_A[-1] != "0" else "1"),
}


@pytest.mark.parametrize("case", sorted(FORGED))
def test_a_forged_token_is_a_403_that_claims_nothing(
    case: str, example: ModuleType, ledger: Path, collection_name: str
) -> None:
    """Whoever can start the workflow cannot pre-claim a future run: a token the proxy
    did not mint is refused before anything is read or written."""
    reply, status = example.handle({"dedup_token": FORGED[case], "payload": {}})
    assert status == 403
    assert "forged" in reply["error"] or "not a proxy token" in reply["error"]
    assert read_ledger(str(ledger)) == []
    client = firestore.Client(project=PROJECT)
    assert list(client.collection(downstream_collection(collection_name)).stream()) == []
    # The genuine token of the same run is then accepted and applied once.
    genuine = token_for("job-f")
    assert example.handle({"dedup_token": genuine, "payload": {}})[0]["outcome"] == "applied"
    assert [e["token"] for e in read_ledger(str(ledger))] == [genuine]


def test_the_guard_raises_forged_token(example: ModuleType) -> None:
    with pytest.raises(ForgedToken, match="did not make: forged"):
        example.guard.run_once(FORGED["bare run ID"] + "." + "0" * 64, lambda _ctx: None)
    with pytest.raises(ForgedToken, match="not a proxy token"):
        example.guard.run_once("a" * 64, lambda _ctx: None)


def test_the_function_over_http(example: ModuleType) -> None:
    app = flask_app(example)
    reply = app.post("/", json={"dedup_token": TOKEN_C, "payload": None})
    assert (reply.status_code, reply.get_json()["outcome"]) == (200, "applied")
    forged = app.post("/", json={"dedup_token": run_id("job-c"), "payload": None})
    assert forged.status_code == 403
    deep = app.post("/", data=b"[" * 20_000, content_type="application/json")
    assert deep.status_code == 400  # nested past the parser's limit: not a JSON object
    huge = app.post("/", data=b" " * (example.MAX_BODY_BYTES + 1),
                    content_type="application/json")
    assert huge.status_code == 413


def flask_app(module: ModuleType) -> Any:
    import flask

    app = flask.Flask("example")
    app.add_url_rule("/", "apply", lambda: module.apply_daily_report(flask.request),
                     methods=["POST"])
    return app.test_client()


@pytest.fixture
def apis() -> Iterator[FakeGoogleApis]:
    with FakeGoogleApis() as fake:
        yield fake


def test_end_to_end_a_lost_start_answer_leads_to_two_executions_and_one_change(
    example: ModuleType, ledger: Path, apis: FakeGoogleApis, collection_name: str,
    tmp_path: Path,
) -> None:
    """Scheduler -> proxy (served) -> Workflows (fake; runs examples/workflow.yaml's call)
    -> example function (helper). The first start's answer is lost after the execution
    started: the proxy answers 500 and Scheduler's retry starts a second execution with
    the same token. The function applies the change once."""
    answers: list[tuple[dict[str, Any], int]] = []

    def run_workflow(start: StartRequest) -> None:
        argument = json.loads(start.body["argument"])
        answers.append(example.handle(workflow_call_body(argument)))

    apis.on_start = run_workflow
    apis.script(Behaviour(delay=3.0))  # started, but the answer comes after the timeout
    env = proxy_env(collection_name, apis.url, service_account_file(tmp_path, apis.token_uri),
                    DEDUP_PROXY_TIMEOUT_SECONDS="1")
    job = JOBS[WORKFLOW]
    with FunctionServer(env, workers=2, threads=4, target="proxy_scheduled_job") as proxy:
        def deliver() -> requests.Response:
            return requests.post(proxy.url, headers=scheduler_headers(job),
                                 data=b'{"report": "daily"}', timeout=30)

        first = deliver()
        assert (first.status_code, first.json()["outcome"]) == (500, "failed")
        retry = deliver()
        assert (retry.status_code, retry.json()["outcome"]) == (200, "completed")
        later = deliver()
        assert (later.status_code, later.json()["outcome"]) == (200, "duplicate")

    executions = apis.started(WORKFLOW)
    assert len(executions) == 2
    assert {e.token for e in executions} == {token_for(job)}
    assert retry.json()["result"]["execution"] == executions[1].execution
    assert [(a["outcome"], s) for a, s in answers] == [("applied", 200), ("already_applied", 200)]
    assert len(read_ledger(str(ledger))) == 1
