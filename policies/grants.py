"""What a resource grants: IAM members, bindings and policies, and ACL-style grants, read
into (role, members, condition) triples, and what a role allows.

IAM resources come in three shapes (`*IamMember`/`*IAMMember` with `role` + `member`,
`*IamBinding` with `role` + `members`, `*IamPolicy` with a `policyData` JSON document);
ACL-style resources (Cloud Storage access controls and ACLs, BigQuery dataset access)
grant too. `grants` reads them all, leaving unknowns in place. A policy document is read
by one parser, `policy_document`, the way the provider reads it (Go's JSON decoder: keys
match case-insensitively), and whatever it does not understand raises `PolicyDataError`:
the pack fails closed on it.

Grants are judged by what their role allows (`role_permissions`: policies.permissions for
predefined roles, the stack's declared custom roles for custom ones), not by its name.
A shared helper: it imports no policy module.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from policies.gcp import (
    HIERARCHY_IAM_MODULES,
    ORGANIZATION_CUSTOM_ROLE,
    PROJECT_CUSTOM_ROLE,
    iam_kind,
    service_account_email,
    type_module,
)
from policies.model import Resource
from policies.permissions import (
    DATASTORE_WRITE,
    custom_permissions,
    is_custom_role,
    predefined_permissions,
)
from policies.values import (
    MISSING,
    UNKNOWN,
    as_list,
    as_mapping,
    get,
    is_unknown,
    known_str,
)

PUBLIC_MEMBERS: Final = frozenset({"allusers", "allauthenticatedusers"})
PRIMITIVE_ROLES: Final = frozenset({"roles/owner", "roles/editor", "roles/viewer"})
DATASTORE_USER: Final = "roles/datastore.user"
DATASTORE_VIEWER: Final = "roles/datastore.viewer"
RUN_INVOKER: Final = "roles/run.invoker"
SECRET_ACCESSOR: Final = "roles/secretmanager.secretAccessor"

# Cloud Storage and BigQuery grant through access controls as well as IAM.
ACCESS_CONTROL_TYPES: Final = frozenset(
    {
        "gcp:storage/bucketAccessControl:BucketAccessControl",
        "gcp:storage/defaultObjectAccessControl:DefaultObjectAccessControl",
        "gcp:storage/objectAccessControl:ObjectAccessControl",
    }
)
ACL_TYPES: Final = frozenset(
    {
        "gcp:storage/bucketACL:BucketACL",
        "gcp:storage/defaultObjectACL:DefaultObjectACL",
        "gcp:storage/objectACL:ObjectACL",
    }
)
DATASET_ACCESS: Final = "gcp:bigquery/datasetAccess:DatasetAccess"
DATASET: Final = "gcp:bigquery/dataset:Dataset"
# Canned ACLs that make objects or a bucket readable by anyone (or any Google account).
_PUBLIC_CANNED: Final = frozenset({"publicread", "publicreadwrite", "authenticatedread"})

# The IAM policy document's keys (google.iam.v1.Policy / Binding / Expr), lower case.
_POLICY_KEYS: Final = frozenset({"bindings", "etag", "version", "auditconfigs"})
_BINDING_KEYS: Final = frozenset({"role", "members", "condition"})
_CONDITION_KEYS: Final = frozenset({"expression", "title", "description", "location"})

# The condition the kit puts on datastore roles (infra/cloud_function.py), and the only
# other clauses a conjunction with it may hold.
_DATABASE_CLAUSE: Final = re.compile(
    r"""resource\.name\s*==\s*(["'])(projects/[^/"']+/databases/[^/"']+)\1"""
)
_NARROWING_CLAUSE: Final = re.compile(
    r"""resource\.(type|service)\s*==\s*(["'])[A-Za-z0-9._/-]+\2"""
)


@dataclass(frozen=True)
class Grant:
    role: Any  # str, UNKNOWN or MISSING
    members: list[Any] | None  # None: the member list is unknown
    condition: Any  # mapping, UNKNOWN or MISSING


class PolicyDataError(ValueError):
    """An IAM policy document (or grant) the pack cannot read exactly as the provider does."""


# --- reading grants ------------------------------------------------------------------------


def _reject_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: set[str] = set()
    for key, _ in pairs:
        if key.lower() in seen:
            raise PolicyDataError(f"policyData repeats the key {key!r} (keys match in any case)")
        seen.add(key.lower())
    return dict(pairs)


def _folded(document: Mapping[str, Any], allowed: frozenset[str], where: str) -> dict[str, Any]:
    """The object with lower-case keys; an unknown key raises (Go's decoder would drop it,
    or a later API version read it: either way the pack cannot judge it)."""
    folded: dict[str, Any] = {}
    for key, value in document.items():
        if key.lower() not in allowed:
            raise PolicyDataError(
                f"policyData {where} has the key {key!r}, which the pack does not understand "
                f"(known: {', '.join(sorted(allowed))})"
            )
        folded[key.lower()] = value
    return folded


def _binding(raw: object, index: int) -> Grant:
    where = f"binding {index}"
    if not isinstance(raw, Mapping):
        raise PolicyDataError(f"policyData {where} is not an object")
    binding = _folded(raw, _BINDING_KEYS, where)
    role = binding.get("role")
    if not isinstance(role, str) or not role:
        raise PolicyDataError(f"policyData {where} has no role string")
    members = binding.get("members")
    if members is None:
        members = []
    if not isinstance(members, list) or not all(isinstance(m, str) for m in members):
        raise PolicyDataError(f"policyData {where} members is not a list of strings")
    condition = binding.get("condition")
    if condition is None:
        return Grant(role, list(members), MISSING)
    if not isinstance(condition, Mapping):
        raise PolicyDataError(f"policyData {where} condition is not an object")
    return Grant(role, list(members), _folded(condition, _CONDITION_KEYS, f"{where} condition"))


def policy_document(data: object) -> list[Grant]:
    """The grants of a known `policyData` (a JSON string, or already an object)."""
    try:
        document = (
            json.loads(data, object_pairs_hook=_reject_duplicates)
            if isinstance(data, str)
            else data
        )
    except json.JSONDecodeError as exc:
        raise PolicyDataError(f"policyData is not valid JSON: {exc}") from exc
    if not isinstance(document, Mapping):
        raise PolicyDataError("policyData is not a JSON object")
    bindings = _folded(document, _POLICY_KEYS, "top level").get("bindings")
    if bindings is None:
        return []
    if not isinstance(bindings, list):
        raise PolicyDataError("policyData bindings is not a list")
    return [_binding(b, i) for i, b in enumerate(bindings)]


def _acl_member(entity: object) -> Any:
    """A storage ACL entity (`allUsers`, `user-a@b`, `group-g@b`...) as an IAM member."""
    name = known_str(entity)
    if name is None:
        return entity
    for prefix, member in (("user-", "user:"), ("group-", "group:"), ("domain-", "domain:")):
        if name.startswith(prefix):
            email = name.removeprefix(prefix)
            kind = "serviceAccount:" if email.endswith(".gserviceaccount.com") else member
            return kind + email
    return name


def _dataset_access_grant(entry: object) -> Grant:
    """One BigQuery dataset access entry (DatasetAccess, or an item of Dataset.accesses)."""
    members: list[Any] = []
    for key in ("userByEmail", "groupByEmail", "iamMember", "specialGroup", "domain"):
        value = get(entry, key)
        if value is MISSING:
            continue
        text = known_str(value)
        if text is not None and key == "userByEmail":
            kind = "serviceAccount:" if text.endswith(".gserviceaccount.com") else "user:"
            value = kind + text
        elif text is not None and key == "groupByEmail":
            value = "group:" + text
        members.append(value)
    return Grant(get(entry, "role"), members, MISSING)


def grants(resource_type: str, props: Mapping[str, Any]) -> list[Grant]:
    """The grants an IAM or ACL-style resource makes; [] for other resources or an unknown
    policy document. Raises PolicyDataError on a document or shape it cannot read."""
    kind = iam_kind(resource_type)
    if kind == "member":
        return [Grant(get(props, "role"), [get(props, "member")], get(props, "condition"))]
    if kind == "binding":
        return [Grant(get(props, "role"), as_list(get(props, "members")), get(props, "condition"))]
    if kind == "policy":
        data = get(props, "policyData")
        if is_unknown(data):
            return []
        if data is MISSING:
            raise PolicyDataError("policyData is not set")
        return policy_document(data)
    if resource_type in ACCESS_CONTROL_TYPES:
        return [Grant(get(props, "role"), [_acl_member(get(props, "entity"))], MISSING)]
    if resource_type in ACL_TYPES:
        found = []
        for entry in as_list(get(props, "roleEntities")) or []:
            text = known_str(entry)
            role, _, entity = text.partition(":") if text else ("", "", "")
            found.append(Grant(role or entry, [_acl_member(entity) if text else entry], MISSING))
        canned = known_str(get(props, "predefinedAcl"))
        if canned is not None and canned.lower() in _PUBLIC_CANNED:
            found.append(Grant(f"predefinedAcl {canned}", ["allUsers"], MISSING))
        return found
    if resource_type == DATASET_ACCESS:
        return [_dataset_access_grant(props)]
    if resource_type == DATASET:
        return [_dataset_access_grant(a) for a in as_list(get(props, "accesses")) or []]
    return []


def grants_or_problem(
    resource_type: str, props: Mapping[str, Any], *, report_bad_document: bool = False
) -> tuple[list[Grant], list[str]]:
    """The grants, and (for one policy only, so it is reported once) an unreadable one."""
    try:
        return grants(resource_type, props), []
    except PolicyDataError as exc:
        return [], [f"{exc}: fix the policy document"] if report_bad_document else []


def is_hierarchy_level(resource_type: str) -> bool:
    return (
        iam_kind(resource_type) is not None and type_module(resource_type) in HIERARCHY_IAM_MODULES
    )


def level_name(resource_type: str) -> str:
    module = type_module(resource_type)
    return {"projects": "project", "folder": "folder", "organizations": "organization"}.get(
        module, module
    )


# --- conditions -----------------------------------------------------------------------------


def _condition_names_one_database(expression: str) -> str | None:
    """The `projects/P/databases/D` of `resource.name == "projects/P/databases/D"`, alone
    or &&-joined with resource.type / resource.service equalities (nothing that could widen
    it); None for any other expression."""
    clauses = [c.strip() for c in expression.strip().split("&&")]
    databases = []
    for clause in clauses:
        match = _DATABASE_CLAUSE.fullmatch(clause)
        if match:
            databases.append(match.group(2))
        elif not _NARROWING_CLAUSE.fullmatch(clause):
            return None
    return databases[0] if len(databases) == 1 else None


def _condition_expression(condition: Any) -> Any:
    """A grant condition's expression: a string, UNKNOWN, or MISSING (no condition)."""
    if is_unknown(condition):
        return UNKNOWN
    mapping = as_mapping(condition)
    return get(mapping, "expression") if mapping is not None else MISSING


def writes_datastore(role: str) -> bool:
    """A predefined role that writes Firestore/Datastore entities (roles/datastore.user and
    broader)."""
    carried = predefined_permissions(role)
    return bool(carried and carried & DATASTORE_WRITE)


def condition_database(condition: Any) -> Any:
    """The one database (`projects/P/databases/D`) a grant's condition limits it to;
    UNKNOWN while the condition is not known; None without a condition, or for one that
    is not exactly one database (it may reach any database of the project)."""
    expression = _condition_expression(condition)
    if is_unknown(expression):
        return UNKNOWN
    text = known_str(expression)
    return _condition_names_one_database(text) if text is not None else None


def single_database_problem(role: str, condition: Any, database: str) -> str | None:
    """Why the grant of `role` with `condition` is not limited to exactly one database
    (`database` says which one it should name); None if it is, or is not known yet."""
    expression = _condition_expression(condition)
    if is_unknown(expression):
        return None
    text = known_str(expression)
    hint = (
        'add condition {title, expression: resource.name == "projects/P/databases/D"} '
        f"naming {database}"
    )
    if text is None:
        return f"{role} is granted without a condition: {hint}"
    if _condition_names_one_database(text) is None:
        return (
            f"{role} condition {text!r} is not exactly one database (no ||, no other "
            f"clauses): {hint}"
        )
    return None


# --- what a role allows (custom roles are declared by other resources of the stack) ---------


@dataclass(frozen=True)
class CustomRoles:
    permissions: Mapping[str, Any]
    """Custom role name (projects/P/roles/R, organizations/O/roles/R) -> its permissions
    (a list, or UNKNOWN)."""
    unnamed: bool
    """Some custom role's name is not known yet: a role not found may be that one."""


def custom_roles(resources: Sequence[Resource]) -> CustomRoles:
    roles: dict[str, Any] = {}
    unnamed = False
    for r in resources:
        if r.type not in (PROJECT_CUSTOM_ROLE, ORGANIZATION_CUSTOM_ROLE):
            continue
        permissions = get(r.props, "permissions")
        names = {known_str(get(r.props, "name")), known_str(get(r.props, "id"))}
        role_id = known_str(get(r.props, "roleId"))
        parent = known_str(get(r.props, "project" if r.type == PROJECT_CUSTOM_ROLE else "orgId"))
        if role_id and parent:
            prefix = "projects" if r.type == PROJECT_CUSTOM_ROLE else "organizations"
            names.add(f"{prefix}/{parent}/roles/{role_id}")
        known = {name for name in names if name}
        unnamed = unnamed or not known
        for name in known:
            roles[name] = permissions
    return CustomRoles(roles, unnamed)


def role_permissions(role: str, declared: CustomRoles) -> frozenset[str] | None:
    """What `role` allows (sensitive permissions only for predefined roles, all for custom
    ones); None if not known (an undeclared custom role, unknown permissions)."""
    if is_custom_role(role):
        if role not in declared.permissions:
            return None
        return custom_permissions(declared.permissions[role])
    return predefined_permissions(role)


def role_not_known_yet(role: str, declared: CustomRoles) -> bool:
    """What `role` allows is not known *yet*: a custom role whose permissions are not known
    at this preview, or not declared while some custom role's name is not known (it may be
    that one). Judged once known; any other role missing from the pack's table is unknown
    for good."""
    if not is_custom_role(role):
        return False
    if role not in declared.permissions:
        return declared.unnamed
    listed = declared.permissions[role]
    return is_unknown(listed) or any(is_unknown(p) for p in as_list(listed) or [])


def holds(members: list[Any] | None, email: str) -> bool:
    """`serviceAccount:<email>` is among the (known) members."""
    for member in members or []:
        text = known_str(member)
        if (
            text
            and text.startswith("serviceAccount:")
            and service_account_email(text) == email
        ):
            return True
    return False
