"""The wait for IAM propagation inside the program (pulumiverse-time's Sleep): created after
the accounts and their grants, and every function depends on it, so one `pulumi up`
deploys a fresh project instead of failing its first build while grants propagate."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from infra.config import ConfigError, load_config
from infra.iam_wait import SLEEP_TYPE
from operator_tools.offline import load_stack_config, run_offline
from tests.infra.helpers import FUNCTION, SLEEP, StackUnderTest
from tests.infra.test_proxy import CONFIGS as PROXY_CONFIGS
from tests.stacks import FIXTURE_STACKS_DIR


def test_sleep_type_token() -> None:
    assert SLEEP_TYPE == SLEEP == "time:index/sleep:Sleep"


def dependency_closure(stack: StackUnderTest, urn: str) -> set[str]:
    """Every resource `urn` is created after: its dependencies, theirs, and so on."""
    seen: set[str] = set()
    todo = list(stack.run.by_urn(urn).dependencies)
    while todo:
        current = todo.pop()
        if current in seen:
            continue
        seen.add(current)
        todo.extend(stack.run.by_urn(current).dependencies)
    return seen


def assert_every_function_waits(stack: StackUnderTest) -> None:
    sleeps = {s.urn: s for s in stack.all(SLEEP)}
    functions = stack.all(FUNCTION)
    assert functions
    assert len(sleeps) == len(functions)  # one wait per function, beside each other
    for function in functions:
        waits = [sleeps[urn] for urn in function.dependencies if urn in sleeps]
        assert len(waits) == 1, f"{function.name} does not depend on a wait"
        wait = waits[0]
        assert wait.parent == function.parent  # the same component's wait
        assert wait.props["createDuration"] == f"{stack.config.iam_propagation_seconds}s"

        # The wait starts once the accounts the function is built and run as, and every
        # grant to them, exist (directly, or through what it waits for).
        env = function.props["serviceConfig"]
        build_email = function.props["buildConfig"]["serviceAccount"].rsplit("/", 1)[1]
        runtime_email = env["serviceAccountEmail"]
        deps = dependency_closure(stack, wait.urn)
        for email in {build_email, runtime_email}:
            account = next(
                a
                for a in stack.all("gcp:serviceaccount/account:Account")
                if a.outputs["email"] == email
            )
            assert account.urn in deps, (function.name, account.name)
            for grant in stack.grants_to(email):
                assert grant.urn in deps, (function.name, grant.name)
        # It waits again when an account is replaced (a new e-mail).
        assert runtime_email in wait.props["triggers"].values()


def test_every_function_depends_on_the_wait(stack: StackUnderTest) -> None:
    assert_every_function_waits(stack)


@pytest.mark.parametrize("name", sorted(PROXY_CONFIGS))
def test_the_proxy_waits_for_its_own_grants(name: str, tmp_path: Path) -> None:
    raw = PROXY_CONFIGS[name]
    stack = StackUnderTest(
        name=name, raw=raw, config=load_config(raw), run=run_offline(raw, build_dir=tmp_path)
    )
    assert stack.proxy is not None
    assert_every_function_waits(stack)


def test_the_wait_follows_iam_propagation_seconds(tmp_path: Path) -> None:
    raw = copy.deepcopy(load_stack_config("dev", FIXTURE_STACKS_DIR))
    raw["scheduler-dedup:iamPropagationSeconds"] = 420
    run = run_offline(raw, build_dir=tmp_path)
    sleeps = run.of_type(SLEEP)  # the dedup service's and the watchdog's
    assert [s.props["createDuration"] for s in sleeps] == ["420s"] * 2


@pytest.mark.parametrize(
    ("seconds", "accepted"), [(0, True), (900, True), (-1, False), (901, False)]
)
def test_iam_propagation_seconds_bounds(seconds: int, accepted: bool) -> None:
    raw = copy.deepcopy(load_stack_config("dev", FIXTURE_STACKS_DIR))
    raw["scheduler-dedup:iamPropagationSeconds"] = seconds
    if accepted:
        assert load_config(raw).iam_propagation_seconds == seconds
        return
    with pytest.raises(ConfigError) as caught:
        load_config(raw)
    assert caught.value.keys == ("scheduler-dedup:iamPropagationSeconds",)
