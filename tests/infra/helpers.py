"""Shared helpers for the infra tests: one offline run per stack file, and lookups."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dedup.tables import TABLES_DIR, TABLES_DIR_ENV
from infra.config import StackConfig, TeamServiceSettings
from infra.source import read_archive_table
from operator_tools.offline import DeclaredResource, OfflineRun, engine_config

FUNCTION = "gcp:cloudfunctionsv2/function:Function"
JOB = "gcp:cloudscheduler/job:Job"
DATABASE = "gcp:firestore/database:Database"
FIELD = "gcp:firestore/field:Field"
BUCKET = "gcp:storage/bucket:Bucket"
OBJECT = "gcp:storage/bucketObject:BucketObject"
ACCOUNT = "gcp:serviceaccount/account:Account"
SERVICE = "gcp:projects/service:Service"
PROJECT_IAM = "gcp:projects/iAMMember:IAMMember"
RUN_IAM = "gcp:cloudrunv2/serviceIamMember:ServiceIamMember"
REPOSITORY = "gcp:artifactregistry/repository:Repository"
REPOSITORY_IAM = "gcp:artifactregistry/repositoryIamMember:RepositoryIamMember"
JOB_IAM = "gcp:cloudrunv2/jobIamMember:JobIamMember"
CUSTOM_ROLE = "gcp:projects/iAMCustomRole:IAMCustomRole"
SLEEP = "time:index/sleep:Sleep"
DEDUP_COMPONENT = "scheduler-dedup:index:DedupService"
PROXY_COMPONENT = "scheduler-dedup:index:DedupProxy"
JOB_COMPONENT = "scheduler-dedup:index:ScheduledJob"
WATCHDOG_COMPONENT = "scheduler-dedup:index:Watchdog"
MONITORING_COMPONENT = "scheduler-dedup:index:Monitoring"
RUNTIME_COMPONENT = "scheduler-dedup:index:JobRuntime"
TEAM_SERVICE_COMPONENT = "scheduler-dedup:index:TeamService"
STACK_COMPONENT = "scheduler-dedup:index:SchedulerDedup"
"""The whole stack's component (infra/component.py), the five above its children."""
METRIC = "gcp:logging/metric:Metric"
ALERT_POLICY = "gcp:monitoring/alertPolicy:AlertPolicy"
CHANNEL = "gcp:monitoring/notificationChannel:NotificationChannel"
DASHBOARD = "gcp:monitoring/dashboard:Dashboard"


