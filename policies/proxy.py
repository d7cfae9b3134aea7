"""Policies for the idempotent proxy (one downstream execution per scheduled run): its
account holds only the roles the proxy's targets need.

The proxy is linked by the resource graph, not only by its account's e-mail (unknown at a
first preview): a resource declared inside the kit's DedupProxy component carries the
component's type in its URN, which a resource policy sees before anything is applied
(`dedup-proxy-component-grants`); the stack policy links the proxy's account through the
Account resource declared in that component (its accountId and project fix the e-mail) and
through the grants' dependencies on it. Which function is the proxy and what it targets:
policies/kit_resources.py and policies/facts.py.

Its records live in a Firestore database of its own (its DEDUP_DATABASE): its
roles/datastore.user is conditioned to that database (dedup-proxy-least-privilege), and no
one else writes it (dedup-proxy-own-database, in policies/stack.py), since the dedup
function's job code could otherwise forge a proxied job's record. That it runs as an
account of its own is dedup-proxy-own-service-account's (policies/accounts.py).

The other policies apply to the proxy as to any function: dedicated runtime and build
accounts, internal ingress, no public members, run.invoker on its service only, the
database condition on datastore.user, and (as a dedup function) lease, retention, TTL
policy (in its own database) and the jobs' dedup headers.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from policies.facts import ProxyAccount, stack_facts
from policies.gcp import (
    CLOUD_RUN_V2_JOB_IAM_PREFIX,
    PUBSUB_TOPIC_IAM_PREFIX,
    SECRET_IAM_PREFIX,
    type_module,
)
from policies.grants import (
    DATASTORE_USER,
    RUN_INVOKER,
    SECRET_ACCESSOR,
    CustomRoles,
    Grant,
    condition_database,
    grants_or_problem,
    holds,
)
from policies.kit_resources import (
    RecordsDatabase,
    Target,
    in_proxy_component,
    label,
    records_database,
)
from policies.model import Finding, Resource
from policies.permissions import custom_permissions, is_custom_role
from policies.values import MISSING, get, is_unknown, known_str

WORKFLOW: Final = "workflow"
RUN_JOB: Final = "run_job"
BUILD_TRIGGER: Final = "build_trigger"

WORKFLOWS_INVOKER: Final = "roles/workflows.invoker"
RUN_JOBS_EXECUTOR_WITH_OVERRIDES: Final = "roles/run.jobsExecutorWithOverrides"
CLOUDBUILD_BUILDS_EDITOR: Final = "roles/cloudbuild.builds.editor"
PUBSUB_PUBLISHER: Final = "roles/pubsub.publisher"
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


# --- dedup-proxy-component-grants (resource policy), dedup-proxy-least-privilege (stack) ---


def _granted_to(members: list[Any] | None, account: ProxyAccount, resource: Resource) -> bool:
    """A grant to the proxy's account: by e-mail, or (member not known yet) by the grant's
    dependency on the proxy's Account resource."""
    if account.email and holds(members, account.email):
        return True
    unknown_member = members is None or any(is_unknown(m) for m in members)
    return unknown_member and bool(account.account_urns & set(resource.dependencies))


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
    facts = stack_facts(resources)
    declared = facts.custom_roles
    for proxy in facts.proxy_functions:
        account = facts.proxy_account(proxy)
        if account.email is None and not account.account_urns:
            continue  # nothing links any grant to this proxy yet
        proxy_targets = facts.proxy_targets(proxy)
        who = account.email or "(not known yet)"
        for resource, found in facts.granting:
            for grant in found:
                role = known_str(grant.role)
                if role is None or not _granted_to(grant.members, account, resource):
                    continue
                problem = _judge(role, resource, grant, proxy, proxy_targets, declared)
                if problem is not None:
                    findings.append(
                        Finding(
                            f"the proxy's account {who} ({label(proxy)}): {problem}",
                            resource.urn,
                        )
                    )
    return findings
