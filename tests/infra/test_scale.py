"""A stack at Cloud Scheduler's default quota, 1,000 jobs a region (the maximum, 5,000, is in
`make bench BENCH_ARGS=--scale`): planned, policy-checked, and every declared function
within Cloud Run's limits, its per-job data in its archive rather than its environment."""

from __future__ import annotations

from pathlib import Path
from typing import Final

import pytest

from bench.scale import PROXIED_EVERY, scaled_stack_config
from infra.config import load_config
from infra.source import JOB_ROUTES_TABLE, PROXY_ROUTES_TABLE, WATCH_JOBS_TABLE
from operator_tools.offline import run_offline
from operator_tools.plan import render
from policies.evaluate import mandatory
from policies.offline_check import check_declared
from tests.infra.helpers import FUNCTION, StackUnderTest

JOBS: Final = 1000
ENV_BYTES_LIMIT: Final = 32 * 1024
"""Cloud Run functions: runtime environment variables, names and values together, at most
32 KiB per function (cloud.google.com/run/docs/configuring/services/
overview-environment-variables, "Variable size limits for functions")."""
ENV_COUNT_LIMIT: Final = 1000
"""At most 1,000 environment variables per Cloud Run service (the same page)."""


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> StackUnderTest:
    raw = scaled_stack_config(JOBS)
    run = run_offline(raw, stack="dev", build_dir=tmp_path_factory.mktemp("scale-source"))
    return StackUnderTest("dev", raw, load_config(raw), run)


def _env_bytes(env: dict[str, str]) -> int:
    return sum(len(k.encode()) + len(str(v).encode()) for k, v in env.items())


def test_the_generated_stack_has_the_jobs_it_says(big: StackUnderTest) -> None:
    assert len(big.config.jobs) == JOBS
    assert len(big.config_jobs()) == JOBS
    assert len(big.config.proxied_jobs) == JOBS // PROXIED_EVERY
    assert len({j.schedule for j in big.config.jobs}) > 60  # not one schedule repeated


def test_every_function_fits_cloud_runs_environment_limits(big: StackUnderTest) -> None:
    functions = big.all(FUNCTION)
    assert {f.name for f in functions} == {"dedup-function", "proxy-function",
                                           "watchdog-function"}
    for function in functions:
        env = function.props["serviceConfig"]["environmentVariables"]
        assert _env_bytes(env) < ENV_BYTES_LIMIT, (function.name, _env_bytes(env))
        assert len(env) < ENV_COUNT_LIMIT
        # Nothing grows with the jobs: no job ID anywhere in the environment.
        job_ids = {big.config.job_id(job) for job in big.config.jobs}
        assert not [v for v in env.values() if any(j in str(v) for j in job_ids)]


def test_each_function_carries_every_one_of_its_jobs_in_its_table(big: StackUnderTest) -> None:
    cfg = big.config
    assert big.proxy is not None and big.watchdog is not None
    routes = big.job_table(big.function, JOB_ROUTES_TABLE)
    assert set(routes) == {cfg.job_id(j) for j in cfg.jobs if j.proxy is None}
    proxy_routes = big.job_table(big.proxy, PROXY_ROUTES_TABLE)
    assert set(proxy_routes) == {cfg.job_id(j) for j in cfg.proxied_jobs}
    watched = big.job_table(big.watchdog, WATCH_JOBS_TABLE)
    assert sorted(w["name"] for w in watched) == sorted(cfg.job_id(j) for j in cfg.jobs)


def test_the_policy_pack_passes_the_stack(big: StackUnderTest) -> None:
    """No mandatory violation (the DST advisories of the Berlin jobs remain advisory), and
    the proxy's least-privilege policy sees its routes from its archive."""
    violations = check_declared(big.run.resources)
    assert mandatory(violations) == []
    assert {v.policy for v in violations} <= {
        "scheduler-job-dst-change", "dedup-retries-outlast-lease", "dedup-alerting-notifies"}


def test_the_plan_shows_each_functions_table(big: StackUnderTest) -> None:
    text = render(big.run)
    assert f"watchedJobs={JOBS}" in text
    assert f"jobRoutes={JOBS - JOBS // PROXIED_EVERY}" in text


def test_the_watchdog_reads_its_thousand_jobs_at_start_up(big: StackUnderTest) -> None:
    from dedup.watchdog.settings import WatchSettings

    assert big.watchdog is not None
    env = big.watchdog.props["serviceConfig"]["environmentVariables"]
    settings = WatchSettings.from_env({**env, **big.tables_env(big.watchdog)})
    assert len(settings.jobs) == JOBS
    assert sum(j.proxied for j in settings.jobs) == JOBS // PROXIED_EVERY


def test_the_stack_file_round_trips(tmp_path: Path) -> None:
    from bench.scale import write_scaled_stack
    from operator_tools.offline import load_stack_config

    path = write_scaled_stack(tmp_path, 30)
    assert path.name == "Pulumi.scale30.yaml"
    assert load_stack_config(path) == scaled_stack_config(30)
