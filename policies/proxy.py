"""Stack policies for the idempotent proxy (SPEC section 4): it runs as its own service
account, and that account holds only the roles the proxy's targets need.

The proxy is the `gcp:cloudfunctionsv2/function:Function` with the entry point
`proxy_scheduled_job`, or with DEDUP_PROXY_ROUTES / DEDUP_PROXY_TARGET in its environment.
Its targets come from those settings (function/dedup/proxy.py reads the same ones):
DEDUP_PROXY_ROUTES = {"job-id": {"target": ..., "resource": "projects/P/locations/L/..."}}
and DEDUP_PROXY_TARGET + DEDUP_PROXY_RESOURCE.

The other policies apply to the proxy as to any function: dedicated runtime and build
accounts, internal ingress, no public members, run.invoker on its service only, the
database condition on datastore.user, and (as a dedup function) lease, retention, TTL
policy and the jobs' dedup headers.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from policies.gcp import (
    CLOUD_RUN_V1_SERVICE,
    CLOUD_RUN_V2_JOB,
    CLOUD_RUN_V2_JOB_IAM_PREFIX,
    CLOUD_RUN_V2_SERVICE,
    FUNCTION_V2,
    ORGANIZATION_CUSTOM_ROLE,
    PROJECT_CUSTOM_ROLE,
    PROXY_ENTRY_POINT,
    PROXY_RESOURCE_ENV,
    PROXY_ROUTES_ENV,
    PROXY_TARGET_ENV,
    SCHEDULER_JOB,
    iam_kind,
    service_account_email,
    type_module,
)
from policies.iam import DATASTORE_USER, PolicyDataError, grants
from policies.model import Finding, Resource
from policies.values import MISSING, as_list, as_mapping, get, is_unknown, known_str

WORKFLOW: Final = "workflow"
RUN_JOB: Final = "run_job"
BUILD_TRIGGER: Final = "build_trigger"

WORKFLOWS_INVOKER: Final = "roles/workflows.invoker"
RUN_JOBS_EXECUTOR_WITH_OVERRIDES: Final = "roles/run.jobsExecutorWithOverrides"
CLOUDBUILD_BUILDS_EDITOR: Final = "roles/cloudbuild.builds.editor"
BUILD_TRIGGER_PERMISSIONS: Final = frozenset({"cloudbuild.builds.create"})
"""What running a build trigger checks; the most a custom role for the proxy may hold."""

ALLOWED_TEXT: Final = (
    f"{DATASTORE_USER} (the dedup database) and, per target, {WORKFLOWS_INVOKER} (workflow), "
    f"{RUN_JOBS_EXECUTOR_WITH_OVERRIDES} on the job (run_job), or a custom role with only "
    f"cloudbuild.builds.create / {CLOUDBUILD_BUILDS_EDITOR} (build_trigger)"
)


# --- who is the proxy, what does it target ----------------------------------------------


def _env(function: Resource) -> Any:
    return get(function.props, "serviceConfig", "environmentVariables")


def is_proxy_function(resource: Resource) -> bool:
    if resource.type != FUNCTION_V2:
        return False
    if get(resource.props, "buildConfig", "entryPoint") == PROXY_ENTRY_POINT:
        return True
    env = as_mapping(_env(resource))
    return env is not None and (PROXY_ROUTES_ENV in env or PROXY_TARGET_ENV in env)


def proxy_functions(resources: Sequence[Resource]) -> list[Resource]:
    return [r for r in resources if is_proxy_function(r)]


@dataclass(frozen=True)
class Target:
    kind: str
    project: str
    location: str
    resource_id: str


def _target(kind: Any, resource: Any) -> Target | None:
    parts = resource.split("/") if isinstance(resource, str) else []
    if not isinstance(kind, str) or len(parts) != 6 or parts[0] != "projects":
        return None
    return Target(kind, parts[1], parts[3], parts[5])


def targets(function: Resource) -> list[Target] | None:
    """The proxy's targets; None if its settings are not known (or not readable)."""
    env = _env(function)
    if is_unknown(env):
        return None
    found: list[Target] = []
    raw = get(env, PROXY_ROUTES_ENV)
    if is_unknown(raw):
        return None
    if raw is not MISSING:
        try:
            routes = json.loads(raw) if isinstance(raw, str) else raw
        except json.JSONDecodeError:
            return None  # the function refuses to start; nothing to judge here
        if not isinstance(routes, Mapping):
            return None
        for spec in routes.values():
            if not isinstance(spec, Mapping):
                return None
            target = _target(spec.get("target"), spec.get("resource"))
            if target is None:
                return None
            found.append(target)
    kind, resource = get(env, PROXY_TARGET_ENV), get(env, PROXY_RESOURCE_ENV)
    if is_unknown(kind) or is_unknown(resource):
        return None
    if kind is not MISSING or resource is not MISSING:
        target = _target(kind, resource)
        if target is None:
            return None
        found.append(target)
    return found


