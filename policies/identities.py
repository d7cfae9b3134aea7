"""Stack policy: the kit's caller identities are used by the kit alone, whatever the type
of the resource that names them (dedup-kit-identities-kit-only).

The kit's functions accept an OIDC token of two kinds of account: the jobs' invoker (the
accounts the stack's Scheduler jobs that target a function of the kit send tokens of, and
the ones a function of the kit names in DEDUP_ALLOWED_CALLERS) and the run watchdog's
(the account it runs as, whose Cloud Tasks carry its token). Any other Google service that
runs as, pushes with or mints a token of either account (a Pub/Sub push subscription, a
Cloud Run service, a workflow, an Eventarc trigger, a type the pack has never seen) hands
whoever controls that resource a token the functions accept: a way to run any job at any
time.

So the account is judged, not the resource type: every string (and mapping key) of every
resource's properties, in one pass over the stack, is compared (case-insensitively) with
the accounts' e-mails in each form a property names an account by (`<e-mail>`,
`serviceAccount:<e-mail>`, `projects/<p>/serviceAccounts/<e-mail>`), and only the places
the kit itself puts them are allowed (`KIT_USES`, as `scheduler-dedup policy-check` finds
them in the example stacks), plus grants whose member is the account and grants on the
account (the grant policies judge those). Any other place is a mandatory violation. A
value not known yet is not judged (it is judged once known).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from policies.facts import StackFacts, stack_facts
from policies.gcp import (
    ALLOWED_CALLERS_ENV,
    FUNCTION_V2,
    SCHEDULER_JOB,
    SERVICE_ACCOUNT,
    TASKS_QUEUE,
    iam_kind,
    service_account_email,
)
from policies.kit_resources import (
    TASK_ACCOUNT_ENV,
    account_email,
    environment,
    label,
    runtime_email,
)
from policies.model import Finding, Resource
from policies.reach import SERVICE_ACCOUNT_IAM_MODULE
from policies.values import as_mapping, known_str

INVOKER: Final = "invoker"
WATCHDOG: Final = "watchdog"

IAM_WAIT_TYPE: Final = "time:index/sleep:Sleep"
"""The kit's IAM-propagation wait (infra/iam_wait.py SLEEP_TYPE): its `triggers` hold the
accounts' e-mails so that it waits again when they change; it runs as nobody."""
KIT_COMPONENT_TYPES: Final = "scheduler-dedup:index:"
"""A resource declared inside one of the kit's components carries this in its URN."""

_ENV: Final = ("serviceConfig", "environmentVariables")
_MEMBER_KEYS: Final = frozenset({"member", "members", "userByEmail", "iamMember"})
"""The properties that name a grant's member (IAM members and bindings, BigQuery access)."""
_SA_PATH: Final = "/serviceaccounts/"

Path = tuple[str, ...]
"""A property's path, its list indices left out."""


@dataclass(frozen=True)
class KitUse:
    """A place the kit itself names one of its caller identities."""

    resource_type: str
    path: Path
    roles: frozenset[str]
    """The accounts it may name there: INVOKER, WATCHDOG or both."""
    where: str
    """Which resources of the type ("any", "kit function", "watchdog function")."""


KIT_USES: Final[tuple[KitUse, ...]] = (
    # The jobs' OIDC tokens (a job's own target is judged by the scheduler-job-* policies).
    KitUse(SCHEDULER_JOB, ("httpTarget", "oidcToken", "serviceAccountEmail"),
           frozenset({INVOKER}), "any"),
    # Who the functions of the kit accept: a setting, not an identity.
    KitUse(FUNCTION_V2, (*_ENV, ALLOWED_CALLERS_ENV), frozenset({INVOKER, WATCHDOG}),
           "kit function"),
    # The watchdog runs as its own account and its tasks carry that account's token.
    KitUse(FUNCTION_V2, ("serviceConfig", "serviceAccountEmail"), frozenset({WATCHDOG}),
           "watchdog function"),
    KitUse(FUNCTION_V2, (*_ENV, TASK_ACCOUNT_ENV), frozenset({WATCHDOG}),
           "watchdog function"),
    # The deliveries queue's own OIDC override (where it may point: the queue policies).
    KitUse(TASKS_QUEUE, ("httpTarget", "oidcToken", "serviceAccountEmail"),
           frozenset({WATCHDOG}), "any"),
)


@dataclass(frozen=True)
class CallerIdentities:
    """The accounts whose tokens the kit's functions accept, by e-mail: INVOKER or WATCHDOG
    (an account that is both is judged as both: each use must suit every role it has)."""

    roles: Mapping[str, frozenset[str]]

    def match(self, value: str) -> str | None:
        """The e-mail `value` names in one of an account's forms; None if none of these."""
        text = value.strip().lower()
        if "@" not in text:
            return None
        email = text.removeprefix("serviceaccount:")
        if _SA_PATH in email:
            email = email.rsplit(_SA_PATH, 1)[1]
        return email if email in self.roles else None


