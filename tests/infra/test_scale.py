"""A stack at Cloud Scheduler's default quota, 1,000 jobs a region (the maximum, 5,000, is in
`make bench BENCH_ARGS=--scale`): planned, policy-checked, and every declared function
within Cloud Run's limits, its per-job data in its archive rather than its environment."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Final

import pytest

from bench.scale import PROXIED_EVERY, scaled_stack_config
from infra.config import StackConfig, load_config
from infra.scheduler_rules import HazardKind, dst_advisory
from infra.source import JOB_ROUTES_TABLE, PROXY_ROUTES_TABLE, WATCH_JOBS_TABLE
from infra.watchdog import watch_jobs
from operator_tools import plan
from operator_tools.offline import run_offline
from operator_tools.plan import dst_advisories, render
from policies.evaluate import mandatory
from policies.offline_check import check_declared
from tests.infra.helpers import FUNCTION, JOB, StackUnderTest

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
    settings = WatchSettings.from_env(
        {**env, **big.secret_env(big.watchdog), **big.tables_env(big.watchdog)})
    assert len(settings.jobs) == JOBS
    assert sum(j.proxied for j in settings.jobs) == JOBS // PROXIED_EVERY


def test_the_stack_file_round_trips(tmp_path: Path) -> None:
    from bench.scale import write_scaled_stack
    from operator_tools.offline import load_stack_config

    path = write_scaled_stack(tmp_path, 30)
    assert path.name == "Pulumi.scale30.yaml"
    assert load_stack_config(path) == scaled_stack_config(30)


def test_the_watchdogs_table_asks_whom_it_delivers_to_once_per_target(
    big: StackUnderTest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each answer looks at every job: asked per job, the table took quadratic time (2 s of
    a 5,000-job plan)."""
    asked: list[bool] = []
    answer = StackConfig.watchdog_delivers_to

    def counted(cfg: StackConfig, *, proxied: bool) -> bool:
        asked.append(proxied)
        return answer(cfg, proxied=proxied)

    monkeypatch.setattr(StackConfig, "watchdog_delivers_to", counted)
    table = watch_jobs(big.config)
    assert len(table) == JOBS
    assert sorted(asked) == [False, True]
    # Each job's entry still says what the watchdog does for a job of its target.
    delivers = {proxied: answer(big.config, proxied=proxied) for proxied in (False, True)}
    assert [entry.get("reruns", False) for entry in table] == [
        delivers[entry.get("proxied", False)] for entry in table]


def test_the_dst_advisories_judge_each_schedule_once_and_say_what_each_job_would(
    big: StackUnderTest, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    jobs = [r for r in big.run.resources if r.type == JOB]
    one_by_one = [(job.name, advisory) for job in jobs
                  if (advisory := dst_advisory(job.props["schedule"], job.props["timeZone"],
                                               now)) is not None]
    judged: list[tuple[str, str]] = []

    def counted(schedule: str, zone: str, at: datetime | None = None,
                chosen: frozenset[HazardKind] = frozenset()) -> str | None:
        judged.append((schedule, zone))
        return dst_advisory(schedule, zone, at, chosen=chosen)

    monkeypatch.setattr(plan, "dst_advisory", counted)
    assert dst_advisories(big.run, now) == one_by_one
    assert one_by_one  # the Berlin jobs meet the change
    assert sorted(judged) == sorted({(j.props["schedule"], j.props["timeZone"]) for j in jobs})


def test_the_bench_judges_plan_and_policy_check_at_a_thousand_and_five_thousand_jobs() -> None:
    """Issue 41's targets: each under 10 s at 1,000 jobs and under 30 s at 5,000."""
    from bench.scale import ScaleRow, TickFigures, Timing, scale_table

    def row(jobs: int, plan_s: float, policy_s: float) -> ScaleRow:
        tick = TickFigures(jobs, reads=jobs, seconds=1.0, peak_mib=1.0,
                           one_by_one_seconds=2.0, problems=0)
        return ScaleRow(jobs, Timing(plan_s, plan_s), Timing(policy_s, policy_s), tick)

    lines = scale_table([row(100, 2.0, 2.0), row(1000, 9.0, 10.5), row(5000, 29.0, 25.0)])
    assert "target: plan and policy check under 10 s for 1,000 jobs: MISSED" in lines
    assert "target: plan and policy check under 30 s for 5,000 jobs: met" in lines
    assert "for 100 jobs" not in lines


def test_the_bench_spreads_jobs_over_runtimes_and_judges_them() -> None:
    """Issue 35: 1,000 jobs over 50 runtimes plan and policy-check under 30 s each, beside
    the same 1,000 jobs without runtimes (the comparator)."""
    from bench.scale import ScaleRow, TickFigures, Timing, scale_table, scaled_stack_config
    from infra.config import load_config

    cfg = load_config(scaled_stack_config(200, runtimes=10))
    assert len(cfg.runtimes) == 10
    in_runtimes = [job for job in cfg.jobs if job.runtime]
    assert {job.runtime for job in in_runtimes} == {r.name for r in cfg.runtimes}
    assert len(in_runtimes) == len([job for job in cfg.jobs if job.proxy is None])

    def row(jobs: int, plan_s: float, policy_s: float, runtimes: int = 0) -> ScaleRow:
        tick = TickFigures(jobs, reads=jobs, seconds=1.0, peak_mib=1.0,
                           one_by_one_seconds=2.0, problems=0)
        return ScaleRow(jobs, Timing(plan_s, plan_s), Timing(policy_s, policy_s), tick,
                        runtimes)

    table = scale_table([row(100, 2.0, 2.0), row(1000, 8.0, 8.0), row(1000, 12.0, 31.0, 50)])
    assert ("target: plan and policy check under 30 s for 1,000 jobs over 50 runtimes: "
            "MISSED (x the 1,000 jobs without runtimes: plan 1.50, policy check 3.88)") in table
    assert "1000/50rt" in table
