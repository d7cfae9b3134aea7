"""`make dist`: the kit as a wheel, scheduler_dedup_kit-<version>-py3-none-any.whl.

Built once for the module (tests/dist_helpers.py, as `make dist` builds it): it carries the
kit's tree under scheduler_dedup_kit/ as this repository lays it out, and nothing of the
kit's own tests, benchmarks, docs or a team's jobs; its version is version.py's; its
Requires-Dist are the pins of the files that declare them, once each; and installed alone
into a fresh virtualenv, its `scheduler-dedup` command finds the installed tree.
"""

from __future__ import annotations

import importlib.metadata
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from dedup.version import __version__
from operator_tools.__main__ import COMMANDS
from tests.dist_helpers import (
    PACKAGE,
    REPO_ROOT,
    build_wheel,
    clean_env,
    fresh_venv,
    install_wheel,
    wheel_entry_points,
    wheel_files,
    wheel_metadata,
)
from tests.kit_tree import kit_clone, kit_files

# What the wheel carries of the checkout, each under scheduler_dedup_kit/ (pyproject.toml's
# [tool.hatch.build.targets.wheel]); provider/ once it exists.
SHIPPED = ("scheduler_dedup_kit/", "function/dedup/", "function/example_jobs/",
           "function/main.py", "function/requirements.in", "function/requirements.txt",
           "infra/", "operator_tools/", "policies/", "scheduler_emulator/", "demo/",
           "local_stack/", "examples/", "schema/", "provider/", "CHANGELOG.md", "Pulumi.yaml")
# Pinned by these, in this order (hatch_build.py's DECLARING_FILES).
DECLARING = ("requirements.txt", "function/requirements.in", "policies/requirements.txt",
             "requirements-tools.txt")
# Their closure, pinned (make lock-kit), which the wheel pins too.
CLOSURE = "requirements-dist.txt"
# What a build needs of a checkout but the kit's tree (test_one_declaration... copies).
BUILD_INPUTS = ("pyproject.toml", "hatch_build.py", "LICENSE", "CHANGELOG.md", "Pulumi.yaml",
                *DECLARING, CLOSURE, "function/dedup/version.py", "scheduler_dedup_kit/__init__.py",
                "scheduler_dedup_kit/cli.py", "scheduler_dedup_kit/__main__.py")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The kit's wheel, built from a clone of the kit: in a fork the checkout also holds
    the team's files (policies/policy-config.<stack>.json would be shipped)."""
    return build_wheel(tmp_path_factory.mktemp("dist"), kit_clone(tmp_path_factory.mktemp("kit")))


def in_wheel(relative: str) -> str:
    return relative if relative.startswith(f"{PACKAGE}/") else f"{PACKAGE}/{relative}"


def checkout_files() -> set[str]:
    """The kit's files under SHIPPED, as git sees them (tracked, or new and not ignored;
    never a team's file: tests/kit_tree.py), that exist."""
    return {path for path in kit_files()
            if path in SHIPPED or path.startswith(tuple(s for s in SHIPPED if s.endswith("/")))}


def pins_of(root: Path, files: tuple[str, ...] = (*DECLARING, CLOSURE)) -> set[str]:
    """`name==version` of every requirement line of `files` (read here on purpose without
    hatch_build.py, whose output this checks)."""
    pins: set[str] = set()
    for relative in files:
        for line in (root / relative).read_text(encoding="utf-8").splitlines():
            match = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s#;\\]+)", line)
            if match:
                pins.add(f"{canonicalize_name(match[1])}=={match[2]}")
    return pins


def requires_dist(wheel: Path) -> list[str]:
    requirements = [Requirement(r) for r in wheel_metadata(wheel).get_all("Requires-Dist", [])]
    return [f"{canonicalize_name(r.name)}{r.specifier}" for r in requirements]


# --- (a) the tree ---------------------------------------------------------------------


def test_the_wheel_is_named_for_the_kits_one_version(wheel: Path) -> None:
    assert wheel.name == f"scheduler_dedup_kit-{__version__}-py3-none-any.whl"


