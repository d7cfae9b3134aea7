"""The kit's names, and the IDs that follow from them: the Pulumi project name that is the
namespace of the kit's config keys (`kit_key`), the providers' namespaces it leaves alone,
gcp:project and gcp:region, and how a stack's resources are named from its `namePrefix`
(service accounts, Scheduler job IDs, the proxy's and the watchdog's databases beside the
dedup database) with the lengths Google allows them.
"""

from __future__ import annotations

from typing import Final

PROJECT_NAME: Final = "scheduler-dedup"
"""The Pulumi project name, and so the namespace of the kit's own config keys."""

GCP_PROJECT_KEY: Final = "gcp:project"
GCP_REGION_KEY: Final = "gcp:region"
PROVIDER_NAMESPACES: Final = ("gcp", "time", "pulumi")
"""Config namespaces read by others than the kit: the providers the program uses (gcp,
time) and Pulumi itself (e.g. pulumi:tags)."""
WATCHDOG_JOB_NAME: Final = "watchdog"
"""The watchdog's role name: its Scheduler job `<namePrefix>-watchdog`, its function and its
runtime account of the same name (so no `jobs[].name` may be `watchdog`)."""
SERVICE_ACCOUNT_ID_MAX_LENGTH: Final = 30
PROXY_DATABASE_SUFFIX: Final = "-proxy"
WATCH_DATABASE_SUFFIX: Final = "-watchdog"
DATABASE_ID_MAX_LENGTH: Final = 63


def kit_key(name: str) -> str:
    """`leaseSeconds` -> `scheduler-dedup:leaseSeconds`."""
    return f"{PROJECT_NAME}:{name}"


def service_account_id(name_prefix: str, role: str) -> str:
    """The kit's service account IDs: `<namePrefix>-<role>` (runtime, build, invoker, proxy,
    watchdog)."""
    return f"{name_prefix}-{role}"


def service_account_email(project: str, account_id: str) -> str:
    """A user-managed service account's e-mail, fixed by its ID and project."""
    return f"{account_id}@{project}.iam.gserviceaccount.com"


def scheduler_job_id(name_prefix: str, job_name: str) -> str:
    """The Cloud Scheduler job ID of `jobs[].name` in a stack: `<namePrefix>-<name>`.

    Job IDs are unique per project and region, so two stacks sharing a project keep apart
    only if the ID carries the stack's prefix. It is what the function receives as
    X-CloudScheduler-JobName, keys the functions' job tables (routes, watch list), and is part of
    every run's dedup key.
    """
    return f"{name_prefix}-{job_name}"


def proxy_database_of(database_name: str) -> str:
    """The proxy's own database beside the dedup database `database_name`."""
    return f"{database_name}{PROXY_DATABASE_SUFFIX}"


def watch_database_of(database_name: str) -> str:
    """The watchdog's own database (its cursors, the re-run requests) beside it."""
    return f"{database_name}{WATCH_DATABASE_SUFFIX}"


def runtime_database_of(database_name: str, runtime: str) -> str:
    """A runtime's own records database beside the dedup database `database_name`."""
    return f"{database_name}-{runtime}"
