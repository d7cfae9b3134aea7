"""Stack policies for the run watchdog: it runs as its own service account, and that account
holds no more than `roles/datastore.user` conditioned to the dedup database.

The watchdog is the `gcp:cloudfunctionsv2/function:Function` with the entry point
`watch_scheduled_runs`, or with DEDUP_WATCH_JOBS in its environment. It reads the dedup
records and writes its own cursor documents in the same database, so the database-conditioned
user role is all it needs. As a function of the kit, the other policies apply to it as well
(dedicated accounts, internal ingress, DEDUP_ALLOWED_CALLERS, invoker on its service only).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from policies.gcp import (
    FUNCTION_V2,
    WATCH_JOBS_ENV,
    WATCHDOG_ENTRY_POINT,
    type_module,
)
from policies.iam import DATASTORE_USER, datastore_user_single_database
from policies.model import Finding, Resource
from policies.proxy import _label, _runtime_email, functions_own_their_accounts, roles_held
from policies.values import as_mapping, get


def _env(function: Resource) -> Any:
    return get(function.props, "serviceConfig", "environmentVariables")


def is_watchdog_function(resource: Resource) -> bool:
    if resource.type != FUNCTION_V2:
        return False
    if get(resource.props, "buildConfig", "entryPoint") == WATCHDOG_ENTRY_POINT:
        return True
    env = as_mapping(_env(resource))
    return env is not None and WATCH_JOBS_ENV in env


def watchdog_functions(resources: Sequence[Resource]) -> list[Resource]:
    return [r for r in resources if is_watchdog_function(r)]


# --- dedup-watchdog-own-service-account -------------------------------------------------


def own_service_account(resources: Sequence[Resource]) -> list[Finding]:
    return functions_own_their_accounts(
        watchdog_functions(resources), resources, what="watchdog",
        why="which holds only roles/datastore.user on the dedup database",
        invoker_hint="use the stack's invoker account, which holds only roles/run.invoker on "
        "the kit's services",
    )


# --- dedup-watchdog-least-privilege -----------------------------------------------------


def least_privilege(resources: Sequence[Resource]) -> list[Finding]:
    """The watchdog's account holds roles/datastore.user, conditioned to one database, and
    nothing else."""
    findings: list[Finding] = []
    for watchdog in watchdog_functions(resources):
        email = _runtime_email(watchdog)
        if email is None:
            continue  # not known yet: the grants cannot be attributed to the watchdog
        prefix = f"the watchdog's account {email} ({_label(watchdog)})"
        for resource, role in roles_held(resources, email):
            if role != DATASTORE_USER:
                findings.append(
                    Finding(
                        f"{prefix}: {role} is not a role the watchdog needs: remove it "
                        f"(allowed: only {DATASTORE_USER}, conditioned to the dedup "
                        "database)",
                        resource.urn,
                    )
                )
                continue
            if type_module(resource.type) in ("folder", "organizations"):
                findings.append(
                    Finding(
                        f"{prefix}: {role} is granted at folder or organization level, "
                        "across every project: grant it in the dedup database's project, "
                        "conditioned to that database",
                        resource.urn,
                    )
                )
                continue
            for problem in datastore_user_single_database(resource.type, resource.props):
                findings.append(Finding(f"{prefix}: {problem}", resource.urn))
    return findings
