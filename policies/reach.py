"""What one grant is on, and whether it reaches a given resource of the kit: a records
database, a secret, a service account, a Cloud Run service or function, a Cloud Tasks
queue, a bucket.

A grant reaches a resource when it is made on that resource (its IAM resource names it),
or on the resource's project, a folder or the organization: a role granted there applies
to every resource below it. Only a condition the pack reads exactly narrows a grant made
there: one Firestore database (`resource.name == "projects/P/databases/D"`, the kit's own
condition on datastore roles) or one secret (`resource.name == "projects/P/secrets/S"`);
any other condition is read as reaching everything (fail closed). A grant whose project,
condition or target is not known yet reaches nothing here (it is judged once known).

A shared helper: it imports no policy module.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from policies.gcp import SECRET_IAM_PREFIX, service_account_email, type_module
from policies.grants import Grant, condition_database, is_hierarchy_level, level_name
from policies.kit_resources import RecordsDatabase, Secret, same_secret, secret_of
from policies.model import Resource
from policies.values import as_mapping, get, is_unknown, known_str

# IAM resources of one Cloud Run service or function (type prefixes), and the property
# naming it.
RUN_SERVICE_IAM: Final = "gcp:cloudrunv2/serviceIam"
FUNCTION_IAM: Final = "gcp:cloudfunctionsv2/functionIam"
CLOUD_RUN_V1_IAM: Final = "gcp:cloudrun/iam"
SERVICE_IAM_NAME: Final[Mapping[str, str]] = {
    RUN_SERVICE_IAM: "name",
    FUNCTION_IAM: "cloudFunction",
    CLOUD_RUN_V1_IAM: "service",
}
SERVICE_ACCOUNT_IAM_MODULE: Final = "gcp:serviceaccount/"
QUEUE_IAM_PREFIX: Final = "gcp:cloudtasks/queueIam"
STORAGE_MODULE: Final = "storage"
_ONE_SECRET: Final = re.compile(
    r"""\s*resource\.name\s*==\s*(["'])projects/([^/"']+)/secrets/([^/"']+)\1\s*"""
)


# --- grants on the project, a folder or the organization ---------------------------------


def project_wide(grant_on: Resource, project: str | None) -> bool:
    """A grant on `grant_on` applies to every resource of `project` (None: a project not
    known yet, or any): made on the organization, a folder, or that project (unset: the
    provider's default project, the stack's own). Not while its project is unknown."""
    if not is_hierarchy_level(grant_on.type):
        return False
    if level_name(grant_on.type) != "project":
        return True
    named = get(grant_on.props, "project")
    if is_unknown(named):
        return False
    text = known_str(named)
    return text is None or project is None or text == project


# --- Firestore databases ---------------------------------------------------------------------


def database_reach(grant_on: Resource, condition: Any, database: RecordsDatabase) -> str | None:
    """How a grant on `grant_on` with `condition` reaches `database`, or None if it does
    not (or is not known yet): its one-database condition names it, or it has no such
    condition and is granted on the database's project, a folder or the organization."""
    if not is_hierarchy_level(grant_on.type):
        return None  # Firestore roles act on databases through the project only
    named = condition_database(condition)
    if is_unknown(named):
        return None
    if isinstance(named, str):
        return "its condition names it" if database.named_by(named) else None
    level = level_name(grant_on.type)
    if level != "project":
        return f"granted at {level} level without a one-database condition"
    if project_wide(grant_on, database.project):
        return "granted on its project without a one-database condition"
    return None


# --- Secret Manager secrets -------------------------------------------------------------------


def grant_secret(resource: Resource) -> Secret | None:
    """The secret a secret IAM resource grants on (None: not one, or not known yet)."""
    if not resource.type.startswith(SECRET_IAM_PREFIX):
        return None
    secret = known_str(get(resource.props, "secretId"))
    if secret is None:
        return None
    return secret_of(secret, known_str(get(resource.props, "project")))


