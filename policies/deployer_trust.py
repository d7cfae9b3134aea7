"""A listed deployer is protected as the kit's accounts are: the `deployers` exemption
(policies/deployers.py) hands a deployer what the pack refuses everyone else, so whoever
may impersonate a listed deployer, or act as it, holds the exemption too.

Both policies that read the setting (iam-no-role-admin-or-build-create,
dedup-accounts-act-as) report, for the deployers their own entry lists, every grant in the
stack that lets a member other than the deployer itself act as it or mint its tokens or
keys (iam.serviceAccounts.actAs, getAccessToken, getOpenIdToken, signJwt, signBlob,
implicitDelegation, setIamPolicy, serviceAccountKeys.create: roles/iam.serviceAccountUser,
serviceAccountTokenCreator, workloadIdentityUser, serviceAccountKeyAdmin, custom roles...)
or change the IAM policy of the deployer's project, folder or organization:

- on the deployer's own account (a service account IAM resource naming it), by any role
  that allows one of those, or a role whose permissions the pack does not know (fail
  closed: the grant is on the deployer itself);
- on its project (the one in its e-mail, or the provider's default when the grant names
  none), a folder or the organization, by a role known to allow one of those.

A member not known yet is reported (it may be anyone). A shared helper: it imports no
policy module.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Final

from policies.deployers import member_email
from policies.grants import CustomRoles, Grant, is_hierarchy_level, role_permissions
from policies.model import Finding, Resource
from policies.permissions import IMPERSONATE
from policies.reach import granted_on, project_wide, service_account_of
from policies.values import known_str

HIERARCHY_IAM_ADMIN: Final = frozenset({
    "resourcemanager.projects.setIamPolicy",
    "resourcemanager.folders.setIamPolicy",
    "resourcemanager.organizations.setIamPolicy",
})
"""Granting oneself any role on the deployer, on its project, folder or organization."""
_USER_MANAGED_DOMAIN: Final = ".iam.gserviceaccount.com"


def deployer_project(email: str) -> str | None:
    """The project a user-managed service account lives in (from its e-mail): a
    domain-scoped project `example.com:proj` reads `proj.example.com` there."""
    _, _, domain = email.partition("@")
    if not domain.endswith(_USER_MANAGED_DOMAIN):
        return None
    project = domain.removesuffix(_USER_MANAGED_DOMAIN)
    name, dot, scope = project.partition(".")
    return f"{scope}:{name}" if dot else project


def _reaches(resource: Resource, grant_permissions: frozenset[str] | None,
             deployer: str) -> frozenset[str] | None:
    """What the grant on `resource` lets its members do to `deployer` (impersonation
    permissions), None if it does not reach it."""
    if service_account_of(resource) == deployer:
        if grant_permissions is None:
            return frozenset({"(a role the pack does not know)"})
        found = grant_permissions & IMPERSONATE
        return found or None
    if is_hierarchy_level(resource.type) and project_wide(resource, deployer_project(deployer)):
        found = (grant_permissions or frozenset()) & (IMPERSONATE | HIERARCHY_IAM_ADMIN)
        return found or None
    return None


def impersonable_deployers(
    granting: Iterable[tuple[Resource, Sequence[Grant]]],
    declared: CustomRoles,
    deployers: frozenset[str],
    policy: str,
) -> list[Finding]:
    """A finding for each grant letting a member other than a listed deployer (e-mails,
    lower case) act as it or mint its tokens; `policy` names the setting's entry."""
    if not deployers:
        return []
    findings: list[Finding] = []
    for resource, grants in granting:
        for grant in grants:
            role = known_str(grant.role)
            if role is None:
                continue  # not known yet
            allowed = role_permissions(role, declared)
            for deployer in sorted(deployers):
                reached = _reaches(resource, allowed, deployer)
                if not reached:
                    continue
                others = [
                    known_str(m) or "(a member not known yet)"
                    for m in (grant.members if grant.members is not None else [None])
                    if member_email(known_str(m) or "") != deployer
                ]
                if not others:
                    continue  # the deployer on itself
                findings.append(Finding(
                    f"{role} on {granted_on(resource)} lets {', '.join(others)} act as or "
                    f"mint tokens of {deployer} ({', '.join(sorted(reached))}), a deployer "
                    f"listed in {policy}'s `deployers` setting: whoever impersonates it holds "
                    "its exemption (and everything it deploys): remove the grant, or remove "
                    "the account from `deployers`",
                    resource.urn,
                ))
    return findings
