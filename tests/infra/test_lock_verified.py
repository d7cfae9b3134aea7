"""`make plan` verifies the team's lock, it does not trust it (operator_tools/lock.py
`verify_team_lock`, called by operator_tools/job_logic.py): the lock is resolved again as
`make lock` resolves it and any line that differs is refused, naming it; an index that cannot
be reached is a named refusal, never a pass; a verified lock is remembered under the
project's .cache/ by the digest of what it was verified from.

The tests that resolve call uv against the package index, as `make lock` does (the machine's
package registries are reachable); the unreachable index is an address nothing listens on,
and the cache's tests count the resolutions with a stand-in resolver.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from infra.config import ConfigError
from infra.lock import (
    KIT_LOCK,
    RESOLVED_AS_OF,
    TEAM_LOCK,
    TEAM_REQUIREMENTS,
    IndexUnreachable,
    digest_line,
    parse_lock,
)
from operator_tools import lock as lock_tool
from operator_tools.lock import VERIFIED_LOCKS, lock_team, verify_team_lock
from operator_tools.offline import checked_run, load_stack_config
from tests.kit_tree import kit_function
from tests.stacks import FIXTURE_STACKS_DIR

ATTACKER_HASH = "--hash=sha256:" + "a" * 64
UNREACHABLE_INDEX = "http://127.0.0.1:9/simple"  # the discard port: nothing answers


def project(root: Path, requirements: str | None) -> Path:
    """A project as `make plan` reads it: the kit's function/ (its lock), the team's jobs/."""
    kit_function(root / "function")
    (root / "function" / "jobs").mkdir()
    if requirements is not None:
        (root / TEAM_REQUIREMENTS).write_text(requirements)
    return root


@pytest.fixture(scope="module")
def six_locked(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A project whose team needs `six`, locked by `make lock` (once for the module)."""
    root = project(tmp_path_factory.mktemp("six") / "project", "six\n")
    assert lock_team(root) == root / TEAM_LOCK
    return root


def copy_of(locked: Path, into: Path, *, verified: bool) -> Path:
    shutil.copytree(locked, into, symlinks=True)
    if not verified:  # make lock remembers what it wrote: forget it, to resolve again
        shutil.rmtree(into / VERIFIED_LOCKS, ignore_errors=True)
    return into


def refusal(root: Path) -> str:
    """What `make plan` says of the project's team lock (its start-up check's first step),
    which must refuse it before anything starts."""
    values = load_stack_config("dev", FIXTURE_STACKS_DIR)
    with pytest.raises(ConfigError) as caught:
        checked_run(values, source_dir=root / "function", build_dir=root / "build")
    assert caught.value.keys == (str(TEAM_LOCK),)
    return str(caught.value)


@pytest.mark.timeout(180)
def test_an_unchanged_lock_is_resolved_again_and_passes(six_locked: Path, tmp_path: Path) -> None:
    root = copy_of(six_locked, tmp_path / "p", verified=False)
    text = (root / TEAM_LOCK).read_text()
    assert f"\n{RESOLVED_AS_OF} " in text
    assert verify_team_lock(root) == []
    assert len(list((root / VERIFIED_LOCKS).iterdir())) == 1  # remembered


@pytest.mark.timeout(180)
def test_a_url_requirement_with_the_attackers_hash_is_refused_naming_the_line(
    six_locked: Path, tmp_path: Path
) -> None:
    root = copy_of(six_locked, tmp_path / "p", verified=False)
    lock = root / TEAM_LOCK
    [six] = parse_lock(lock.read_text())
    evil = ("six @ https://attacker.example/six-1.17.0-py2.py3-none-any.whl \\\n"
            f"    {ATTACKER_HASH}\n")
    lock.write_text(lock.read_text().replace(six.block, evil))
    message = refusal(root)
    assert f"{TEAM_LOCK} is not what `make lock` resolves from {TEAM_REQUIREMENTS}" in message
    assert "\n  - six @ https://attacker.example/six-1.17.0-py2.py3-none-any.whl\n" in message
    assert f"\n  - {ATTACKER_HASH}\n" in message
    assert f"\n  + six=={six.version}\n" in message
    assert message.endswith("Fix: run `make lock`")
    assert not (root / VERIFIED_LOCKS).exists()  # a refusal is never remembered


@pytest.mark.timeout(180)
def test_another_version_with_a_hash_is_refused_naming_the_line(
    six_locked: Path, tmp_path: Path
) -> None:
    root = copy_of(six_locked, tmp_path / "p", verified=False)
    lock = root / TEAM_LOCK
    [six] = parse_lock(lock.read_text())
    lock.write_text(lock.read_text().replace(
        six.block, f"six==1.16.0 \\\n    {ATTACKER_HASH}\n    # via -r {TEAM_REQUIREMENTS}\n"))
    [problem] = verify_team_lock(root)
    assert "\n  - six==1.16.0\n" in problem
    assert f"\n  - {ATTACKER_HASH}\n" in problem
    assert f"\n  + six=={six.version}\n" in problem


