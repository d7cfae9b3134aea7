"""Policies on IAM members, bindings and policies, and ACL-style grants: no public members,
no primitive roles, no invoke or impersonation roles on the project, folder or
organization, datastore roles conditioned to one database, custom roles resolved, no
role-admin or build-create grants.

What a resource grants and what a role allows are read by policies.grants; the stack's
custom roles and the kit's accounts come from policies.facts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from policies.deployer_trust import impersonable_deployers
from policies.deployers import exempt, member_email
from policies.facts import stack_facts
from policies.gcp import iam_kind
from policies.grants import (
    ACCESS_CONTROL_TYPES,
    ACL_TYPES,
    DATASET,
    DATASET_ACCESS,
    PRIMITIVE_ROLES,
    PUBLIC_MEMBERS,
    grants_or_problem,
    is_hierarchy_level,
    level_name,
    role_permissions,
    single_database_problem,
    writes_datastore,
)
from policies.model import Finding, Resource
from policies.permissions import (
    ESCALATION,
    GRANTED_ESCALATION,
    INVOKE,
    is_custom_role,
    predefined_permissions,
)
from policies.values import MISSING, get, known_str

# Type names that suggest access grants the pack may not read (see unknown_grant_types).
_GRANT_LIKE_SUFFIXES: Final = ("accesscontrol", "acl", "access", "accesses")

# --- policies --------------------------------------------------------------------------------


def no_public_members(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    found, problems = grants_or_problem(resource_type, props, report_bad_document=True)
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
    found, problems = grants_or_problem(resource_type, props)
    for grant in found:
        role = known_str(grant.role)
        if role in PRIMITIVE_ROLES:
            problems.append(
                f"primitive role {role} granted: replace it with the predefined roles the "
                "principal needs (e.g. roles/run.invoker, roles/datastore.user)"
            )
    return problems


def _hierarchy_grants(
    resource_type: str, props: Mapping[str, Any], permissions: frozenset[str], fix: str
) -> list[str]:
    """Problems for each predefined role carrying any of `permissions` granted on a
    project, folder or organization (custom roles: iam-custom-roles-resolved)."""
    if not is_hierarchy_level(resource_type):
        return []
    found, problems = grants_or_problem(resource_type, props)
    for grant in found:
        role = known_str(grant.role)
        if role in PRIMITIVE_ROLES:
            continue  # iam-no-primitive-roles blocks it already: one violation per grant
        carried = predefined_permissions(role) if role else None
        if role and carried and carried & permissions:
            allows = ", ".join(sorted(carried & permissions))
            problems.append(
                f"{role} granted at {level_name(resource_type)} level (it allows {allows}) {fix}"
            )
    return problems


INVOKER_FIX: Final = (
    "lets the principal invoke every service: grant roles/run.invoker on the one Cloud Run "
    "service instead (gcp.cloudrunv2.ServiceIamMember)"
)
IMPERSONATION_FIX: Final = (
    "lets the principal act as or mint tokens for every service account (or grant itself "
    "anything): grant roles on the one service account or resource instead "
    "(gcp.serviceaccount.IAMMember)"
)


def no_hierarchy_invoker(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    return _hierarchy_grants(resource_type, props, INVOKE, INVOKER_FIX)


def no_hierarchy_impersonation(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    return _hierarchy_grants(resource_type, props, ESCALATION, IMPERSONATION_FIX)


def known_roles_at_hierarchy_level(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    """Advisory: a predefined role the pack's permission table does not list, granted on a
    project, folder or organization, is not judged by what it allows."""
    if not is_hierarchy_level(resource_type):
        return []
    found, problems = grants_or_problem(resource_type, props)
    for grant in found:
        role = known_str(grant.role)
        if role and not is_custom_role(role) and predefined_permissions(role) is None:
            problems.append(
                f"{role} is granted at {level_name(resource_type)} level and the pack does not "
                "know what it allows (policies/permissions.py): check it grants no invoke, "
                "impersonation or IAM-admin permission, then add it to the table, or grant a "
                "role the table lists"
            )
    return problems


def unknown_grant_types(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    """A resource whose type or properties look like an access grant the pack cannot read:
    the other IAM policies cannot judge it."""
    kind = iam_kind(resource_type)
    if kind is not None:
        if kind == "policy":
            return []  # an unreadable document: iam-no-public-members reports it
        role = get(props, "role")
        members = get(props, "member" if kind == "member" else "members")
        if role is MISSING or members is MISSING:
            return [
                f"{resource_type} sets no role or member(s) the pack can read: declare the "
                "grant with role and member(s)"
            ]
        return []
    known = ACCESS_CONTROL_TYPES | ACL_TYPES | {DATASET_ACCESS, DATASET}
    if resource_type in known or not resource_type.startswith("gcp:"):
        return []
    name = resource_type.rsplit(":", 1)[-1].lower()
    if name.endswith(_GRANT_LIKE_SUFFIXES) or any(
        key in props for key in ("accesses", "roleEntities")
    ):
        return [
            f"{resource_type} looks like an access grant (ACL, access entry) that the pack "
            "cannot read: replace it with an IAM member/binding the pack judges, or add the "
            "type to policies/grants.py grants()"
        ]
    return []


def datastore_user_single_database(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    """Roles that write Firestore/Datastore entities (roles/datastore.user and broader)
    carry the one-database condition."""
    if iam_kind(resource_type) is None:
        return []
    found, problems = grants_or_problem(resource_type, props)
    for grant in found:
        role = known_str(grant.role)
        if role and writes_datastore(role):
            problem = single_database_problem(role, grant.condition, "the dedup database")
            if problem is not None:
                problems.append(problem)
    return problems


# --- stack policies (custom roles and the kit's accounts are declared by other resources) --


def custom_roles_resolved(resources: Sequence[Resource]) -> list[Finding]:
    """Custom roles granted on a project, folder or organization: declared in the stack
    (else what they allow is unknown) and holding no invoke or impersonation permission."""
    declared = stack_facts(resources).custom_roles
    findings: list[Finding] = []
    for resource, found in stack_facts(resources).granting:
        if not is_hierarchy_level(resource.type):
            continue
        level = level_name(resource.type)
        for grant in found:
            role = known_str(grant.role)
            if role is None or not is_custom_role(role):
                continue
            if role not in declared.permissions:
                if not declared.unnamed:
                    findings.append(Finding(
                        f"custom role {role} is granted at {level} level but not declared in "
                        "this stack, so what it allows cannot be checked: declare it "
                        "(gcp.projects.IAMCustomRole) in the stack, or grant a predefined role",
                        resource.urn,
                    ))
                continue
            permissions = role_permissions(role, declared)
            risky = sorted((permissions or frozenset()) & (INVOKE | ESCALATION))
            if risky:
                findings.append(Finding(
                    f"custom role {role} granted at {level} level holds {', '.join(risky)}, "
                    "which lets the principal invoke every service or act as every service "
                    "account: remove those permissions, or grant them on the one service or "
                    "service account instead",
                    resource.urn,
                ))
    return findings


def no_role_admin_or_build_create(
    resources: Sequence[Resource], deployers: frozenset[str] = frozenset()
) -> list[Finding]:
    """No grant, on any resource and at any level, of a role carrying iam.roles.create /
    iam.roles.update (its holders rewrite a custom role they hold into anything) or
    cloudbuild.builds.create (a build of their own runs as the project's build account),
    except to the deployer's service accounts (the policy's `deployers` setting: e-mails)
    that are no account of the kit. Judged by permission: predefined roles by the table,
    custom roles declared in the stack by their `permissions`."""
    facts = stack_facts(resources)
    kit = facts.kit_accounts
    allowed = exempt(deployers, kit)
    findings: list[Finding] = []
    for resource, found in facts.granting:
        for grant in found:
            role = known_str(grant.role)
            if role is None or role in PRIMITIVE_ROLES:
                continue  # iam-no-primitive-roles blocks those: one violation per grant
            allows = role_permissions(role, facts.custom_roles) or frozenset()
            risky = sorted(allows & GRANTED_ESCALATION)
            if not risky:
                continue
            names = [known_str(m) for m in grant.members or []]
            refused = [
                name or "(not known yet)"
                for name in names
                if name is None or member_email(name) not in allowed
            ]
            if names and not refused:
                continue  # the deployer's service accounts only
            listed_kit = sorted(
                e for name in names if name and (e := member_email(name)) in kit & deployers
            )
            note = (
                f" ({', '.join(listed_kit)} is listed in deployers but is an account of the "
                "kit, which may not hold it)"
                if listed_kit
                else ""
            )
            findings.append(Finding(
                f"{role} ({', '.join(risky)}) is granted to {', '.join(refused) or 'a member'} "
                f"on {resource.type.split(':')[1].split('/')[0]} {resource.name!r}: whoever "
                "holds iam.roles.create/update rewrites a custom role into any permissions, and "
                "cloudbuild.builds.create runs any build as the project's build account; "
                "remove the grant, or, for the deployer's own service account, list it in this "
                f"policy's `deployers` setting (docs/policies.md){note}",
                resource.urn,
            ))
    # A listed deployer's exemption is only as safe as the deployer (issue 36).
    return findings + impersonable_deployers(
        facts.granting, facts.custom_roles, deployers, "iam-no-role-admin-or-build-create")
