"""Catch-up and re-runs in the stack: what the watchdog is given and allowed when it
delivers runs (some job has `catchUp`, or `watchdog.reruns`), and only then; checked under
Pulumi's mocks and by the policy pack."""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from dedup.settings import Settings
from dedup.watchdog.settings import WatchSettings
from infra.config import ConfigError, load_config
from infra.source import WATCH_JOBS_TABLE
from local_stack.tables import job_tables_env
from operator_tools.offline import load_stack_config, run_offline
from policies import offline_check
from tests.infra.helpers import StackUnderTest
from tests.stacks import FIXTURE_STACKS_DIR, fixture_stack_file

INVOKER_ROLE = "roles/run.invoker"
CATCH_UP_JOBS = {"invoice-sync": 14400, "daily-report": 7200}  # one plain, one proxied


def prod_with(**changes: Any) -> dict[str, Any]:
    """The prod fixture stack's config, with catchUp on CATCH_UP_JOBS (or `changes`)."""
    raw = dict(load_stack_config("prod", FIXTURE_STACKS_DIR))
    jobs = [dict(job) for job in raw["scheduler-dedup:jobs"]]
    for job in jobs:
        if job["name"] in CATCH_UP_JOBS and not changes:
            job.update(catchUp=True, catchUpWithinSeconds=CATCH_UP_JOBS[job["name"]])
    raw["scheduler-dedup:jobs"] = jobs
    raw.update({f"scheduler-dedup:{k}": v for k, v in changes.items()})
    return raw


@pytest.fixture(scope="module")
def catch_up(tmp_path_factory: pytest.TempPathFactory) -> StackUnderTest:
    raw = prod_with()
    build = tmp_path_factory.mktemp("catch-up-source")
    return StackUnderTest("prod", raw, load_config(raw), run_offline(raw, stack="prod",
                                                                     build_dir=build))


def env_of(resource: Any) -> Mapping[str, str]:
    return resource.props["serviceConfig"]["environmentVariables"]  # type: ignore[no-any-return]


def test_the_watchdog_gets_what_a_delivery_needs(catch_up: StackUnderTest) -> None:
    cfg = catch_up.config
    assert catch_up.watchdog is not None and catch_up.proxy is not None
    env = env_of(catch_up.watchdog)
    assert env["DEDUP_WATCH_TARGET_URL"] == catch_up.service_uri
    assert env["DEDUP_WATCH_PROXY_URL"] == catch_up.proxy_uri
    table = catch_up.job_table(catch_up.watchdog, WATCH_JOBS_TABLE)
    entries = {e["name"]: e for e in table}
    deployed = {j.props["name"]: j.props["httpTarget"] for j in catch_up.config_jobs()}
    for job in cfg.jobs:
        entry, target = entries[cfg.job_id(job)], deployed[cfg.job_id(job)]
        # The same headers and body the job's Scheduler job sends.
        assert entry["headers"] == target["headers"]
        assert entry["body"] == base64.b64decode(target["body"]).decode()
        assert entry.get("catchUp", False) is job.catch_up
        if job.catch_up:
            assert entry["catchUpWithinSeconds"] == CATCH_UP_JOBS[job.name]
        # A proxied job's deliveries go to the proxy, as its Scheduler job's do.
        assert entry.get("proxied", False) is (job.proxy is not None)
        assert "url" not in entry  # the proxy's URL is an output: the environment's
    # And the watchdog starts with it, each job's deliveries going where its Scheduler
    # job's go.
    settings = WatchSettings.from_env(
        {**env, **catch_up.secret_env(catch_up.watchdog), "DEDUP_PROJECT": cfg.project,
         **job_tables_env(watch_jobs=table)})
    assert [j.name for j in settings.jobs if j.catch_up] == sorted(
        cfg.job_id(j) for j in cfg.jobs if j.catch_up
    )
    for watched in settings.jobs:
        assert settings.delivery_url(watched) == deployed[watched.name]["uri"]


def test_the_watchdog_may_call_the_function_and_the_proxy(catch_up: StackUnderTest) -> None:
    email = catch_up.account_email("watchdog")
    assert email == catch_up.config.watchdog_email
    for function in (catch_up.function, catch_up.proxy):
        assert function is not None
        callers = Settings.from_env({**env_of(function), "DEDUP_PROJECT": "p"}).allowed_callers
        assert callers == {catch_up.account_email("invoker"), email}
    invokes = sorted(
        g.props["name"] for g in catch_up.grants_to(email) if g.props["role"] == INVOKER_ROLE
    )
    assert invokes == sorted([catch_up.service_name, catch_up.proxy_service_name])