def test_the_wheel_holds_the_kits_tree_as_the_repository_lays_it_out(wheel: Path) -> None:
    files = wheel_files(wheel)
    shipped = {name for name in files if not name.split("/", 1)[0].endswith(".dist-info")}
    assert shipped == {in_wheel(path) for path in checkout_files()}
    for needed in ("scheduler_dedup_kit/__init__.py", "scheduler_dedup_kit/cli.py",
                   "scheduler_dedup_kit/__main__.py", "function/main.py",
                   "function/requirements.in", "function/requirements.txt",
                   "function/dedup/version.py", "function/example_jobs/__init__.py",
                   "infra/__main__.py", "infra/config/__init__.py", "infra/contracts/__init__.py",
                   "operator_tools/__main__.py", "policies/PulumiPolicy.yaml",
                   "policies/requirements.txt", "policies/policy-config.example.json",
                   "scheduler_emulator/__init__.py", "demo/cli.py", "local_stack/__init__.py",
                   "examples/stacks/Pulumi.dev.yaml", "schema/stack.schema.json",
                   "CHANGELOG.md", "Pulumi.yaml"):
        assert in_wheel(needed) in shipped, needed
    assert any(name.startswith(f"{PACKAGE}/operator_tools/templates/") for name in shipped)


def test_the_wheel_carries_none_of_the_kits_own_tests_docs_or_a_teams_jobs(wheel: Path) -> None:
    refused = [name for name in wheel_files(wheel)
               if name.startswith(tuple(f"{PACKAGE}/{part}" for part in (
                   "tests/", "bench/", "docs/", ".github/", "build/", ".cache/", "dist/",
                   "function/jobs/", "stacks/", "scheduler_dedup_kit/")))
               or "__pycache__" in name or name.endswith(".pyc")
               or not name.startswith((f"{PACKAGE}/", f"scheduler_dedup_kit-{__version__}"))]
    assert refused == []


# --- (b) the metadata -----------------------------------------------------------------


def test_its_version_is_the_kits_one_version(wheel: Path) -> None:
    assert wheel_metadata(wheel)["Name"] == "scheduler-dedup-kit"
    assert wheel_metadata(wheel)["Version"] == __version__


def test_its_requirements_are_the_declared_pins_each_once(wheel: Path) -> None:
    requirements = requires_dist(wheel)
    assert len(requirements) == len({r.split("==")[0] for r in requirements})
    assert set(requirements) == pins_of(REPO_ROOT)
    # the tools' own: the stack files (PyYAML), make lock (uv), the demo's fake Google APIs
    assert {"pyyaml==6.0.4", "uv==0.13.9"} <= set(requirements)
    assert any(r.startswith("cryptography==") for r in requirements)


def test_the_plans_google_api_types_come_with_the_wheels_requirements(wheel: Path) -> None:
    """make plan parses each resource with Google's types, imported by name
    (infra/contracts): each module is shipped by a Requires-Dist or what it requires."""
    from infra.contracts.convert import CONTRACTS

    modules = {c.api_type.module for c in CONTRACTS.values()}
    modules |= {t.module for c in CONTRACTS.values() for t in c.parsed_apart.values()}
    shipped: set[str] = set()
    pending = [r.split("==")[0] for r in requires_dist(wheel)]
    seen: set[str] = set()
    while pending:  # the installed closure, as this virtualenv has it
        name = canonicalize_name(pending.pop())
        if name in seen:
            continue
        seen.add(name)
        distribution = importlib.metadata.distribution(name)
        shipped |= {f.as_posix() for f in distribution.files or ()}
        needs = [Requirement(r) for r in distribution.requires or ()]
        pending += [r.name for r in needs if r.marker is None or r.marker.evaluate({"extra": ""})]
    missing = [m for m in sorted(modules) if not {f"{m.replace('.', '/')}/__init__.py",
                                                  f"{m.replace('.', '/')}.py"} & shipped]
    assert missing == []


def test_the_dev_environment_installs_every_declaring_file() -> None:
    """requirements-dev.txt includes each (-r): `make test` runs with the wheel's pins."""
    dev = (REPO_ROOT / "requirements-dev.txt").read_text(encoding="utf-8").splitlines()
    assert all(f"-r {relative}" in dev for relative in DECLARING)


