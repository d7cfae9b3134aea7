"""Policies for the idempotent proxy (one downstream execution per scheduled run): it runs
as its own service account, and that account holds only the roles the proxy's targets need.

The proxy is linked by the resource graph, not only by its account's e-mail (unknown at a
first preview): a resource declared inside the kit's DedupProxy component carries the
component's type in its URN, which a resource policy sees before anything is applied
(`dedup-proxy-component-grants`); the stack policies link the proxy's account through the
Account resource declared in that component (its accountId and project fix the e-mail) and
through the grants' dependencies on it.

The proxy is the `gcp:cloudfunctionsv2/function:Function` with the entry point
`proxy_scheduled_job`, with a DEDUP_PROXY_* setting in its environment (infra always sets
DEDUP_PROXY_TIMEOUT_SECONDS), or with the proxy's job table in its source archive. Its
targets come from what function/dedup/proxy/handler.py reads: that table, proxy_routes.json =
{"job-id": {"target": ..., "resource": "projects/P/locations/L/..."}} (read from the
declared source object, policies/job_tables.py), and DEDUP_PROXY_TARGET +
DEDUP_PROXY_RESOURCE.

Its records live in a Firestore database of its own (its DEDUP_DATABASE): its
roles/datastore.user is conditioned to that database (dedup-proxy-least-privilege), and no
one else writes it (dedup-proxy-own-database, in policies/stack.py), since the dedup
function's job code could otherwise forge a proxied job's record.

The other policies apply to the proxy as to any function: dedicated runtime and build
accounts, internal ingress, no public members, run.invoker on its service only, the
database condition on datastore.user, and (as a dedup function) lease, retention, TTL
policy (in its own database) and the jobs' dedup headers.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from infra.source import PROXY_ROUTES_TABLE
from policies.function import RecordsDatabase, records_database
from policies.gcp import (
    CLOUD_BUILD_TRIGGER,
    CLOUD_RUN_V1_SERVICE,
    CLOUD_RUN_V2_JOB,
    CLOUD_RUN_V2_JOB_IAM_PREFIX,
    CLOUD_RUN_V2_SERVICE,
    FUNCTION_V1,
    FUNCTION_V2,
    PROXY_COMPONENT,
    PROXY_ENTRY_POINT,
    PROXY_RESOURCE_ENV,
    PROXY_SETTINGS_PREFIX,
    PROXY_TARGET_ENV,
    PUBSUB_TOPIC_IAM_PREFIX,
    SCHEDULER_JOB,
    SERVICE_ACCOUNT,
    WORKFLOWS_WORKFLOW,
    service_account_email,
    type_module,
)
from policies.iam import (
    DATASTORE_USER,
    CustomRoles,
    Grant,
    PolicyDataError,
    condition_database,
    custom_roles,
    grants,
    grants_or_problem,
)
from policies.job_tables import job_table
from policies.model import Finding, Resource
from policies.permissions import custom_permissions, is_custom_role
from policies.values import MISSING, as_mapping, get, is_unknown, known_str

WORKFLOW: Final = "workflow"
RUN_JOB: Final = "run_job"
BUILD_TRIGGER: Final = "build_trigger"

WORKFLOWS_INVOKER: Final = "roles/workflows.invoker"
RUN_JOBS_EXECUTOR_WITH_OVERRIDES: Final = "roles/run.jobsExecutorWithOverrides"
CLOUDBUILD_BUILDS_EDITOR: Final = "roles/cloudbuild.builds.editor"
PUBSUB_PUBLISHER: Final = "roles/pubsub.publisher"
RUN_INVOKER: Final = "roles/run.invoker"
SECRET_ACCESSOR: Final = "roles/secretmanager.secretAccessor"
SECRET_IAM_PREFIX: Final = "gcp:secretmanager/secretIam"
WORKFLOW_START_PERMISSIONS: Final = frozenset({"workflows.executions.create"})
"""What starting a workflow execution checks; the most a custom role for the proxy may
hold (Workflows has no IAM on one workflow)."""
BUILDS_CREATE: Final = "cloudbuild.builds.create"

ALLOWED_TEXT: Final = (
    f"{DATASTORE_USER} (its own database, DEDUP_DATABASE), {SECRET_ACCESSOR} on the token "
    "secret and, per target, a custom role with only workflows.executions.create (or "
    f"{WORKFLOWS_INVOKER}) (workflow), {RUN_JOBS_EXECUTOR_WITH_OVERRIDES} on the job "
    f"(run_job), {PUBSUB_PUBLISHER} on the trigger's topic (build_trigger)"
)
BUILDS_CREATE_FIX: Final = (
    "project-wide cloudbuild.builds.create lets the proxy create arbitrary builds that run as "
    "the project's build account (a known escalation path): remove it; start the trigger "
    f"through its Pub/Sub topic and grant {PUBSUB_PUBLISHER} on that topic"
)


# --- who is the proxy, what does it target ----------------------------------------------


def _env(function: Resource) -> Any:
    return get(function.props, "serviceConfig", "environmentVariables")


def is_proxy_function(resource: Resource, resources: Sequence[Resource] = ()) -> bool:
    """The proxy: by its entry point, a setting of the proxy's or, among `resources` (the
    stack), a source object holding the proxy's job table."""
    if resource.type != FUNCTION_V2:
        return False
    if get(resource.props, "buildConfig", "entryPoint") == PROXY_ENTRY_POINT:
        return True
    env = as_mapping(_env(resource))
    if env is not None and any(str(k).startswith(PROXY_SETTINGS_PREFIX) for k in env):
        return True
    routes = job_table(resource, resources, PROXY_ROUTES_TABLE) if resources else MISSING
    return routes is not MISSING and not is_unknown(routes)