def test_without_catch_up_or_reruns_the_watchdog_delivers_nothing(
    stack: StackUnderTest,
) -> None:
    """Each fixture stack: a watchdog that delivers (dev: a job with catchUp, for `make
    demo`) may call the dedup function; one that does not gets no target and no grant."""
    assert stack.watchdog is not None
    env = env_of(stack.watchdog)
    email = stack.account_email("watchdog")
    if stack.config.watchdog_delivers_to(proxied=False):
        assert stack.proxy is None  # dev: no proxied job, the dedup function only
        assert env["DEDUP_WATCH_TARGET_URL"] == stack.service_uri
        invokes = [g for g in stack.grants_to(email) if g.props["role"] == INVOKER_ROLE]
        assert [g.props["name"] for g in invokes] == [stack.service_name]
        assert email in env_of(stack.function)["DEDUP_ALLOWED_CALLERS"]
        return
    runtimes = [r.name for r in stack.config.runtimes
                if stack.config.watchdog_delivers_to(runtime=r.name)]
    if runtimes:  # retail: nightly-export's runs, to its runtime (tests/infra/test_runtimes.py)
        assert sorted(json.loads(env["DEDUP_WATCH_RUNTIME_URLS"])) == runtimes
        assert "DEDUP_WATCH_TARGET_URL" not in env
        return
    assert "DEDUP_WATCH_TARGET_URL" not in env
    assert "DEDUP_WATCH_PROXY_URL" not in env
    assert all(set(e) - {"database", "proxied"} == {"name", "schedule", "timeZone",
                                                    "attemptDeadlineSeconds",
                                                    "retryWindowSeconds", "paused",
                                                    "dstRepeated", "dstSkipped", "forcedRuns",
                                                    "failureThreshold", "recoveryThreshold"}
               for e in stack.job_table(stack.watchdog, WATCH_JOBS_TABLE))
    assert [g for g in stack.grants_to(email) if g.props["role"] == INVOKER_ROLE] == []
    assert email not in env_of(stack.function)["DEDUP_ALLOWED_CALLERS"]


def test_reruns_alone_let_the_watchdog_deliver_to_every_function(tmp_path: Path) -> None:
    raw = prod_with(watchdog={"reruns": True})
    run = run_offline(raw, stack="prod", build_dir=tmp_path)
    cfg = load_config(raw)
    entries = StackUnderTest("prod", raw, cfg, run).job_table(
        run.by_name("watchdog-function"), WATCH_JOBS_TABLE)
    assert all("catchUp" not in e and "headers" in e for e in entries)
    for name in ("dedup-function", "proxy-function"):
        assert cfg.watchdog_email in env_of(run.by_name(name))["DEDUP_ALLOWED_CALLERS"]


def test_the_policy_pack_accepts_a_delivering_watchdog(tmp_path: Path) -> None:
    """No finding beyond those of the same stack without catch-up."""
    path = tmp_path / "Pulumi.prod.yaml"
    path.write_text(yaml.safe_dump({"config": prod_with()}), encoding="utf-8")
    with_catch_up = offline_check.check_stack_file(path)
    plain = offline_check.check_stack_file(fixture_stack_file("prod"))
    assert with_catch_up.error is None and with_catch_up.resources > plain.resources
    found = sorted((v.policy, v.resource.split(" ")[0]) for v in with_catch_up.violations)
    assert found == sorted((v.policy, v.resource.split(" ")[0]) for v in plain.violations)


@pytest.mark.parametrize(("job", "watchdog", "key", "message"), [
    ({"catchUpWithinSeconds": 600}, {}, "jobs[0].catchUpWithinSeconds",
     "600 s is not longer than the job's retry window plus watchdog.graceSeconds"),
    ({"catchUpWithinSeconds": 172800}, {}, "jobs[0].catchUpWithinSeconds",
     "172800 s is not shorter than watchdog.lookbackSeconds (172800 s)"),
    ({}, {"enabled": False}, "jobs[0].catchUp", "needs the watchdog"),
])
def test_a_catch_up_bound_that_cannot_work_is_refused(
    job: dict[str, Any], watchdog: dict[str, Any], key: str, message: str,
) -> None:
    raw = prod_with(watchdog=watchdog)
    jobs = [dict(j) for j in raw["scheduler-dedup:jobs"]]
    jobs[0].update(catchUp=True, **job)
    raw["scheduler-dedup:jobs"] = jobs
    with pytest.raises(ConfigError) as caught:
        load_config(raw)
    [problem] = [p for p in caught.value.problems if p.key.endswith(key)]
    assert message in problem.message