@dataclass(frozen=True)
class StackUnderTest:
    """A stack file, its validated config and what the program declared for it."""

    name: str
    raw: Mapping[str, Any]
    config: StackConfig
    run: OfflineRun

    def one(self, type_token: str) -> DeclaredResource:
        return self.run.one(type_token)

    def all(self, type_token: str) -> list[DeclaredResource]:
        return self.run.of_type(type_token)

    @property
    def function(self) -> DeclaredResource:
        """The dedup function (the proxy, if any, is `proxy`)."""
        return self.run.by_name("dedup-function")

    @property
    def proxy(self) -> DeclaredResource | None:
        """The idempotent proxy's function, declared only when some job has `proxy:`."""
        found = [r for r in self.all(FUNCTION) if r.name == "proxy-function"]
        return found[0] if found else None

    @property
    def watchdog(self) -> DeclaredResource | None:
        """The run watchdog's function, declared unless `watchdog.enabled` is false."""
        found = [r for r in self.all(FUNCTION) if r.name == "watchdog-function"]
        return found[0] if found else None

    def runtime_function(self, runtime: str) -> DeclaredResource:
        """The function of the runtime named `runtime` (`runtimes[].name`)."""
        return self.run.by_name(f"runtime-{runtime}-function")

    @property
    def dedup_functions(self) -> list[DeclaredResource]:
        """Every function that runs job logic: the dedup function and each runtime's."""
        return [self.function, *(self.runtime_function(r.name) for r in self.config.runtimes)]

    def job_function(self, job_name: str) -> DeclaredResource:
        """The function the job `job_name` (its name or deployed ID) calls (a job aimed at
        a team service calls none of the kit's)."""
        job = next(j for j in self.config.jobs if job_name in (j.name, self.config.job_id(j)))
        assert job.service is None, f"{job_name} is aimed at team service {job.service}"
        if job.proxy is not None:
            assert self.proxy is not None
            return self.proxy
        return self.runtime_function(job.runtime) if job.runtime else self.function

    @property
    def watchdog_uri(self) -> str:
        assert self.watchdog is not None
        return str(self.watchdog.outputs["serviceConfig"]["uri"])

    @property
    def watchdog_job_id(self) -> str:
        return f"{self.config.name_prefix}-watchdog"

    def config_jobs(self) -> list[DeclaredResource]:
        """The Scheduler jobs of `jobs:` (not the watchdog's own job)."""
        ids = {self.config.job_id(j) for j in self.config.jobs}
        return [j for j in self.all(JOB) if j.props["name"] in ids]

    @property
    def service_uri(self) -> str:
        return str(self.function.outputs["serviceConfig"]["uri"])

    @property
    def service_name(self) -> str:
        return str(self.function.outputs["serviceConfig"]["service"])

    @property
    def proxy_uri(self) -> str:
        assert self.proxy is not None
        return str(self.proxy.outputs["serviceConfig"]["uri"])

    @property
    def proxy_service_name(self) -> str:
        assert self.proxy is not None
        return str(self.proxy.outputs["serviceConfig"]["service"])

    def job_service(self, job_name: str) -> TeamServiceSettings | None:
        """The team service the job `job_name` (its name or deployed ID) is aimed at."""
        job = next((j for j in self.config.jobs
                    if job_name in (j.name, self.config.job_id(j))), None)
        return self.config.service_of(job) if job is not None else None

    def job_uri(self, job_name: str) -> str:
        """The URL a job must call: the proxy's for a proxied job, its service's URL and
        path for a job aimed at a team service, else the function's. `job_name` is the
        config's `jobs[].name` or the deployed job ID (or the watchdog's job ID: its own
        function's)."""
        if job_name == self.watchdog_job_id and self.watchdog is not None:
            return self.watchdog_uri
        if (team := self.job_service(job_name)) is not None:
            job = next(j for j in self.config.jobs
                       if job_name in (j.name, self.config.job_id(j)))
            return f"{team.url}{job.service_path}"
        return str(self.job_function(job_name).outputs["serviceConfig"]["uri"])

    def job_audience(self, job_name: str) -> str:
        """The OIDC audience a job's token must carry: the URL it calls, but a team
        service's own URL (no path: Cloud Run checks the service's run.app URL)."""
        team = self.job_service(job_name)
        return str(team.url) if team is not None else self.job_uri(job_name)

    def account_email(self, role: str) -> str:
        wanted = f"{self.config.name_prefix}-{role}"
        for account in self.all(ACCOUNT):
            if account.props["accountId"] == wanted:
                return str(account.outputs["email"])
        raise LookupError(f"no {role} service account")

    def iam_grants(self) -> list[DeclaredResource]:
        return [r for r in self.run.resources if r.custom and "role" in r.props]

    def grants_to(self, email: str) -> list[DeclaredResource]:
        member = f"serviceAccount:{email}"
        return [g for g in self.iam_grants() if g.props["member"] == member]

    def source_object(self, function: DeclaredResource) -> DeclaredResource:
        """The BucketObject `function` is built from (its storageSource object)."""
        name = function.props["buildConfig"]["source"]["storageSource"]["object"]
        [found] = [o for o in self.all(OBJECT) if o.props["name"] == name]
        return found

    def job_table(self, function: DeclaredResource, table: str) -> Any:
        """The job table `table` in `function`'s source archive, parsed; None if absent."""
        text = read_archive_table(self.source_object(function).props["source"]["path"], table)
        return None if text is None else json.loads(text)

    def tables_env(self, function: DeclaredResource) -> dict[str, str]:
        """DEDUP_TABLES_DIR at a copy of the job tables in `function`'s source archive: the
        function run here reads exactly what it reads deployed."""
        directory = Path(tempfile.mkdtemp(prefix="archive-tables-"))
        archive = self.source_object(function).props["source"]["path"]
        with zipfile.ZipFile(archive) as zf:
            for name in zf.namelist():
                if name.startswith(f"{TABLES_DIR}/"):
                    (directory / name.removeprefix(f"{TABLES_DIR}/")).write_bytes(zf.read(name))
        return {TABLES_DIR_ENV: str(directory)}

    @staticmethod
    def secret_env(function: DeclaredResource) -> dict[str, str]:
        """Its secret environment variables as Cloud Run sets them at instance start: a
        stand-in value of each secret (the watchdog's task key, the proxy's token secret)."""
        entries = function.props["serviceConfig"].get("secretEnvironmentVariables") or []
        return {entry["key"]: f"stand-in-{entry['secret']}-" + "0" * 32 for entry in entries}

    def children_of(self, component: str) -> list[DeclaredResource]:
        """The custom resources of the component with that Pulumi name."""
        parent = self.run.by_name(component).urn
        return [r for r in self.run.resources if r.custom and r.parent == parent]