def _runtime_email(resource: Resource) -> str | None:
    """The known runtime service account of a function or Cloud Run service / job."""
    paths: dict[str, tuple[str, ...]] = {
        FUNCTION_V2: ("serviceConfig", "serviceAccountEmail"),
        CLOUD_RUN_V2_SERVICE: ("template", "serviceAccount"),
        CLOUD_RUN_V1_SERVICE: ("template", "spec", "serviceAccountName"),
        CLOUD_RUN_V2_JOB: ("template", "template", "serviceAccount"),
    }
    path = paths.get(resource.type)
    if path is None:
        return None
    email = known_str(get(resource.props, *path))
    return service_account_email(email) if email else None


def _label(resource: Resource) -> str:
    return repr(known_str(get(resource.props, "name")) or resource.name)


# --- dedup-proxy-own-service-account ----------------------------------------------------


def functions_own_their_accounts(
    functions: Sequence[Resource], resources: Sequence[Resource], *, what: str, why: str,
    invoker_hint: str,
) -> list[Finding]:
    """Each of `functions` (the proxy, the watchdog) runs as an account no other function
    or service runs as and no Scheduler job sends OIDC tokens of. `what` names the function
    in messages; `why` says why it needs its own account; `invoker_hint` what jobs use."""
    findings: list[Finding] = []
    for function in functions:
        email = _runtime_email(function)
        if email is None:
            continue  # not known yet, or unset (function-dedicated-runtime-service-account)
        for other in resources:
            if other is function or other.urn == function.urn:
                continue
            if _runtime_email(other) == email:
                findings.append(
                    Finding(
                        f"the {what} {_label(function)} runs as {email}, and so does "
                        f"{_label(other)}: set the {what}'s serviceConfig.serviceAccountEmail "
                        f"to an account of its own, {why}",
                        function.urn,
                    )
                )
            if other.type == SCHEDULER_JOB:
                oidc = known_str(get(other.props, "httpTarget", "oidcToken", "serviceAccountEmail"))
                if oidc and service_account_email(oidc) == email:
                    findings.append(
                        Finding(
                            f"Scheduler job {_label(other)} sends OIDC tokens of the {what}'s "
                            f"own account {email}: {invoker_hint}",
                            other.urn,
                        )
                    )
    return findings


def own_service_account(resources: Sequence[Resource]) -> list[Finding]:
    return functions_own_their_accounts(
        proxy_functions(resources), resources, what="proxy",
        why="so that only the proxy holds the roles that start its targets",
        invoker_hint="use a dedicated invoker account that holds only roles/run.invoker on "
        "the proxy's service",
    )


# --- dedup-proxy-least-privilege --------------------------------------------------------


@dataclass(frozen=True)
class CustomRoles:
    permissions: Mapping[str, Any]
    """Custom role name (projects/P/roles/R, organizations/O/roles/R) -> its permissions
    (a list, or UNKNOWN)."""
    unnamed: bool
    """Some custom role's name is not known yet: a role not found may be that one."""


def _custom_roles(resources: Sequence[Resource]) -> CustomRoles:
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


def _holds(members: list[Any] | None, email: str) -> bool:
    for member in members or []:
        text = known_str(member)
        if (
            text
            and text.startswith("serviceAccount:")
            and service_account_email(text) == email
        ):
            return True
    return False


def roles_held(resources: Sequence[Resource], email: str) -> Iterator[tuple[Resource, str]]:
    """(IAM resource, role) for every known role granted to service account `email`. A
    malformed policy document is skipped: iam-no-public-members reports it."""
    for resource in resources:
        if iam_kind(resource.type) is None:
            continue
        try:
            found = grants(resource.type, resource.props)
        except PolicyDataError:
            continue
        for grant in found:
            role = known_str(grant.role)
            if role is not None and _holds(grant.members, email):
                yield resource, role


