"""The watchdog's deliveries take a path Cloud Run admits: a Cloud Tasks queue of the stack,
with the enqueuer grant on it, actAs on the watchdog's own account only, and the settings
the function reads (function/dedup/watchdog/cloud_tasks.py)."""

from __future__ import annotations

import json
from typing import Any

from google.cloud import tasks_v2

from dedup.watchdog.deliveries import (
    QUEUE_MAX_ATTEMPTS,
    QUEUE_MAX_BACKOFF_SECONDS,
    QUEUE_MAX_DOUBLINGS,
    QUEUE_MIN_BACKOFF_SECONDS,
)
from infra.watchdog import (
    DELIVERY_MAX_ATTEMPTS,
    DELIVERY_MAX_BACKOFF_SECONDS,
    DELIVERY_MAX_DOUBLINGS,
    DELIVERY_MIN_BACKOFF_SECONDS,
    DELIVERY_QUEUE_SUFFIX,
    ROLE_SA_USER,
    ROLE_TASKS_ENQUEUER,
    ROLE_TASKS_VIEWER,
    TASK_KEY_ENV,
)
from tests.infra.helpers import FUNCTION, SLEEP, StackUnderTest

QUEUE = "gcp:cloudtasks/queue:Queue"
QUEUE_IAM = "gcp:cloudtasks/queueIamMember:QueueIamMember"
SA_IAM = "gcp:serviceaccount/iAMMember:IAMMember"
SECRET = "gcp:secretmanager/secret:Secret"
PULUMI_SECRET_SIG = "4dabf18193072939515e22adb298388d"  # Pulumi's mark of a secret value
SECRET_VERSION = "gcp:secretmanager/secretVersion:SecretVersion"
SECRET_IAM = "gcp:secretmanager/secretIamMember:SecretIamMember"


def _watchdog_env(stack: StackUnderTest) -> dict[str, Any]:
    [watchdog] = [r for r in stack.all(FUNCTION) if r.name == "watchdog-function"]
    return dict(watchdog.props["serviceConfig"]["environmentVariables"])


def test_a_delivering_watchdog_hands_its_runs_to_its_own_queue(
    stack_runs: dict[str, StackUnderTest],
) -> None:
    dev = stack_runs["dev"]  # hourly-sync has catchUp
    [queue] = dev.all(QUEUE)
    prefix = dev.config.name_prefix
    assert queue.props["name"] == f"{prefix}{DELIVERY_QUEUE_SUFFIX}"
    path = f"projects/{dev.config.project}/locations/{dev.config.region}/queues/{prefix}-deliveries"
    env = _watchdog_env(dev)
    account = env["DEDUP_WATCH_TASK_ACCOUNT"]
    assert env["DEDUP_WATCH_QUEUE"] == path
    assert account == f"{prefix}-watchdog@{dev.config.project}.iam.gserviceaccount.com"
    enqueuer, viewer = sorted(dev.all(QUEUE_IAM), key=lambda r: r.props["role"])
    assert (enqueuer.props["role"], enqueuer.props["member"], enqueuer.props["name"]) == (
        ROLE_TASKS_ENQUEUER, f"serviceAccount:{account}", queue.props["name"])
    # GetTask: a task name that exists is believed once read back as its own.
    assert (viewer.props["role"], viewer.props["member"], viewer.props["name"]) == (
        ROLE_TASKS_VIEWER, f"serviceAccount:{account}", queue.props["name"])
    [acts_as] = [r for r in dev.all(SA_IAM) if r.props["role"] == ROLE_SA_USER]
    assert acts_as.props["serviceAccountId"].endswith(f"/serviceAccounts/{account}")
    assert acts_as.props["member"] == f"serviceAccount:{account}"  # itself, nobody else
    # Its first delivery does not meet a grant still propagating.
    [wait] = [r for r in dev.all(SLEEP) if r.name == "watchdog-iam-propagation"]
    assert {enqueuer.urn, viewer.urn, acts_as.urn} <= set(wait.dependencies)


def test_its_task_key_is_a_secret_only_its_account_reads(
    stack_runs: dict[str, StackUnderTest],
) -> None:
    """DEDUP_WATCH_TASK_KEY: a secret environment variable of the watchdog only (never a
    plain one, never in the stack file), from a secret whose one accessor is its account."""
    dev = stack_runs["dev"]
    prefix = dev.config.name_prefix
    env = _watchdog_env(dev)
    assert TASK_KEY_ENV not in env
    [key] = [s for s in dev.all(SECRET) if s.name == "watchdog-task-key"]
    assert key.props["secretId"] == f"{prefix}-watchdog-task-key"
    [version] = [v for v in dev.all(SECRET_VERSION) if v.name == "watchdog-task-key-version"]
    [watchdog] = [r for r in dev.all(FUNCTION) if r.name == "watchdog-function"]
    [secret_env] = watchdog.props["serviceConfig"]["secretEnvironmentVariables"]
    assert (secret_env["key"], secret_env["secret"]) == (TASK_KEY_ENV, key.props["secretId"])
    assert version.urn in watchdog.dependencies  # the version made here, not "latest"
    assert PULUMI_SECRET_SIG in version.props["secretData"]  # encrypted in the state
    readers = [g for g in dev.all(SECRET_IAM) if g.props["secretId"] == key.props["secretId"]]
    assert [(g.props["role"], g.props["member"]) for g in readers] == [(
        "roles/secretmanager.secretAccessor", f"serviceAccount:{env['DEDUP_WATCH_TASK_ACCOUNT']}")]
    others = [r for r in dev.all(FUNCTION) if r.name != "watchdog-function"]
    assert all(TASK_KEY_ENV not in json.dumps(r.props) for r in others)


def test_the_queues_retries_are_what_the_watchdog_waits_for(
    stack_runs: dict[str, StackUnderTest],
) -> None:
    [queue] = stack_runs["dev"].all(QUEUE)
    retry = queue.props["retryConfig"]
    parsed = tasks_v2.Queue.from_json(json.dumps({"retryConfig": retry}),
                                      ignore_unknown_fields=False)
    config = parsed.retry_config
    declared = (config.max_attempts, config.min_backoff.total_seconds(),
                config.max_backoff.total_seconds(), config.max_doublings)
    assert declared == (DELIVERY_MAX_ATTEMPTS, DELIVERY_MIN_BACKOFF_SECONDS,
                        DELIVERY_MAX_BACKOFF_SECONDS, DELIVERY_MAX_DOUBLINGS)
    # One fact, checked: how long the watchdog leaves a queued delivery to the queue.
    assert declared == (QUEUE_MAX_ATTEMPTS, QUEUE_MIN_BACKOFF_SECONDS,
                        QUEUE_MAX_BACKOFF_SECONDS, QUEUE_MAX_DOUBLINGS)


def test_a_watchdog_that_delivers_nothing_has_no_queue(
    stack_runs: dict[str, StackUnderTest],
) -> None:
    prod = stack_runs["prod"]  # no catchUp, no reruns
    assert prod.all(QUEUE) == [] and prod.all(QUEUE_IAM) == []
    assert [s for s in prod.all(SECRET) if s.name == "watchdog-task-key"] == []
    env = _watchdog_env(prod)
    assert "DEDUP_WATCH_QUEUE" not in env and "DEDUP_WATCH_TASK_ACCOUNT" not in env
