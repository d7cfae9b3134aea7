"""Resource policies for the Cloud Run function and Cloud Run services, and the DEDUP_*
settings a function of the kit reads (`setting`, `records_database`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from policies.gcp import (
    CLOUD_RUN_V1_SERVICE,
    CLOUD_RUN_V2_SERVICE,
    DEDUP_DEFAULTS,
    FUNCTION_V1,
    FUNCTION_V2,
    is_default_build_account,
    is_default_runtime_account,
)
from policies.model import Resource
from policies.values import MISSING, UNKNOWN, get, is_unknown, known_str

_FUNCTION_INGRESS: Final = ("ALLOW_INTERNAL_ONLY", "ALLOW_INTERNAL_AND_GCLB")
_RUN_V2_INGRESS: Final = ("INGRESS_TRAFFIC_INTERNAL_ONLY", "INGRESS_TRAFFIC_INTERNAL_LOAD_BALANCER")
_RUN_V1_INGRESS: Final = ("internal", "internal-and-cloud-load-balancing")
_V1_INGRESS_ANNOTATION: Final = "run.googleapis.com/ingress"
_INVOKER_IAM_DISABLED: Final = "run.googleapis.com/invoker-iam-disabled"
DEFAULT_DATABASE: Final = "(default)"


# --- a function's DEDUP_* settings (function/dedup/settings.py) ---------------------------


def _env(function: Resource) -> Any:
    return get(function.props, "serviceConfig", "environmentVariables")


def setting(function: Resource, key: str) -> Any:
    """The function's DEDUP_* value (a string), its default, or UNKNOWN."""
    env = _env(function)
    if is_unknown(env):
        return UNKNOWN
    value = get(env, key)
    if value is MISSING:
        return DEDUP_DEFAULTS[key]
    return value


def database_id(value: Any) -> Any:
    """A Firestore database ID from an ID or a `projects/P/databases/D` name; unset or
    empty is the default database (as the function and the provider read it)."""
    if value is MISSING or value == "":
        return DEFAULT_DATABASE
    if isinstance(value, str) and "/databases/" in value:
        return value.rsplit("/databases/", 1)[1]
    return value


@dataclass(frozen=True)
class RecordsDatabase:
    """The Firestore database a function of the kit keeps its run records in."""

    project: str | None
    """None: not known yet (a name is then matched by its database ID alone)."""
    database: str

    def same_as(self, other: RecordsDatabase) -> bool:
        """The same database ID in the same project (or a project not known yet)."""
        return self.database == other.database and (
            self.project is None or other.project is None or self.project == other.project
        )

    def named_by(self, name: str) -> bool:
        """`projects/P/databases/D` (an IAM condition's resource.name) is this database."""
        project, _, database = name.removeprefix("projects/").partition("/databases/")
        return self.same_as(RecordsDatabase(project or None, database))

    def resource_name(self, default_project: str = "P") -> str:
        """`projects/P/databases/D`, as an IAM condition names it."""
        return f"projects/{self.project or default_project}/databases/{self.database}"

    def __str__(self) -> str:
        return self.database if self.project is None else self.resource_name()


def records_database(function: Resource) -> RecordsDatabase | None:
    """DEDUP_DATABASE (default "(default)") in DEDUP_PROJECT (default: the function's own
    project); None while the database is not known."""
    database = known_str(database_id(setting(function, "DEDUP_DATABASE")))
    if database is None:
        return None
    project = get(_env(function), "DEDUP_PROJECT")
    if project is MISSING or project == "":
        project = get(function.props, "project")
    return RecordsDatabase(known_str(project), database)


def _account_problem(value: Any, where: str, *, build: bool) -> list[str]:
    if is_unknown(value):
        return []  # an output of a (dedicated) account created in the same update
    if value is MISSING or (isinstance(value, str) and not value.strip()):
        fallback = "the Compute Engine default account" if not build else "a default account"
        return [f"{where} is not set, so {fallback} is used: set it to a dedicated service account"]
    email = known_str(value)
    if email is None:
        return []
    default = is_default_build_account(email) if build else is_default_runtime_account(email)
    if default:
        return [
            f"{where} {email!r} is a default service account (broad project roles): use a "
            "dedicated service account with only the roles the function needs"
        ]
    return []


