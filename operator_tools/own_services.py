"""What the kit cannot see of a team's own services (`services[]`), as `make plan` prints it.

The kit declares a team service's records database, its account's claim on it, the
invoker's grant and the jobs (infra/team_service.py); the service itself is the team's.
Whether it runs the protocol library, who else may invoke it (and, if anyone may, whether
it verifies tokens itself: DEDUP_VERIFY_TOKEN_AUDIENCE), whether its ingress admits
Scheduler and the watchdog's queue, which account it really runs as and which DEDUP_*
settings it has: none of that is in the stack, so `make plan` names each as a checklist
item with the concrete values, never assumes it (docs/own-service.md).
"""

from __future__ import annotations

from infra.config import StackConfig, TeamServiceSettings
from infra.dedup_service import dedup_environment

HEADING = "What the kit cannot see (check each for your services; docs/own-service.md):"
NOT_A_DEFAULT_ACCOUNT = (
    "; a dedicated account, not the Compute Engine or App Engine default one (often Editor, "
    "which holds datastore.user on every database: that grant would bound nothing)")


def service_checklist(cfg: StackConfig, service: TeamServiceSettings) -> list[str]:
    """The checklist of one team service: one line per item, with the values to find."""
    jobs = [job for job in cfg.jobs if job.service == service.name]
    routes = ", ".join(sorted({f"POST {job.service_path}" for job in jobs}))
    deadline = max(job.attempt_deadline_seconds for job in jobs) if jobs else 0
    watchdog = cfg.watchdog_delivers_to(service=service.name)
    callers = [cfg.invoker_email, *([cfg.watchdog_email] if watchdog else [])]
    database = cfg.service_database(service)
    settings = dedup_environment(cfg.project, cfg.region, cfg.dedup, database)
    if service.cloud_run is not None:  # App Engine requests from Scheduler carry no token
        settings["DEDUP_ALLOWED_CALLERS"] = ",".join(callers)
    lines = [f"service {service.name} ({service.kind}):",
             f"  [ ] its code guards {routes} with the protocol library (function/dedup/adapters) "
             "and answers 409, never 503, while another attempt holds a run's claim"]
    if service.cloud_run is not None:
        lines += [
            f"  [ ] its IAM: who else holds roles/run.invoker (or run.admin, Editor, Owner) on "
            f"{service.cloud_run}: each could send a job's headers; the kit grants "
            f"{', '.join(callers)} only",
            f"  [ ] if it allows unauthenticated invocations (allUsers invoker, "
            "--allow-unauthenticated), Cloud Run verifies no token and anyone can send a "
            "job's headers with any e-mail: then its environment also has "
            f"DEDUP_VERIFY_TOKEN_AUDIENCE={service.url} (the library verifies the token "
            "itself; leave it unset on a service that requires authentication)",
            f"  [ ] its ingress admits requests to {service.url}: 'all', 'internal' or "
            "'internal-and-cloud-load-balancing' (Cloud Scheduler and Cloud Tasks of "
            f"{cfg.project} count as internal when the service is in the same project; "
            "https://cloud.google.com/run/docs/securing/ingress)",
            f"  [ ] it runs as {service.service_account} (its revision's service account; "
            f"the kit grants that account roles/datastore.user on {database} only"
            f"{NOT_A_DEFAULT_ACCOUNT})",
            f"  [ ] its request timeout is at least the jobs' attemptDeadlineSeconds "
            f"({deadline} s)",
        ]
    else:
        lines += [
            f"  [ ] who else can reach {routes} on it: App Engine requests from Scheduler "
            "carry no token (X-CloudScheduler and X-CloudScheduler-* can be sent by anyone), "
            "so no DEDUP_ALLOWED_CALLERS e-mail admits them: restrict who reaches the app "
            "(its firewall)",
            f"  [ ] it runs as {service.service_account} (its version's service account; the "
            f"kit grants that account roles/datastore.user on {database} only"
            f"{NOT_A_DEFAULT_ACCOUNT})",
            f"  [ ] its scaling type lets a request run for the jobs' attemptDeadlineSeconds "
            f"({deadline} s)",
        ]
        if watchdog:
            lines.append(f"  [ ] {service.url} admits the watchdog's Cloud Tasks deliveries "
                         "(HTTP requests with its OIDC token)")
    lines.append("  [ ] its environment has " + " ".join(
        f"{key}={value}" for key, value in sorted(settings.items())))
    return lines


def checklist(cfg: StackConfig) -> list[str]:
    """Every team service's checklist under one heading; [] for a stack without services."""
    if not cfg.services:
        return []
    return [HEADING, *(line for service in cfg.services
                       for line in service_checklist(cfg, service))]
