"""What one resource is to the kit, read from the resource itself: which function is the
dedup function, the idempotent proxy or the run watchdog, the account it runs as, the
DEDUP_* settings it reads and the database it keeps its records in, the targets the proxy
starts, which Scheduler job targets which function.

Per-resource readers only (the proxy's job table is read from the stack's source objects:
policies/job_tables.py); what takes the whole stack (which account is whose, who may call
or act as whom) is derived once per stack in policies/facts.py. A shared helper: it
imports no policy module.

- The dedup function is the `gcp:cloudfunctionsv2/function:Function` that runs one of the
  kit's entry points (the idempotent proxy is one as well) or reads DEDUP_* settings; a
  job targets it when its httpTarget.uri is the function's URL, a Cloud Run / Cloud
  Functions URL while the function's URL is not known, or not known itself (at preview
  the job's URI is the function's not-yet-known URL).
- The proxy is the function with the entry point `proxy_scheduled_job`, with a
  DEDUP_PROXY_* setting in its environment (infra always sets DEDUP_PROXY_TIMEOUT_SECONDS),
  or with the proxy's job table in its source archive. Its targets come from what
  function/dedup/proxy/handler.py reads: that table, proxy_routes.json = {"job-id":
  {"target": ..., "resource": "projects/P/locations/L/..."}}, and DEDUP_PROXY_TARGET +
  DEDUP_PROXY_RESOURCE. A resource declared inside the kit's DedupProxy component carries
  the component's type in its URN, which links it to the proxy before any output is known.
- The watchdog is the function with the entry point `watch_scheduled_runs`, or with a
  DEDUP_WATCH_* setting in its environment (its job list travels in its source archive).
- A runtime's function (infra/job_runtime.py) is a dedup function labelled
  `kit-runtime: <name>`; it runs as the runtime's own account, keeps its records in its
  own database (its DEDUP_DATABASE) and declares the Secret Manager secrets it reads
  (serviceConfig.secretEnvironmentVariables[].secret, secretVolumes[].secret).

Values a function does not set take the function's own defaults (function/dedup/settings.py).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from infra.source import PROXY_ROUTES_TABLE
from policies.gcp import (
    CLOUD_BUILD_TRIGGER,
    CLOUD_RUN_V1_SERVICE,
    CLOUD_RUN_V2_JOB,
    CLOUD_RUN_V2_SERVICE,
    DEDUP_DEFAULTS,
    DEDUP_ENTRY_POINT,
    FUNCTION_V1,
    FUNCTION_V2,
    PROXY_COMPONENT,
    PROXY_ENTRY_POINT,
    PROXY_RESOURCE_ENV,
    PROXY_SETTINGS_PREFIX,
    PROXY_TARGET_ENV,
    SCHEDULER_JOB,
    WATCH_SETTINGS_PREFIX,
    WATCHDOG_ENTRY_POINT,
    WORKFLOWS_WORKFLOW,
    service_account_email,
)
from policies.job_tables import job_table
from policies.model import Resource
from policies.urls import NormalUrl, normal_url
from policies.values import MISSING, UNKNOWN, as_list, as_mapping, get, is_unknown, known_str

DEFAULT_DATABASE: Final = "(default)"
_RUN_HOSTS: Final = (".run.app", ".cloudfunctions.net")

# The watchdog's settings (function/dedup/watchdog/settings.py, cloud_tasks.py): set when
# it delivers runs, to the dedup function, to the proxy (its proxied jobs') and to the
# runtimes (a JSON object runtime name -> URL); its deliveries' Cloud Tasks queue; its own
# database (its cursors and the re-run queue).
TARGET_URL_ENV: Final = "DEDUP_WATCH_TARGET_URL"
PROXY_URL_ENV: Final = "DEDUP_WATCH_PROXY_URL"
RUNTIME_URLS_ENV: Final = "DEDUP_WATCH_RUNTIME_URLS"
DELIVERY_URL_ENVS: Final = (TARGET_URL_ENV, PROXY_URL_ENV, RUNTIME_URLS_ENV)
QUEUE_ENV: Final = "DEDUP_WATCH_QUEUE"
TASK_ACCOUNT_ENV: Final = "DEDUP_WATCH_TASK_ACCOUNT"
"""The account whose OIDC tokens the watchdog's tasks carry (its own)."""
WATCH_DATABASE_ENV: Final = "DEDUP_WATCH_DATABASE"

# Where each kind of workload names the service account it runs as.
RUNTIME_ACCOUNT_PATHS: Final[Mapping[str, tuple[str, ...]]] = {
    FUNCTION_V2: ("serviceConfig", "serviceAccountEmail"),
    CLOUD_RUN_V2_SERVICE: ("template", "serviceAccount"),
    CLOUD_RUN_V1_SERVICE: ("template", "spec", "serviceAccountName"),
    CLOUD_RUN_V2_JOB: ("template", "template", "serviceAccount"),
    FUNCTION_V1: ("serviceAccountEmail",),
    WORKFLOWS_WORKFLOW: ("serviceAccount",),
    CLOUD_BUILD_TRIGGER: ("serviceAccount",),
}


