"""Stack policies on the team services a stack declares (issue 39, "Bring your own
service"): where the jobs' invoker may be granted invoke, where the jobs aimed at a team's
Cloud Run service send its token, and what the team service's own account may hold.

The principle is the kit's: judge the identity, not the resource type. The invoker's OIDC
token is what every function of the kit, and now each declared team service, accepts, so
the invoker may invoke exactly those (roles/run.invoker on the one service: a function of
the kit, or a team Cloud Run service the stack declares) and nothing else, whatever
resource grants it; the jobs aimed at a team Cloud Run service go to a run.app URL of the
service its component's invoker grant names. A team service runs the team's own code as
its own account: that account claims records in its own records database only (the grant
conditioned to it), and is none of the kit's accounts (whose tokens or records the team's
code would then hold) nor a default account (often a project Editor). The team service's
own IAM, ingress and code are the team's: the pack cannot see them (`make plan` names
them).
"""

from __future__ import annotations

from collections.abc import Sequence

from infra.shared_facts import appspot_url_problem, run_app_url_names_service
from policies.facts import StackFacts, stack_facts
from policies.gcp import is_default_runtime_account, service_account_email
from policies.grants import (
    PRIMITIVE_ROLES,
    condition_database,
    is_hierarchy_level,
    role_not_known_yet,
    role_permissions,
)
from policies.kit_resources import (
    RecordsDatabase,
    function_urls,
    job_uri,
    label,
    oidc_email,
    targets_by_host,
    url_targets,
)
from policies.model import Finding, Resource
from policies.permissions import INVOKE, RECORDS_ACCESS, SET_IAM
from policies.reach import SERVICE_IAM_NAME, granted_on
from policies.team_services import TeamService, service_not_known, watch_table_urls
from policies.urls import DEFAULT_PORTS, Origin, normal_url
from policies.values import get, is_unknown, known_str

# --- dedup-invoker-reach -----------------------------------------------------------------


def invoker_reach(resources: Sequence[Resource]) -> list[Finding]:
    """The accounts the stack's Scheduler jobs aimed at the kit's functions or a declared
    team service send OIDC tokens of (the jobs' invoker) hold a role allowing invoke or
    IAM changes only on one service the kit calls: a function of the kit (by name, project
    and location), or a team Cloud Run service the stack declares, granted on that service
    by its Cloud Run (v2) or function IAM; there, only roles that allow invoking it and
    nothing more."""
    facts = stack_facts(resources)
    declared = facts.custom_roles
    # A function of the kit whose name is not known yet may be the service any grant
    # names: service grants are judged once the names are known.
    unnamed = any(known_str(get(f.props, "name")) is None for f in facts.kit_functions)
    findings: list[Finding] = []
    for email in sorted(facts.invoker_emails):
        if facts.runtimes_running_as(email):
            continue  # dedup-runtime-account-not-a-caller reports a job-running account
        for resource, role, _ in facts.roles_held(email):
            if role in PRIMITIVE_ROLES:
                continue  # dedup-accounts-no-basic-roles: one violation per grant
            allowed = role_permissions(role, declared)
            if allowed is None and role_not_known_yet(role, declared):
                continue
            on_service = any(resource.type.startswith(p) for p in SERVICE_IAM_NAME)
            if on_service and (unnamed or service_not_known(resource)):
                continue  # not known yet
            called = facts.called_service(resource)
            if called is not None:
                if allowed is not None and not _beyond_invoking(allowed):
                    continue  # invoke only, on a service the kit calls
            elif allowed is not None and not allowed & (INVOKE | SET_IAM):
                continue
            what = ("a role the pack does not know (policies/permissions.py)"
                    if allowed is None else ", ".join(sorted(
                        _beyond_invoking(allowed) if called is not None
                        else allowed & (INVOKE | SET_IAM))))
            findings.append(Finding(
                f"{email}, whose OIDC tokens the stack's Scheduler jobs send, holds {role} "
                f"({what}) on {_where(facts, resource)}: every function of the kit and each "
                "declared team service accepts its tokens, so it may invoke only those: "
                "remove the grant; grant roles/run.invoker on the one Cloud Run service "
                "(gcp.cloudrunv2.ServiceIamMember) of a function of the kit or of a team "
                "service declared under `services`",
                resource.urn,
            ))
    return findings