def proxy_functions(resources: Sequence[Resource]) -> list[Resource]:
    return [r for r in resources if is_proxy_function(r, resources)]


@dataclass(frozen=True)
class Target:
    kind: str
    project: str
    location: str
    resource_id: str
    topic: str | None = None
    """A build trigger's Pub/Sub topic (projects/P/topics/T) the proxy publishes to."""


def _target(kind: Any, resource: Any, topic: Any = None) -> Target | None:
    parts = resource.split("/") if isinstance(resource, str) else []
    if not isinstance(kind, str) or len(parts) != 6 or parts[0] != "projects":
        return None
    return Target(kind, parts[1], parts[3], parts[5], topic if isinstance(topic, str) else None)


def targets(function: Resource, resources: Sequence[Resource]) -> list[Target] | None:
    """The proxy's targets (its job table, in its source object among `resources`, and its
    default target); None if they are not known (or not readable)."""
    env = _env(function)
    if is_unknown(env):
        return None
    found: list[Target] = []
    routes = job_table(function, resources, PROXY_ROUTES_TABLE)
    if is_unknown(routes):
        return None  # not readable here, or not JSON (the function refuses to start)
    if routes is not MISSING:
        if not isinstance(routes, Mapping):
            return None
        for spec in routes.values():
            if not isinstance(spec, Mapping):
                return None
            target = _target(spec.get("target"), spec.get("resource"), spec.get("topic"))
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
        FUNCTION_V1: ("serviceAccountEmail",),
        WORKFLOWS_WORKFLOW: ("serviceAccount",),
        CLOUD_BUILD_TRIGGER: ("serviceAccount",),
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
        email = _runtime_email(function) or _component_account_email(function, resources)
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


# --- linking resources to the proxy by the resource graph --------------------------------


def in_proxy_component(resource: Resource) -> bool:
    """Declared inside the kit's DedupProxy component (its URN's type chain names it)."""
    parts = resource.urn.split("::")
    return len(parts) >= 4 and f"{PROXY_COMPONENT}$" in parts[2]


def _component_prefix(resource: Resource) -> str | None:
    """The type chain and name prefix shared by children of the same component."""
    parts = resource.urn.split("::")
    if len(parts) < 4 or "$" not in parts[2]:
        return None
    return parts[2].rsplit("$", 1)[0]


def _account_email(account: Resource) -> str | None:
    """A service account's e-mail: known, or fixed by its accountId and project."""
    email = known_str(get(account.props, "email"))
    if email:
        return email.lower()
    account_id = known_str(get(account.props, "accountId"))
    project = known_str(get(account.props, "project"))
    if account_id and project:
        return f"{account_id}@{project}.iam.gserviceaccount.com".lower()
    return None


def _proxy_account_resources(proxy: Resource, resources: Sequence[Resource]) -> list[Resource]:
    """The service accounts declared in the same DedupProxy component as `proxy`."""
    prefix = _component_prefix(proxy)
    if prefix is None or not in_proxy_component(proxy):
        return []
    return [
        r for r in resources
        if r.type == SERVICE_ACCOUNT and in_proxy_component(r) and _component_prefix(r) == prefix
    ]


def _component_account_email(function: Resource, resources: Sequence[Resource]) -> str | None:
    """The proxy's account e-mail from its component's Account while its output is unknown
    (a first preview). Only when the function's own setting is unknown, not unset."""
    if not is_unknown(get(function.props, "serviceConfig", "serviceAccountEmail")):
        return None
    emails = {_account_email(a) for a in _proxy_account_resources(function, resources)}
    emails.discard(None)
    return emails.pop() if len(emails) == 1 else None


