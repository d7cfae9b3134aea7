"""Issue 25 (2, 9): the watchdog writes only a database of its own (DEDUP_WATCH_DATABASE),
and reads the run records. The pack refuses a watchdog that writes the dedup database
while it has its own (job code writes the dedup database), and any other writer of its
own database."""

from __future__ import annotations

from policies.gcp import FIRESTORE_DATABASE
from policies.model import Resource, StackPolicy
from policies.registry import by_name
from tests.policies.fixtures import (
    DATABASE,
    PROJECT,
    PROJECT_IAM_MEMBER,
    RUNTIME_SA,
    WATCHDOG_SA,
    database_condition,
    database_props,
    replace_named,
    res,
    watchdog_stack,
)

WATCH_DATABASE = f"{DATABASE}-watchdog"
ENV = "serviceConfig.environmentVariables"


def grant(name: str, role: str, who: str, database: str) -> Resource:
    return res(PROJECT_IAM_MEMBER, name, {
        "project": PROJECT, "role": role, "member": f"serviceAccount:{who}",
        "condition": database_condition(database)})


def own_database_stack() -> list[Resource]:
    """The watchdog as infra declares it now: its own database, user there, viewer on the
    dedup database."""
    stack = replace_named(watchdog_stack(), "watchdog-function", f"{ENV}.DEDUP_WATCH_DATABASE",
                          WATCH_DATABASE)
    stack = replace_named(stack, "watchdog-datastore-user", "condition",
                          database_condition(WATCH_DATABASE))
    return [
        *stack,
        res(FIRESTORE_DATABASE, "watchdog-database", database_props(False, WATCH_DATABASE)),
        grant("watchdog-reads-dedup-database", "roles/datastore.viewer", WATCHDOG_SA, DATABASE),
    ]


def violations(policy: str, resources: list[Resource]) -> list[str]:
    stack_policy = by_name(policy)
    assert isinstance(stack_policy, StackPolicy)
    return [f.message for f in stack_policy.run(resources, stack_policy.configure({}))]


def test_the_watchdog_with_its_own_database_passes() -> None:
    for policy in ("dedup-watchdog-least-privilege", "dedup-database-writers"):
        assert violations(policy, own_database_stack()) == [], policy


def test_a_watchdog_with_its_own_database_may_not_write_the_dedup_database() -> None:
    """The old layout's grant kept beside the new database: job code's database is one the
    watchdog writes again (its cursors there would blind it)."""
    stack = [*own_database_stack(),
             grant("watchdog-writes-dedup", "roles/datastore.user", WATCHDOG_SA, DATABASE)]
    [least] = violations("dedup-watchdog-least-privilege", stack)
    assert f"not its own database 'projects/{PROJECT}/databases/{WATCH_DATABASE}'" in least
    [writers] = violations("dedup-database-writers", stack)
    assert writers.startswith(f"serviceAccount:{WATCHDOG_SA} holds roles/datastore.user, "
                              f"which writes the kit's database 'projects/{PROJECT}/databases/"
                              f"{DATABASE}'")


def test_nobody_else_writes_the_watchdogs_database() -> None:
    """The dedup function's account (job code) writing the watchdog's cursors and queue."""
    stack = [*own_database_stack(),
             grant("runtime-writes-watchdog", "roles/datastore.user", RUNTIME_SA,
                   WATCH_DATABASE)]
    [message] = violations("dedup-database-writers", stack)
    assert f"serviceAccount:{RUNTIME_SA} holds roles/datastore.user" in message
    assert "(DEDUP_WATCH_DATABASE)" in message


def test_the_watchdog_may_read_but_not_write_elsewhere() -> None:
    stack = [*own_database_stack(),
             grant("watchdog-reads-other", "roles/datastore.viewer", WATCHDOG_SA, "other-db")]
    [message] = violations("dedup-watchdog-least-privilege", stack)
    assert "roles/datastore.viewer is granted but the stack has no proxy" in message
