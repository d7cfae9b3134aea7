"""Runtimes in the stack config (infra/config/runtimes.py): what a runtime takes, what
follows from it, and one clear error naming the key and the fix for each mistake."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from infra.config import ConfigError, StackConfig, load_config
from operator_tools.offline import load_stack_config
from tests.stacks import FIXTURE_STACKS_DIR

Config = dict[str, Any]
RUNTIMES = "scheduler-dedup:runtimes"
JOBS = "scheduler-dedup:jobs"


def base() -> Config:
    """Two jobs, one in runtime `sync` (a setting, a secret, a grant, a connector)."""
    return {
        "gcp:project": "acme-retail-test",
        "gcp:region": "us-west1",
        "scheduler-dedup:namePrefix": "retail",
        "scheduler-dedup:deleteProtection": False,
        "scheduler-dedup:functionTimeoutSeconds": 300,
        "scheduler-dedup:maxInstances": 4,
        RUNTIMES: [{
            "name": "sync",
            "resources": {"functionMemory": "1Gi"},
            "settings": {"API_URL": "https://api.internal"},
            "secrets": [{"secret": "api-token", "env": "API_TOKEN"}],
            "grants": [{"role": "roles/storage.objectCreator", "bucket": "acme-exports"}],
            "network": {"vpcConnector": "internal"},
        }],
        JOBS: [
            {"name": "sync", "schedule": "*/15 * * * *", "runtime": "sync"},
            {"name": "plain", "schedule": "0 3 * * *"},
        ],
    }


def runtime(change: Callable[[dict[str, Any]], None]) -> Callable[[Config], None]:
    def apply(cfg: Config) -> None:
        change(cfg[RUNTIMES][0])
    return apply


def job(key: str, value: Any, index: int = 0) -> Callable[[Config], None]:
    def apply(cfg: Config) -> None:
        cfg[JOBS][index][key] = value
    return apply


def test_a_runtime_takes_the_stacks_function_keys_it_leaves_unset() -> None:
    cfg = load_config(base())
    sync = cfg.runtimes[0]
    assert sync.function.memory == "1Gi"  # its own
    assert (sync.function.timeout_seconds, sync.function.max_instances) == (300, 4)  # stack's
    assert cfg.function.memory == "512Mi"  # the stack's own is untouched


def test_what_follows_from_a_runtime() -> None:
    cfg = load_config(base())
    sync, plain = cfg.jobs
    runtime = cfg.runtime_of(sync)
    assert runtime is not None and cfg.runtime_of(plain) is None
    assert cfg.runtime_function_name(runtime) == "retail-sync"
    assert cfg.runtime_email(runtime) == "retail-sync@acme-retail-test.iam.gserviceaccount.com"
    assert cfg.records_database_of(sync) == "retail-sync"
    assert cfg.records_database_of(plain) == "retail"
    assert cfg.job_routes("sync") == {"retail-sync": "example_jobs.example:run"}
    assert cfg.job_routes() == {"retail-plain": "example_jobs.example:run"}


def test_the_retail_example_gives_each_job_its_own_runtime() -> None:
    cfg = load_config(load_stack_config("retail", FIXTURE_STACKS_DIR))
    by_name = {job.name: job for job in cfg.jobs}
    assert by_name["inventory-sync"].runtime == "sync"
    assert by_name["nightly-export"].runtime == "export"
    assert by_name["weekly-report"].proxy is not None
    assert {cfg.records_database_of(j) for j in cfg.jobs if j.service is None} == {
        "retail-sync", "retail-export", "retail-proxy"}
    sync = next(r for r in cfg.runtimes if r.name == "sync")
    assert sync.environment(demo=True)["INVENTORY_API_URL"].startswith("http://127.0.0.1")
    assert sync.environment()["INVENTORY_API_URL"].startswith("https://")


def demo_only(cfg: Config) -> None:
    cfg[RUNTIMES][0]["demoSettings"] = {"API_URL": "http://127.0.0.1:8099", "EXTRA": "1"}


def test_demo_settings_replace_and_add_only_in_the_demo() -> None:
    raw = base()
    demo_only(raw)
    sync = load_config(raw).runtimes[0]
    assert sync.environment() == {"API_URL": "https://api.internal"}
    assert sync.environment(demo=True) == {"API_URL": "http://127.0.0.1:8099", "EXTRA": "1"}


def two_file_secrets(r: dict[str, Any]) -> None:
    r["secrets"] = [{"secret": "a", "path": "/secrets/x/a"},
                    {"secret": "b", "path": "/secrets/x/b"}]


def other_runtime(name: str) -> Callable[[Config], None]:
    def apply(cfg: Config) -> None:
        cfg[RUNTIMES].append({"name": name})
        cfg[JOBS][1]["runtime"] = name
    return apply


def unused_runtime(cfg: Config) -> None:
    cfg[RUNTIMES].append({"name": "spare"})


def proxied_in_runtime(cfg: Config) -> None:
    cfg[JOBS][1].update(runtime="sync", proxy={
        "target": "workflow",
        "resource": "projects/acme-retail-test/locations/us-west1/workflows/w"})


CASES: list[tuple[str, Callable[[Config], object], str, str]] = [
    ("unknown runtime", job("runtime", "synk"), "jobs[0].runtime", "did you mean 'sync'"),
    ("reserved name", other_runtime("proxy"), "runtimes[1].name", "kit's own"),
    ("duplicate name", other_runtime("sync"), "runtimes[1].name", "already the name"),
    ("runtime no job runs in", unused_runtime, "runtimes[1].name", "no job runs in"),
    ("long account ID", lambda c: (c.update({"scheduler-dedup:namePrefix": "retail-scheduling"}),
                                   other_runtime("exports-daily")(c)),
     "runtimes[1].name", "at most 12 characters"),
    ("proxied job in a runtime", proxied_in_runtime, "jobs[1].runtime", "proxy's own"),
    ("kit's variable", runtime(lambda r: r["settings"].update(DEDUP_LEASE="1")),
     "runtimes[0].settings.DEDUP_LEASE", "DEDUP_"),
    ("Cloud Run's variable", runtime(lambda r: r["settings"].update(PORT="1")),
     "runtimes[0].settings.PORT", "Cloud Run"),
    ("not a variable name", runtime(lambda r: r["settings"].update({"1X": "1"})),
     "runtimes[0].settings.1X", "environment variable name"),
    ("a number setting", runtime(lambda r: r["settings"].update(N=3)),
     "runtimes[0].settings.N", "string"),
    ("secret as a setting too", runtime(lambda r: r["settings"].update(API_TOKEN="x")),
     "runtimes[0].secrets[0].env", "also a plain setting"),
    ("secret env and path", runtime(lambda r: r["secrets"][0].update(path="/secrets/t/t")),
     "runtimes[0].secrets[0].env", "both env and path"),
    ("secret neither", runtime(lambda r: r["secrets"][0].pop("env")),
     "runtimes[0].secrets[0].env", "neither env nor path"),
    ("secret over the code", runtime(lambda r: r["secrets"].append(
        {"secret": "c", "path": "/workspace/c"})), "runtimes[0].secrets[1].path", "/workspace"),
    ("two secrets, one folder", runtime(two_file_secrets), "runtimes[0].secrets[1].path",
     "folder of its own"),
    ("secret version", runtime(lambda r: r["secrets"][0].update(version="v3")),
     "runtimes[0].secrets[0].version", "version"),
    ("basic role", runtime(lambda r: r["grants"].append({"role": "roles/editor",
                                                         "project": True})),
     "runtimes[0].grants[1].role", "basic role"),
    ("grant on two resources", runtime(lambda r: r["grants"][0].update(topic="t-events")),
     "runtimes[0].grants[0].role", "bucket and topic"),
    ("a secret read through a grant", runtime(lambda r: r["grants"].append(
        {"role": "roles/secretmanager.secretAccessor", "secret": "api-token"})),
     "runtimes[0].grants[1].role", "declare it under secrets"),
    ("a grant on another runtime's secret", lambda c: (
        c[RUNTIMES].append({"name": "export", "grants": [
            {"role": "roles/secretmanager.secretVersionAdder", "secret": "api-token"}]}),
        c[JOBS][1].update(runtime="export")),
     "runtimes[1].grants[0].secret", "runtime 'sync''s secret"),
    ("a grant on the token secret", runtime(lambda r: r["grants"].append(
        {"role": "roles/secretmanager.viewer", "secret": "retail-token-secret"})),
     "runtimes[0].grants[1].secret", "token secret"),
    ("a connector of another region", runtime(lambda r: r["network"].update(
        vpcConnector="projects/acme-retail-test/locations/europe-west1/connectors/c1")),
     "runtimes[0].network.vpcConnector", "its own region"),
    ("a demo setting that is a secret's", runtime(lambda r: r.update(
        demoSettings={"API_TOKEN": "x"})), "runtimes[0].demoSettings.API_TOKEN",
     "local secrets file"),
    ("nested secret folders", runtime(lambda r: r.update(secrets=[
        {"secret": "a", "path": "/secrets/a/token"}, {"secret": "b", "path": "/secrets/a/b/key"}])),
     "runtimes[0].secrets[1].path", "neither inside the other"),
    ("a folder as a secret's path", runtime(lambda r: r["secrets"][0].update(
        env=None, path="/secrets/a/")), "runtimes[0].secrets[0].path", "names a folder"),
    ("a secret over the loader", runtime(lambda r: r["secrets"][0].update(
        env=None, path="/lib64/x")), "runtimes[0].secrets[0].path", "/lib64"),
    ("grant on nothing", runtime(lambda r: r["grants"][0].pop("bucket")),
     "runtimes[0].grants[0].role", "no resource"),
    ("Direct VPC egress", runtime(lambda r: r["network"].update(directVpc={"network": "n"})),
     "runtimes[0].network.directVpc", "run.invoker for the function's own account"),
    ("no connector", runtime(lambda r: r["network"].pop("vpcConnector")),
     "runtimes[0].network.vpcConnector", "connector"),
    ("egress", runtime(lambda r: r["network"].update(egress="ALL")),
     "runtimes[0].network.egress", "privateRangesOnly"),
    ("deadline past the runtime's timeout",
     lambda c: (c[RUNTIMES][0]["resources"].update(functionTimeoutSeconds=60),
                c[JOBS][0].update(attemptDeadlineSeconds=120)),
     "jobs[0].attemptDeadlineSeconds", "runtime 'sync'"),
    ("min above the stack's max", runtime(lambda r: r["resources"].update(minInstances=5)),
     "runtimes[0].resources", "maxInstances"),
]


@pytest.mark.parametrize(("change", "key", "words"),
                         [pytest.param(c, k, w, id=i) for i, c, k, w in CASES])
def test_a_mistake_is_named_with_its_fix(
    change: Callable[[Config], object], key: str, words: str
) -> None:
    raw = copy.deepcopy(base())
    change(raw)
    with pytest.raises(ConfigError) as caught:
        load_config(raw)
    found = [p for p in caught.value.problems if p.key == f"scheduler-dedup:{key}"]
    assert found, f"no problem at {key}: {caught.value}"
    assert words in f"{found[0].message} {found[0].fix}", found[0]
    assert found[0].fix


def test_a_stack_without_runtimes_has_none() -> None:
    raw = base()
    del raw[RUNTIMES]
    for entry in raw[JOBS]:
        entry.pop("runtime", None)
    cfg: StackConfig = load_config(raw)
    assert cfg.runtimes == () and all(cfg.runtime_of(j) is None for j in cfg.jobs)


def test_a_secret_version_may_be_written_as_a_number() -> None:
    raw = base()
    raw[RUNTIMES][0]["secrets"][0]["version"] = 3
    assert load_config(raw).runtimes[0].secrets[0].version == "3"
