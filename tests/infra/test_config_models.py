"""The config models (infra/config/) beyond the invalid-config table: odd shapes of values
are reported as problems naming the key, never raised as anything else."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from infra.config import DEFAULTS, KIT_KEYS, ConfigError, load_config, stack_fields
from tests.infra.test_config import base_config

JOB = {"name": "j", "schedule": "0 3 * * *"}
RUN_JOB = "projects/acme-scheduler-test/locations/europe-west1/jobs/x"
# (id, config entries over the valid base, key the error must name)
ODD: list[tuple[str, dict[str, Any], str]] = [
    ("jobs-a-mapping", {"scheduler-dedup:jobs": {"a": 1}}, "scheduler-dedup:jobs"),
    ("jobs-not-json", {"scheduler-dedup:jobs": "abc"}, "scheduler-dedup:jobs"),
    ("job-a-string", {"scheduler-dedup:jobs": ["x"]}, "scheduler-dedup:jobs[0]"),
    ("retry-a-list", {"scheduler-dedup:jobs": [{**JOB, "retry": [1]}]},
     "scheduler-dedup:jobs[0].retry"),
    ("target-a-number", {"scheduler-dedup:jobs": [{**JOB, "proxy": {"target": 3,
                                                                     "resource": RUN_JOB}}]},
     "scheduler-dedup:jobs[0].proxy.target"),
    ("container-not-a-name", {"scheduler-dedup:jobs": [{**JOB, "proxy": {
        "target": "run_job", "resource": RUN_JOB, "container": "Bad_Name"}}]},
     "scheduler-dedup:jobs[0].proxy.container"),
    ("body-a-timestamp", {"scheduler-dedup:jobs": [{**JOB, "body": datetime.date(2020, 1, 1)}]},
     "scheduler-dedup:jobs[0].body"),
    ("schedule-a-number", {"scheduler-dedup:jobs": [{"name": "j", "schedule": 5}]},
     "scheduler-dedup:jobs[0].schedule"),
    ("a-group-of-the-models", {"scheduler-dedup:<dedup>": 5}, "scheduler-dedup:<dedup>"),
    ("project-a-number", {"gcp:project": 12345}, "gcp:project"),
    ("lease-a-fraction", {"scheduler-dedup:leaseSeconds": 60.5}, "scheduler-dedup:leaseSeconds"),
    ("lease-a-boolean", {"scheduler-dedup:leaseSeconds": True}, "scheduler-dedup:leaseSeconds"),
    ("memory-below-128Mi", {"scheduler-dedup:functionMemory": "64Mi"},
     "scheduler-dedup:functionMemory"),
    ("database-uuid-like", {"scheduler-dedup:databaseName": "a2345678-1234-1234-1234-1234567890ab"},
     "scheduler-dedup:databaseName"),
    ("database-default", {"scheduler-dedup:databaseName": "(default)"},
     "scheduler-dedup:databaseName"),
]


@pytest.mark.parametrize(("change", "key"), [c[1:] for c in ODD], ids=[c[0] for c in ODD])
def test_odd_values_are_problems_naming_the_key(change: dict[str, Any], key: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config({**base_config(), **change})
    assert caught.value.keys == (key,)
    assert "Fix: " in str(caught.value)


def test_null_means_unset_and_engine_strings_read_as_values() -> None:
    cfg = load_config({**base_config(), "scheduler-dedup:leaseSeconds": "90",
                       "scheduler-dedup:collection": None,
                       "scheduler-dedup:jobs": '[{"name": "j", "schedule": "0 3 * * *", '
                       '"proxy": null, "jobLogic": null}]'})
    assert cfg.dedup.lease_seconds == 90
    assert cfg.dedup.collection == DEFAULTS["collection"]
    assert (cfg.jobs[0].proxy, cfg.jobs[0].job_logic) == (None, DEFAULTS["defaultJobLogic"])


def test_followers_take_their_settings_values() -> None:
    cfg = load_config({**base_config(), "scheduler-dedup:namePrefix": "acme-dedup"})
    assert (cfg.dedup.database_name, cfg.dedup.firestore_location) == ("acme-dedup",
                                                                       "europe-west1")
    assert not {"databaseName", "firestoreLocation", "jobs"} & set(DEFAULTS)
    assert set(DEFAULTS) < KIT_KEYS < set(stack_fields())
