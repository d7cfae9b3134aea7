"""Resource policies for IAM members, bindings and policies of any gcp resource.

IAM resources come in three shapes (`*IamMember`/`*IAMMember` with `role` + `member`,
`*IamBinding` with `role` + `members`, `*IamPolicy` with a `policyData` JSON document);
`grants` reads all three into (role, members, condition) triples, leaving unknowns in place.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from policies.gcp import HIERARCHY_IAM_MODULES, iam_kind, type_module
from policies.values import MISSING, as_list, as_mapping, get, is_unknown, known_str

PUBLIC_MEMBERS: Final = frozenset({"allusers", "allauthenticatedusers"})
PRIMITIVE_ROLES: Final = frozenset({"roles/owner", "roles/editor", "roles/viewer"})
INVOKER_ROLES: Final = frozenset({"roles/run.invoker", "roles/cloudfunctions.invoker"})
IMPERSONATION_ROLES: Final = frozenset(
    {"roles/iam.serviceAccountUser", "roles/iam.serviceAccountTokenCreator"}
)
DATASTORE_USER: Final = "roles/datastore.user"
_DATABASE_EQUALS: Final = re.compile(
    r"resource\.name\s*==\s*[\"'](projects/[^/\"']+/databases/[^/\"']+)[\"']"
)
_DATABASE_NAMED: Final = re.compile(r"projects/[^/\"'\s]+/databases/[^/\"'\s)]+")


@dataclass(frozen=True)
class Grant:
    role: Any  # str, UNKNOWN or MISSING
    members: list[Any] | None  # None: the member list is unknown
    condition: Any  # mapping, UNKNOWN or MISSING


class PolicyDataError(ValueError):
    """An IAM policy document that is not the JSON Google's IAM API accepts."""


def grants(resource_type: str, props: Mapping[str, Any]) -> list[Grant]:
    """The grants an IAM resource makes; [] for other resources or an unknown policy."""
    kind = iam_kind(resource_type)
    if kind is None:
        return []
    if kind == "member":
        return [Grant(get(props, "role"), [get(props, "member")], get(props, "condition"))]
    if kind == "binding":
        return [Grant(get(props, "role"), as_list(get(props, "members")), get(props, "condition"))]
    data = get(props, "policyData")
    if is_unknown(data) or data is MISSING:
        return []
    try:
        document = json.loads(data) if isinstance(data, str) else data
    except json.JSONDecodeError as exc:
        raise PolicyDataError(f"policyData is not valid JSON: {exc}") from exc
    if not isinstance(document, Mapping):
        raise PolicyDataError("policyData is not a JSON object")
    bindings = as_list(get(document, "bindings")) or []
    return [
        Grant(get(b, "role"), as_list(get(b, "members")), get(b, "condition"))
        for b in bindings
        if isinstance(b, Mapping)
    ]


def _grants_or_problem(
    resource_type: str, props: Mapping[str, Any], *, report_bad_document: bool = False
) -> tuple[list[Grant], list[str]]:
    """The grants, and (for one policy only, so it is reported once) a malformed document."""
    try:
        return grants(resource_type, props), []
    except PolicyDataError as exc:
        return [], [f"{exc}: fix the policy document"] if report_bad_document else []


def _is_hierarchy_level(resource_type: str) -> bool:
    return (
        iam_kind(resource_type) is not None and type_module(resource_type) in HIERARCHY_IAM_MODULES
    )


def _level(resource_type: str) -> str:
    module = type_module(resource_type)
    return {"projects": "project", "folder": "folder", "organizations": "organization"}.get(
        module, module
    )


def no_public_members(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    found, problems = _grants_or_problem(resource_type, props, report_bad_document=True)
    for grant in found:
        for member in grant.members or []:
            name = known_str(member)
            if name is not None and name.lower() in PUBLIC_MEMBERS:
                role = known_str(grant.role) or "a role"
                problems.append(
                    f"{name} is granted {role}: remove it; grant the role to a dedicated "
                    "service account instead"
                )
    return problems


def no_primitive_roles(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    found, problems = _grants_or_problem(resource_type, props)
    for grant in found:
        role = known_str(grant.role)
        if role in PRIMITIVE_ROLES:
            problems.append(
                f"primitive role {role} granted: replace it with the predefined roles the "
                "principal needs (e.g. roles/run.invoker, roles/datastore.user)"
            )
    return problems


def _hierarchy_grants(
    resource_type: str, props: Mapping[str, Any], roles: frozenset[str], fix: str
) -> list[str]:
    """Problems for each of `roles` granted on a project, folder or organization."""
    if not _is_hierarchy_level(resource_type):
        return []
    found, problems = _grants_or_problem(resource_type, props)
    for grant in found:
        role = known_str(grant.role)
        if role in roles:
            problems.append(f"{role} granted at {_level(resource_type)} level {fix}")
    return problems


def no_hierarchy_invoker(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    return _hierarchy_grants(
        resource_type, props, INVOKER_ROLES,
        "lets the principal invoke every service: grant it on the one Cloud Run service "
        "instead (gcp.cloudrunv2.ServiceIamMember)",
    )


def no_hierarchy_impersonation(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    return _hierarchy_grants(
        resource_type, props, IMPERSONATION_ROLES,
        "lets the principal act as every service account: grant it on the one service "
        "account instead (gcp.serviceaccount.IAMMember)",
    )


def datastore_user_single_database(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    found, problems = _grants_or_problem(resource_type, props)
    for grant in found:
        if known_str(grant.role) != DATASTORE_USER:
            continue
        condition = grant.condition
        if is_unknown(condition):
            continue
        mapping = as_mapping(condition)
        expression = get(mapping, "expression") if mapping is not None else MISSING
        if is_unknown(expression):
            continue
        text = known_str(expression)
        hint = (
            'add condition {title, expression: resource.name == "projects/P/databases/D"} '
            "naming the dedup database"
        )
        if text is None:
            problems.append(f"{DATASTORE_USER} is granted without a condition: {hint}")
            continue
        equal = set(_DATABASE_EQUALS.findall(text))
        named = set(_DATABASE_NAMED.findall(text))
        if len(equal) != 1 or len(named) != 1:
            problems.append(
                f"{DATASTORE_USER} condition {text!r} does not name exactly one database: {hint}"
            )
    return problems