@dataclass(frozen=True)
class ProxyAccount:
    email: str | None
    account_urns: frozenset[str]


def proxy_account(proxy: Resource, resources: Sequence[Resource]) -> ProxyAccount:
    email = _runtime_email(proxy) or _component_account_email(proxy, resources)
    urns = frozenset(a.urn for a in _proxy_account_resources(proxy, resources))
    return ProxyAccount(email, urns)


def own_account_emails(proxy: Resource, resources: Sequence[Resource]) -> frozenset[str]:
    """The known e-mails of the proxy's accounts: the one it runs as and the ones declared
    in its component (meant to hold its grants)."""
    emails = {_account_email(a) for a in _proxy_account_resources(proxy, resources)}
    emails.add(proxy_account(proxy, resources).email)
    return frozenset(e for e in emails if e is not None)


def _granted_to(members: list[Any] | None, account: ProxyAccount, resource: Resource) -> bool:
    """A grant to the proxy's account: by e-mail, or (member not known yet) by the grant's
    dependency on the proxy's Account resource."""
    if account.email and _holds(members, account.email):
        return True
    unknown_member = members is None or any(is_unknown(m) for m in members)
    return unknown_member and bool(account.account_urns & set(resource.dependencies))


# --- dedup-proxy-component-grants (resource policy), dedup-proxy-least-privilege (stack) ---


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


def roles_held(
    resources: Sequence[Resource], email: str
) -> Iterator[tuple[Resource, str, Grant]]:
    """(grant-bearing resource, role, grant) for every known role granted to service
    account `email`, IAM or ACL-style. An unreadable grant is skipped:
    iam-no-public-members reports it."""
    for resource in resources:
        try:
            found = grants(resource.type, resource.props)
        except PolicyDataError:
            continue
        for grant in found:
            role = known_str(grant.role)
            if role is not None and _holds(grant.members, email):
                yield resource, role, grant


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


def _shape_problem(role: str, grant_on: Resource) -> str | None:
    """What any proxy grant must look like, whatever its targets: at most project level,
    each role on the narrowest resource that takes it."""
    level = type_module(grant_on.type)
    if level in ("folder", "organizations"):
        return (
            f"{role} is granted at {'organization' if level == 'organizations' else 'folder'} "
            "level, across every project: remove it; grant roles in the target's project or "
            "on the target"
        )
    if role in (DATASTORE_USER, WORKFLOWS_INVOKER) or is_custom_role(role):
        return None  # condition / project / permissions: judged where the facts are
    if role == CLOUDBUILD_BUILDS_EDITOR:
        return f"{role}: {BUILDS_CREATE_FIX}"
    if role == SECRET_ACCESSOR:
        if not grant_on.type.startswith(SECRET_IAM_PREFIX):
            return (
                f"{role} granted outside one secret lets the proxy read every secret: grant it "
                "on the token secret only (gcp.secretmanager.SecretIamMember)"
            )
        return None
    if role == RUN_JOBS_EXECUTOR_WITH_OVERRIDES:
        if not grant_on.type.startswith(CLOUD_RUN_V2_JOB_IAM_PREFIX):
            where = "the project" if level == "projects" else f"a {level or 'other'} resource"
            return (
                f"{role} granted on {where} lets the proxy run other jobs (or services) with "
                "any overrides: grant it on the one Cloud Run job (gcp.cloudrunv2.JobIamMember)"
            )
        if get(grant_on.props, "location") is MISSING and not (
            known_str(get(grant_on.props, "name")) or ""
        ).startswith("projects/"):
            return (
                f"{role} is granted on a job without location, so the provider's default "
                "region decides which job: set location (and name) to the proxy's job"
            )
        return None
    if role == PUBSUB_PUBLISHER:
        if not grant_on.type.startswith(PUBSUB_TOPIC_IAM_PREFIX):
            return (
                f"{role} granted outside one topic lets the proxy publish to every topic: "
                "grant it on the build trigger's topic (gcp.pubsub.TopicIAMMember)"
            )
        return None
    return f"{role} is not a role any proxy target needs: remove it (allowed: {ALLOWED_TEXT})"


def component_grants(resource: Resource) -> list[str]:
    """Grants declared in the proxy's component: only the shapes its targets need. The
    component's invoker binding (roles/run.invoker on its own Cloud Run service, for the
    jobs' invoker account) is the one grant there that is not to the proxy's account."""
    if not in_proxy_component(resource):
        return []
    found, _ = grants_or_problem(resource.type, resource.props)
    problems = []
    for grant in found:
        role = known_str(grant.role)
        if role is None:
            continue  # a custom role's name, not known yet
        if role == RUN_INVOKER and resource.type.startswith("gcp:cloudrunv2/serviceIam"):
            continue
        problem = _shape_problem(role, resource)
        if problem is not None:
            problems.append(f"the proxy component grants: {problem}")
    return problems


