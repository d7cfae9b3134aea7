"""`make lock` (operator_tools/lock.py; infra/lock.py reads locks): the team's dependencies
pinned with hashes beside the kit's.

The resolving tests call uv against the package index, as `make lock` does (the machine's
package registries are reachable; nothing else is). The staleness checks and the deployed
union are offline.
"""

from __future__ import annotations

import io
import shutil
import zipfile
from pathlib import Path

import pytest

from infra import KIT_ROOT as REPO_ROOT
from infra.config import ConfigError
from infra.lock import (
    KIT_LOCK,
    TEAM_LOCK,
    TEAM_REQUIREMENTS,
    LockError,
    deployed_requirements,
    lock_problems,
    parse_lock,
)
from infra.source import build_source_archive
from operator_tools.lock import lock_team, main
from operator_tools.offline import checked_run, load_stack_config
from tests.kit_tree import kit_function
from tests.stacks import FIXTURE_STACKS_DIR


def checkout(tmp_path: Path, team_requirements: str | None) -> Path:
    """What make lock reads: the kit's lock and the team's requirements."""
    (tmp_path / "function" / "jobs").mkdir(parents=True)
    shutil.copy2(REPO_ROOT / KIT_LOCK, tmp_path / KIT_LOCK)
    if team_requirements is not None:
        (tmp_path / TEAM_REQUIREMENTS).write_text(team_requirements)
    return tmp_path


def kit_pins() -> dict[str, str]:
    return {p.name: p.version for p in parse_lock((REPO_ROOT / KIT_LOCK).read_text())}


@pytest.mark.timeout(180)
def test_a_team_dependency_is_pinned_with_its_own_dependencies_and_hashes(
    tmp_path: Path,
) -> None:
    root = checkout(tmp_path, "# jobs/validate.py\njsonschema\n")
    assert lock_problems(root) == [f"{TEAM_REQUIREMENTS} is not locked yet"]
    written = lock_team(root)
    assert written == root / TEAM_LOCK
    pins = {p.name: p for p in parse_lock(written.read_text())}
    # Transitive ones included, each with the hashes of its files...
    assert {"jsonschema", "attrs", "referencing", "rpds-py"} <= set(pins)
    assert all("--hash=sha256:" in pin.block for pin in pins.values())
    # ...and what the kit's lock already pins is left to it (referencing needs it).
    assert "typing-extensions" in kit_pins()
    assert not set(pins) & set(kit_pins())
    assert lock_problems(root) == []