def hand_written_lock(root: Path, body: str) -> None:
    """A team lock whose first lines are as `make lock` writes them (the offline checks
    pass): only resolving it again tells whether its body is."""
    (root / TEAM_LOCK).write_text(
        f"{digest_line(root)}\n{RESOLVED_AS_OF} 2026-01-01T00:00:00Z\n{body}")


def test_an_unreachable_index_refuses_the_lock_as_not_verified(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = project(tmp_path, "six\n")
    hand_written_lock(root, f"six==1.17.0 \\\n    {ATTACKER_HASH}\n")
    monkeypatch.setenv("UV_INDEX_URL", UNREACHABLE_INDEX)  # uv's: where make lock looks
    monkeypatch.setenv("UV_HTTP_RETRIES", "0")
    monkeypatch.setenv("UV_NO_CACHE", "1")  # nothing answered from uv's own cache
    with pytest.raises(IndexUnreachable) as caught:
        verify_team_lock(root)
    assert caught.value.what == (
        f"the package index could not be reached ({UNREACHABLE_INDEX}/six/): "
        f"{TEAM_REQUIREMENTS} could not be resolved, so {TEAM_LOCK} could not be verified")
    message = refusal(root)  # make plan: the named refusal, under the lock's name
    assert f"{TEAM_LOCK}: the package index could not be reached ({UNREACHABLE_INDEX}" in message
    assert "could not be verified. Fix: run it again where the package index can be reached" \
        in message
    assert not (root / VERIFIED_LOCKS).exists()


def counting_resolver(monkeypatch: pytest.MonkeyPatch) -> Callable[[], int]:
    """Stand in for the resolver with one that agrees with the lock on disk (what it would
    write: the lock's first lines as they are now, then the lock's body); the number of
    resolutions so far."""
    calls: list[str] = []

    def resolve(root: Path, kit_root: Path, as_of: str, uv: str | None = None,
                action: str = "written") -> str:
        calls.append(action)
        lock = root / TEAM_LOCK
        body = lock.read_text().split("\n", 2)[2] if lock.is_file() else STAND_IN_BODY
        return f"{digest_line(root, kit_root)}\n{RESOLVED_AS_OF} {as_of}\n{body}"

    monkeypatch.setattr(lock_tool, "resolve_team_lock", resolve)
    return lambda: len(calls)


STAND_IN_BODY = f"six==1.17.0 \\\n    {ATTACKER_HASH}\n"


def test_a_verified_lock_is_not_resolved_again_until_an_input_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = project(tmp_path, "six\n")
    body = STAND_IN_BODY
    resolutions = counting_resolver(monkeypatch)
    hand_written_lock(root, body)
    assert verify_team_lock(root) == []
    assert resolutions() == 1
    assert verify_team_lock(root) == []  # the same inputs: remembered
    assert resolutions() == 1
    # Each input is part of what was verified: the team's lock, its requirements, the
    # kit's lock (a release), the resolver's version.
    hand_written_lock(root, body + "\n")
    assert verify_team_lock(root) == []
    assert resolutions() == 2
    monkeypatch.setattr(lock_tool, "resolver_version", lambda uv: "uv 99.0.0")
    assert verify_team_lock(root) == []
    assert resolutions() == 3
    kit_lock = root / "function" / KIT_LOCK.name
    kit_lock.write_text(kit_lock.read_text() + "\n")
    hand_written_lock(root, body)  # re-locked against it (its first line names it)
    assert verify_team_lock(root) == []
    assert resolutions() == 4
    (root / TEAM_REQUIREMENTS).write_text("six\n# and a comment\n")
    hand_written_lock(root, body)
    assert verify_team_lock(root) == []
    assert resolutions() == 5


def test_a_lock_make_lock_wrote_is_not_resolved_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = project(tmp_path, "six\n")
    resolutions = counting_resolver(monkeypatch)
    lock_team(root)
    assert resolutions() == 1
    assert verify_team_lock(root) == []
    assert resolutions() == 1


def test_a_team_without_requirements_needs_no_resolution(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = project(tmp_path, None)
    resolutions = counting_resolver(monkeypatch)
    assert verify_team_lock(root) == []
    assert resolutions() == 0
    assert not (root / VERIFIED_LOCKS).exists()


def test_a_lock_that_does_not_say_when_it_was_resolved_is_refused(tmp_path: Path) -> None:
    root = project(tmp_path, "six\n")
    (root / TEAM_LOCK).write_text(f"{digest_line(root)}\nsix==1.17.0 \\\n    {ATTACKER_HASH}\n")
    assert verify_team_lock(root) == [
        f"{TEAM_LOCK} does not say when it was resolved (its line {RESOLVED_AS_OF!r}): an "
        "older `make lock` or a hand wrote it"]