def _beyond_invoking(allowed: frozenset[str]) -> frozenset[str]:
    """What a role granted on a service allows there besides invoking it (a job's
    permissions, such as roles/run.invoker's run.jobs.run, act on no service)."""
    return frozenset(p for p in allowed - INVOKE if not p.startswith("run.jobs."))


def _where(facts: StackFacts, resource: Resource) -> str:
    if is_hierarchy_level(resource.type):
        return f"{granted_on(resource)} (every service there)"
    called = facts.called_service(resource)
    if isinstance(called, TeamService):
        return f"{called} (a role allowing more than invoking it)"
    if called is not None:
        return f"the function {label(called)} of the kit (a role allowing more than invoking it)"
    name = known_str(get(resource.props, "name")) or known_str(
        get(resource.props, "service")) or resource.name
    return f"{resource.type} {name!r}, no service the kit calls"


# --- dedup-service-job-target ------------------------------------------------------------


def service_job_target(resources: Sequence[Resource]) -> list[Finding]:
    """A job aimed at a declared team Cloud Run service sends an OIDC token whose audience
    is the service's url (the one audience of every job aimed at it: the kit sets it to
    `services[].url`, which Cloud Run checks), and its uri lies under that url; a job
    that sends the invoker's token goes to a function of the kit or a declared team
    service, nowhere else."""
    facts = stack_facts(resources)
    findings: list[Finding] = []
    aimed = {id(job): service for job, service in facts.team_service_jobs}
    for job in facts.scheduler_jobs:
        uri = job_uri(job)
        if is_unknown(uri) or not isinstance(uri, str) or facts.functions_targeted(job):
            continue  # no HTTP target, not known yet, or the kit's own (scheduler-job-*)
        service = aimed.get(id(job))
        if service is not None:
            if service.cloud_run is not None:
                findings += _audience_problems(job, uri, service, facts)
            else:
                findings.append(Finding(
                    f"Scheduler job {label(job)} sends an HTTP request to {uri!r} for "
                    f"{service}, whose component grants the jobs' invoker roles/run.invoker "
                    "on no Cloud Run service: the job's token and target are then checked "
                    "against nothing: declare the service's cloudRun (the kit grants the "
                    "invoker run.invoker on it), or aim an App Engine service's job with "
                    "its appEngine target",
                    job.urn,
                ))
            continue
        sent = known_str(oidc_email(job))
        if sent and service_account_email(sent) in facts.invoker_emails and not (
                _may_call_the_kit(uri, facts)):
            findings.append(Finding(
                f"Scheduler job {label(job)} sends OIDC tokens of the jobs' invoker "
                f"{service_account_email(sent)} to {uri!r}, neither a function of the kit "
                "nor a team service the stack declares: declare the service under `services` "
                "(cloudRun, url, serviceAccount) and aim the job at it with `service`, or "
                "send tokens of an account of its own",
                job.urn,
            ))
    return findings + _watchdog_delivery_problems(facts)


def _may_call_the_kit(uri: str, facts: StackFacts) -> bool:
    """`uri` is (or, while a function's URL is not known yet, may be) a function of the
    kit's: the watchdog's among them."""
    urls = [function_urls(f) for f in facts.kit_functions]
    return any(url_targets(uri, u) for listed in urls for u in listed) or (
        targets_by_host(uri) and any(not listed for listed in urls))


