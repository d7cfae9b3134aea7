"""A team's own services (`services`): existing services that the kit's jobs call.

A team service runs the protocol library itself (docs/own-service.md): the kit does not
build or deploy it. For each one the kit declares its own records database (with the TTL
policy), the grant that lets the service's runtime account claim records there (and no
other database), and, for a Cloud Run service (a Cloud Run function 2nd gen is one),
roles/run.invoker on that one service for the invoker account (and the watchdog's, when it
delivers runs). A job names its service (`jobs[].service`) and the route to POST to
(`jobs[].path`). Each model here checks its own fields; the rules across services and jobs
(names, the job's deadline for its kind of target, catch-ups) are `services_in_stack`'s.
Which run.app URLs are a Cloud Run service's (`run_app_url_names_service`) is declared in
infra/shared_facts.py, which the policy pack loads too.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import ClassVar, Final
from urllib.parse import urlsplit

from pydantic import Field, field_validator, model_validator

from infra.config.errors import ProblemList, did_you_mean, invalid
from infra.config.fields import ConfigModel, Hint
from infra.config.names import DATABASE_ID_MAX_LENGTH, runtime_database_of
from infra.config.runtimes import RESERVED_RUNTIME_NAMES, RUNTIME_NAME
from infra.scheduler_rules import (
    APP_ENGINE_ATTEMPT_DEADLINE_MAX_SECONDS,
    ATTEMPT_DEADLINE_MAX_SECONDS,
)
from infra.shared_facts import (
    appspot_url_problem,
    is_default_runtime_account,
    run_app_url_problem,
)
from infra.shared_facts import run_app_url_names_service as run_app_url_names_service

CLOUD_RUN_SERVICE: Final = r"^[a-z](?:[a-z0-9-]{0,61}[a-z0-9])?$"
"""A Cloud Run service's name: lowercase letters, digits and '-', starting with a letter."""
APP_ENGINE_ID: Final = r"^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$"
"""An App Engine service or version ID: lowercase letters, digits and '-'."""
SERVICE_ACCOUNT_EMAIL: Final = (r"^[a-z0-9][a-z0-9.-]{0,98}@[a-z0-9][a-z0-9.-]*"
                               r"\.gserviceaccount\.com$")
DESCRIBE_URL: Final = ("gcloud run services describe {name} --region <region> "
                       "--format='value(status.url)'")

RUN_APP_HOST: Final = re.compile(r"^[a-z0-9-]+(\.[a-z0-9-]+)*\.run\.app$")
"""Any run.app host: what a Cloud Run URL is before it is matched to its service."""


def url_origin(url: str) -> str | None:
    """`https://host` of an https URL with nothing else (no path but '/', query, user info
    or fragment); None otherwise."""
    parts = urlsplit(url)
    if (parts.scheme != "https" or not parts.hostname or parts.username is not None
            or parts.path not in ("", "/") or parts.query or parts.fragment):
        return None
    return f"https://{parts.netloc}"


class AppEngineTarget(ConfigModel):
    """Where on App Engine a job's requests go (Scheduler's AppEngineRouting)."""

    setting_of: ClassVar[str] = "an appEngine setting"
    service: str = Field(
        default="default", pattern=APP_ENGINE_ID, description="The App Engine service "
        "(`default` unless the app has others)",
        json_schema_extra=Hint("an App Engine service ID", "use the service's ID, e.g. "
                               "default or worker"))
    version: str | None = Field(
        default=None, pattern=APP_ENGINE_ID, description="The version; unset: the one "
        "serving the service's traffic",
        json_schema_extra=Hint("an App Engine version ID", "use the version's ID, e.g. v2, "
                               "or leave it unset for the serving version"))


