"""What a role allows: the sensitive permissions of the predefined roles the pack judges.

The policies judge a grant by the permissions its role carries, not by its name, so a
broader role (roles/run.admin, roles/iam.workloadIdentityUser, a custom role) cannot stand
in for a role a policy forbids. Only the permissions the policies ask about are listed.

Source: Google Cloud's IAM roles and permissions reference
(https://cloud.google.com/iam/docs/roles-permissions, per service: run, iam,
resourcemanager, cloudfunctions, datastore, cloudbuild, workflows, pubsub) and
https://cloud.google.com/iam/docs/service-account-permissions for the service account
roles. Re-check there when adding a role; a role missing here is "unknown" to the pack.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Final

from policies.values import as_list, is_unknown

# --- the permissions the policies ask about ----------------------------------------------

RUN_INVOKE: Final = "run.routes.invoke"
FUNCTIONS_INVOKE: Final = "cloudfunctions.functions.invoke"
INVOKE: Final = frozenset({RUN_INVOKE, FUNCTIONS_INVOKE})
"""Calling a Cloud Run service / function (the dedup function, the proxy)."""

IMPERSONATE: Final = frozenset(
    {
        "iam.serviceAccounts.actAs",
        "iam.serviceAccounts.getAccessToken",
        "iam.serviceAccounts.getOpenIdToken",
        "iam.serviceAccounts.implicitDelegation",
        "iam.serviceAccounts.signBlob",
        "iam.serviceAccounts.signJwt",
        "iam.serviceAccounts.setIamPolicy",
        "iam.serviceAccountKeys.create",
    }
)
"""Acting as a service account or minting its tokens (an invoker's OIDC token included)."""

SET_IAM: Final = frozenset(
    {
        "resourcemanager.projects.setIamPolicy",
        "resourcemanager.folders.setIamPolicy",
        "resourcemanager.organizations.setIamPolicy",
        "run.services.setIamPolicy",
        "run.jobs.setIamPolicy",
        "cloudfunctions.functions.setIamPolicy",
    }
)
"""Granting any role to anyone: every other permission follows."""

ESCALATION: Final = IMPERSONATE | SET_IAM

DATASTORE_WRITE: Final = frozenset(
    {"datastore.entities.create", "datastore.entities.update", "datastore.entities.delete"}
)
"""Writing dedup records (any database of the project, unless conditioned)."""

START_TARGETS: Final = frozenset(
    {
        "workflows.executions.create",
        "run.jobs.run",
        "run.jobs.runWithOverrides",
        "cloudbuild.builds.create",
        "pubsub.topics.publish",
    }
)
"""Starting the proxy's kinds of target."""

ROLE_ADMIN: Final = frozenset({"iam.roles.create", "iam.roles.update"})
"""Creating or rewriting custom roles: whoever holds it on a role's project or organization
rewrites a role they (or anyone) hold into any permissions
(https://cloud.google.com/iam/docs/creating-custom-roles)."""

BUILDS_CREATE: Final = "cloudbuild.builds.create"
"""Running an arbitrary build as the project's build account (a known escalation path)."""

GRANTED_ESCALATION: Final = ROLE_ADMIN | {BUILDS_CREATE}
"""Escalation the pack judges for every member, on every resource: `iam-no-role-admin-or-
build-create`."""

SECRET_ACCESS: Final = "secretmanager.versions.access"
"""Reading a secret's payload (the proxy's token secret)."""

ACT_AS: Final = "iam.serviceAccounts.actAs"

_RUN_ALL: Final = frozenset(
    {RUN_INVOKE, "run.services.setIamPolicy", "run.jobs.setIamPolicy", "run.jobs.run",
     "run.jobs.runWithOverrides"}
)
_TOKEN_CREATOR: Final = frozenset(
    {
        "iam.serviceAccounts.getAccessToken",
        "iam.serviceAccounts.getOpenIdToken",
        "iam.serviceAccounts.implicitDelegation",
        "iam.serviceAccounts.signBlob",
        "iam.serviceAccounts.signJwt",
    }
)
_DATASTORE_ALL: Final = DATASTORE_WRITE | {"datastore.entities.get", "datastore.entities.list"}

ROLE_PERMISSIONS: Final[Mapping[str, frozenset[str]]] = {
    # Basic roles: Owner holds every permission; Editor all but IAM policy changes and
    # token minting (it can act as service accounts and create their keys).
    "roles/owner": INVOKE
    | ESCALATION
    | _DATASTORE_ALL
    | START_TARGETS
    | _RUN_ALL
    | ROLE_ADMIN
    | {SECRET_ACCESS},
    "roles/editor": INVOKE
    | _DATASTORE_ALL
    | START_TARGETS
    | {"iam.serviceAccounts.actAs", "iam.serviceAccountKeys.create"},
    "roles/viewer": frozenset({"datastore.entities.get", "datastore.entities.list"}),
    # Cloud Run
    "roles/run.admin": _RUN_ALL,
    "roles/run.developer": frozenset({RUN_INVOKE, "run.jobs.run", "run.jobs.runWithOverrides"}),
    "roles/run.invoker": frozenset({RUN_INVOKE, "run.jobs.run"}),
    "roles/run.servicesInvoker": frozenset({RUN_INVOKE}),
    "roles/run.jobsExecutor": frozenset({"run.jobs.run"}),
    "roles/run.jobsExecutorWithOverrides": frozenset({"run.jobs.run", "run.jobs.runWithOverrides"}),
    "roles/run.viewer": frozenset(),
    # Service accounts
    "roles/iam.serviceAccountUser": frozenset({"iam.serviceAccounts.actAs"}),
    "roles/iam.serviceAccountTokenCreator": _TOKEN_CREATOR,
    "roles/iam.serviceAccountOpenIdTokenCreator": frozenset(
        {"iam.serviceAccounts.getOpenIdToken"}
    ),
    "roles/iam.workloadIdentityUser": _TOKEN_CREATOR,
    "roles/iam.serviceAccountKeyAdmin": frozenset({"iam.serviceAccountKeys.create"}),
    "roles/iam.serviceAccountAdmin": frozenset({"iam.serviceAccounts.setIamPolicy"}),
    "roles/resourcemanager.projectIamAdmin": frozenset({"resourcemanager.projects.setIamPolicy"}),
    "roles/resourcemanager.folderIamAdmin": frozenset({"resourcemanager.folders.setIamPolicy"}),
    "roles/resourcemanager.organizationAdmin": frozenset(
        {"resourcemanager.organizations.setIamPolicy", "resourcemanager.projects.setIamPolicy",
         "resourcemanager.folders.setIamPolicy"}
    ),
    "roles/iam.securityAdmin": SET_IAM | {"iam.serviceAccounts.setIamPolicy"},
    # Custom roles (https://cloud.google.com/iam/docs/roles-permissions/iam).
    "roles/iam.roleAdmin": ROLE_ADMIN,
    "roles/iam.organizationRoleAdmin": ROLE_ADMIN,
    "roles/iam.roleViewer": frozenset(),
    # Cloud Functions (1st gen invoke; 2nd gen functions are invoked through Cloud Run)
    "roles/cloudfunctions.admin": frozenset(
        {FUNCTIONS_INVOKE, "cloudfunctions.functions.setIamPolicy"}
    ),
    "roles/cloudfunctions.developer": frozenset({FUNCTIONS_INVOKE}),
    "roles/cloudfunctions.invoker": frozenset({FUNCTIONS_INVOKE}),
    "roles/cloudfunctions.viewer": frozenset(),
    # Firestore / Datastore
    "roles/datastore.user": _DATASTORE_ALL,
    "roles/datastore.owner": _DATASTORE_ALL,
    "roles/datastore.viewer": frozenset({"datastore.entities.get", "datastore.entities.list"}),
    # Cloud Build
    "roles/cloudbuild.builds.editor": frozenset({"cloudbuild.builds.create"}),
    "roles/cloudbuild.builds.builder": frozenset(
        {"cloudbuild.builds.create", "pubsub.topics.publish"}
    ),
    "roles/cloudbuild.builds.viewer": frozenset(),
    # Workflows
    "roles/workflows.invoker": frozenset({"workflows.executions.create"}),
    "roles/workflows.admin": frozenset({"workflows.executions.create"}),
    "roles/workflows.editor": frozenset({"workflows.executions.create"}),
    "roles/workflows.viewer": frozenset(),
    # Pub/Sub
    "roles/pubsub.publisher": frozenset({"pubsub.topics.publish"}),
    "roles/pubsub.editor": frozenset({"pubsub.topics.publish"}),
    "roles/pubsub.admin": frozenset({"pubsub.topics.publish"}),
    "roles/pubsub.subscriber": frozenset(),
    "roles/pubsub.viewer": frozenset(),
    # Cloud Tasks: creating a task (a task's OIDC token needs actAs on its account besides,
    # https://cloud.google.com/tasks/docs/reference/rest/v2/OidcToken).
    "roles/cloudtasks.enqueuer": frozenset(),
    # What the kit itself grants besides the above (infra/): none sensitive.
    "roles/logging.logWriter": frozenset(),
    "roles/artifactregistry.writer": frozenset(),
    "roles/artifactregistry.reader": frozenset(),
    "roles/storage.objectViewer": frozenset(),
    "roles/storage.objectAdmin": frozenset(),
    "roles/storage.admin": frozenset(),
    # Secret Manager (https://cloud.google.com/iam/docs/roles-permissions/secretmanager).
    "roles/secretmanager.secretAccessor": frozenset({SECRET_ACCESS}),
    "roles/secretmanager.admin": frozenset({SECRET_ACCESS}),
    "roles/secretmanager.secretVersionManager": frozenset(),
    "roles/secretmanager.viewer": frozenset(),
    "roles/monitoring.metricWriter": frozenset(),
}

_CUSTOM_ROLE: Final = re.compile(r"^(projects|organizations)/[^/]+/roles/[^/]+$")


def is_custom_role(role: str) -> bool:
    """`projects/P/roles/R` or `organizations/O/roles/R`."""
    return _CUSTOM_ROLE.match(role) is not None


def predefined_permissions(role: str) -> frozenset[str] | None:
    """The sensitive permissions of a predefined role; None if the pack does not know it."""
    return ROLE_PERMISSIONS.get(role)


def custom_permissions(listed: object) -> frozenset[str] | None:
    """A declared custom role's `permissions` as a set; None if not (all) known strings."""
    items = as_list(listed)
    if items is None or any(is_unknown(p) or not isinstance(p, str) for p in items):
        return None
    return frozenset(items)
