"""Facts the stack config, the program and the policy pack share, declared once: the
component type of a team's own service, Google's default runtime accounts, which
run.app URLs are a Cloud Run service's (`run_app_url_names_service`) and which appspot.com
URLs are a project's App Engine app's (`appspot_url_problem`).

Standard library only, and no import of the kit: the policy pack's own process loads this
module (policies/gcp.py re-exports it) without pydantic or Pulumi's gcp provider, as it
loads `infra.scheduler_rules` (tests/policies/test_packaging.py).
"""

from __future__ import annotations

import re
from typing import Final

TEAM_SERVICE_COMPONENT_TYPE: Final = "scheduler-dedup:index:TeamService"
"""The type of what the kit declares around a team's own service (infra/team_service.py),
in its children's URNs, where the policy pack finds them."""

# Google's default runtime accounts: Compute Engine's (`PROJECT_NUMBER-compute@developer...`)
# and App Engine's (`PROJECT_ID@appspot...`). Both are often granted Editor, which holds
# datastore.user on every database of the project: a grant conditioned to one database adds
# nothing to such an account, and code running as it is bounded by nothing the kit declares.
_APP_ENGINE_DEFAULT_ACCOUNT: Final = re.compile(r"^[^@]+@appspot\.gserviceaccount\.com$")
_COMPUTE_DEFAULT_ACCOUNT_DOMAIN: Final = "-compute@developer.gserviceaccount.com"


def account_email(member: str) -> str:
    """The lower-case e-mail in `serviceAccount:E`, `projects/P/serviceAccounts/E` or `E`."""
    email = member.strip().removeprefix("serviceAccount:")
    if "/serviceAccounts/" in email:
        email = email.rsplit("/serviceAccounts/", 1)[1]
    return email.lower()


def is_default_runtime_account(email: str) -> bool:
    """The Compute Engine or App Engine default service account (in any of
    `account_email`'s forms; the `-compute@` one also with a project ID for the number)."""
    address = account_email(email)
    return address.endswith(_COMPUTE_DEFAULT_ACCOUNT_DOMAIN) or bool(
        _APP_ENGINE_DEFAULT_ACCOUNT.match(address))


# Cloud Run gives a service two run.app URLs ("Invoke with an HTTPS request", Service URL,
# https://cloud.google.com/run/docs/triggering/https-request): a hash-based one for every
# service, `https://SERVICE-HASH-REGIONCODE.a.run.app`, and, when the DNS label fits in 63
# characters, the deterministic `https://[TAG---]SERVICE-PROJECT_NUMBER.REGION.run.app`
# (REGION the region's name, e.g. us-central1). Google documents neither the hash's length
# nor the region codes: the hash is taken as lowercase letters and digits (no '-', so the
# service's name is what comes before it), the code as two letters (uc, ew, uw, ...). A
# traffic tag's URL (`TAG---`) names one revision, not the service: refused.
_HASH_LABEL_TAIL: Final = re.compile(r"^-[a-z0-9]+-[a-z]{2}$")
_DETERMINISTIC_LABEL_TAIL: Final = re.compile(r"^-[0-9]+$")
_CLOUD_RUN_REGION: Final = re.compile(r"^[a-z]+-[a-z]+[0-9]+$")
_BASE_URL: Final = re.compile(r"^https://(?P<host>[a-z0-9.-]+)/?$")
DNS_LABEL_MAX_LENGTH: Final = 63


def run_app_url_problem(url: str, service: str, region: str | None = None) -> str | None:
    """What keeps `url` from being a run.app URL of Cloud Run service `service` (in `region`,
    when given: the deterministic form names it), or None when it is one.

    Accepted: `https://` + a lower-case host in one of the two forms above, and nothing
    else but an optional lone trailing '/' (it is the same base URL: the kit drops it); no
    port, user info, path, query or fragment."""
    found = _BASE_URL.match(url)
    if found is None:
        return ("is not https://<lower-case host> alone (no upper case, port, user info, "
                "path, query or fragment)")
    host = found["host"]
    label, _, domain = host.partition(".")
    if not label.startswith(f"{service}-") or len(label) > DNS_LABEL_MAX_LENGTH:
        return (f"does not start with https://{service}- (Cloud Run's URLs of service "
                f"{service!r} do)")
    tail = label[len(service):]
    if domain == "a.run.app":
        if _HASH_LABEL_TAIL.match(tail):
            return None
        return (f"is not of the form https://{service}-<hash>-<region code>.a.run.app "
                "(a traffic tag's or another service's URL?)")
    region_of_url, _, rest = domain.partition(".")
    if rest != "run.app" or not _DETERMINISTIC_LABEL_TAIL.match(tail) or (
            not _CLOUD_RUN_REGION.match(region_of_url)):
        return (f"is neither https://{service}-<hash>-<region code>.a.run.app nor "
                f"https://{service}-<project number>.<region>.run.app")
    if region is not None and region_of_url != region:
        return (f"names region {region_of_url!r}, not the service's region {region!r} "
                "(gcp:region)")
    return None


def run_app_url_names_service(url: str, service: str, region: str | None = None) -> bool:
    """Whether `url` is one of Cloud Run's run.app URLs of `service` (see
    `run_app_url_problem`): https, lower case, no port, user info, path (a lone '/' is
    accepted), query or fragment; `<service>-<hash>-<regioncode>.a.run.app` or
    `<service>-<projectnumber>.<region>.run.app`, whose region must be `region` if given."""
    return run_app_url_problem(url, service, region) is None


# App Engine's URLs ("How requests are routed", Routing with URLs,
# https://cloud.google.com/appengine/docs/standard/how-requests-are-routed): the app's
# `https://PROJECT_ID.REGION_ID.r.appspot.com` (REGION_ID.r is optional for apps created
# before February 2020), a service's or version's with `SERVICE-dot-` or
# `VERSION-dot-SERVICE-dot-` before it. Nothing else is taken for the app: the watchdog
# sends its queue's tokens and a run's headers there.
_APPSPOT_PREFIX: Final = r"(?:[a-z0-9](?:[a-z0-9-]*[a-z0-9])?-dot-){0,2}"
_APPSPOT_REGION: Final = r"(?:\.[a-z0-9]{1,8}\.r)?"


def appspot_url_problem(url: str, project: str) -> str | None:
    """What keeps `url` from being an App Engine URL of project `project`'s app, or None.
    Accepted: `https://` + `[VERSION-dot-][SERVICE-dot-]PROJECT[.REGION_ID.r].appspot.com`,
    lower case, and nothing else but an optional lone trailing '/'."""
    found = _BASE_URL.match(url)
    if found is None:
        return ("is not https://<lower-case host> alone (no upper case, port, user info, "
                "path, query or fragment)")
    host = re.compile(rf"^{_APPSPOT_PREFIX}{re.escape(project)}{_APPSPOT_REGION}"
                      r"\.appspot\.com$")
    if not host.match(found["host"]):
        return (f"is not an appspot.com URL of the App Engine app of project {project!r} "
                f"(https://[SERVICE-dot-]{project}.REGION_ID.r.appspot.com)")
    return None
