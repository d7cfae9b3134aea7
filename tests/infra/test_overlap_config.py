"""overlap in the stack config: a job's own, else the stack's, else `allow`; a bad value
fails before any resource with the key and the fix; the Scheduler job sends
X-Dedup-Overlap only for a policy other than `allow` (existing jobs' headers unchanged)."""

from __future__ import annotations

import pytest

from infra.config import ConfigError, load_config
from infra.scheduled_job import HEADER_OVERLAP, job_headers
from tests.infra.test_config import base_config, set_job, set_key


def test_allow_is_the_default_and_sends_no_header() -> None:
    cfg = load_config(base_config())
    assert cfg.dedup.overlap == "allow" and cfg.jobs[0].overlap == "allow"
    assert HEADER_OVERLAP not in job_headers(cfg.project, cfg.region, cfg.jobs[0])


def test_the_jobs_own_policy_wins_over_the_stacks() -> None:
    raw = base_config()
    set_key("scheduler-dedup:overlap", "wait")(raw)
    raw["scheduler-dedup:jobs"].append({"name": "sync", "schedule": "*/5 * * * *",
                                        "overlap": "forbid"})
    cfg = load_config(raw)
    assert [job.overlap for job in cfg.jobs] == ["wait", "forbid"]
    assert [job_headers(cfg.project, cfg.region, job)[HEADER_OVERLAP] for job in cfg.jobs] == [
        "wait", "forbid"]


@pytest.mark.parametrize(("key", "change"), [
    ("scheduler-dedup:jobs[0].overlap", set_job("overlap", "skip")),
    ("scheduler-dedup:overlap", set_key("scheduler-dedup:overlap", "Forbid")),
])
def test_a_bad_overlap_names_the_key_and_the_choices(key: str, change: object) -> None:
    raw = base_config()
    change(raw)  # type: ignore[operator]
    with pytest.raises(ConfigError) as caught:
        load_config(raw)
    message = str(caught.value)
    assert key in message
    assert "'allow', 'forbid', 'wait' or 'replace'" in message


@pytest.mark.parametrize("where", ["job", "stack"])
def test_wait_or_replace_on_a_job_never_retried_names_the_key_and_the_fix(where: str) -> None:
    raw = base_config()
    set_job("retry", "none")(raw)
    if where == "job":
        set_job("overlap", "wait")(raw)
    else:
        set_key("scheduler-dedup:overlap", "replace")(raw)
    with pytest.raises(ConfigError) as caught:
        load_config(raw)
    message = str(caught.value)
    assert ("scheduler-dedup:jobs[0].overlap" if where == "job"
            else "scheduler-dedup:overlap") in message
    assert "is never retried" in message and "retry.retryCount >= 1" in message
    set_job("overlap", "forbid")(raw)  # forbid needs no retry
    assert load_config(raw).jobs[0].overlap == "forbid"
