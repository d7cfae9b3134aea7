"""`make plan` fails a stack whose declarations break Google's API contracts like a config
error: exit status 2, each finding naming resource, property, value, rule and source, and
the other stacks still planned."""

from __future__ import annotations

import base64
import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra.contracts import check_resources
from infra.contracts.limits import R_JOB_BODY, SCHEDULER_JOB_MAX_BYTES
from operator_tools import offline, plan
from operator_tools.offline import DeclaredResource, load_stack_config
from tests.infra.helpers import JOB, StackUnderTest
from tests.stacks import FIXTURE_STACKS_DIR, fixture_stack_file


def test_a_bad_declaration_is_a_finding_of_the_stack(stack: StackUnderTest) -> None:
    """The fixture stack passes; the same stack with one job's body over 1 MB does not."""
    assert check_resources(stack.run.resources) == []
    job = stack.all(JOB)[0]
    oversized = {**job.props, "httpTarget": {
        **job.props["httpTarget"],
        "body": base64.b64encode(b"x" * (SCHEDULER_JOB_MAX_BYTES + 1)).decode()}}
    bad = DeclaredResource(type=job.type, name=job.name, urn=job.urn, props=oversized)
    resources = [bad if r.urn == job.urn else r for r in stack.run.resources]
    (finding,) = check_resources(resources)
    assert (finding.resource_type, finding.resource_name, finding.property, finding.rule) == (
        JOB, job.name, "httpTarget.body", R_JOB_BODY)


def skip_startup_check(monkeypatch: pytest.MonkeyPatch) -> None:
    """Through the real program under the mocks; only the start-up check (each declared
    function started in a virtualenv of its own, tested in test_job_logic.py) is left out."""
    monkeypatch.setattr(offline, "check_job_logic", lambda *args, **kwargs: None)


def stack_with_an_oversized_body(directory: Path) -> Path:
    """The dev fixture stack, its first job POSTing a JSON string just over 1 MB: valid
    config (the kit sets no size on a body), a body Cloud Scheduler refuses."""
    config: dict[str, Any] = copy.deepcopy(load_stack_config("dev", FIXTURE_STACKS_DIR))
    config["scheduler-dedup:jobs"][0]["body"] = "x" * SCHEDULER_JOB_MAX_BYTES
    path = directory / "Pulumi.oversized.yaml"
    path.write_text(yaml.safe_dump({"config": config}))
    return path


def test_the_plan_fails_like_a_config_error_and_plans_the_other_stacks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    skip_startup_check(monkeypatch)
    bad = stack_with_an_oversized_body(tmp_path)
    assert plan.main([str(bad), str(fixture_stack_file("dev"))]) == 2
    captured = capsys.readouterr()
    errors = [line for line in captured.err.splitlines() if line.strip()]
    assert errors[0] == (
        f"error: {bad}: 1 declared value(s) that Google's APIs would refuse (contract "
        "checks, docs/contracts.md):"
    )
    (finding,) = errors[1:]
    assert finding.startswith(
        "  - gcp:cloudscheduler/job:Job 'job-heartbeat-job': httpTarget.body = "
        f"'{SCHEDULER_JOB_MAX_BYTES + 2:,} bytes': "
    )
    assert R_JOB_BODY.text in finding
    assert "https://cloud.google.com/scheduler/quotas" in finding
    # The bad stack is not rendered; the good one after it is.
    assert "Offline plan for stack 'oversized'" not in captured.out
    assert "Offline plan for stack 'dev'" in captured.out
    assert "Traceback" not in captured.err


def test_the_fixture_stacks_plan_clean(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    skip_startup_check(monkeypatch)
    stacks = [str(fixture_stack_file(name)) for name in ("dev", "prod", "retail")]
    assert plan.main(stacks) == 0
    assert "contract" not in capsys.readouterr().err


def test_contract_error_lists_every_finding() -> None:
    job = DeclaredResource(type=JOB, name="j", urn="urn:j", props={
        "name": "bad name", "project": "p", "region": "r", "description": "d" * 501})
    findings = check_resources([job])
    text = plan.contract_error("Pulumi.x.yaml", findings)
    lines = text.splitlines()
    assert lines[0].startswith("error: Pulumi.x.yaml: 2 declared value(s)")
    assert [line.split(" = ")[0] for line in lines[1:]] == [
        "  - gcp:cloudscheduler/job:Job 'j': name",
        "  - gcp:cloudscheduler/job:Job 'j': description",
    ]
    assert json.dumps(text)  # one plain string, printable as is
