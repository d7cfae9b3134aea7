"""Policies on secrets: the proxy's token secret (infra/dedup_proxy.py), which only the
proxy and the declared token secret readers (`tokenSecretReaders`, the downstream guards)
may read and which never travels as a plain environment variable, since whoever reads it
computes any future run's token; and every secret an account of the kit reads, which a
function running as it must declare.

The token secret is the secret the proxy's DEDUP_TOKEN_SECRET secret environment variable
names (serviceConfig.secretEnvironmentVariables). A reader is any member holding a role
that carries secretmanager.versions.access (roles/secretmanager.secretAccessor,
roles/secretmanager.admin, a custom role listing it) on that secret, or on its project, a
folder or the organization without a condition naming another secret. The declared
readers are the service accounts the proxy's component grants roles/secretmanager.
secretAccessor on the secret (the program declares one grant per `tokenSecretReaders`
entry there).

A runtime's secrets (infra/job_runtime.py) are the ones its function declares
(serviceConfig.secretEnvironmentVariables[].secret, secretVolumes[].secret); the program
grants its account roles/secretmanager.secretAccessor on each. An account of the kit
(a runtime's, the default function's, the invoker, the watchdog, the build account...)
that may read a secret no function running as it declares lets job code read another
runtime's secret; one that may change a secret a function of the kit declares, when it
is none of those functions' accounts, lets job code take that secret over: add a version
the other runtime reads next, disable or destroy its versions, or grant anyone access
(setIamPolicy). A role the pack does not know, granted on such a secret, is refused too
(dedup-secret-readers-declared). The proxy's token secret keeps its own policies
(dedup-token-secret-readers, dedup-runtime-no-kit-resources).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from policies.facts import StackFacts, stack_facts
from policies.gcp import (
    CLOUD_RUN_V1_SERVICE,
    CLOUD_RUN_V2_JOB,
    CLOUD_RUN_V2_SERVICE,
    FUNCTION_V1,
    FUNCTION_V2,
    SECRET_IAM_PREFIX,
    service_account_email,
)
from policies.grants import (
    PRIMITIVE_ROLES,
    SECRET_ACCESSOR,
    Grant,
    role_not_known_yet,
    role_permissions,
)
from policies.kit_resources import (
    TOKEN_SECRET_ENV,
    Secret,
    declared_secrets,
    in_proxy_component,
    label,
    runtime_email,
    runtime_name,
    same_secret,
    token_secrets,
)
from policies.model import Finding, Resource
from policies.permissions import SECRET_ACCESS, SECRET_ADMIN
from policies.reach import (
    SecretsReached,
    grant_secret,
    project_wide,
    reaches_secret,
    secrets_reached,
)
from policies.values import MISSING, as_list, as_mapping, get, known_str


def _declared_readers(facts: StackFacts, secret: Secret) -> set[str]:
    """The service accounts the proxy's component grants the accessor role on `secret`."""
    readers: set[str] = set()
    for resource, found in facts.granting:
        if not (in_proxy_component(resource) and resource.type.startswith(SECRET_IAM_PREFIX)):
            continue
        on = grant_secret(resource)
        if on is None or not same_secret(on, secret):
            continue
        for grant in found:
            if known_str(grant.role) != SECRET_ACCESSOR:
                continue
            for member in grant.members or []:
                text = known_str(member)
                if text and text.startswith("serviceAccount:"):
                    readers.add(service_account_email(text))
    return readers


def token_secret_readers(resources: Sequence[Resource]) -> list[Finding]:
    """Only the proxy's accounts and the declared readers read the token secret. Not
    judged while the proxy's account, the secret, or a grant's member is unknown."""
    facts = stack_facts(resources)
    declared = facts.custom_roles
    findings: list[Finding] = []
    for proxy in facts.proxy_functions:
        own = facts.own_account_emails(proxy)
        if not own:
            continue
        for secret in token_secrets(proxy):
            allowed = set(own) | _declared_readers(facts, secret)
            for resource, found in facts.granting:
                for grant in found:
                    role = known_str(grant.role)
                    if role is None or role in PRIMITIVE_ROLES:
                        continue  # iam-no-primitive-roles blocks those
                    if SECRET_ACCESS not in (role_permissions(role, declared) or frozenset()):
                        continue
                    if not reaches_secret(resource, grant, secret):
                        continue
                    for member in grant.members or []:
                        text = known_str(member)
                        if text is None or (
                            text.startswith("serviceAccount:")
                            and service_account_email(text) in allowed
                        ):
                            continue
                        findings.append(Finding(
                            f"{text} holds {role}, which reads the proxy's token secret "
                            f"{secret[1]!r} (secretmanager.versions.access): whoever reads it "
                            "computes any future run's token and pre-claims it: remove the "
                            "grant; add a downstream service's account to the stack config's "
                            "tokenSecretReaders instead",
                            resource.urn,
                        ))
    return findings


# --- dedup-secret-readers-declared ------------------------------------------------------