def checkout_copy(into: Path) -> Path:
    """What a build needs of this checkout, copied."""
    for relative in BUILD_INPUTS:
        (into / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO_ROOT / relative, into / relative)
    return into


def test_one_declaration_a_changed_pin_changes_the_wheel(tmp_path: Path) -> None:
    """A pin edited in the function's requirements.in is the wheel's; a team's job, byte
    code and a folder's dotfiles (examples/team-repo/.github/) as the tree has them."""
    source = checkout_copy(tmp_path / "kit")
    requirements_in = source / "function" / "requirements.in"
    for pinned in (requirements_in, source / CLOSURE):  # as make lock-kit would, both
        pinned.write_text(re.sub(r"(?m)^requests==\S+", "requests==2.0.1",
                                 pinned.read_text(encoding="utf-8")))
    team_repo = source / "examples" / "team-repo"
    (team_repo / ".github" / "workflows").mkdir(parents=True)
    (team_repo / ".github" / "workflows" / "deploy.yml").write_text("name: deploy\n")
    (team_repo / ".gitignore").write_text(".venv\n")
    (source / "function" / "jobs").mkdir()
    (source / "function" / "jobs" / "billing.py").write_text("")
    (source / "infra" / "__pycache__").mkdir(parents=True)
    (source / "infra" / "__pycache__" / "program.cpython-312.pyc").write_bytes(b"")

    rebuilt = build_wheel(tmp_path / "dist", source)
    assert "requests==2.0.1" in requires_dist(rebuilt)
    assert set(requires_dist(rebuilt)) == pins_of(source)
    files = wheel_files(rebuilt)
    assert f"{PACKAGE}/examples/team-repo/.github/workflows/deploy.yml" in files
    assert f"{PACKAGE}/examples/team-repo/.gitignore" in files
    assert not [name for name in files if "/jobs/" in name or "__pycache__" in name]


def test_two_different_pins_of_one_package_fail_the_build_naming_both(tmp_path: Path) -> None:
    import hatch_build

    source = checkout_copy(tmp_path / "kit")
    pack = source / "policies" / "requirements.txt"
    pack.write_text(re.sub(r"(?m)^croniter==\S+", "croniter==0.0.1",
                           pack.read_text(encoding="utf-8")))
    with pytest.raises(ValueError, match=r"croniter is pinned twice.*requirements\.txt.*"
                                         r"'croniter==0\.0\.1' in policies/requirements\.txt"):
        hatch_build.pinned_requirements(source)
    pack.write_text("pulumi-policy>=1\n")
    with pytest.raises(ValueError, match="not pinned exactly"):
        hatch_build.pinned_requirements(source)


def test_requirement_lines_skip_comments_options_and_hashes(tmp_path: Path) -> None:
    import hatch_build

    lock = tmp_path / "requirements.txt"
    lock.write_text("# a comment\n-r other.txt\n-c constraints.txt\n"
                    "croniter==7.0.0  # why\n"
                    "requests==2.34.2 \\\n    --hash=sha256:" + "0" * 64 + " \\\n"
                    "    --hash=sha256:" + "1" * 64 + "\n\n")
    assert hatch_build.requirement_lines(lock) == ["croniter==7.0.0", "requests==2.34.2"]


# --- (c) the entry point --------------------------------------------------------------


def test_the_scheduler_dedup_command_is_declared(wheel: Path) -> None:
    assert re.search(r"(?m)^\[console_scripts\]\nscheduler-dedup = scheduler_dedup_kit\.cli:main$",
                     wheel_entry_points(wheel))


# --- (d) installed --------------------------------------------------------------------


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtualenv (none of this one's packages) with the wheel alone in it."""
    python = fresh_venv(tmp_path_factory.mktemp("installed") / "venv")
    install_wheel(wheel, python)
    return python


def run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, env=clean_env(), capture_output=True, text=True,
                          timeout=120, check=False)


