"""Runtimes through the program (Pulumi's mocks): each runtime's function, account,
records database, secrets, grants, network and resources, as the policy pack and the
engine see them (camelCase), and nothing of one runtime reaching another."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from infra.config import load_config
from infra.job_runtime import RUNTIME_LABEL
from infra.source import JOB_ROUTES_TABLE, WATCH_JOBS_TABLE
from operator_tools.offline import DeclaredResource, load_stack_config, run_offline
from tests.infra.helpers import FUNCTION, PROJECT_IAM, StackUnderTest
from tests.stacks import FIXTURE_STACKS_DIR

SECRET_IAM = "gcp:secretmanager/secretIamMember:SecretIamMember"
BUCKET_IAM = "gcp:storage/bucketIAMMember:BucketIAMMember"


def retail_with(change: Any = None, *, build_dir: Path) -> StackUnderTest:
    raw = copy.deepcopy(load_stack_config("retail", FIXTURE_STACKS_DIR))
    if change is not None:
        change(raw)
    return StackUnderTest("retail", raw, load_config(raw),
                          run_offline(raw, stack="retail", build_dir=build_dir))


@pytest.fixture(scope="module")
def retail(stack_runs: dict[str, StackUnderTest]) -> StackUnderTest:
    return stack_runs["retail"]


def service(function: DeclaredResource) -> dict[str, Any]:
    return dict(function.props["serviceConfig"])


def member(stack: StackUnderTest, runtime: str) -> str:
    cfg = stack.config
    return f"serviceAccount:{cfg.runtime_email(next(r for r in cfg.runtimes if r.name == runtime))}"


def test_each_runtime_is_a_function_of_its_own(retail: StackUnderTest) -> None:
    sync, export = retail.runtime_function("sync"), retail.runtime_function("export")
    assert (sync.props["name"], export.props["name"]) == ("retail-sync", "retail-export")
    assert sync.props["labels"][RUNTIME_LABEL] == "sync"
    assert service(sync)["serviceAccountEmail"] == (
        "retail-sync@acme-retail-prod.iam.gserviceaccount.com")
    assert service(export)["serviceAccountEmail"] == (
        "retail-export@acme-retail-prod.iam.gserviceaccount.com")
    for function in (sync, export):
        assert service(function)["ingressSettings"] == "ALLOW_INTERNAL_ONLY"
        assert function.props["buildConfig"]["entryPoint"] == "handle_scheduled_job"
    # Its resources: its own keys over the stack's.
    assert (service(sync)["availableMemory"], service(sync)["timeoutSeconds"],
            service(sync)["maxInstanceCount"]) == ("512Mi", 300, 2)
    assert (service(export)["availableMemory"], service(export)["timeoutSeconds"],
            service(export)["maxInstanceCount"]) == ("1Gi", 900, 1)


def test_a_runtime_has_its_settings_and_its_own_records(retail: StackUnderTest) -> None:
    env = service(retail.runtime_function("sync"))["environmentVariables"]
    assert env["INVENTORY_API_URL"] == "https://inventory.internal.acme-retail.example/v2"
    assert env["DEDUP_DATABASE"] == "retail-sync"
    assert "EXPORT_BUCKET" not in env  # another runtime's setting
    # demoSettings are the demo's only.
    assert "127.0.0.1" not in str(env)
    export_env = service(retail.runtime_function("export"))["environmentVariables"]
    assert export_env["EXPORT_BUCKET"] == "acme-retail-exports"
    assert export_env["DEDUP_DATABASE"] == "retail-export"


def test_a_runtime_reads_its_secret_by_name_and_only_it_may(retail: StackUnderTest) -> None:
    assert service(retail.runtime_function("sync"))["secretEnvironmentVariables"] == [{
        "key": "INVENTORY_API_TOKEN", "projectId": "acme-retail-prod",
        "secret": "inventory-api-token", "version": "latest"}]
    assert not service(retail.runtime_function("export")).get("secretEnvironmentVariables")
    readers = [g for g in retail.all(SECRET_IAM) if g.props["secretId"] == "inventory-api-token"]
    assert [(g.props["role"], g.props["member"]) for g in readers] == [
        ("roles/secretmanager.secretAccessor", member(retail, "sync"))]
    # The function deploys after its grant: Cloud Run reads the secret at instance start.
    assert readers[0].urn in retail.runtime_function("sync").dependencies


def test_a_runtime_writes_only_its_own_records_database(retail: StackUnderTest) -> None:
    for runtime, database in (("sync", "retail-sync"), ("export", "retail-export")):
        who = member(retail, runtime)
        grants = [g for g in retail.all(PROJECT_IAM) if g.props["member"] == who]
        assert [g.props["role"] for g in grants] == ["roles/datastore.user"]
        assert grants[0].props["condition"]["expression"] == (
            f'resource.name == "projects/acme-retail-prod/databases/{database}"')


def test_the_teams_grant_is_on_the_one_resource_it_names(retail: StackUnderTest) -> None:
    [grant] = retail.all(BUCKET_IAM)
    assert grant.props == {**grant.props, "bucket": "acme-retail-exports",
                           "role": "roles/storage.objectCreator",
                           "member": member(retail, "export")}
    assert grant.urn in retail.runtime_function("export").dependencies or any(
        grant.urn in r.dependencies for r in retail.run.resources
        if r.name == "runtime-export-iam-propagation")


def test_vpc_egress_through_the_connector(retail: StackUnderTest) -> None:
    sync = service(retail.runtime_function("sync"))
    assert sync["vpcConnector"] == (
        "projects/acme-retail-prod/locations/us-west1/connectors/retail-internal")
    assert sync["vpcConnectorEgressSettings"] == "PRIVATE_RANGES_ONLY"
    assert "vpcConnector" not in service(retail.runtime_function("export"))
    assert "vpcConnector" not in service(retail.function)


def test_each_runtime_runs_only_its_jobs(retail: StackUnderTest) -> None:
    assert retail.job_table(retail.runtime_function("sync"), JOB_ROUTES_TABLE) == {
        "retail-inventory-sync": "example_jobs.retail:sync_inventory"}
    assert retail.job_table(retail.runtime_function("export"), JOB_ROUTES_TABLE) == {
        "retail-nightly-export": "example_jobs.retail:export_nightly"}
    assert retail.job_table(retail.function, JOB_ROUTES_TABLE) == {}
    for job, function in (("inventory-sync", "sync"), ("nightly-export", "export")):
        uri = retail.runtime_function(function).outputs["serviceConfig"]["uri"]
        assert retail.job_uri(job) == uri


def test_the_watchdog_covers_every_runtimes_jobs(retail: StackUnderTest) -> None:
    assert retail.watchdog is not None
    table = {e["name"]: e for e in retail.job_table(retail.watchdog, WATCH_JOBS_TABLE)}
    assert table["retail-inventory-sync"]["runtime"] == "sync"
    assert table["retail-inventory-sync"]["database"] == "retail-sync"
    assert table["retail-nightly-export"]["database"] == "retail-export"
    watchdog = f"serviceAccount:{retail.account_email('watchdog')}"
    reads = {g.props["condition"]["expression"].rsplit("/", 1)[-1].rstrip('"')
             for g in retail.all(PROJECT_IAM)
             if g.props["member"] == watchdog and g.props["role"] == "roles/datastore.viewer"}
    assert {"retail-sync", "retail-export"} <= reads
    # nightly-export catches up: the watchdog delivers its runs to its runtime alone.
    env = service(retail.watchdog)["environmentVariables"]
    export_uri = retail.runtime_function("export").outputs["serviceConfig"]["uri"]
    assert env["DEDUP_WATCH_RUNTIME_URLS"] == f'{{"export":"{export_uri}"}}'
    callers = service(retail.runtime_function("export"))["environmentVariables"][
        "DEDUP_ALLOWED_CALLERS"].split(",")
    assert retail.account_email("watchdog") in callers
    assert retail.account_email("watchdog") not in service(retail.runtime_function("sync"))[
        "environmentVariables"]["DEDUP_ALLOWED_CALLERS"]


def test_a_runtime_with_file_secrets_and_other_grants(tmp_path: Path) -> None:
    def change(raw: dict[str, Any]) -> None:
        sync = raw["scheduler-dedup:runtimes"][0]
        sync["secrets"] = [{"secret": "inventory-cert", "path": "/secrets/cert/client.pem",
                            "version": "4"}]
        sync["grants"] = [
            {"role": "roles/bigquery.dataEditor", "dataset": "analytics-prod.inventory"},
            {"role": "roles/pubsub.publisher", "topic": "stock-changes"},
            {"role": "roles/cloudtrace.agent", "project": True},
        ]

    stack = retail_with(change, build_dir=tmp_path)
    sync = service(stack.runtime_function("sync"))
    assert sync["secretVolumes"] == [{
        "mountPath": "/secrets/cert", "projectId": "acme-retail-prod", "secret": "inventory-cert",
        "versions": [{"path": "client.pem", "version": "4"}]}]
    assert not sync.get("secretEnvironmentVariables")
    who = member(stack, "sync")
    [dataset] = stack.all("gcp:bigquery/datasetIamMember:DatasetIamMember")
    assert (dataset.props["project"], dataset.props["datasetId"], dataset.props["member"]) == (
        "analytics-prod", "inventory", who)
    [topic] = stack.all("gcp:pubsub/topicIAMMember:TopicIAMMember")
    assert (topic.props["topic"], topic.props["project"]) == ("stock-changes", "acme-retail-prod")
    assert [g.props["role"] for g in stack.all(PROJECT_IAM) if g.props["member"] == who] == [
        "roles/datastore.user", "roles/cloudtrace.agent"]
    [reader] = [g for g in stack.all(SECRET_IAM) if g.props["secretId"] == "inventory-cert"]
    assert reader.props["member"] == who


def test_every_function_of_the_stack_is_accounted_for(retail: StackUnderTest) -> None:
    names = sorted(f.props["name"] for f in retail.all(FUNCTION))
    assert names == ["retail", "retail-export", "retail-proxy", "retail-sync", "retail-watchdog"]


def test_a_connector_named_alone_is_the_stacks_projects_and_regions(tmp_path: Path) -> None:
    """The API takes only a connector's full name (docs/contracts.md)."""
    def change(raw: dict[str, Any]) -> None:
        raw["scheduler-dedup:runtimes"][0]["network"] = {"vpcConnector": "retail-internal",
                                                         "egress": "allTraffic"}

    sync = service(retail_with(change, build_dir=tmp_path).runtime_function("sync"))
    assert sync["vpcConnector"] == (
        "projects/acme-retail-prod/locations/us-west1/connectors/retail-internal")
    assert sync["vpcConnectorEgressSettings"] == "ALL_TRAFFIC"


def test_the_default_functions_archive_carries_the_default_job_logic(tmp_path: Path) -> None:
    """With every job in a runtime (or the proxy), the dedup function has no job of its
    own and imports defaultJobLogic at start: its archive must carry that module."""
    from infra.dedup_service import DedupServiceArgs

    raw = copy.deepcopy(load_stack_config("retail", FIXTURE_STACKS_DIR))
    raw["scheduler-dedup:defaultJobLogic"] = "jobs.fallback:run"
    args = DedupServiceArgs.from_config(load_config(raw), source_dir=tmp_path,
                                        build_dir=tmp_path)
    assert args.job_routes == {}
    assert args.job_modules == ("jobs.fallback",)
