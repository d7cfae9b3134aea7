"""Pass/fail fixtures for issue 39 ("Bring your own service"), in the pattern of cases.py:
Scheduler jobs with an App Engine HTTP target, and jobs aimed at a team's own Cloud Run
service, with the grants the kit makes for it (the invoker's run.invoker on that service,
the team account's records grant conditioned to its own database).
test_policy_cases.py runs them with the others.
"""

from __future__ import annotations

from typing import Any

from tests.policies.cases import JOB, Case, one
from tests.policies.fixtures import DELETE, PROJECT, REGION, U, job_props, patch

APP_SERVICE = "inventory"
APP_ROUTE = "/tasks/export"

CASES: dict[str, list[Case]] = {}


def app_engine_job_props(name: str = "inventory-export") -> dict[str, Any]:
    """A kit job aimed at a team's App Engine service: no OIDC token (the target has no
    such field), POST to a relative URI with the X-Dedup-* headers."""
    props = patch(job_props(name), "httpTarget", DELETE)
    props["attemptDeadline"] = "3600s"
    props["appEngineHttpTarget"] = {
        "httpMethod": "POST",
        "relativeUri": APP_ROUTE,
        "appEngineRouting": {"service": APP_SERVICE, "version": "v3"},
        "body": "e30=",
        "headers": {
            "Content-Type": "application/json",
            "X-Dedup-Project": PROJECT,
            "X-Dedup-Location": REGION,
        },
    }
    return props


def _app(path: str, value: Any) -> dict[str, Any]:
    return patch(app_engine_job_props(), path, value)


# An App Engine target carries no token: neither OIDC policy fails it.
CASES["scheduler-job-oidc-auth"] = [one("app-engine-job-no-oidc", JOB,
                                        app_engine_job_props(), False)]
CASES["scheduler-job-oidc-audience"] = [one("app-engine-job-no-audience", JOB,
                                            app_engine_job_props(), False)]
CASES["scheduler-job-attempt-deadline"] = [
    one("app-engine-deadline-1h", JOB, app_engine_job_props(), False),
    one("app-engine-deadline-24h", JOB, _app("attemptDeadline", "86400s"), False),
    one("app-engine-deadline-default", JOB, _app("attemptDeadline", DELETE), False),
    one("app-engine-deadline-over-24h", JOB, _app("attemptDeadline", "86401s"), True),
    one("app-engine-deadline-14s", JOB, _app("attemptDeadline", "14s"), True),
]
CASES["scheduler-job-app-engine-target"] = [
    one("app-engine-kit-job", JOB, app_engine_job_props(), False),
    one("app-engine-method-default", JOB, _app("appEngineHttpTarget.httpMethod", DELETE), False),
    one("app-engine-uri-unknown", JOB, _app("appEngineHttpTarget.relativeUri", U), False),
    one("app-engine-target-unknown", JOB, _app("appEngineHttpTarget", U), False),
    one("app-engine-http-job", JOB, job_props(), False),
    one("app-engine-uri-not-rooted", JOB,
        _app("appEngineHttpTarget.relativeUri", "tasks/export"), True),
    one("app-engine-uri-with-space", JOB,
        _app("appEngineHttpTarget.relativeUri", "/tasks/ export"), True),
    one("app-engine-get", JOB, _app("appEngineHttpTarget.httpMethod", "GET"), True),
]