def test_installed_the_kits_root_is_the_installed_tree(installed: Path, tmp_path: Path) -> None:
    # -I: no working directory, no PYTHON* variables, no user site: only the venv's own.
    # dedup found, not imported: its __init__ needs croniter, which this venv has not.
    probe = ("import scheduler_dedup_kit as kit; print(kit.KIT_ROOT); kit.activate()\n"
             "import importlib.util, infra, operator_tools.__main__ as tools\n"
             "print(infra.__file__); print(importlib.util.find_spec('dedup').origin)\n"
             "print(tools.__file__)\n"
             "try:\n    import pulumi\nexcept ModuleNotFoundError:\n    print('alone')\n")
    result = run([str(installed), "-I", "-c", probe], cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    root, *modules, alone = result.stdout.splitlines()
    site_packages = subprocess.run(
        [str(installed), "-I", "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True, text=True, check=True, timeout=60).stdout.strip()
    assert Path(root) == Path(site_packages) / PACKAGE
    assert [Path(m).relative_to(root).as_posix() for m in modules] == [
        "infra/__init__.py", "function/dedup/__init__.py", "operator_tools/__main__.py"]
    assert (Path(root) / "Pulumi.yaml").is_file()
    assert alone == "alone"  # nothing of the checkout's virtualenv leaks in


def test_installed_scheduler_dedup_help_lists_the_commands(installed: Path,
                                                          tmp_path: Path) -> None:
    for argv in ([str(installed.with_name("scheduler-dedup")), "--help"],
                 [str(installed), "-I", "-m", "scheduler_dedup_kit", "--help"]):
        result = run(argv, cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        assert result.stdout.startswith("usage: scheduler-dedup <command> [args]")
        listed = re.findall(r"(?m)^  (\S+)  ", result.stdout)
        assert listed == list(COMMANDS)


def test_installed_outside_a_project_it_refuses_and_never_plans_its_own_folder(
    installed: Path, tmp_path: Path,
) -> None:
    """No Pulumi.yaml around: a project command says so (it would otherwise write a team's
    files into whatever folder it ran in), and `schema` would rewrite the installed kit."""
    command = str(installed.with_name("scheduler-dedup"))
    for argv, says in (([command, "new-job", "billing"], "no Pulumi.yaml in"),
                       ([command, "plan"], "no Pulumi.yaml in"),
                       ([command, "schema"], "a kit maintainer's command")):
        result = run(argv, cwd=tmp_path)
        assert result.returncode == 2 and says in result.stderr, (argv, result.stderr)
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_the_closure_is_every_package_the_declared_pins_need_at_the_tested_versions() -> None:
    """requirements-dist.txt is current: the declared pins and, through the dev venv's own
    metadata (built from constraints.txt), each package they need on Linux, transitively,
    each at constraints.txt's version. Else: make lock-kit."""
    import importlib.metadata as metadata

    from packaging.markers import default_environment

    environment = {key: str(value) for key, value in default_environment().items()}
    environment |= {"sys_platform": "linux", "platform_system": "Linux"}
    seen: set[tuple[str, frozenset[str]]] = set()
    todo = [(r.split("==")[0], frozenset[str]()) for r in pins_of(REPO_ROOT, DECLARING)]
    while todo:
        name, extras = todo.pop()
        if (canonicalize_name(name), extras) in seen:
            continue
        seen.add((canonicalize_name(name), extras))
        for line in metadata.distribution(name).requires or []:
            requirement = Requirement(line)
            if requirement.marker is None or any(
                    requirement.marker.evaluate({**environment, "extra": extra})
                    for extra in ("", *extras)):
                todo.append((requirement.name, frozenset(requirement.extras)))
    needed = {name for name, _ in seen}
    constraints = pins_of(REPO_ROOT, ("constraints.txt",))
    closure = pins_of(REPO_ROOT, (CLOSURE,))
    assert {p.split("==")[0] for p in closure} == needed, "run make lock-kit"
    tested = {p.split("==")[0]: p for p in constraints}
    assert [p for p in closure if tested.get(p.split("==")[0], p) != p] == [], (
        "requirements-dist.txt and constraints.txt disagree: run make lock-kit")