class TeamServiceSettings(ConfigModel):
    """One team service: a Cloud Run service (or function) or an App Engine service."""

    setting_of: ClassVar[str] = "a service setting"
    name: str = Field(
        pattern=RUNTIME_NAME, description="Unique in the stack, not a runtime's name; its "
        "records database is `<databaseName>-<name>`",
        json_schema_extra=Hint("a service name", "use 2-22 lowercase letters, digits or '-', "
                               "starting with a letter, e.g. exports"))
    cloud_run: str | None = Field(
        default=None, pattern=CLOUD_RUN_SERVICE, description="A Cloud Run service (a Cloud "
        "Run function 2nd gen is one) of gcp:project in gcp:region; not with appEngine",
        json_schema_extra=Hint("a Cloud Run service name", "use the service's name, e.g. "
                               "exports-api"))
    app_engine: AppEngineTarget | None = Field(
        default=None, description="An App Engine service of gcp:project (`service`, "
        "`version`); not with cloudRun")
    url: str | None = Field(
        default=None, description="With cloudRun: its run.app URL, the jobs' target base and "
        "OIDC audience (required). With appEngine: its https URL (e.g. "
        "https://PROJECT.REGION_ID.r.appspot.com), where the watchdog delivers catch-ups and "
        "re-runs (needed for catchUp and watchdog.reruns)",
        json_schema_extra=Hint("an https URL", "give the service's https URL with no path, "
                               "e.g. https://exports-api-abc123-uw.a.run.app"))
    service_account: str = Field(
        pattern=SERVICE_ACCOUNT_EMAIL, description="The service's runtime account: it may "
        "claim runs in the records database the kit declares for this service (and no other)",
        json_schema_extra=Hint("a service account e-mail", "give the account the service runs "
                               "as, e.g. exports-api@my-project.iam.gserviceaccount.com"))

    @field_validator("name")
    @classmethod
    def _not_reserved(cls, name: str) -> str:
        if name in RESERVED_RUNTIME_NAMES:
            raise invalid(f"{name!r} is the name of one of the kit's own accounts, functions "
                          "or databases", "choose another name, e.g. exports")
        return name

    @field_validator("service_account")
    @classmethod
    def _not_a_default_account(cls, account: str) -> str:
        if is_default_runtime_account(account):
            which = "Compute Engine" if "-compute@" in account else "App Engine"
            raise invalid(f"{account!r} is the project's {which} default account, which is "
                          "often granted Editor: that holds datastore.user "
                          "on every database of the project, so the kit's claim conditioned "
                          "to the service's records database would bound nothing",
                          "run the service as a dedicated account (gcloud iam "
                          "service-accounts create NAME, then deploy the service with "
                          "--service-account NAME@PROJECT.iam.gserviceaccount.com) and give "
                          "it here")
        return account

    @field_validator("url")
    @classmethod
    def _an_origin(cls, url: str | None) -> str | None:
        if url is None:
            return None
        origin = url_origin(url)
        if origin is None:
            raise invalid(f"{url!r} is not an https URL without a path", "give the "
                          "service's base URL (https://host, no path: the job's path is "
                          "jobs[].path)")
        return origin

    @model_validator(mode="after")
    def _one_kind(self) -> TeamServiceSettings:
        if (self.cloud_run is None) == (self.app_engine is None):
            raise invalid("gives both cloudRun and appEngine" if self.cloud_run else "gives "
                          "neither cloudRun nor appEngine", "give exactly one: cloudRun "
                          "(a Cloud Run service or function) or appEngine ({service, "
                          "version})", "cloudRun")
        if self.cloud_run is not None:
            if self.url is None:
                raise invalid(f"is not set for Cloud Run service {self.cloud_run!r}: it is "
                              "the jobs' target and their OIDC token's audience, which Cloud "
                              "Run checks", "set url to its run.app URL ("
                              + DESCRIBE_URL.format(name=self.cloud_run) + ")", "url")
            host = urlsplit(self.url).hostname or ""
            if not RUN_APP_HOST.match(host):
                raise invalid(f"{self.url!r} is not a run.app URL: Cloud Run checks a token's "
                              "audience against the service's run.app URL (a custom domain "
                              "needs custom audiences the kit cannot see)", "give its run.app "
                              "URL (" + DESCRIBE_URL.format(name=self.cloud_run) + ")", "url")
            # The region is the stack's (gcp:region): `services_in_stack` checks it.
            if (wrong := run_app_url_problem(self.url, self.cloud_run)) is not None:
                raise invalid(f"{self.url!r} {wrong}: it is not a URL of {self.kind}, so the "
                              "jobs would call another service, or none", "give the "
                              f"service's own run.app URL, which starts with https://"
                              f"{self.cloud_run}- (" + DESCRIBE_URL.format(
                                  name=self.cloud_run) + ")", "url")
        return self

    @property
    def kind(self) -> str:
        """`Cloud Run service X` or `App Engine service Y (version V)`, for messages."""
        if self.cloud_run is not None:
            return f"Cloud Run service {self.cloud_run!r}"
        assert self.app_engine is not None
        version = f" version {self.app_engine.version!r}" if self.app_engine.version else ""
        return f"App Engine service {self.app_engine.service!r}{version}"

    @property
    def max_attempt_deadline_seconds(self) -> int:
        """Scheduler's bound on a job's attemptDeadline for this kind of target."""
        return (ATTEMPT_DEADLINE_MAX_SECONDS if self.cloud_run is not None
                else APP_ENGINE_ATTEMPT_DEADLINE_MAX_SECONDS)