def label(resource: Resource) -> str:
    """The resource's own name (a function's or job's ID) if known, else its Pulumi name."""
    return repr(known_str(get(resource.props, "name")) or resource.name)


def runtime_email(resource: Resource) -> str | None:
    """The known runtime service account of a function, Cloud Run service / job, workflow
    or build trigger."""
    path = RUNTIME_ACCOUNT_PATHS.get(resource.type)
    if path is None:
        return None
    email = known_str(get(resource.props, *path))
    return service_account_email(email) if email else None


# --- a function's DEDUP_* settings (function/dedup/settings.py) ---------------------------


def environment(function: Resource) -> Any:
    """serviceConfig.environmentVariables: a mapping, UNKNOWN or MISSING."""
    return get(function.props, "serviceConfig", "environmentVariables")


def setting(function: Resource, key: str) -> Any:
    """The function's DEDUP_* value (a string), its default, or UNKNOWN."""
    env = environment(function)
    if is_unknown(env):
        return UNKNOWN
    value = get(env, key)
    if value is MISSING:
        return DEDUP_DEFAULTS[key]
    return value


def database_id(value: Any) -> Any:
    """A Firestore database ID from an ID or a `projects/P/databases/D` name; unset or
    empty is the default database (as the function and the provider read it)."""
    if value is MISSING or value == "":
        return DEFAULT_DATABASE
    if isinstance(value, str) and "/databases/" in value:
        return value.rsplit("/databases/", 1)[1]
    return value


@dataclass(frozen=True)
class RecordsDatabase:
    """The Firestore database a function of the kit keeps its run records in."""

    project: str | None
    """None: not known yet (a name is then matched by its database ID alone)."""
    database: str

    def same_as(self, other: RecordsDatabase) -> bool:
        """The same database ID in the same project (or a project not known yet)."""
        return self.database == other.database and (
            self.project is None or other.project is None or self.project == other.project
        )

    def named_by(self, name: str) -> bool:
        """`projects/P/databases/D` (an IAM condition's resource.name) is this database."""
        project, _, database = name.removeprefix("projects/").partition("/databases/")
        return self.same_as(RecordsDatabase(project or None, database))

    def resource_name(self, default_project: str = "P") -> str:
        """`projects/P/databases/D`, as an IAM condition names it."""
        return f"projects/{self.project or default_project}/databases/{self.database}"

    def __str__(self) -> str:
        return self.database if self.project is None else self.resource_name()


def declared_database(database: Resource) -> RecordsDatabase | None:
    """The database a gcp.firestore.Database resource declares; None while its name is
    not known."""
    name = known_str(get(database.props, "name"))
    if name is None:
        return None
    return RecordsDatabase(known_str(get(database.props, "project")), str(database_id(name)))


def records_database(function: Resource) -> RecordsDatabase | None:
    """DEDUP_DATABASE (default "(default)") in DEDUP_PROJECT (default: the function's own
    project); None while the database is not known."""
    database = known_str(database_id(setting(function, "DEDUP_DATABASE")))
    if database is None:
        return None
    project = get(environment(function), "DEDUP_PROJECT")
    if project is MISSING or project == "":
        project = get(function.props, "project")
    return RecordsDatabase(known_str(project), database)


def named_databases(function: Resource) -> Iterator[tuple[str, RecordsDatabase]]:
    """(setting, database) for each DEDUP_*DATABASE setting of a function of the kit
    (DEDUP_DATABASE, unset: the (default) database; a watchdog's DEDUP_WATCH_DATABASE)."""
    env = as_mapping(environment(function))
    if env is None:
        if not is_unknown(environment(function)):
            yield "DEDUP_DATABASE", RecordsDatabase(
                known_str(get(function.props, "project")), DEFAULT_DATABASE)
        return
    keys = {str(k) for k in env if str(k).startswith("DEDUP_") and str(k).endswith("DATABASE")}
    keys.add("DEDUP_DATABASE")  # unset: the (default) database
    project = get(env, "DEDUP_PROJECT")
    if project is MISSING or project == "":
        project = get(function.props, "project")
    for key in sorted(keys):
        name = known_str(database_id(get(env, key)))
        if name is not None:
            yield key, RecordsDatabase(known_str(project), name)


# --- the dedup function and the jobs that target it -------------------------------------