def _watchdog_delivery_problems(facts: StackFacts) -> list[Finding]:
    """The watchdog delivers a team service's runs (its job table's `url`, with its own
    OIDC token) only under the url of the Cloud Run service the job is aimed at, or, for
    an App Engine service, to one origin per service, an appspot.com URL of the app of the
    job's project (no Cloud Run or function host: a function of the kit's among them); a
    job aimed at no declared team service has no such url."""
    by_id = {name: (job, service) for job, service in facts.team_service_jobs
             if (name := known_str(get(job.props, "name")))}
    findings: list[Finding] = []
    for watchdog in facts.watchdog_functions:
        table = sorted((watch_table_urls(watchdog, facts.resources) or {}).items())
        origins: dict[str, set[Origin]] = {}  # App Engine service -> the origins it gets
        for job_id, url in table:
            job, service = by_id.get(job_id, (None, None))
            if service is not None and service.cloud_run is None and (
                    target := normal_url(url)) is not None:
                origins.setdefault(service.component, set()).add(target.origin)
        for job_id, url in table:
            job, service = by_id.get(job_id, (None, None))
            target = normal_url(url)
            problem: str | None
            if job is None or service is None:
                problem = "which is aimed at no team service the stack declares"
            elif service.cloud_run is None:
                problem = _app_engine_delivery_problem(
                    url, job, service, len(origins.get(service.component, ())), facts)
            elif service.url is None:
                continue  # the jobs' audiences differ: dedup-service-job-target says so
            elif target is None or not target.within(service.url):
                problem = f"not under the url of {service}, {str(service.url)!r}"
            else:
                continue
            if problem is None:
                continue
            findings.append(Finding(
                f"the watchdog {label(watchdog)} delivers the runs of job {job_id!r} to "
                f"{url!r} (its job table), {problem}: its tasks carry the watchdog's OIDC "
                "token and the run's headers there: fix the table's source (the job's "
                "`service` and the service's url), or remove the url",
                watchdog.urn,
            ))
    return findings


def _app_engine_delivery_problem(url: str, job: Resource, service: TeamService,
                                 origin_count: int, facts: StackFacts) -> str | None:
    """What is wrong with `url` as where the watchdog delivers runs of App Engine
    `service` (services[].url, which only the table carries): it must be an https
    appspot.com URL of the app of the job's project (infra/shared_facts.py, the config's
    rule), no Cloud Run or function host, and the one origin of that service's runs; None
    if nothing is."""
    target = normal_url(url)
    if target is None or target.scheme != "https":
        return f"not an https URL of {service}"
    if targets_by_host(url) or any(target.host == u.host for f in facts.kit_functions
                                   for u in function_urls(f)):
        return (f"a Cloud Run or Cloud Functions host (a function of the kit's, or another "
                f"service's), not {service}")
    project = known_str(get(job.props, "project"))
    base = f"https://{target.host}" if target.port == DEFAULT_PORTS["https"] else url
    if project is not None and (problem := appspot_url_problem(base, project)) is not None:
        return f"whose origin {problem}"
    if origin_count > 1:
        return (f"while the table sends other runs of {service} elsewhere: one service has "
                "one url")
    return None


