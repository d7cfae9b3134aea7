"""Preflight: a project whose Cloud Resource Manager or Service Usage API is disabled (the
two the program cannot enable itself) stops the program before any resource is declared,
with one line naming the `gcloud services enable` command; other lookup failures pass on
unchanged. Under Pulumi's mocks, whose invokes can be made to fail as the provider's do."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import pytest
from pulumi.runtime import mocks as pulumi_mocks

from infra.preflight import (
    CLOUD_RESOURCE_MANAGER,
    SERVICE_USAGE,
    PrerequisiteError,
    disabled_api_message,
    enable_command,
)
from operator_tools import offline
from operator_tools.offline import DeclaredResource, load_stack_config, run_offline
from tests.infra.helpers import run_entrypoint
from tests.stacks import FIXTURE_STACKS_DIR

PROJECT = "acme-scheduler-dev"
GET_PROJECT = "gcp:organizations/getProject:getProject"
GET_SERVICE = "gcp:projects/getProjectService:getProjectService"
FIX = (
    "gcloud services enable cloudresourcemanager.googleapis.com serviceusage.googleapis.com "
    f"--project {PROJECT}"
)


def google_disabled_error(title: str, service: str, project: str = "123456789012") -> str:
    """What the provider reports for a call to a disabled API (googleapi, HTTP 403)."""
    return (
        f"googleapi: Error 403: {title} has not been used in project {project} before or it "
        f"is disabled. Enable it by visiting https://console.developers.google.com/apis/api/"
        f"{service}/overview?project={project} then retry. If you enabled this API recently, "
        "wait a few minutes for the action to propagate to our systems and retry.\n"
        'Details:\n[{"@type": "type.googleapis.com/google.rpc.ErrorInfo", '
        f'"domain": "googleapis.com", "reason": "SERVICE_DISABLED"}}], accessNotConfigured'
    )


CRM_DISABLED = google_disabled_error("Cloud Resource Manager API", CLOUD_RESOURCE_MANAGER)
SU_DISABLED = google_disabled_error("Service Usage API", SERVICE_USAGE)


class FailingLookup(offline.KitMocks):
    """The kit's mocks, with one invoke failing as the provider's does."""

    failing: ClassVar[dict[str, str]] = {}

    def call(
        self, args: pulumi_mocks.MockCallArgs
    ) -> tuple[dict[str, Any], list[tuple[str, str]] | None]:
        if args.token in self.failing:
            return {}, [("", self.failing[args.token])]
        return super().call(args)


def run_failing(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, token: str, error: str
) -> tuple[BaseException, list[DeclaredResource]]:
    monkeypatch.setattr(FailingLookup, "failing", {token: error})
    monkeypatch.setattr(offline, "KitMocks", FailingLookup)
    declared: list[DeclaredResource] = []
    with pytest.raises(Exception) as caught:
        run_offline(load_stack_config("dev", FIXTURE_STACKS_DIR), build_dir=tmp_path, sink=declared)
    return caught.value, declared


@pytest.mark.parametrize(
    ("token", "error", "api"),
    [
        (GET_PROJECT, CRM_DISABLED, "Cloud Resource Manager API (cloudresourcemanager"),
        (GET_SERVICE, SU_DISABLED, "Service Usage API (serviceusage"),
    ],
)
def test_a_disabled_prerequisite_api_stops_the_program_with_one_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, token: str, error: str, api: str
) -> None:
    raised, declared = run_failing(monkeypatch, tmp_path, token, error)
    assert isinstance(raised, PrerequisiteError)
    message = str(raised)
    assert "\n" not in message
    assert message.startswith(f"preflight: the {api}")
    assert f"Fix: {FIX}" in message
    assert "project 123456789012 (Google's name for acme-scheduler-dev" in message
    assert declared == [], "nothing is declared before the preflight passed"


def test_other_lookup_failures_pass_on_unchanged(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    denied = (
        "googleapi: Error 403: The caller does not have permission, forbidden "
        "(resourcemanager.projects.get)"
    )
    raised, declared = run_failing(monkeypatch, tmp_path, GET_PROJECT, denied)
    assert not isinstance(raised, PrerequisiteError)
    assert "The caller does not have permission" in str(raised)
    assert declared == []


def test_the_offline_mocks_pass_the_preflight(tmp_path: Path) -> None:
    run = run_offline(load_stack_config("dev", FIXTURE_STACKS_DIR), build_dir=tmp_path)
    assert run.resources


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (CRM_DISABLED, "Cloud Resource Manager API (cloudresourcemanager.googleapis.com)"),
        (SU_DISABLED, "Service Usage API (serviceusage.googleapis.com)"),
        # Only the reason: the lookup's own API is named.
        ("rpc error: code = PermissionDenied desc = SERVICE_DISABLED", "Service Usage API"),
    ],
)
def test_disabled_api_message(error: str, expected: str) -> None:
    message = disabled_api_message(PROJECT, SERVICE_USAGE, error)
    assert message is not None
    assert expected in message
    assert message.endswith(f"Fix: {FIX}, wait a minute, then run pulumi up again")


def test_the_project_named_in_the_error_is_shown_only_when_it_differs() -> None:
    same = disabled_api_message(
        PROJECT, SERVICE_USAGE, google_disabled_error("Service Usage API", SERVICE_USAGE, PROJECT)
    )
    assert same is not None and f"disabled in project {PROJECT};" in same


def test_unrelated_errors_are_not_translated() -> None:
    assert disabled_api_message(PROJECT, SERVICE_USAGE, "googleapi: Error 429: quota") is None
    assert enable_command(PROJECT) == FIX


# `pulumi up` runs infra/__main__.py: the message is one RunError, no traceback.
@pytest.mark.timeout(180)
def test_pulumi_up_reports_the_preflight_as_one_error(kit_checkout: Path) -> None:
    outcome = run_entrypoint(
        kit_checkout, load_stack_config("dev", FIXTURE_STACKS_DIR),
        service_lookup_error=SU_DISABLED
    )
    assert outcome["outcome"].startswith("RunError: preflight: the Service Usage API")
    assert FIX in outcome["outcome"]
    assert outcome["declared"] == []
