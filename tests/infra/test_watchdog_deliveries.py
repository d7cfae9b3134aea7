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
)
from tests.infra.helpers import FUNCTION, SLEEP, StackUnderTest

QUEUE = "gcp:cloudtasks/queue:Queue"
QUEUE_IAM = "gcp:cloudtasks/queueIamMember:QueueIamMember"
SA_IAM = "gcp:serviceaccount/iAMMember:IAMMember"


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
    [enqueuer] = dev.all(QUEUE_IAM)
    assert (enqueuer.props["role"], enqueuer.props["member"], enqueuer.props["name"]) == (
        ROLE_TASKS_ENQUEUER, f"serviceAccount:{account}", queue.props["name"])
    [acts_as] = [r for r in dev.all(SA_IAM) if r.props["role"] == ROLE_SA_USER]
    assert acts_as.props["serviceAccountId"].endswith(f"/serviceAccounts/{account}")
    assert acts_as.props["member"] == f"serviceAccount:{account}"  # itself, nobody else
    # Its first delivery does not meet a grant still propagating.
    [wait] = [r for r in dev.all(SLEEP) if r.name == "watchdog-iam-propagation"]
    assert {enqueuer.urn, acts_as.urn} <= set(wait.dependencies)


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
    env = _watchdog_env(prod)
    assert "DEDUP_WATCH_QUEUE" not in env and "DEDUP_WATCH_TASK_ACCOUNT" not in env