def dedicated_runtime_account(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    if resource_type == FUNCTION_V2:
        service = get(props, "serviceConfig")
        if is_unknown(service):
            return []
        return _account_problem(
            get(props, "serviceConfig", "serviceAccountEmail"),
            "serviceConfig.serviceAccountEmail",
            build=False,
        )
    if resource_type == FUNCTION_V1:
        return _account_problem(
            get(props, "serviceAccountEmail"), "serviceAccountEmail", build=False
        )
    if resource_type == CLOUD_RUN_V2_SERVICE:
        if is_unknown(get(props, "template")):
            return []
        return _account_problem(
            get(props, "template", "serviceAccount"), "template.serviceAccount", build=False
        )
    if resource_type == CLOUD_RUN_V1_SERVICE:
        if is_unknown(get(props, "template")) or is_unknown(get(props, "template", "spec")):
            return []
        return _account_problem(
            get(props, "template", "spec", "serviceAccountName"),
            "template.spec.serviceAccountName",
            build=False,
        )
    return []


def dedicated_build_account(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    if resource_type != FUNCTION_V2:
        return []
    if is_unknown(get(props, "buildConfig")):
        return []
    return _account_problem(
        get(props, "buildConfig", "serviceAccount"), "buildConfig.serviceAccount", build=True
    )


def _ingress_problem(value: Any, where: str, allowed: tuple[str, str], default: str) -> list[str]:
    """An allow-list: anything but the two internal settings (unset, "", a typo, a value
    the pack does not know) lets traffic in from the internet or is not judgeable."""
    if is_unknown(value) or value in allowed:
        return []
    shown = f"unset (defaults to {default})" if value is MISSING else repr(value)
    return [
        f"{where} is {shown}: set {allowed[0]} (Cloud Scheduler counts as internal) or "
        f"{allowed[1]}"
    ]


def ingress_not_public(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    if resource_type == FUNCTION_V2:
        if is_unknown(get(props, "serviceConfig")):
            return []
        return _ingress_problem(
            get(props, "serviceConfig", "ingressSettings"), "serviceConfig.ingressSettings",
            _FUNCTION_INGRESS, "ALLOW_ALL",
        )
    if resource_type == FUNCTION_V1:
        return _ingress_problem(
            get(props, "ingressSettings"), "ingressSettings", _FUNCTION_INGRESS, "ALLOW_ALL"
        )
    if resource_type == CLOUD_RUN_V2_SERVICE:
        return _ingress_problem(
            get(props, "ingress"), "ingress", _RUN_V2_INGRESS, "INGRESS_TRAFFIC_ALL"
        )
    if resource_type == CLOUD_RUN_V1_SERVICE:
        return _ingress_problem(
            get(props, "metadata", "annotations", _V1_INGRESS_ANNOTATION),
            f"the {_V1_INGRESS_ANNOTATION} annotation", _RUN_V1_INGRESS, "all",
        )
    return []


def invoker_iam_check_enabled(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    """Cloud Run's invoker check (run.routes.invoke) must stay on: without it anyone who
    reaches the service calls it, whatever the IAM grants say."""
    fix = "remove it (or set false) so Cloud Run checks run.routes.invoke on every request"
    problems: list[str] = []
    if resource_type == CLOUD_RUN_V2_SERVICE:
        if get(props, "invokerIamDisabled") is True:
            problems.append(f"invokerIamDisabled is true: {fix}")
        annotations = get(props, "annotations")
    elif resource_type == CLOUD_RUN_V1_SERVICE:
        annotations = get(props, "metadata", "annotations")
    else:
        return []
    flag = get(annotations, _INVOKER_IAM_DISABLED)
    if not is_unknown(flag) and flag is not MISSING and str(flag).strip().lower() != "false":
        problems.append(f"the {_INVOKER_IAM_DISABLED} annotation is {flag!r}: {fix}")
    return problems