def _job_target(resource: Resource) -> tuple[str | None, str | None, str | None]:
    """(project, location, job ID) a Cloud Run job IAM resource grants on (None: unknown)."""
    name = known_str(get(resource.props, "name"))
    project = known_str(get(resource.props, "project"))
    location = known_str(get(resource.props, "location"))
    if name and name.startswith("projects/"):
        parts = name.split("/")
        if len(parts) == 6:
            return parts[1], parts[3], parts[5]
    return project, location, name


def _judge(
    role: str,
    grant_on: Resource,
    proxy_targets: list[Target] | None,
    custom_roles: CustomRoles,
) -> str | None:
    """Why the proxy's account must not hold `role` on `grant_on`, or None if it may."""
    level = type_module(grant_on.type)
    kinds = None if proxy_targets is None else {t.kind for t in proxy_targets}
    if level in ("folder", "organizations"):
        return (
            f"{role} is granted at {'organization' if level == 'organizations' else 'folder'} "
            "level, across every project: remove it; grant roles in the target's project or "
            "on the target"
        )
    if role == DATASTORE_USER:
        return None  # its database condition: iam-datastore-user-single-database
    if role == WORKFLOWS_INVOKER:
        if kinds is not None and WORKFLOW not in kinds:
            return f"{role} is granted but the proxy routes no workflow: remove it"
        project = known_str(get(grant_on.props, "project"))
        if (
            proxy_targets is not None
            and level == "projects"
            and project
            and project not in {t.project for t in proxy_targets if t.kind == WORKFLOW}
        ):
            return (
                f"{role} is granted in project {project!r}, where the proxy starts no "
                "workflow: remove it (grant it in the workflow's project)"
            )
        return None
    if role == RUN_JOBS_EXECUTOR_WITH_OVERRIDES:
        if not grant_on.type.startswith(CLOUD_RUN_V2_JOB_IAM_PREFIX):
            where = "the project" if level == "projects" else f"a {level or 'other'} resource"
            return (
                f"{role} granted on {where} lets the proxy run other jobs (or services) with "
                "any overrides: grant it on the one Cloud Run job (gcp.cloudrunv2.JobIamMember)"
            )
        if kinds is not None and RUN_JOB not in kinds:
            return f"{role} is granted but the proxy routes no Cloud Run job: remove it"
        project, location, job = _job_target(grant_on)
        if proxy_targets is not None and job and location:
            routed = {
                (t.location, t.resource_id)
                for t in proxy_targets
                if t.kind == RUN_JOB and (project is None or t.project == project)
            }
            if (location, job) not in routed:
                return (
                    f"{role} is granted on job {job!r} in {location}, which the proxy does not "
                    "start: remove it"
                )
        return None
    if role == CLOUDBUILD_BUILDS_EDITOR or "/roles/" in role:
        if kinds is not None and BUILD_TRIGGER not in kinds:
            return f"{role} is granted but the proxy routes no build trigger: remove it"
        if role == CLOUDBUILD_BUILDS_EDITOR:
            return None
        if role not in custom_roles.permissions:
            if custom_roles.unnamed:
                return None  # possibly the custom role whose name is not known yet
            return (
                f"custom role {role} is not declared in this stack, so what it allows cannot "
                "be checked: declare it (gcp.projects.IAMCustomRole) with only "
                "cloudbuild.builds.create"
            )
        permissions = custom_roles.permissions[role]
        if is_unknown(permissions):
            return None
        listed = as_list(permissions) or []
        if any(is_unknown(p) for p in listed):
            return None
        extra = sorted({str(p) for p in listed} - BUILD_TRIGGER_PERMISSIONS)
        if extra:
            return (
                f"custom role {role} also holds {', '.join(extra)}: running a build trigger "
                "needs only cloudbuild.builds.create; remove the others"
            )
        return None
    return f"{role} is not a role any proxy target needs: remove it (allowed: {ALLOWED_TEXT})"


def least_privilege(resources: Sequence[Resource]) -> list[Finding]:
    findings: list[Finding] = []
    custom_roles = _custom_roles(resources)
    for proxy in proxy_functions(resources):
        email = _runtime_email(proxy)
        if email is None:
            continue  # not known yet: the grants cannot be attributed to the proxy
        proxy_targets = targets(proxy)
        for resource, role in roles_held(resources, email):
            problem = _judge(role, resource, proxy_targets, custom_roles)
            if problem is not None:
                findings.append(
                    Finding(
                        f"the proxy's account {email} ({_label(proxy)}): {problem}",
                        resource.urn,
                    )
                )
    return findings