def _condition_secret(grant: Grant) -> tuple[bool, Secret | None]:
    """(known, the one secret the grant's condition names): None without such a
    condition (any other condition included); known False while the condition is not."""
    if is_unknown(grant.condition):
        return False, None
    expression = get(as_mapping(grant.condition) or {}, "expression")
    if is_unknown(expression):
        return False, None
    match = _ONE_SECRET.fullmatch(expression) if isinstance(expression, str) else None
    return True, (match.group(2), match.group(3)) if match else None


def reaches_secret(resource: Resource, grant: Grant, secret: Secret) -> bool:
    """The grant on `resource` reaches `secret` (not judged, False, while unknown)."""
    if resource.type.startswith(SECRET_IAM_PREFIX):
        on = grant_secret(resource)
        return on is not None and same_secret(on, secret)
    if not project_wide(resource, secret[0]):
        return False
    known, named = _condition_secret(grant)
    return known and (named is None or same_secret(named, secret))


@dataclass(frozen=True)
class SecretsReached:
    """The secrets a grant reaches: one, or every secret of a project, folder or
    organization (`secret` None; `where` names it)."""

    secret: Secret | None
    where: str = ""


def secrets_reached(resource: Resource, grant: Grant) -> SecretsReached | None:
    """What the grant on `resource` reaches of Secret Manager; None if no secret, or not
    known yet."""
    on = grant_secret(resource)
    if on is not None:
        return SecretsReached(on)
    if not is_hierarchy_level(resource.type):
        return None
    project = get(resource.props, "project")
    if level_name(resource.type) == "project" and is_unknown(project):
        return None
    known, named = _condition_secret(grant)
    if not known:
        return None
    if named is not None:
        return SecretsReached(named)
    where = level_name(resource.type)
    if where == "project" and known_str(project):
        where = f"project {known_str(project)}"
    return SecretsReached(None, where)


# --- service accounts, Cloud Run services, queues, buckets -----------------------------------


def service_account_of(resource: Resource) -> str | None:
    """The e-mail of the service account a service account IAM resource grants on."""
    if not resource.type.startswith(SERVICE_ACCOUNT_IAM_MODULE):
        return None
    raw = known_str(get(resource.props, "serviceAccountId"))
    return service_account_email(raw) if raw else None


def service_of(resource: Resource) -> str | None:
    """The service / function a Cloud Run or function IAM resource grants on (its ID)."""
    for prefix, key in SERVICE_IAM_NAME.items():
        if resource.type.startswith(prefix):
            name = known_str(get(resource.props, key))
            return name.rsplit("/", 1)[-1] if name else None
    return None


def queue_of(resource: Resource) -> str | None:
    """`projects/P/locations/L/queues/Q` of a queue IAM resource (its name may be the
    full name or the queue ID); None if not one, or not known yet."""
    if not resource.type.startswith(QUEUE_IAM_PREFIX):
        return None
    name = known_str(get(resource.props, "name"))
    if name is None or name.startswith("projects/"):
        return name
    project = known_str(get(resource.props, "project"))
    location = known_str(get(resource.props, "location"))
    if project is None or location is None:
        return None
    return f"projects/{project}/locations/{location}/queues/{name}"


def bucket_name(value: str) -> str:
    """A bucket's name from `name`, `b/name` or `projects/_/buckets/name`."""
    text = value.strip()
    if "/buckets/" in text:
        return text.rsplit("/buckets/", 1)[1]
    return text.removeprefix("b/")


def bucket_of(resource: Resource) -> str | None:
    """The bucket a grant-bearing Cloud Storage resource (IAM or ACL-style) grants on
    (None: not one, or not known yet)."""
    if type_module(resource.type) != STORAGE_MODULE:
        return None
    name = known_str(get(resource.props, "bucket"))
    return bucket_name(name) if name else None


def granted_on(resource: Resource) -> str:
    """Where a grant is made, for messages: `project P`, `folder`, `organization`, or the
    kind of resource and its Pulumi name (`secretmanager 'runtime-sync-secret-0'`)."""
    if is_hierarchy_level(resource.type):
        level = level_name(resource.type)
        project = known_str(get(resource.props, "project"))
        return f"project {project}" if level == "project" and project else level
    return f"{type_module(resource.type)} {resource.name!r}"