def is_dedup_function(resource: Resource) -> bool:
    """The dedup function, or the idempotent proxy (same protocol, same DEDUP_* settings)."""
    if resource.type != FUNCTION_V2:
        return False
    if get(resource.props, "buildConfig", "entryPoint") in (DEDUP_ENTRY_POINT, PROXY_ENTRY_POINT):
        return True
    env = as_mapping(environment(resource))
    return env is not None and any(str(k).startswith("DEDUP_") for k in env)


def job_uri(job: Resource) -> Any:
    """A Scheduler job's httpTarget.uri: a string, UNKNOWN, or MISSING (no HTTP target)."""
    if job.type != SCHEDULER_JOB:
        return MISSING
    target = get(job.props, "httpTarget")
    return MISSING if target is MISSING else get(target, "uri")


def function_urls(function: Resource) -> list[NormalUrl]:
    """The function's known URLs (url, serviceConfig.uri), normalised (policies/urls.py)."""
    found: list[NormalUrl] = []
    for value in (get(function.props, "url"), get(function.props, "serviceConfig", "uri")):
        text = known_str(value)
        normal = normal_url(text) if text else None
        if normal is not None and normal not in found:
            found.append(normal)
    return found


def url_targets(uri: str, url: NormalUrl) -> bool:
    """`uri` is the function URL `url` itself or a path below it, compared by normalised
    origin and path (the proxy's ".../<name>-proxy" URL does not target the function
    ".../<name>"); a URI that is no plain http(s) URL may target any (fail closed)."""
    target = normal_url(uri)
    return target is None or target.within(url)


def targets_by_host(uri: str) -> bool:
    """`uri` is a Cloud Run / Cloud Functions URL (or no plain URL: fail closed): it may
    target a function whose URL is not known yet."""
    target = normal_url(uri)
    return target is None or target.host.endswith(_RUN_HOSTS)


def job_targets(job: Resource, function: Resource) -> bool:
    uri = job_uri(job)
    if is_unknown(uri):
        return True
    text = known_str(uri)
    if text is None:
        return False
    urls = function_urls(function)
    if urls:
        return any(url_targets(text, u) for u in urls)
    return targets_by_host(text)


def oidc_email(job: Resource) -> Any:
    """The e-mail of the account a Scheduler job sends OIDC tokens of: a string, UNKNOWN or
    MISSING."""
    return get(job.props, "httpTarget", "oidcToken", "serviceAccountEmail")


# --- the run watchdog ---------------------------------------------------------------------


def is_watchdog_function(resource: Resource) -> bool:
    if resource.type != FUNCTION_V2:
        return False
    if get(resource.props, "buildConfig", "entryPoint") == WATCHDOG_ENTRY_POINT:
        return True
    env = as_mapping(environment(resource))
    return env is not None and any(str(k).startswith(WATCH_SETTINGS_PREFIX) for k in env)


def has_own_database(watchdog: Resource) -> bool:
    """It names a database of its own (DEDUP_WATCH_DATABASE), known or not yet."""
    env = as_mapping(environment(watchdog))
    value = get(env, WATCH_DATABASE_ENV) if env is not None else MISSING
    return value is not MISSING and value != ""


def own_database(watchdog: Resource) -> RecordsDatabase | None:
    """Its DEDUP_WATCH_DATABASE (in its DEDUP_PROJECT); None if unset or not known yet."""
    env = as_mapping(environment(watchdog))
    if env is None or not has_own_database(watchdog):
        return None
    name = known_str(database_id(get(env, WATCH_DATABASE_ENV)))
    records = records_database(watchdog)
    if name is None or records is None:
        return None
    return RecordsDatabase(records.project, name)


def task_account(watchdog: Resource) -> Any:
    """The e-mail its deliveries' tasks send OIDC tokens of (DEDUP_WATCH_TASK_ACCOUNT,
    lower case): a string, UNKNOWN or MISSING."""
    value = get(environment(watchdog), TASK_ACCOUNT_ENV)
    text = known_str(value)
    return service_account_email(text) if text else value


def delivers_runs(watchdog: Resource) -> bool:
    """A watchdog that delivers runs itself (catch-up, operator re-runs): infra gives it
    DEDUP_WATCH_TARGET_URL (the dedup function's), DEDUP_WATCH_PROXY_URL (the proxy's) or
    DEDUP_WATCH_RUNTIME_URLS (the runtimes' it delivers to)."""
    env = as_mapping(environment(watchdog))
    return env is not None and any(key in env for key in DELIVERY_URL_ENVS)


# --- a runtime's function, and the secrets a function declares --------------------------

RUNTIME_LABEL: Final = "kit-runtime"
"""The label naming the runtime a function of the kit is (infra/job_runtime.py)."""

Secret = tuple[str | None, str]
"""(project or None if not known, secret ID)."""


def runtime_name(function: Resource) -> str | None:
    """The runtime a function is (its `kit-runtime` label), None for any other function."""
    if function.type != FUNCTION_V2:
        return None
    return known_str(get(function.props, "labels", RUNTIME_LABEL))


