"""The pack's permission table and its one IAM policy document parser."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from policies.grants import Grant, PolicyDataError, policy_document
from policies.permissions import (
    ESCALATION,
    FUNCTION_CHANGES,
    INVOKE,
    RECORDS_ACCESS,
    ROLE_PERMISSIONS,
    SCHEDULER_JOBS,
    is_custom_role,
    predefined_permissions,
)
from policies.values import MISSING

INFRA = Path(__file__).resolve().parents[2] / "infra"
# The roles issue #15 asks the table to know.
REQUIRED_ROLES = [
    "roles/owner",
    "roles/editor",
    "roles/run.admin",
    "roles/run.invoker",
    "roles/run.developer",
    "roles/iam.serviceAccountUser",
    "roles/iam.serviceAccountTokenCreator",
    "roles/iam.serviceAccountOpenIdTokenCreator",
    "roles/iam.workloadIdentityUser",
    "roles/iam.serviceAccountKeyAdmin",
    "roles/iam.serviceAccountAdmin",
    "roles/resourcemanager.projectIamAdmin",
    "roles/cloudfunctions.admin",
    "roles/cloudfunctions.invoker",
    "roles/datastore.user",
    "roles/datastore.owner",
    "roles/cloudbuild.builds.editor",
    "roles/cloudbuild.builds.builder",
    "roles/workflows.invoker",
    "roles/workflows.admin",
    "roles/pubsub.publisher",
]


@pytest.mark.parametrize("role", REQUIRED_ROLES)
def test_the_table_knows_the_roles_the_issue_names(role: str) -> None:
    assert predefined_permissions(role) is not None


def test_the_table_knows_every_role_the_kit_grants() -> None:
    granted = {
        m for path in INFRA.glob("*.py")
        for m in re.findall(r"roles/[A-Za-z.]+[A-Za-z]", path.read_text(encoding="utf-8"))
    }
    assert granted, "no roles/ string found in infra/"
    assert sorted(r for r in granted if predefined_permissions(r) is None) == []


@pytest.mark.parametrize(
    ("role", "invokes", "escalates"),
    [
        ("roles/run.invoker", True, False),
        ("roles/run.admin", True, True),
        ("roles/run.developer", True, False),
        ("roles/iam.serviceAccountOpenIdTokenCreator", False, True),
        ("roles/iam.workloadIdentityUser", False, True),
        ("roles/iam.serviceAccountKeyAdmin", False, True),
        ("roles/resourcemanager.projectIamAdmin", False, True),
        ("roles/workflows.invoker", False, False),
        ("roles/datastore.user", False, False),
    ],
)
def test_roles_are_judged_by_what_they_allow(role: str, invokes: bool, escalates: bool) -> None:
    allowed = ROLE_PERMISSIONS[role]
    assert bool(allowed & INVOKE) is invokes
    assert bool(allowed & ESCALATION) is escalates


@pytest.mark.parametrize(
    ("role", "reaches"),
    [
        # Roles a review of the runtime policies found the table did not know.
        ("roles/datastore.admin", {"datastore.databases.bulkDelete", "datastore.entities.update",
                                   "datastore.databases.delete"}),
        ("roles/datastore.bulkAdmin", {"datastore.databases.bulkDelete"}),
        ("roles/firebaserules.system", {"datastore.entities.create", "datastore.entities.get"}),
        ("roles/firebase.admin", {"datastore.databases.delete", "datastore.entities.delete"}),
        ("roles/firebase.developAdmin", {"datastore.databases.update", "datastore.entities.get"}),
    ],
)
def test_firestore_and_firebase_roles_reach_records(role: str, reaches: set[str]) -> None:
    assert reaches <= ROLE_PERMISSIONS[role] & RECORDS_ACCESS


def test_scheduler_and_function_changes_are_known() -> None:
    assert ROLE_PERMISSIONS["roles/cloudscheduler.admin"] == SCHEDULER_JOBS
    assert ROLE_PERMISSIONS["roles/cloudscheduler.jobRunner"] == {"cloudscheduler.jobs.run"}
    assert not ROLE_PERMISSIONS["roles/cloudscheduler.viewer"]
    for role in ("roles/run.developer", "roles/run.admin", "roles/cloudfunctions.developer",
                 "roles/cloudfunctions.admin", "roles/firebase.admin"):
        assert ROLE_PERMISSIONS[role] & FUNCTION_CHANGES, role
    assert "secretmanager.secrets.setIamPolicy" in ROLE_PERMISSIONS["roles/iam.securityAdmin"]


def test_custom_role_names() -> None:
    assert is_custom_role("projects/p/roles/r") and is_custom_role("organizations/1/roles/r")
    assert not is_custom_role("roles/run.invoker") and not is_custom_role("projects/p/roles/")


def test_policy_keys_match_in_any_case_like_the_provider() -> None:
    lower = {"bindings": [{"role": "roles/run.invoker", "members": ["allUsers"],
                           "condition": {"expression": "true", "title": "t"}}]}
    for text in (
        json.dumps(lower),
        json.dumps({"Bindings": [{"Role": "roles/run.invoker", "Members": ["allUsers"],
                                  "Condition": {"Expression": "true", "Title": "t"}}]}),
        json.dumps(lower).upper().replace("ROLES/RUN.INVOKER", "roles/run.invoker")
        .replace("ALLUSERS", "allUsers").replace('"TRUE"', '"true"').replace('"T"', '"t"'),
    ):
        assert policy_document(text) == [
            Grant("roles/run.invoker", ["allUsers"], {"expression": "true", "title": "t"})
        ]
    assert policy_document('{"etag": "x", "Version": 3}') == []
    assert policy_document('{"bindings": [{"role": "roles/x", "members": null}]}') == [
        Grant("roles/x", [], MISSING)
    ]


@pytest.mark.parametrize(
    ("document", "named"),
    [
        ('{"bindings": [], "bindingz": []}', "'bindingz'"),
        ('{"bindings": {"role": "roles/owner"}}', "bindings is not a list"),
        ('{"bindings": [{"role": "roles/owner", "member": "allUsers"}]}', "'member'"),
        ('{"bindings": [{"role": "roles/owner", "members": [1]}]}', "not a list of strings"),
        ('{"bindings": [{"members": ["allUsers"]}]}', "no role"),
        ('{"bindings": ["roles/owner"]}', "binding 0 is not an object"),
        ('{"bindings": [{"role": "r", "condition": {"expr": "true"}}]}', "'expr'"),
        ('{"bindings": [], "BINDINGS": []}', "repeats the key 'BINDINGS'"),
        ("[]", "not a JSON object"),
        ("{bindings", "not valid JSON"),
    ],
)
def test_what_the_parser_does_not_understand_fails_closed(document: str, named: str) -> None:
    with pytest.raises(PolicyDataError, match=re.escape(named)):
        policy_document(document)