def caller_identities(facts: StackFacts) -> CallerIdentities:
    """The watchdogs' accounts (the one each runs as, the one its tasks carry: its
    DEDUP_WATCH_TASK_ACCOUNT) and the invoker accounts (tokens a Scheduler job that targets
    a function of the kit or a declared team service sends; the callers a function of the
    kit accepts, but for the watchdogs' own)."""
    watchdogs: set[str] = set()
    for watchdog in facts.watchdog_functions:
        env = as_mapping(environment(watchdog)) or {}
        task_account = known_str(env.get(TASK_ACCOUNT_ENV))
        for account in (runtime_email(watchdog),
                        service_account_email(task_account) if task_account else None):
            if account:
                watchdogs.add(account)
    invokers: set[str] = set(facts.invoker_emails)  # jobs aimed at the kit or a team service
    for function in facts.kit_functions:
        env = as_mapping(environment(function)) or {}
        callers = known_str(env.get(ALLOWED_CALLERS_ENV)) or ""
        accepted = {service_account_email(c) for c in callers.split(",") if c.strip()}
        invokers.update(accepted - watchdogs)
    roles = {
        email: frozenset({WATCHDOG} if email in watchdogs else set())
        | frozenset({INVOKER} if email in invokers else set())
        for email in watchdogs | invokers
    }
    return CallerIdentities(roles)


def identity_mentions(
    props: Mapping[str, Any], identities: CallerIdentities
) -> Iterator[tuple[Path, str]]:
    """(path, e-mail) for each string or mapping key of `props` naming a caller identity."""
    stack: list[tuple[Path, Any]] = [((), props)]
    while stack:
        path, value = stack.pop()
        if isinstance(value, str):
            email = identities.match(value)
            if email is not None:
                yield path, email
        elif isinstance(value, Mapping):
            for key, item in value.items():
                key_text = str(key)
                email = identities.match(key_text)
                if email is not None:
                    yield (*path, key_text), email
                stack.append(((*path, key_text), item))
        elif isinstance(value, list | tuple):
            stack.extend((path, item) for item in value)


def kit_use(facts: StackFacts, resource: Resource, path: Path, roles: frozenset[str]) -> bool:
    """`resource` names an account of `roles` at `path` where the kit itself does."""
    for use in KIT_USES:
        if use.resource_type != resource.type or use.path != path or not roles <= use.roles:
            continue
        if use.where == "any":
            return True
        if use.where == "kit function" and facts.is_kit_function(resource):
            return True
        if use.where == "watchdog function" and any(
            w is resource for w in facts.watchdog_functions
        ):
            return True
    return False


def _not_a_use(facts: StackFacts, resource: Resource, path: Path, email: str) -> bool:
    """Naming the account here uses it as nobody's identity: the account's own resource, a
    grant to it or on it (judged by the grant policies), the kit's IAM wait."""
    if resource.type == SERVICE_ACCOUNT:
        return account_email(resource) == email
    if path and path[-1] in _MEMBER_KEYS and facts.grants_of(resource):
        return True
    if path == ("serviceAccountId",) and iam_kind(resource.type) and (
        resource.type.startswith(SERVICE_ACCOUNT_IAM_MODULE)  # not a key: that mints it
    ):
        return True
    return (
        resource.type == IAM_WAIT_TYPE and path[:1] == ("triggers",)
        and KIT_COMPONENT_TYPES in resource.urn
    )


def kit_identities_kit_only(resources: Sequence[Resource]) -> list[Finding]:
    facts = stack_facts(resources)
    identities = caller_identities(facts)
    if not identities.roles:
        return []
    findings: list[Finding] = []
    for resource in facts.resources:
        for path, email in identity_mentions(resource.props, identities):
            roles = identities.roles[email]
            if kit_use(facts, resource, path, roles) or _not_a_use(facts, resource, path, email):
                continue
            what = " and ".join(
                "the jobs' invoker account" if role == INVOKER else "the run watchdog's account"
                for role in sorted(roles)
            )
            findings.append(Finding(
                f"{resource.type} {label(resource)} names {email}, {what}, at "
                f"{'.'.join(path) or '(its value)'}: the kit's functions accept this "
                "account's OIDC tokens, so whatever runs as, pushes with or mints tokens of it "
                "here can run any job at any time: use an account of its own (the invoker is "
                "only the kit's Scheduler jobs' OIDC identity, the watchdog's only its "
                "function's and its tasks'); remove it from this resource",
                resource.urn,
            ))
    return findings
