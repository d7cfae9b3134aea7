"""What a role allows: the sensitive permissions of the predefined roles the pack judges.

The policies judge a grant by the permissions its role carries, not by its name, so a
broader role (roles/run.admin, roles/iam.workloadIdentityUser, a custom role) cannot stand
in for a role a policy forbids. Only the permissions the policies ask about are listed.

Source: Google Cloud's IAM roles and permissions reference
(https://cloud.google.com/iam/docs/roles-permissions, per service: run, iam,
resourcemanager, cloudfunctions, datastore (the Firestore page), firebase, firebaserules,
cloudbuild, workflows, pubsub, cloudtasks, cloudscheduler, storage, secretmanager) and
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

DATASTORE_READ: Final = frozenset({"datastore.entities.get", "datastore.entities.list"})
DATASTORE_EXPORT_IMPORT: Final = frozenset(
    {"datastore.databases.export", "datastore.databases.import"}
)
DATASTORE_BULK: Final = DATASTORE_EXPORT_IMPORT | {
    "datastore.databases.bulkDelete",
    "datastore.databases.clone",
}
"""A database's entities in bulk: export, import, bulk delete, clone (a copy read elsewhere)."""
DATASTORE_DATABASE_ADMIN: Final = frozenset(
    {"datastore.databases.delete", "datastore.databases.update"}
)
"""Deleting a database (every record in it) or changing its settings."""
RECORDS_ACCESS: Final = DATASTORE_WRITE | DATASTORE_READ | DATASTORE_BULK | DATASTORE_DATABASE_ADMIN
"""Reading, writing or deleting a Firestore database's entities, one by one or in bulk, or
the database itself (run records, on any database of the project unless conditioned to
one; https://cloud.google.com/iam/docs/roles-permissions/firestore)."""

SCHEDULER_JOBS: Final = frozenset(
    {
        "cloudscheduler.jobs.run",
        "cloudscheduler.jobs.pause",
        "cloudscheduler.jobs.enable",
        "cloudscheduler.jobs.delete",
        "cloudscheduler.jobs.update",
        "cloudscheduler.jobs.create",
    }
)
"""Running a Cloud Scheduler job now, pausing or resuming it (resume takes `enable`),
deleting, rewriting or creating one. Scheduler's roles are granted on the project only
(https://cloud.google.com/iam/docs/roles-permissions/cloudscheduler: "Lowest-level
resources where you can grant this role: Project"), so these reach every job there."""

FUNCTION_CHANGES: Final = frozenset(
    {
        "run.services.delete",
        "run.services.update",
        "cloudfunctions.functions.delete",
        "cloudfunctions.functions.update",
    }
)
"""Deleting or redeploying a function (its Cloud Run service: another image, account or
settings)."""

SECRET_ADMIN: Final = frozenset(
    {
        "secretmanager.secrets.setIamPolicy",
        "secretmanager.secrets.update",
        "secretmanager.secrets.delete",
        "secretmanager.versions.add",
        "secretmanager.versions.enable",
        "secretmanager.versions.disable",
        "secretmanager.versions.destroy",
    }
)
"""Changing a secret, its versions or who reads it (https://cloud.google.com/iam/docs/
roles-permissions/secretmanager)."""

CLOUD_TASKS: Final = frozenset(
    {
        "cloudtasks.tasks.create",
        "cloudtasks.tasks.delete",
        "cloudtasks.tasks.run",
        "cloudtasks.tasks.get",
        "cloudtasks.tasks.list",
        "cloudtasks.tasks.fullView",
        "cloudtasks.queues.update",
        "cloudtasks.queues.pause",
        "cloudtasks.queues.resume",
        "cloudtasks.queues.purge",
        "cloudtasks.queues.delete",
        "cloudtasks.queues.setIamPolicy",
    }
)
"""Acting on a queue or its tasks: adding a delivery, running, reading or deleting one,
pausing or purging the queue (https://cloud.google.com/iam/docs/roles-permissions/
cloudtasks)."""

STORAGE_WRITE: Final = frozenset(
    {
        "storage.objects.create",
        "storage.objects.update",
        "storage.objects.delete",
        "storage.objects.setIamPolicy",
        "storage.buckets.update",
        "storage.buckets.delete",
        "storage.buckets.setIamPolicy",
    }
)
"""Writing a bucket's objects (a function's source archive), or its settings and IAM policy
(https://cloud.google.com/iam/docs/roles-permissions/storage)."""