@pytest.mark.timeout(180)
def test_a_conflict_with_the_kits_pins_is_one_error_naming_both_packages(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # google-cloud-bigquery 2.34.4 needs python-dateutil<3; the kit runs 4.0.0 (croniter).
    root = checkout(tmp_path, "google-cloud-bigquery==2.34.4\n")
    with pytest.raises(LockError) as caught:
        lock_team(root)
    message = str(caught.value)
    assert "google-cloud-bigquery==2.34.4" in message
    assert f"python-dateutil=={kit_pins()['python-dateutil']}" in message
    assert "cannot be resolved together with the kit's pins (function/requirements.txt" in message
    assert "Fix: choose a version of your package" in message
    assert not (root / TEAM_LOCK).exists()
    # The command: exit status 2, the message on stderr, no traceback.
    assert main(["--root", str(root)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("make lock: function/jobs/requirements.in cannot be resolved")
    assert "Traceback" not in err


def test_without_team_requirements_make_lock_writes_nothing_and_removes_an_old_lock(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = checkout(tmp_path, None)
    (root / TEAM_LOCK).write_text("left over\n")
    assert lock_problems(root) == [
        f"{TEAM_LOCK} exists without {TEAM_REQUIREMENTS} (make lock removes it)"
    ]
    assert main(["--root", str(root)]) == 0
    assert "your jobs use the kit's packages only" in capsys.readouterr().out
    assert not (root / TEAM_LOCK).exists()
    assert lock_problems(root) == []


def locked(root: Path, requirements: str, pins: str) -> None:
    """A team lock as make lock writes it for `requirements`, with `pins` as its body."""
    from infra.lock import digest_line

    (root / TEAM_REQUIREMENTS).write_text(requirements)
    (root / TEAM_LOCK).write_text(f"{digest_line(root)}\n{pins}")


HASHED = "--hash=sha256:" + "0" * 64
STALE = (f"{TEAM_LOCK} was resolved from another {TEAM_REQUIREMENTS} or another kit lock "
         f"({KIT_LOCK}, which a kit release changes)")


def test_a_team_lock_older_than_its_requirements_is_named_with_the_fix(tmp_path: Path) -> None:
    root = checkout(tmp_path, None)
    locked(root, "jsonschema\n", f"jsonschema==4.26.0 \\\n    {HASHED}\n")
    assert lock_problems(root) == []
    (root / TEAM_REQUIREMENTS).write_text("jsonschema\nhttpx\n")  # edited, not re-locked
    assert lock_problems(root) == [STALE]


def test_a_kit_release_that_changes_its_lock_makes_the_team_lock_stale(tmp_path: Path) -> None:
    """A kit release may drop, add or move a package the team's depend on: re-resolve."""
    root = checkout(tmp_path, None)
    locked(root, "httpx\n", f"httpx==0.28.1 \\\n    {HASHED}\n")
    assert lock_problems(root) == []
    kit = root / KIT_LOCK
    kit.write_text(kit.read_text().replace("requests==", "requests-moved=="))
    assert lock_problems(root) == [STALE]


def test_an_unhashed_or_unreadable_team_lock_is_named(tmp_path: Path) -> None:
    root = checkout(tmp_path, None)
    locked(root, "x\n", "unhashed==1.0\n")
    assert lock_problems(root) == [f"unhashed in {TEAM_LOCK} has no --hash"]
    locked(root, "x\n", "-e ./local-package\n")
    assert lock_problems(root) == ["cannot read the lock line '-e ./local-package'"]


@pytest.mark.timeout(180)
def test_url_requirements_and_index_options_are_kept(tmp_path: Path) -> None:
    """A direct URL is pinned with its hash; the team's index options travel with its
    lock, so Cloud Build looks where make lock looked."""
    wheel = ("https://files.pythonhosted.org/packages/b7/ce/149a00dd41f10bc29e5921b496af8b5"
             "74d8413afcd5e30dfa0ed46c2cc5e/six-1.17.0-py2.py3-none-any.whl")
    root = checkout(tmp_path, f"--extra-index-url https://pypi.org/simple\nsix @ {wheel}\n")
    written = lock_team(root)
    assert written is not None
    text = written.read_text()
    assert "\n--extra-index-url https://pypi.org/simple\n" in text
    [six] = parse_lock(text)
    assert (six.name, six.version) == ("six", wheel)
    assert "--hash=sha256:" in six.block
    assert lock_problems(root) == []


def test_cloud_build_installs_the_kits_lock_and_the_teams(tmp_path: Path) -> None:
    source = kit_function(tmp_path / "function")
    kit = (source / "requirements.txt").read_bytes()
    assert deployed_requirements(source) == kit  # no team lock: the kit's alone
    (source / "jobs").mkdir(exist_ok=True)
    team = f"# header\njsonschema==4.26.0 \\\n    {HASHED}\n".encode()
    (source / "jobs" / "requirements.txt").write_bytes(team)
    union = deployed_requirements(source)
    assert union.startswith(kit) and union.endswith(team)
    archive = build_source_archive(source)
    with zipfile.ZipFile(io.BytesIO(archive.data)) as zf:
        assert zf.read("requirements.txt") == union


def test_make_plan_refuses_a_stale_team_lock_before_anything_starts(tmp_path: Path) -> None:
    root = tmp_path
    source = kit_function(root / "function")
    (source / "jobs").mkdir()
    (root / TEAM_REQUIREMENTS).write_text("jsonschema\n")
    values = load_stack_config("dev", FIXTURE_STACKS_DIR)
    with pytest.raises(ConfigError) as caught:
        checked_run(values, source_dir=source, build_dir=root / "build")
    assert caught.value.keys == (str(TEAM_LOCK),)
    assert str(caught.value).endswith(
        f"{TEAM_LOCK}: {TEAM_REQUIREMENTS} is not locked yet. Fix: run `make lock`"
    )


@pytest.mark.timeout(180)
def test_a_package_that_does_not_exist_is_not_called_a_conflict(tmp_path: Path) -> None:
    root = checkout(tmp_path, "no-such-package-of-the-kit-xyz\n")
    with pytest.raises(LockError) as caught:
        lock_team(root)
    message = str(caught.value)
    assert message.startswith(f"resolving {TEAM_REQUIREMENTS} failed:")
    assert "no-such-package-of-the-kit-xyz" in message
    assert "cannot be resolved together" not in message
