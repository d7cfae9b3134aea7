"""Stack policies on who can call the kit's functions: only the jobs' invoker accounts may
invoke them, and nobody may mint tokens for the accounts the stack's functions run as or its
Scheduler jobs send OIDC tokens of.

An OIDC token of a job's invoker account is what Cloud Run lets through and what the
function's DEDUP_ALLOWED_CALLERS accepts; a token of a function's runtime account carries
that function's roles. Whoever holds getOpenIdToken, getAccessToken, signJwt, signBlob,
implicitDelegation, keys.create or setIamPolicy on such an account can therefore call the
function as its jobs do, or act with its roles. `actAs` alone is left out: whoever deploys
the functions and jobs needs it on these accounts.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from policies.gcp import ALLOWED_CALLERS_ENV, service_account_email
from policies.iam import PUBLIC_MEMBERS, custom_roles, grants_or_problem, role_permissions
from policies.model import Finding, Resource
from policies.permissions import IMPERSONATE, INVOKE, SET_IAM
from policies.proxy import _runtime_email
from policies.stack import _scheduler_oidc_emails, dedup_functions
from policies.values import get, known_str

MINT_TOKENS: Final = IMPERSONATE - {"iam.serviceAccounts.actAs"}
SERVICE_ACCOUNT_IAM_MODULE: Final = "gcp:serviceaccount/"
# IAM resources of one Cloud Run service or function, and the property naming it.
SERVICE_IAM_NAME: Final = {
    "gcp:cloudrunv2/serviceIam": "name",
    "gcp:cloudfunctionsv2/functionIam": "cloudFunction",
    "gcp:cloudrun/iam": "service",
}


def _kit_accounts(resources: Sequence[Resource]) -> set[str]:
    """Known e-mails of the accounts functions/services/jobs run as and jobs send tokens of."""
    emails = {email for r in resources if (email := _runtime_email(r))}
    return emails | _scheduler_oidc_emails(resources)[0]


def accounts_not_impersonable(resources: Sequence[Resource]) -> list[Finding]:
    accounts = _kit_accounts(resources)
    declared = custom_roles(resources)
    findings: list[Finding] = []
    for resource in resources:
        if not resource.type.startswith(SERVICE_ACCOUNT_IAM_MODULE):
            continue
        target = known_str(get(resource.props, "serviceAccountId"))
        if target is None or service_account_email(target) not in accounts:
            continue
        found, _ = grants_or_problem(resource.type, resource.props)
        for grant in found:
            role = known_str(grant.role)
            allowed = role_permissions(role, declared) if role else None
            mints = sorted((allowed or frozenset()) & MINT_TOKENS)
            if mints:
                findings.append(Finding(
                    f"{role} on {service_account_email(target)} allows {', '.join(mints)}: "
                    "its holders can call the kit's functions as its Scheduler jobs do, or act "
                    "with a function's roles: remove the grant (Cloud Scheduler mints the "
                    "jobs' tokens itself; deployers need only roles/iam.serviceAccountUser)",
                    resource.urn,
                ))
    return findings


def _service_of(resource: Resource) -> str | None:
    """The service / function a Cloud Run or function IAM resource grants on (its ID)."""
    for prefix, key in SERVICE_IAM_NAME.items():
        if resource.type.startswith(prefix):
            name = known_str(get(resource.props, key))
            return name.rsplit("/", 1)[-1] if name else None
    return None


def _served_callers(function: Resource) -> set[str]:
    """The e-mails the function's DEDUP_ALLOWED_CALLERS names (dedup-allowed-callers
    judges that setting itself)."""
    raw = known_str(
        get(function.props, "serviceConfig", "environmentVariables", ALLOWED_CALLERS_ENV)
    )
    return {service_account_email(e) for e in (raw or "").split(",") if e.strip()}


def function_invokers(resources: Sequence[Resource]) -> list[Finding]:
    """On the kit's functions' services, roles that allow invoking them (or granting that)
    go only to accounts the stack's Scheduler jobs send OIDC tokens of (or that the
    function's DEDUP_ALLOWED_CALLERS names: dedup-allowed-callers judges those)."""
    functions = {
        name: f for f in dedup_functions(resources) if (name := known_str(get(f.props, "name")))
    }
    callers, some_unknown = _scheduler_oidc_emails(resources)
    declared = custom_roles(resources)
    findings: list[Finding] = []
    for resource in resources:
        service = _service_of(resource)
        if service not in functions:
            continue
        found, _ = grants_or_problem(resource.type, resource.props)
        for grant in found:
            role = known_str(grant.role)
            allowed = (role_permissions(role, declared) if role else None) or frozenset()
            if not allowed & (INVOKE | SET_IAM):
                continue
            for member in grant.members or []:
                text = known_str(member)
                if text is None or text.lower() in PUBLIC_MEMBERS:
                    continue  # not known yet, or iam-no-public-members' to report
                served = callers | _served_callers(functions[service])
                if text.startswith("serviceAccount:") and (
                    some_unknown or not callers or service_account_email(text) in served
                ):
                    # A job's invoker account, possibly the one not known yet; with no OIDC
                    # account at all, scheduler-job-oidc-auth reports the jobs instead.
                    continue
                findings.append(Finding(
                    f"{role} on the function {service!r} lets {text} call it (or grant that), "
                    "and no Scheduler job of the stack sends its tokens: remove the grant; "
                    "grant roles/run.invoker on the service only to the jobs' invoker account",
                    resource.urn,
                ))
    return findings
