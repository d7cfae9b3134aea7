"""Preflight: the two APIs the program cannot enable itself, checked before anything else.

The program enables every API it uses (`gcp.projects.Service`), but enabling an API goes
through the Service Usage API, and the project lookup and project IAM go through the Cloud
Resource Manager API: with either disabled, `pulumi up` fails half-way with a long 403
(`SERVICE_DISABLED`). Those two must be enabled once per project, by hand:

    gcloud services enable cloudresourcemanager.googleapis.com serviceusage.googleapis.com \
        --project <project>

`check_prerequisites(project)` looks the project up (Cloud Resource Manager) and reads a
service's state (Service Usage) before any resource is declared, also under `pulumi
preview`. A lookup that fails because an API is disabled becomes `PrerequisiteError`, one
line naming the command above; any other failure (e.g. missing permissions) is passed on
unchanged. Google names the project whose API is off: the stack's project, or the quota
project of the credentials (user credentials bill API calls to theirs), which the message
points out.
"""

from __future__ import annotations

import re
from typing import Final

from infra import gcp

CLOUD_RESOURCE_MANAGER: Final = "cloudresourcemanager.googleapis.com"
SERVICE_USAGE: Final = "serviceusage.googleapis.com"
PREREQUISITE_APIS: Final = (CLOUD_RESOURCE_MANAGER, SERVICE_USAGE)
_TITLES: Final = {
    CLOUD_RESOURCE_MANAGER: "Cloud Resource Manager API",
    SERVICE_USAGE: "Service Usage API",
}

# How Google reports a disabled API: status PERMISSION_DENIED with reason SERVICE_DISABLED
# ("<Title> API has not been used in project <n> before or it is disabled. Enable it by
# visiting https://console.developers.google.com/apis/api/<service>/overview?project=<n>"),
# or the older reason accessNotConfigured.
_DISABLED = re.compile(
    r"SERVICE_DISABLED|accessNotConfigured|has not been used in project \S+ before or it is "
    r"disabled",
    re.IGNORECASE,
)
_PROJECT_IN_MESSAGE = re.compile(r"has not been used in project (\S+?)[ .]", re.IGNORECASE)


class PrerequisiteError(RuntimeError):
    """A project prerequisite the program cannot create itself is missing."""


def enable_command(project: str) -> str:
    return f"gcloud services enable {' '.join(PREREQUISITE_APIS)} --project {project}"


def disabled_api_message(project: str, lookup_api: str, error: str) -> str | None:
    """The one-line message for a lookup through `lookup_api` that failed with `error`, or
    None when `error` is not Google's "API disabled" error."""
    if not _DISABLED.search(error):
        return None
    # The error names the disabled service in its console link; else it is the lookup's own.
    named = [api for api in PREREQUISITE_APIS if api in error]
    api = named[0] if named else lookup_api
    reported = _PROJECT_IN_MESSAGE.search(error)
    where = f"project {project}"
    if reported is not None and reported.group(1) != project:
        where = (
            f"project {reported.group(1)} (Google's name for {project}, or your credentials' "
            "quota project)"
        )
    return (
        f"preflight: the {_TITLES[api]} ({api}) is disabled in {where}; the program needs it "
        "and the other of the Cloud Resource Manager and Service Usage APIs before it can "
        f"enable any API itself. Fix: {enable_command(project)}, wait a minute, then run "
        "pulumi up again"
    )


def check_prerequisites(project: str) -> None:
    """Look the project up (Cloud Resource Manager) and one service (Service Usage);
    raise `PrerequisiteError` if either API is disabled."""
    lookups = (
        (CLOUD_RESOURCE_MANAGER, lambda: gcp.organizations.get_project(project_id=project)),
        (
            SERVICE_USAGE,
            lambda: gcp.projects.get_project_service(project=project, service=SERVICE_USAGE),
        ),
    )
    for api, lookup in lookups:
        try:
            lookup()
        except Exception as exc:  # the engine reports a failed invoke as a plain Exception
            message = disabled_api_message(project, api, str(exc))
            if message is None:
                raise
            raise PrerequisiteError(message) from None