def walk_strings(value: Any) -> Iterator[str]:
    """Every string anywhere in a nested props structure (keys and values)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield str(key)
            yield from walk_strings(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from walk_strings(item)


# Runs in a fresh interpreter; mimics pulumi-language-python-exec with minimal mocks.
SCRIPT = r"""
import json, os, runpy, sys
repo = os.path.dirname(os.getcwd())
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") not in (repo, os.getcwd())]
import pulumi
from pulumi.runtime import mocks
from pulumi.runtime.stack import run_pulumi_func
from pulumi.runtime.sync_await import _sync_await

declared = []

class Mocks(mocks.Mocks):
    def new_resource(self, args):
        state = dict(args.inputs)
        if args.typ == "gcp:serviceaccount/account:Account":
            state["email"] = f"{state['accountId']}@p.iam.gserviceaccount.com"
            state["member"] = "serviceAccount:" + state["email"]
            state["name"] = "projects/p/serviceAccounts/" + state["email"]
        if args.typ == "gcp:cloudfunctionsv2/function:Function":
            state["serviceConfig"] = {
                **state["serviceConfig"],
                "uri": "https://fn-abc-ew.a.run.app",
                "service": "projects/p/locations/l/services/fn",
            }
        declared.append(args.typ)
        return args.name + "-id", state

    def call(self, args):
        # argv[2], when given: the error of the Service Usage lookup (preflight tests).
        if len(sys.argv) > 2 and args.token == "gcp:projects/getProjectService:getProjectService":
            return {}, [("", sys.argv[2])]
        return {"number": "42"}, []

mocks.set_mocks(Mocks(), project="scheduler-dedup", stack="dev", preview=False)
pulumi.runtime.set_all_config(json.loads(sys.argv[1]))
try:
    _sync_await(run_pulumi_func(lambda: runpy.run_path(".", run_name="__main__")))
    outcome = "ok"
except Exception as exc:
    outcome = f"{type(exc).__name__}: {exc}"
print(json.dumps({"outcome": outcome, "declared": declared}))
"""


def run_entrypoint(
    checkout: Path, config: dict[str, Any], service_lookup_error: str | None = None
) -> dict[str, Any]:
    """Run infra/__main__.py of `checkout` (a kit_clone: the project is its own) as
    `pulumi up` does, under minimal mocks, in a fresh interpreter: {"outcome": "ok" or the
    exception, "declared": resource types}."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    extra = [] if service_lookup_error is None else [service_lookup_error]
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT, json.dumps(engine_config(config)), *extra],
        cwd=checkout / "infra",
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    parsed: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    return parsed
