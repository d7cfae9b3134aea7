"""The `deployers` setting: the service accounts that deploy the kit, which two policies let
hold what only a deployer needs.

`iam-no-role-admin-or-build-create` (iam.roles.create/update, cloudbuild.builds.create) and
`dedup-accounts-act-as` (iam.serviceAccounts.actAs on the kit's accounts) refuse those grants
to every member unless the policy's entry of the --policy-pack-config document names the
member:

    {"dedup-accounts-act-as": {"deployers": ["serviceAccount:deploy@p.iam.gserviceaccount.com"]}}

Only those two policies read it. Only service accounts may be listed: a group, a user, a
domain, a principal or principal set (a Workload Identity pool's identities) is refused as
a setting error, and so is a default account (Compute Engine, App Engine, Cloud Build),
which other workloads of the project run as, and a Google-managed service account (a
service agent, e.g. service-<number>@gcp-sa-<service>.iam.gserviceaccount.com), which a
Google service acts as. A listed deployer must itself be protected as the kit's accounts
are: policies/deployer_trust.py.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any, Final

from policies.gcp import is_default_build_account, is_default_runtime_account
from policies.model import Setting, SettingError

NAME: Final = "deployers"
PREFIX: Final = "serviceAccount:"
# A service account's IAM member: serviceAccount:<name>@<domain>.gserviceaccount.com.
_MEMBER: Final = re.compile(
    r"serviceAccount:[A-Za-z0-9][A-Za-z0-9._-]*@[A-Za-z0-9][A-Za-z0-9.-]*\.gserviceaccount\.com"
)
PATTERN: Final = f"^{_MEMBER.pattern}$"
_KINDS: Final = {
    "group:": "a group",
    "user:": "a user",
    "domain:": "a domain",
    "principalSet:": "a principal set",
    "principalset:": "a principal set",
    "principal:": "a principal",
    "allUsers": "the public",
    "allAuthenticatedUsers": "every Google account",
    "deleted:": "a deleted member",
    "projectOwner:": "a project's owners",
    "projectEditor:": "a project's editors",
    "projectViewer:": "a project's viewers",
}
FIX: Final = (
    "set it to the deployer's own service accounts only, as IAM members "
    "(serviceAccount:<name>@<project>.iam.gserviceaccount.com)"
)


def _refuse(entry: str, why: str) -> SettingError:
    return SettingError(f"{NAME}: {entry!r} {why}: {FIX}")


def parse(value: Any) -> frozenset[str]:
    """The deployers' e-mails (lower case, as the policies compare members)."""
    if not isinstance(value, list):
        raise SettingError(f"{NAME}: expected a list of IAM members, got {value!r}: {FIX}")
    emails: set[str] = set()
    for entry in value:
        if not isinstance(entry, str):
            raise _refuse(str(entry), "is not a string")
        kind = next((k for prefix, k in _KINDS.items() if entry.startswith(prefix)), None)
        if kind is not None:
            raise _refuse(entry, f"is {kind}, not a service account (only service accounts)")
        if not _MEMBER.fullmatch(entry):
            raise _refuse(entry, "is not a service account's IAM member")
        email = entry.removeprefix(PREFIX).lower()
        agent = google_managed(email)
        if agent is not None:
            raise _refuse(
                entry,
                f"is a Google-managed service account ({agent}), which a Google service acts "
                "as for the project, not the deployer (only a user-managed deployer account, "
                "<name>@<project>.iam.gserviceaccount.com)",
            )
        if is_default_runtime_account(email) or is_default_build_account(email):
            raise _refuse(
                entry,
                "is a default service account, which other workloads of the project run as "
                "(only a dedicated deployer account)",
            )
        emails.add(email)
    return frozenset(emails)


# Google-managed service accounts (service agents), which Google's services act as
# (https://cloud.google.com/iam/docs/service-account-types and
# https://cloud.google.com/iam/docs/service-agents, which warns that "the email address
# format for service agents [is] subject to change": the rules lean to refusing): a
# user-managed account is <name>@<project-id>.iam.gserviceaccount.com (a domain-scoped
# project's ID reads <name>.<domain>); service agents are service-<number>@gcp-sa-<service>,
# service-<number>@<google project> (compute-system, container-engine-robot,
# serverless-robot-prod, gs-project-accounts...), the folder and organization agents
# (service-org-, service-folder-, service-p<number>@...),
# <number>@cloudservices.gserviceaccount.com (the Google APIs Service Agent),
# <number>@cloudbuild.gserviceaccount.com, and accounts in Google's own projects
# (<project>.google.com); the defaults (<number>-compute@developer, <project>@appspot) are
# refused below as default accounts.
_USER_MANAGED: Final = re.compile(r"^[^@]+@(?P<project>[a-z0-9.:-]+)\.iam\.gserviceaccount\.com$")
_AGENT_NAME: Final = re.compile(r"^service-(?:org-|folder-|[pfo])?\d+@")
_GOOGLE_PROJECTS: Final = ("gcp-sa-",)


def google_managed(email: str) -> str | None:
    """Why `email` (lower case) is a Google-managed service account; None if user-managed
    (or a default account: is_default_runtime_account, is_default_build_account)."""
    if is_default_runtime_account(email) or is_default_build_account(email):
        return None  # refused with its own reason
    if _AGENT_NAME.match(email):
        return "a service agent: service-<number>@..."
    user_managed = _USER_MANAGED.match(email)
    if user_managed is None:
        return f"a Google-managed domain, {email.partition('@')[2]}"
    project = user_managed.group("project")
    if project.startswith(_GOOGLE_PROJECTS):
        return "a service agent: @gcp-sa-<service>"
    if project.endswith(".google.com"):
        return "an account of a Google-owned project"
    return None


SETTING: Final = Setting(
    name=NAME,
    description=(
        "The deployer's service accounts (IAM members serviceAccount:<e-mail>), which may "
        "hold what this policy refuses to everyone else. Service accounts only."
    ),
    schema={"type": "array", "items": {"type": "string", "pattern": PATTERN}},
    parse=parse,
    default=frozenset(),
)


def exempt(deployers: Iterable[str], kit_accounts: Iterable[str]) -> frozenset[str]:
    """The deployers that may hold the grants: not an account of the kit itself (a runtime
    account runs the team's job code; the invoker's tokens are what the functions accept)."""
    return frozenset(deployers) - frozenset(kit_accounts)


def member_email(member: str) -> str | None:
    """The e-mail of a `serviceAccount:` member (lower case); None for any other member."""
    if not member.startswith(PREFIX):
        return None
    return member.removeprefix(PREFIX).strip().lower()