def _undeclared_by(facts: StackFacts, email: str, secret: Secret) -> list[str] | None:
    """Labels of the kit's functions running as `email` that do not declare `secret`, or
    ["no function of the kit runs as it"]; None while one's secrets (or, for the latter,
    some function's account) are not known."""
    functions = [f for f in facts.running_as(email) if facts.is_kit_function(f)]
    if not functions:
        return None if facts.kit_function_account_unknown else [
            "no function of the kit runs as it"]
    missing: list[str] = []
    for function in functions:
        declared = facts.per_resource(declared_secrets, function)
        if declared is None:
            return None
        if not any(same_secret(secret, d) for d in declared):
            missing.append(f"{label(function)} does not declare it")
    return missing


def _proxy_token_readers(facts: StackFacts) -> dict[str, list[Secret]]:
    """The proxy's own accounts -> its token secrets (the kit grants those itself)."""
    found: dict[str, list[Secret]] = {}
    for proxy in facts.proxy_functions:
        for email in facts.own_account_emails(proxy):
            found.setdefault(email, []).extend(token_secrets(proxy))
    return found


@dataclass(frozen=True)
class DeclaredSecret:
    """A secret a function of the kit declares (not the proxy's token secret)."""

    secret: Secret
    by: str
    """Who declares it, for messages: "runtime 'export'"."""
    accounts: frozenset[str] | None
    """The declaring function's own accounts; None while not known."""


@dataclass(frozen=True)
class SecretOwners:
    """Which function of the kit declares which secret, indexed by secret ID once per
    stack (`facts.derived(secret_owners)`)."""

    by_id: Mapping[str, tuple[DeclaredSecret, ...]]
    undecided: frozenset[str] | None
    """The accounts of the kit's functions whose secrets are not known yet (they may
    declare any secret); None if one of those functions' account is not known either."""

    def taken(self, email: str, resource: Resource,
              reached: SecretsReached) -> list[DeclaredSecret]:
        """The declared secrets the grant on `resource` reaches whose declarers' accounts
        do not include `email` ([] while that is not known)."""
        if self.undecided is None or email in self.undecided:
            return []  # a function whose secrets are not known yet may run as it
        if reached.secret is not None:
            target = reached.secret
            found = [d for d in self.by_id.get(target[1], ()) if same_secret(d.secret, target)]
            return found if _not_among(email, found) else []
        taken: list[DeclaredSecret] = []
        for declared in self.by_id.values():
            there = [d for d in declared if project_wide(resource, d.secret[0])]
            taken += [d for d in there if _not_among(
                email, [o for o in there if same_secret(o.secret, d.secret)])]
        return taken


def _not_among(email: str, declarations: Sequence[DeclaredSecret]) -> bool:
    """`email` is known to be none of the declaring functions' accounts."""
    return bool(declarations) and all(
        d.accounts is not None and email not in d.accounts for d in declarations)


def secret_owners(facts: StackFacts) -> SecretOwners:
    found: dict[str, list[DeclaredSecret]] = {}
    undecided: set[str] = set()
    unknown = False
    for function in facts.kit_functions:
        if facts.is_proxy(function):
            accounts: frozenset[str] | None = facts.own_account_emails(function) or None
        else:
            email = runtime_email(function)
            accounts = frozenset({email}) if email else None
        declared = facts.per_resource(declared_secrets, function)
        if declared is None:
            unknown = unknown or accounts is None
            undecided |= accounts or set()
            continue
        tokens = token_secrets(function) if facts.is_proxy(function) else []
        name = runtime_name(function)
        by = f"runtime {name!r}" if name else f"function {label(function)}"
        for secret in declared:
            if not any(same_secret(secret, t) for t in tokens):
                found.setdefault(secret[1], []).append(DeclaredSecret(secret, by, accounts))
    return SecretOwners({k: tuple(v) for k, v in found.items()},
                        None if unknown else frozenset(undecided))


TAKEOVER: Final = (
    "a secret a function of the kit declares is that function's alone, and whoever holds "
    "this takes it over: adds a version the function reads next, disables or destroys its "
    "versions (its jobs fail), or grants anyone access (setIamPolicy): remove the grant; a "
    "job that rotates a secret holds roles/secretmanager.secretVersionAdder on a secret "
    "its own runtime declares (runtimes[].secrets)"
)


def _changes_declared_secret(
    facts: StackFacts, email: str, resource: Resource, role: str, grant: Grant,
    allows: frozenset[str] | None,
) -> Finding | None:
    """A role that changes a secret (or one the pack does not know, on the secret), held
    by an account of the kit on a secret that functions of the kit declare, none of them
    running as that account."""
    if allows is None:
        if role_not_known_yet(role, facts.custom_roles):
            return None
        changes = "the pack does not know what that role allows: policies/permissions.py"
    else:
        changes = ", ".join(sorted(allows & SECRET_ADMIN))
        if not changes:
            return None
    reached = secrets_reached(resource, grant)
    if reached is None or (allows is None and reached.secret is None):
        return None  # an unknown role project-wide: a runtime's is no-kit-resources'
    taken = facts.derived(secret_owners).taken(email, resource, reached)
    if not taken:
        return None
    declarers = ", ".join(dict.fromkeys(d.by for d in taken))
    if reached.secret is not None:
        what = f"secret {reached.secret[1]!r}"
    else:
        names = ", ".join(repr(n) for n in dict.fromkeys(d.secret[1] for d in taken))
        what = f"{reached.where}, which holds {names},"
    return Finding(
        f"{email}, an account of the kit, holds {role} ({changes}) on {what} declared by "
        f"{declarers}, not by a function running as it: {TAKEOVER}",
        resource.urn,
    )