# --------------------------------------------------------------------------- across a stack


def services_in_stack(
    services: Sequence[TeamServiceSettings],
    *,
    runtime_names: Sequence[str],
    job_targets: Sequence[tuple[str | None, int, bool]],
    database: str,
    region: str,
    project: str,
    kit_accounts: Mapping[str, str],
    reruns: bool,
    problems: ProblemList,
) -> None:
    """The rules across the stack's services and jobs, added to `problems`. `job_targets`:
    each job's (service, attemptDeadlineSeconds, catchUp), by index; `region`: gcp:region, where
    a Cloud Run service must be; `project`: gcp:project, whose App Engine app an App Engine
    service's url must be; `kit_accounts`: each of the kit's own accounts' e-mail ->
    what it is (`StackConfig.kit_accounts`); `reruns`: whether the
    watchdog delivers `make rerun`'s runs (watchdog.enabled and watchdog.reruns)."""
    known = [service.name for service in services]
    first: dict[str, int] = {}
    used = {name for name, _, _ in job_targets if name is not None}
    for index, service in enumerate(services):
        at = ("services", index)
        if service.name in first:
            problems.add((*at, "name"), f"{service.name!r} is already the name of "
                         f"services[{first[service.name]}]", "give every service a unique name")
        first.setdefault(service.name, index)
        if service.name in runtime_names:
            problems.add((*at, "name"), f"{service.name!r} is also a runtime's name, and both "
                         f"would have the records database '{database}-{service.name}'",
                         "give the service another name")
        if len(own := runtime_database_of(database, service.name)) > DATABASE_ID_MAX_LENGTH:
            problems.add((*at, "name"), f"makes its records database ID {own!r} {len(own)} "
                         f"characters long (at most {DATABASE_ID_MAX_LENGTH})", "shorten the "
                         "service's name or databaseName")
        if service.name not in used:
            problems.add((*at, "name"), f"no job calls service {service.name!r}, which would "
                         "declare a database and grants for nothing", f"set `service: "
                         f"{service.name}` on its jobs, or remove the service")
        if service.cloud_run is not None and service.url is not None and (
                wrong := run_app_url_problem(service.url, service.cloud_run, region)):
            problems.add((*at, "url"), f"{service.url!r} {wrong}: the kit takes "
                         f"{service.kind} to be in gcp:region, where it grants the invoker "
                         "on it", "give the service's "
                         f"URL in {region} (" + DESCRIBE_URL.format(
                             name=service.cloud_run).replace("<region>", region) + ")")
        if service.app_engine is not None and service.url is not None and (
                wrong := appspot_url_problem(service.url, project)):
            problems.add((*at, "url"), f"{service.url!r} {wrong}: the watchdog delivers "
                         f"{service.kind}'s runs there, with its queue's token and the "
                         "run's headers", f"give the app's own URL, e.g. "
                         f"https://{project}.REGION_ID.r.appspot.com (gcloud app describe "
                         f"--project {project} --format='value(defaultHostname)')")
        if (kit_account := kit_accounts.get(service.service_account.lower())) is not None:
            problems.add((*at, "serviceAccount"), f"{service.service_account!r} is {kit_account}"
                         ", one of the kit's own accounts: the service's code running as it "
                         "would hold that account's grants (the jobs' invoker and the "
                         "watchdog's mint the tokens the kit's functions serve; a runtime's "
                         "claims its own records), and the claim the kit grants the service "
                         "would widen it", "run the service as an account of its own")
        _unique_across_services(services, index, problems)
        if reruns and service.app_engine is not None and service.url is None:
            problems.add((*at, "url"), "is not set, but watchdog.reruns asks the watchdog to "
                         f"deliver re-runs, and it reaches {service.kind} only by its URL "
                         "(through its Cloud Tasks queue, as an HTTP request)",
                         "set url to the app's https URL (e.g. "
                         "https://PROJECT.REGION_ID.r.appspot.com), or set watchdog.reruns "
                         "false")
    by_name = {service.name: service for service in services}
    for index, (name, deadline, catch_up) in enumerate(job_targets):
        if name is None:
            continue
        target = by_name.get(name)
        if target is None:
            problems.add(("jobs", index, "service"), f"{name!r} is not a service of this "
                         f"stack; {did_you_mean('service', name, known)}".rstrip("; "),
                         "declare it under services, or use one of: " + (
                             ", ".join(known) if known else "(none declared) remove service"))
            continue
        bound = target.max_attempt_deadline_seconds
        if deadline > bound:
            problems.add(("jobs", index, "attemptDeadlineSeconds"), f"{deadline} s is more "
                         f"than Cloud Scheduler allows for an HTTP target ({bound} s), which "
                         f"a job aimed at {target.kind} is", f"lower attemptDeadlineSeconds "
                         f"to <= {bound} (only App Engine targets may wait up to "
                         f"{APP_ENGINE_ATTEMPT_DEADLINE_MAX_SECONDS} s)")
        if catch_up and target.app_engine is not None and target.url is None:
            problems.add(("jobs", index, "catchUp"), f"needs the watchdog to deliver missed "
                         f"runs to {target.kind}, which it reaches only by its URL (through "
                         "its Cloud Tasks queue, as an HTTP request), and services["
                         f"{known.index(name)}].url is not set",
                         "set the service's url to the app's https URL (e.g. "
                         "https://PROJECT.REGION_ID.r.appspot.com), or remove catchUp")