_RUN_SERVICES_CHANGE: Final = frozenset({"run.services.delete", "run.services.update"})
_RUN_DEVELOP: Final = frozenset(
    {RUN_INVOKE, "run.jobs.run", "run.jobs.runWithOverrides"}
) | _RUN_SERVICES_CHANGE
_RUN_ALL: Final = _RUN_DEVELOP | {"run.services.setIamPolicy", "run.jobs.setIamPolicy"}
_FUNCTIONS_DEVELOP: Final = frozenset(
    {FUNCTIONS_INVOKE, "cloudfunctions.functions.delete", "cloudfunctions.functions.update"}
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
_DATASTORE_ALL: Final = DATASTORE_WRITE | DATASTORE_READ
_STORAGE_OBJECTS: Final = frozenset(
    {"storage.objects.create", "storage.objects.update", "storage.objects.delete"}
)
_TASKS_READ: Final = frozenset(
    {"cloudtasks.tasks.get", "cloudtasks.tasks.list", "cloudtasks.tasks.fullView"}
)

ROLE_PERMISSIONS: Final[Mapping[str, frozenset[str]]] = {
    # Basic roles: Owner holds every permission; Editor all but IAM policy changes and
    # token minting (it can act as service accounts and create their keys).
    "roles/owner": INVOKE
    | ESCALATION
    | RECORDS_ACCESS
    | START_TARGETS
    | _RUN_ALL
    | ROLE_ADMIN
    | SECRET_ADMIN
    | CLOUD_TASKS
    | STORAGE_WRITE
    | SCHEDULER_JOBS
    | FUNCTION_CHANGES
    | {SECRET_ACCESS},
    "roles/editor": INVOKE
    | RECORDS_ACCESS
    | START_TARGETS
    | SCHEDULER_JOBS
    | FUNCTION_CHANGES
    | (SECRET_ADMIN - {"secretmanager.secrets.setIamPolicy"})
    | (CLOUD_TASKS - {"cloudtasks.queues.setIamPolicy"})
    | (STORAGE_WRITE - {"storage.objects.setIamPolicy", "storage.buckets.setIamPolicy"})
    | {"iam.serviceAccounts.actAs", "iam.serviceAccountKeys.create"},
    "roles/viewer": DATASTORE_READ,
    # Cloud Run
    "roles/run.admin": _RUN_ALL,
    "roles/run.developer": _RUN_DEVELOP,
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
    # Security Admin gets and sets any IAM policy: a secret's, a queue's, a bucket's too.
    "roles/iam.securityAdmin": SET_IAM
    | {"iam.serviceAccounts.setIamPolicy", "secretmanager.secrets.setIamPolicy",
       "cloudtasks.queues.setIamPolicy", "storage.buckets.setIamPolicy",
       "storage.objects.setIamPolicy"},
    # Custom roles (https://cloud.google.com/iam/docs/roles-permissions/iam).
    "roles/iam.roleAdmin": ROLE_ADMIN,
    "roles/iam.organizationRoleAdmin": ROLE_ADMIN,
    "roles/iam.roleViewer": frozenset(),
    # Cloud Functions (1st gen invoke; 2nd gen functions are Cloud Run services, and the
    # admin and developer roles carry Cloud Run's permissions too:
    # https://cloud.google.com/functions/docs/reference/iam/roles)
    "roles/cloudfunctions.admin": _FUNCTIONS_DEVELOP
    | _RUN_ALL
    | {"cloudfunctions.functions.setIamPolicy"},
    "roles/cloudfunctions.developer": _FUNCTIONS_DEVELOP | _RUN_DEVELOP,
    "roles/cloudfunctions.invoker": frozenset({FUNCTIONS_INVOKE}),
    "roles/cloudfunctions.viewer": frozenset(),
    # Firestore / Datastore (https://cloud.google.com/iam/docs/roles-permissions/firestore):
    # Owner and Admin hold datastore.* (bulk delete, clone, delete and update included).
    "roles/datastore.user": _DATASTORE_ALL,
    "roles/datastore.owner": RECORDS_ACCESS,
    "roles/datastore.admin": RECORDS_ACCESS,
    "roles/datastore.viewer": DATASTORE_READ,
    "roles/datastore.importExportAdmin": DATASTORE_EXPORT_IMPORT,
    "roles/datastore.bulkAdmin": frozenset({"datastore.databases.bulkDelete"}),
    "roles/datastore.cloneAdmin": frozenset({"datastore.databases.clone"}),
    # Firebase (https://cloud.google.com/iam/docs/roles-permissions/firebaserules and
    # .../firebase): Rules System reads and writes every database's entities, objects, and
    # publishes; Firebase Admin and Develop Admin hold Firestore's database and entity
    # permissions, Cloud Functions' and Cloud Run's (invoke, update, delete, IAM) and
    # Cloud Storage's.
    "roles/firebaserules.system": _DATASTORE_ALL
    | _STORAGE_OBJECTS
    | {"pubsub.topics.publish"},
    "roles/firebase.admin": RECORDS_ACCESS
    | _FUNCTIONS_DEVELOP
    | _RUN_ALL
    | STORAGE_WRITE
    | {"cloudfunctions.functions.setIamPolicy"},
    "roles/firebase.developAdmin": RECORDS_ACCESS
    | _FUNCTIONS_DEVELOP
    | _RUN_ALL
    | STORAGE_WRITE
    | {"cloudfunctions.functions.setIamPolicy"},
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
    # Cloud Tasks (https://cloud.google.com/iam/docs/roles-permissions/cloudtasks): creating
    # a task (a task's OIDC token needs actAs on its account besides,
    # https://cloud.google.com/tasks/docs/reference/rest/v2/OidcToken), running, deleting,
    # pausing or purging them.
    "roles/cloudtasks.enqueuer": frozenset(
        {"cloudtasks.tasks.create", "cloudtasks.tasks.fullView"}
    ),
    "roles/cloudtasks.taskRunner": frozenset({"cloudtasks.tasks.run"}),
    "roles/cloudtasks.taskDeleter": frozenset({"cloudtasks.tasks.delete"}),
    "roles/cloudtasks.viewer": frozenset({"cloudtasks.tasks.get", "cloudtasks.tasks.list"}),
    "roles/cloudtasks.queueAdmin": frozenset(
        {"cloudtasks.queues.update", "cloudtasks.queues.pause", "cloudtasks.queues.resume",
         "cloudtasks.queues.purge", "cloudtasks.queues.delete", "cloudtasks.queues.setIamPolicy"}
    ),
    "roles/cloudtasks.editor": CLOUD_TASKS - {"cloudtasks.queues.setIamPolicy"},
    "roles/cloudtasks.admin": CLOUD_TASKS,
    # Cloud Scheduler (https://cloud.google.com/iam/docs/roles-permissions/cloudscheduler),
    # granted on the project only.
    "roles/cloudscheduler.admin": SCHEDULER_JOBS,
    "roles/cloudscheduler.jobRunner": frozenset({"cloudscheduler.jobs.run"}),
    "roles/cloudscheduler.viewer": frozenset(),
    # What the kit itself grants besides the above (infra/): none sensitive.
    "roles/logging.logWriter": frozenset(),
    "roles/artifactregistry.writer": frozenset(),
    "roles/artifactregistry.reader": frozenset(),
    # Cloud Storage (https://cloud.google.com/iam/docs/roles-permissions/storage).
    "roles/storage.objectViewer": frozenset(),
    "roles/storage.legacyBucketReader": frozenset(),
    "roles/storage.legacyObjectReader": frozenset(),
    "roles/storage.objectCreator": frozenset({"storage.objects.create"}),
    "roles/storage.objectUser": _STORAGE_OBJECTS,
    "roles/storage.legacyBucketWriter": frozenset(
        {"storage.objects.create", "storage.objects.delete"}
    ),
    "roles/storage.legacyObjectOwner": frozenset(
        {"storage.objects.update", "storage.objects.setIamPolicy"}
    ),
    "roles/storage.legacyBucketOwner": frozenset(
        {"storage.objects.create", "storage.objects.delete", "storage.buckets.update",
         "storage.buckets.setIamPolicy"}
    ),
    "roles/storage.objectAdmin": _STORAGE_OBJECTS | {"storage.objects.setIamPolicy"},
    "roles/storage.admin": STORAGE_WRITE,
    # Secret Manager (https://cloud.google.com/iam/docs/roles-permissions/secretmanager).
    "roles/secretmanager.secretAccessor": frozenset({SECRET_ACCESS}),
    "roles/secretmanager.admin": SECRET_ADMIN | {SECRET_ACCESS},
    "roles/secretmanager.secretVersionAdder": frozenset({"secretmanager.versions.add"}),
    "roles/secretmanager.secretVersionManager": frozenset(
        {"secretmanager.versions.add", "secretmanager.versions.enable",
         "secretmanager.versions.disable", "secretmanager.versions.destroy"}
    ),
    "roles/secretmanager.editor": SECRET_ADMIN - {"secretmanager.secrets.setIamPolicy"},
    "roles/secretmanager.viewer": frozenset(),
    "roles/monitoring.metricWriter": frozenset(),
    # What teams grant their runtimes' accounts on their own resources besides the above
    # (BigQuery: https://cloud.google.com/iam/docs/roles-permissions/bigquery): none of the
    # permissions the policies ask about.
    "roles/bigquery.dataViewer": frozenset(),
    "roles/bigquery.dataEditor": frozenset(),
    "roles/bigquery.jobUser": frozenset(),
    "roles/bigquery.user": frozenset(),
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