def _reads_undeclared_secret(
    facts: StackFacts, email: str, resource: Resource, role: str, grant: Grant,
) -> Finding | None:
    """A role that reads a secret, held by an account of the kit that some function
    running as it does not declare the secret for (or on a whole project)."""
    reached = secrets_reached(resource, grant)
    if reached is None:
        return None
    if reached.secret is None:
        return Finding(
            f"{email}, an account of the kit, holds {role} on {reached.where}: it "
            "reads every secret there (secretmanager.versions.access), other "
            "runtimes' among them: remove the grant; grant "
            f"{SECRET_ACCESSOR} on each secret a runtime declares (runtimes[].secrets)",
            resource.urn,
        )
    secret = reached.secret
    if any(same_secret(secret, s) for s in facts.derived(_proxy_token_readers).get(email, [])):
        return None  # the proxy reads its own token secret
    missing = _undeclared_by(facts, email, secret)
    if not missing:
        return None
    return Finding(
        f"{email}, an account of the kit, holds {role} (secretmanager.versions."
        f"access) on secret {secret[1]!r}, but {'; '.join(missing)}: a secret is "
        "read only by the runtimes that declare it (serviceConfig."
        "secretEnvironmentVariables / secretVolumes: a runtime's `secrets`), else "
        "job code, or whoever holds the account's tokens, reads another runtime's "
        "secret: remove the grant, or declare the secret in the runtime that reads "
        "it (the program then grants it)",
        resource.urn,
    )


def secret_readers_declared(resources: Sequence[Resource]) -> list[Finding]:
    """A secret is read (secretmanager.versions.access) by an account of the kit only if
    every function of the kit running as it declares the secret (a secret environment
    variable or volume); the proxy's accounts read its token secret. On a secret a
    function of the kit declares, no other account of the kit holds a role that changes
    it (versions, settings, IAM policy) or one the pack does not know. Not judged while a
    function's secrets or account, a grant's member, project or condition are unknown."""
    facts = stack_facts(resources)
    declared = facts.custom_roles
    findings: list[Finding] = []
    for email in sorted(facts.kit_identities):
        for resource, role, grant in facts.roles_held(email):
            if role in PRIMITIVE_ROLES:
                continue  # dedup-accounts-no-basic-roles reports those: one per grant
            allows = role_permissions(role, declared)
            if allows is not None and SECRET_ACCESS in allows:
                finding = _reads_undeclared_secret(facts, email, resource, role, grant)
            else:
                finding = _changes_declared_secret(facts, email, resource, role, grant, allows)
            if finding is not None:
                findings.append(finding)
    return findings


def _plain_env_names(resource_type: str, props: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """(where, plain environment mapping or list of {name, value}) of a function or
    Cloud Run service / job."""
    if resource_type == FUNCTION_V2:
        return [("serviceConfig.environmentVariables",
                 get(props, "serviceConfig", "environmentVariables")),
                ("buildConfig.environmentVariables",
                 get(props, "buildConfig", "environmentVariables"))]
    if resource_type == FUNCTION_V1:
        return [("environmentVariables", get(props, "environmentVariables")),
                ("buildEnvironmentVariables", get(props, "buildEnvironmentVariables"))]
    containers: Any = MISSING
    if resource_type == CLOUD_RUN_V2_SERVICE:
        containers = get(props, "template", "containers")
    elif resource_type == CLOUD_RUN_V2_JOB:
        containers = get(props, "template", "template", "containers")
    elif resource_type == CLOUD_RUN_V1_SERVICE:
        containers = get(props, "template", "spec", "containers")
    return [(f"containers[{i}].envs", get(c, "envs"))
            for i, c in enumerate(as_list(containers) or [])]


def token_secret_not_plain(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    """DEDUP_TOKEN_SECRET is never a plain environment variable (its value would sit in
    the function's configuration, readable by every viewer of it, and in the stack's
    state): only a secret environment variable from Secret Manager."""
    problems = []
    for where, env in _plain_env_names(resource_type, props):
        mapping = as_mapping(env)
        names = (
            [str(k) for k in mapping]
            if mapping is not None
            else [
                str(get(e, "name"))
                for e in as_list(env) or []
                if get(e, "value") is not MISSING  # {name, valueSource}: a secret reference
            ]
        )
        if any(n.strip().upper() == TOKEN_SECRET_ENV for n in names):
            problems.append(
                f"{where} sets {TOKEN_SECRET_ENV} as a plain environment variable: whoever "
                "reads the configuration computes any future run's token; remove it and use "
                "a secret environment variable naming the token secret "
                "(serviceConfig.secretEnvironmentVariables)"
            )
    return problems