def _custom_role_problem(role: str, declared: CustomRoles) -> str | None:
    """A custom role of the proxy's: declared, holding only what starting a workflow needs."""
    if role not in declared.permissions:
        if declared.unnamed:
            return None  # possibly the custom role whose name is not known yet
        return (
            f"custom role {role} is not declared in this stack, so what it allows cannot "
            "be checked: declare it (gcp.projects.IAMCustomRole) with only "
            "workflows.executions.create"
        )
    permissions = custom_permissions(declared.permissions[role])
    if permissions is None:
        return None  # not known yet
    if BUILDS_CREATE in permissions:
        return f"custom role {role} holds {BUILDS_CREATE}: {BUILDS_CREATE_FIX}"
    extra = sorted(permissions - WORKFLOW_START_PERMISSIONS)
    if extra:
        return (
            f"custom role {role} also holds {', '.join(extra)}: starting a workflow needs "
            "only workflows.executions.create; remove the others"
        )
    return None


def _same_topic(granted: str | None, routed: str | None) -> bool:
    """`projects/P/topics/T` or `T` (a TopicIAMMember's `topic`) against a route's topic."""
    if not granted or not routed:
        return True  # not known: nothing to compare
    if granted.startswith("projects/"):
        return granted == routed
    return routed.rsplit("/", 1)[-1] == granted


def own_database_problem(condition: Any, own: RecordsDatabase | None) -> str | None:
    """Why the proxy's roles/datastore.user with `condition` is not limited to its own
    database `own`; None if it is, or is not known yet. A grant without a one-database
    condition is iam-datastore-user-single-database's."""
    named = condition_database(condition)
    if own is None or not isinstance(named, str) or own.named_by(named):
        return None
    wanted = own.resource_name(default_project=named.split("/")[1])
    return (
        f"{DATASTORE_USER} names database {named!r}, not its own database {str(own)!r} "
        f'(DEDUP_DATABASE): set its condition to resource.name == "{wanted}"; '
        "the proxy's records must not share a database with the dedup function, whose job "
        "code could forge them"
    )


def _judge(
    role: str,
    grant_on: Resource,
    grant: Grant,
    proxy: Resource,
    proxy_targets: list[Target] | None,
    declared: CustomRoles,
) -> str | None:
    """Why the proxy's account must not hold `role` (in `grant`) on `grant_on`, or None if
    it may."""
    shape = _shape_problem(role, grant_on)
    if shape is not None:
        return shape
    level = type_module(grant_on.type)
    kinds = None if proxy_targets is None else {t.kind for t in proxy_targets}
    if role == DATASTORE_USER:
        return own_database_problem(grant.condition, records_database(proxy))
    if role == SECRET_ACCESSOR:
        return None
    if role == WORKFLOWS_INVOKER or is_custom_role(role):
        if is_custom_role(role):
            problem = _custom_role_problem(role, declared)
            if problem is not None:
                return problem
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
    # Publishing to a build trigger's topic.
    if kinds is not None and BUILD_TRIGGER not in kinds:
        return f"{role} is granted but the proxy routes no build trigger: remove it"
    topic = known_str(get(grant_on.props, "topic"))
    topics = [t.topic for t in proxy_targets or [] if t.kind == BUILD_TRIGGER]
    if proxy_targets is not None and not any(_same_topic(topic, t) for t in topics):
        return (
            f"{role} is granted on topic {topic!r}, which no routed build trigger listens to: "
            "remove it"
        )
    return None


def least_privilege(resources: Sequence[Resource]) -> list[Finding]:
    """Every grant in the stack to the proxy's account (IAM or ACL-style, anywhere),
    linked by e-mail or, while the member is not known, by the resource graph."""
    findings: list[Finding] = []
    declared = custom_roles(resources)
    for proxy in proxy_functions(resources):
        account = proxy_account(proxy, resources)
        if account.email is None and not account.account_urns:
            continue  # nothing links any grant to this proxy yet
        proxy_targets = targets(proxy, resources)
        who = account.email or "(not known yet)"
        for resource in resources:
            found, _ = grants_or_problem(resource.type, resource.props)
            for grant in found:
                role = known_str(grant.role)
                if role is None or not _granted_to(grant.members, account, resource):
                    continue
                problem = _judge(role, resource, grant, proxy, proxy_targets, declared)
                if problem is not None:
                    findings.append(
                        Finding(
                            f"the proxy's account {who} ({_label(proxy)}): {problem}",
                            resource.urn,
                        )
                    )
    return findings