def _unique_across_services(
    services: Sequence[TeamServiceSettings], index: int, problems: ProblemList
) -> None:
    """services[index]'s serviceAccount, cloudRun and url, each against the services before
    it: one account's claim would reach both services' databases, and one Cloud Run service
    (or URL) declared twice would get two databases while it can use only one."""
    service = services[index]
    for key, value, of in (("serviceAccount", service.service_account, "runtime account"),
                           ("cloudRun", service.cloud_run, "Cloud Run service"),
                           ("url", service.url, "URL")):
        earlier = next((i for i, other in enumerate(services[:index]) if value is not None
                        and value == {"serviceAccount": other.service_account,
                                      "cloudRun": other.cloud_run, "url": other.url}[key]),
                       None)
        if earlier is None:
            continue
        if key == "url" and service.cloud_run is not None and (
                service.cloud_run == services[earlier].cloud_run):
            continue  # the same Cloud Run service: one problem (cloudRun) is enough
        problems.add(("services", index, key), f"{value!r} is also the {of} of services["
                     f"{earlier}] ({services[earlier].name!r}): services {services[earlier].name!r}"
                     f" and {service.name!r} would share it"
                     + (", and either could claim runs in both records databases"
                        if key == "serviceAccount" else ", with two records databases for "
                        "one service, which can use only one"),
                     "declare each service once" if key != "serviceAccount" else "give each "
                     "service an account of its own")
