"""Stack policies on the kit's accounts and who can call the kit's functions: the proxy and
the watchdog each run as an account of their own, only the jobs' invoker accounts may
invoke the functions, and nobody may mint tokens for the accounts the stack's functions run
as or its Scheduler jobs send OIDC tokens of.

An OIDC token of a job's invoker account is what Cloud Run lets through and what the
function's DEDUP_ALLOWED_CALLERS accepts; a token of a function's runtime account carries
that function's roles. Whoever holds getOpenIdToken, getAccessToken, signJwt, signBlob,
implicitDelegation, keys.create or setIamPolicy on such an account can therefore call the
function as its jobs do, or act with its roles. `actAs` is judged apart
(dedup-accounts-act-as): whoever deploys the functions and jobs needs it on these accounts,
so the deployer's service accounts may hold it when that policy's `deployers` setting
lists them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from policies.deployer_trust import impersonable_deployers
from policies.deployers import exempt, member_email
from policies.facts import StackFacts, stack_facts
from policies.gcp import ALLOWED_CALLERS_ENV, SCHEDULER_JOB, service_account_email
from policies.grants import PRIMITIVE_ROLES, PUBLIC_MEMBERS, role_permissions
from policies.kit_resources import (
    delivers_runs,
    label,
    oidc_email,
    runtime_email,
    task_account,
)
from policies.model import Finding, Resource
from policies.permissions import ACT_AS, IMPERSONATE, INVOKE, SET_IAM
from policies.reach import SERVICE_ACCOUNT_IAM_MODULE, granted_on, service_of
from policies.values import get, known_str

MINT_TOKENS: Final = IMPERSONATE - {"iam.serviceAccounts.actAs"}


# --- dedup-proxy-own-service-account, dedup-watchdog-own-service-account -----------------


def _functions_own_their_accounts(
    facts: StackFacts, functions: Sequence[Resource], *, what: str, why: str,
    invoker_hint: str,
) -> list[Finding]:
    """Each of `functions` (the proxy, the watchdog) runs as an account no other function
    or service runs as and no Scheduler job sends OIDC tokens of. `what` names the function
    in messages; `why` says why it needs its own account; `invoker_hint` what jobs use."""
    findings: list[Finding] = []
    for function in functions:
        email = runtime_email(function) or facts.component_account_email(function)
        if email is None:
            continue  # not known yet, or unset (function-dedicated-runtime-service-account)
        sharing = [*facts.running_as(email), *facts.jobs_sending_tokens_of(email)]
        for other in facts.in_stack_order(sharing):
            if other is function or other.urn == function.urn:
                continue
            if runtime_email(other) == email:
                findings.append(
                    Finding(
                        f"the {what} {label(function)} runs as {email}, and so does "
                        f"{label(other)}: set the {what}'s serviceConfig.serviceAccountEmail "
                        f"to an account of its own, {why}",
                        function.urn,
                    )
                )
            if other.type == SCHEDULER_JOB:
                oidc = known_str(oidc_email(other))
                if oidc and service_account_email(oidc) == email:
                    findings.append(
                        Finding(
                            f"Scheduler job {label(other)} sends OIDC tokens of the {what}'s "
                            f"own account {email}: {invoker_hint}",
                            other.urn,
                        )
                    )
    return findings


def proxy_own_service_account(resources: Sequence[Resource]) -> list[Finding]:
    facts = stack_facts(resources)
    return _functions_own_their_accounts(
        facts, facts.proxy_functions, what="proxy",
        why="so that only the proxy holds the roles that start its targets",
        invoker_hint="use a dedicated invoker account that holds only roles/run.invoker on "
        "the proxy's service",
    )


def watchdog_own_service_account(resources: Sequence[Resource]) -> list[Finding]:
    facts = stack_facts(resources)
    return _functions_own_their_accounts(
        facts, facts.watchdog_functions, what="watchdog",
        why="which holds only roles/datastore.user on the dedup database (and "
        "roles/datastore.viewer on the proxy's)",
        invoker_hint="use the stack's invoker account, which holds only roles/run.invoker on "
        "the kit's services",
    )


# --- who may mint tokens of, act as or call the kit's accounts ----------------------------


def accounts_not_impersonable(resources: Sequence[Resource]) -> list[Finding]:
    """Nobody may mint tokens or keys of any account of the kit: the ones its workloads
    run as and its jobs send tokens of, and every other one it creates or uses (the
    build account, the watchdog's task account, any account the stack declares:
    facts.kit_identities). A build account's token runs the functions' builds, which
    put the code the functions run."""
    facts = stack_facts(resources)
    accounts = facts.kit_identities
    declared = facts.custom_roles
    findings: list[Finding] = []
    for resource, found in facts.granting:
        if not resource.type.startswith(SERVICE_ACCOUNT_IAM_MODULE):
            continue
        target = known_str(get(resource.props, "serviceAccountId"))
        if target is None or service_account_email(target) not in accounts:
            continue
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


def act_as_only_own_accounts(
    resources: Sequence[Resource], deployers: frozenset[str] = frozenset()
) -> list[Finding]:
    """actAs (roles/iam.serviceAccountUser, or any role carrying it) on an account of the
    kit (the jobs' invoker, a function's runtime account) only for the kit's accounts that
    need it: a watchdog that delivers runs, on its own account (its Cloud Tasks carry its
    OIDC token), and the deployer's service accounts (the policy's `deployers` setting:
    e-mails) that are no account of the kit. Whoever else holds it attaches the account to
    a job, task or service of their own and gets its tokens."""
    facts = stack_facts(resources)
    accounts = facts.kit_identities
    allowed = exempt(deployers, accounts)
    # A watchdog that delivers runs acts as its own account (its runtime's, or the task
    # account its tasks send tokens of) to mint its tasks' OIDC tokens.
    own_use = facts.delivering_accounts | {
        email for w in facts.watchdog_functions
        if delivers_runs(w) and (email := known_str(task_account(w)))
    }
    declared = facts.custom_roles
    findings: list[Finding] = []
    for resource, found in facts.granting:
        if not resource.type.startswith(SERVICE_ACCOUNT_IAM_MODULE):
            continue
        raw = known_str(get(resource.props, "serviceAccountId"))
        target = service_account_email(raw) if raw else None
        if target is None or target not in accounts:
            continue
        for grant in found:
            role = known_str(grant.role)
            if role is None or ACT_AS not in (role_permissions(role, declared) or frozenset()):
                continue
            for member in grant.members or []:
                text = known_str(member)
                if text is None:
                    continue  # not known yet
                email = member_email(text)
                if email == target and target in own_use:
                    continue  # the watchdog on itself, for its tasks' OIDC token
                if email in allowed:
                    continue  # the deployer attaches the account to the kit's resources
                note = (
                    f" ({email} is listed in deployers but is an account of the kit, which "
                    "may not act as another)"
                    if email in deployers
                    else ""
                )
                findings.append(Finding(
                    f"{role} on {target} lets {text} act as it (iam.serviceAccounts.actAs): "
                    "attach it to a Scheduler job, task or service of their own and receive "
                    "its tokens, which the kit's functions accept: remove the grant (only a "
                    "watchdog that delivers runs holds it, on its own account, and the "
                    "deployer's service accounts listed in this policy's `deployers` setting)"
                    f"{note}",
                    resource.urn,
                ))
    # A listed deployer's exemption is only as safe as the deployer (issue 36).
    return findings + impersonable_deployers(
        facts.granting, declared, deployers, "dedup-accounts-act-as")


def _functions_by_name(facts: StackFacts) -> dict[str, Resource]:
    """The dedup functions by their known names (a later one wins a name)."""
    return {
        name: f for f in facts.dedup_functions if (name := known_str(get(f.props, "name")))
    }


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
    facts = stack_facts(resources)
    functions = _functions_by_name(facts)
    callers, some_unknown = facts.oidc_emails, facts.oidc_unknown
    declared = facts.custom_roles
    findings: list[Finding] = []
    for resource, found in facts.granting:
        service = service_of(resource)
        if service not in functions:
            continue
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


def runtime_account_not_a_caller(resources: Sequence[Resource]) -> list[Finding]:
    """The runtime account of a dedup function that runs the team's job code is no caller
    of the kit: not a Scheduler job's OIDC identity, not in any function's
    DEDUP_ALLOWED_CALLERS, not an invoker of a function of the kit (dedup function, proxy,
    watchdog). Job code mints that account's tokens from the metadata server, and would
    forge deliveries with them."""
    facts = stack_facts(resources)
    runners = {
        email: function
        for function in facts.job_code_functions
        if (email := runtime_email(function))
    }
    if not runners:
        return []
    functions = _functions_by_name(facts)
    declared = facts.custom_roles
    fix = (
        "job code mints this account's tokens from the metadata server and would forge "
        "Scheduler deliveries with them: use the stack's invoker account"
    )
    findings: list[Finding] = [
        Finding(
            f"{ALLOWED_CALLERS_ENV} of {function.name!r} names {caller}, the runtime account "
            f"of the job-running function: {fix}; remove it",
            function.urn,
        )
        for function in facts.dedup_functions
        for caller in sorted(_served_callers(function) & set(runners))
    ]
    for resource in facts.resources:
        if resource.type == SCHEDULER_JOB:
            email = known_str(oidc_email(resource))
            if email and service_account_email(email) in runners:
                findings.append(Finding(
                    f"Scheduler job {resource.name!r} sends OIDC tokens of "
                    f"{service_account_email(email)}, the runtime account of the job-running "
                    f"function: {fix} (httpTarget.oidcToken.serviceAccountEmail)",
                    resource.urn,
                ))
        if service_of(resource) not in functions:
            continue
        for grant in facts.grants_of(resource):
            role = known_str(grant.role)
            if not ((role_permissions(role, declared) if role else None) or frozenset()) & INVOKE:
                continue
            for member in grant.members or []:
                text = known_str(member)
                if text and text.startswith("serviceAccount:") and (
                    service_account_email(text) in runners
                ):
                    findings.append(Finding(
                        f"{role} on {service_of(resource)!r} lets "
                        f"{service_account_email(text)}, the runtime account of the "
                        f"job-running function, call it: {fix}; remove the grant",
                        resource.urn,
                    ))
    return findings


# --- dedup-accounts-no-basic-roles -------------------------------------------------------


def no_basic_roles(resources: Sequence[Resource]) -> list[Finding]:
    """No account of the kit (one its workloads run as, its jobs send tokens of, it
    declares or builds with) holds a basic role (roles/owner, roles/editor, roles/viewer)
    anywhere: each carries thousands of permissions across every service of the project,
    the kit's records, secrets, queues and accounts among them. Judged apart from
    iam-no-primitive-roles, so a stack that turns that one down for people still keeps
    them from the kit's accounts."""
    facts = stack_facts(resources)
    findings: list[Finding] = []
    for email in sorted(facts.kit_identities):
        for resource, role, _ in facts.roles_held(email):
            if role in PRIMITIVE_ROLES:
                findings.append(Finding(
                    f"{email}, an account of the kit, holds the basic role {role} on "
                    f"{granted_on(resource)}: basic roles carry permissions of every "
                    "service (granted on the project: every runtime's records and secrets, "
                    "the kit's queue, functions and accounts), all of it open to job code "
                    "running as the account or whoever holds its tokens: remove the grant; "
                    "grant the predefined role it needs on the one resource",
                    resource.urn,
                ))
    return findings