def build_account(function: Resource) -> str | None:
    """The known e-mail of the account a function builds with (buildConfig.serviceAccount)."""
    email = known_str(get(function.props, "buildConfig", "serviceAccount"))
    return service_account_email(email) if email else None


def secret_of(value: str, project: str | None) -> Secret:
    """`projects/P/secrets/S` or `S` (in `project`)."""
    if value.startswith("projects/") and "/secrets/" in value:
        return value.split("/")[1], value.rsplit("/secrets/", 1)[1].split("/")[0]
    return project, value


def same_secret(a: Secret, b: Secret) -> bool:
    """The same secret ID in the same project (or a project not known yet)."""
    return a[1] == b[1] and (a[0] is None or b[0] is None or a[0] == b[0])


def _secret_entries(function: Resource) -> Any:
    """The function's secret environment variables and volumes: a list, or UNKNOWN."""
    found: list[Any] = []
    for key in ("secretEnvironmentVariables", "secretVolumes"):
        listed = get(function.props, "serviceConfig", key)
        if is_unknown(listed):
            return UNKNOWN
        found += as_list(listed) or []
    return found


def declared_secrets(function: Resource) -> tuple[Secret, ...] | None:
    """The secrets a function reads (secretEnvironmentVariables[].secret, secretVolumes[].
    secret, each in its projectId or the function's project); None while one is not
    known."""
    entries = _secret_entries(function)
    if is_unknown(entries):
        return None
    project = known_str(get(function.props, "project"))
    found: list[Secret] = []
    for entry in entries:
        secret, owner = get(entry, "secret"), get(entry, "projectId")
        if is_unknown(secret) or is_unknown(owner):
            return None
        text = known_str(secret)
        if text is not None:
            found.append(secret_of(text, known_str(owner) or project))
    return tuple(found)


TOKEN_SECRET_ENV: Final = "DEDUP_TOKEN_SECRET"
"""function/dedup/proxy/tokens.py reads the proxy's token secret from this variable."""


def token_secrets(proxy: Resource) -> list[Secret]:
    """The secrets the proxy's DEDUP_TOKEN_SECRET secret environment variable names."""
    found: list[Secret] = []
    project = known_str(get(proxy.props, "project"))
    for entry in as_list(get(proxy.props, "serviceConfig", "secretEnvironmentVariables")) or []:
        if get(entry, "key") != TOKEN_SECRET_ENV:
            continue
        secret = known_str(get(entry, "secret"))
        if secret is not None:
            found.append(secret_of(secret, known_str(get(entry, "projectId")) or project))
    return found


# --- the idempotent proxy -------------------------------------------------------------------


def is_proxy_function(resource: Resource, resources: Sequence[Resource] = ()) -> bool:
    """The proxy: by its entry point, a setting of the proxy's or, among `resources` (the
    stack, or its source objects), a source object holding the proxy's job table."""
    if resource.type != FUNCTION_V2:
        return False
    if get(resource.props, "buildConfig", "entryPoint") == PROXY_ENTRY_POINT:
        return True
    env = as_mapping(environment(resource))
    if env is not None and any(str(k).startswith(PROXY_SETTINGS_PREFIX) for k in env):
        return True
    routes = job_table(resource, resources, PROXY_ROUTES_TABLE) if resources else MISSING
    return routes is not MISSING and not is_unknown(routes)


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
    env = environment(function)
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


def in_proxy_component(resource: Resource) -> bool:
    """Declared inside the kit's DedupProxy component (its URN's type chain names it)."""
    parts = resource.urn.split("::")
    return len(parts) >= 4 and f"{PROXY_COMPONENT}$" in parts[2]


def component_prefix(resource: Resource) -> str | None:
    """The type chain and name prefix shared by children of the same component."""
    parts = resource.urn.split("::")
    if len(parts) < 4 or "$" not in parts[2]:
        return None
    return parts[2].rsplit("$", 1)[0]


def account_email(account: Resource) -> str | None:
    """A service account's e-mail: known, or fixed by its accountId and project."""
    email = known_str(get(account.props, "email"))
    if email:
        return email.lower()
    account_id = known_str(get(account.props, "accountId"))
    project = known_str(get(account.props, "project"))
    if account_id and project:
        return f"{account_id}@{project}.iam.gserviceaccount.com".lower()
    return None


# --- alerting ------------------------------------------------------------------------------


def notifies(alert_policy: Resource) -> bool:
    """The alert policy names a notification channel (or ones not known yet)."""
    channels = get(alert_policy.props, "notificationChannels")
    if is_unknown(channels):
        return True
    listed = as_list(channels) or []
    return any(is_unknown(c) or known_str(c) for c in listed)