def _audience_problems(job: Resource, uri: str, service: TeamService,
                       facts: StackFacts) -> list[Finding]:
    audience = get(job.props, "httpTarget", "oidcToken", "audience")
    if is_unknown(audience):
        return []
    heard = normal_url(audience) if isinstance(audience, str) else None
    target = normal_url(uri)
    if service.url is None:
        sent = sorted({str(get(j.props, "httpTarget", "oidcToken", "audience"))
                       for j, s in facts.team_service_jobs if s is service})
        return [Finding(
            f"the jobs aimed at {service} send different OIDC audiences ({', '.join(sent)}): "
            "Cloud Run accepts only its own run.app URL: set each job's "
            "httpTarget.oidcToken.audience to the service's url (services[].url)",
            job.urn,
        )]
    url = service.url
    if heard is None or not heard.same_target(url) or target is None or (
            not target.within(url)) or url.scheme != "https" or url.path != "/" or url.query:
        return [Finding(
            f"Scheduler job {label(job)} calls {service} at {uri!r} with the OIDC audience "
            f"{audience!r}: the audience must be exactly the service's url (https, no path: "
            "services[].url, which Cloud Run checks) and the uri lie under it: set "
            "httpTarget.uri to the url plus the job's path and httpTarget.oidcToken.audience "
            "to the url",
            job.urn,
        )]
    run = service.cloud_run
    if run is not None and run.service is not None and not run_app_url_names_service(
            str(audience), run.service, run.location):
        return [Finding(
            f"Scheduler job {label(job)} calls {service} at {uri!r} with the OIDC audience "
            f"{audience!r}, which is no run.app URL of {run}, the service its component "
            "grants the jobs' invoker roles/run.invoker on: the invoker's token would go "
            "to another host: set services[].url to the service's run.app URL "
            f"(https://{run.service}-<hash>-<region code>.a.run.app or https://"
            f"{run.service}-<project number>.<region>.run.app)",
            job.urn,
        )]
    return []


# --- dedup-service-account-own-database ---------------------------------------------------


def service_account_own_database(resources: Sequence[Resource]) -> list[Finding]:
    """A team service's account holds a role reaching Firestore records only conditioned
    to its own records database: job code runs as it, and with another database's records
    (or every database of the project) it could make another function's run execute twice
    or never."""
    facts = stack_facts(resources)
    findings: list[Finding] = []
    for service in facts.team_services:
        own = service.database
        if own is None:
            continue  # not known yet
        for account in service.accounts:
            findings += _records_beyond(facts, service, account, own)
    return findings


def _records_beyond(facts: StackFacts, service: TeamService, account: str,
                    own: RecordsDatabase) -> list[Finding]:
    findings: list[Finding] = []
    for resource, role, grant in facts.roles_held(account):
        if role in PRIMITIVE_ROLES or not is_hierarchy_level(resource.type):
            continue  # basic roles: iam-no-primitive-roles; Firestore acts per project
        allowed = role_permissions(role, facts.custom_roles)
        if allowed is None and role_not_known_yet(role, facts.custom_roles):
            continue
        if allowed is not None and not allowed & RECORDS_ACCESS:
            continue
        named = condition_database(grant.condition)
        if is_unknown(named) or (isinstance(named, str) and own.named_by(named)):
            continue
        reach = (f"conditioned to {named!r}" if isinstance(named, str)
                 else "without a condition naming one database")
        findings.append(Finding(
            f"{account}, the account of {service}, holds {role} on "
            f"{granted_on(resource)} {reach}, not only its own records database "
            f"{str(own)!r}: the service's code could read or rewrite other run records "
            "(a run executed twice or never): remove the grant; the kit grants "
            "roles/datastore.user with the condition "
            f'resource.name == "{own.resource_name()}"',
            resource.urn,
        ))
    return findings


# --- dedup-service-account-not-kit --------------------------------------------------------


def service_account_not_kit(resources: Sequence[Resource]) -> list[Finding]:
    """A team service runs as an account of its own, none of the kit's (the invoker, the
    watchdog's, a function's runtime or build account, one the stack declares): its code
    would hold that account's tokens and grants."""
    facts = stack_facts(resources)
    kit = facts.kit_identities
    findings: list[Finding] = []
    for service in facts.team_services:
        for account in service.accounts:
            if account in kit:
                what = ("an account of the kit (what its functions run as, build with or its "
                        "jobs send tokens of): the service's code could mint that account's "
                        "tokens (which the kit's functions accept) or use its grants")
            elif is_default_runtime_account(account):
                what = ("the Compute Engine or App Engine default account (often a project "
                        "Editor): the service's code would hold every grant it has, and "
                        "whatever else runs as it, the service's records")
            else:
                continue
            findings.append(Finding(
                f"{service} runs as {account}, {what}: run the service as an account of "
                "its own and set services[].serviceAccount to it",
                service.component,
            ))
    return findings
