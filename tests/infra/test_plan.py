"""`python -m operator_tools plan <stack>`: one row per resource, and clear config errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from operator_tools.plan import main, render
from tests.infra.helpers import StackUnderTest
from tests.stacks import fixture_stack_file


def test_plan_prints_a_row_per_resource(stack: StackUnderTest) -> None:
    text = render(stack.run)
    lines = text.splitlines()
    for resource in stack.run.resources:
        assert any(resource.type in line and resource.name in line for line in lines)
    assert "ALLOW_INTERNAL_ONLY" in text
    assert "roles/run.invoker" in text
    assert "functionUrl" in text
    for job in stack.config.jobs:
        assert f"'{job.schedule}'" in text


def test_plan_shows_the_proxy(stack_runs: dict[str, StackUnderTest]) -> None:
    text = render(stack_runs["prod"].run)
    assert "entry=proxy_scheduled_job" in text
    assert (
        "routes=scheduler-dedup-daily-report->workflow:projects/acme-scheduler-prod/locations/"
        in text
    )
    assert "scheduler_dedup_proxy_workflow_starter -> serviceAccount:scheduler-dedup-proxy@" in text
    for output in ("proxyUrl", "proxyFunctionName", "proxyServiceAccount"):
        assert f"  {output}: " in text
    assert "proxy" not in render(stack_runs["dev"].run)


def test_plan_cli(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(fixture_stack_file("dev"))]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Offline plan for stack 'dev'")
    assert "gcp:cloudscheduler/job:Job" in out


def test_plan_reports_config_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "Pulumi.bad.yaml"
    bad.write_text(
        "config:\n"
        "  gcp:project: acme-bad\n"
        "  gcp:region: europe-west1\n"
        "  scheduler-dedup:jobs:\n"
        "    - name: broken\n"
        "      schedule: every 5 minutes\n"
    )
    assert main([str(bad)]) == 2
    err = capsys.readouterr().err
    assert "scheduler-dedup:jobs[0].schedule" in err
    assert "Traceback" not in err


def test_plan_unknown_stack(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["nope"]) == 2
    assert "no stack file" in capsys.readouterr().err
