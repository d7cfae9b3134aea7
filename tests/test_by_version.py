"""Use it by version (docs/by-version.md): the kit's wheel installed into a fresh virtualenv
with nothing else of this repository, a team repository written by `scheduler-dedup init`,
a job of the team's with a dependency of its own, and there, exactly as a team runs them:
`lock`, the team's tests, `plan --stack dev`, `policy-check` and `demo`. The function's
archive must hold the team's job, the kit's runtime at the installed version, and the
team's pinned dependency; the locks `make lock` writes for the team's CI must pin the kit
by the wheel's own hash, and install, hash-checked, as the starter's workflows install them.
Last, a second release cut by `make release` in a clone of the kit, and the team repository
upgraded to it as docs/by-version.md says: `make upgrade-check` prints its steps for a
repository by version, and no fork's.

Installs go through uv from its cache (tests/dist_helpers.py uv_pip_install), and the plan's
function environment is seeded the same way (seed_function_venv): the same packages,
without a minute of index round trips per environment."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from dedup.version import __version__ as KIT_VERSION
from infra.cloud_function import FUNCTION_RUNTIME
from infra.lock import deployed_requirements, kit_requirements
from local_stack import FirestoreEmulator
from operator_tools.init import KIT_PIN
from operator_tools.release import next_releases, unreleased_changes
from operator_tools.upgrade_check import (
    BY_VERSION,
    FORK,
    Release,
    parse_changelog,
    split_steps,
    version_key,
)
from tests.dist_helpers import (
    UV,
    build_wheel,
    clean_env,
    fresh_venv,
    install_wheel,
    uv_pip_install,
)
from tests.function.test_requirements_lock import pins
from tests.infra.test_ci_supply_chain import TEAM as TEAM_WORKFLOWS
from tests.infra.test_ci_supply_chain import unhashed
from tests.infra.test_init import starter_files
from tests.infra.test_makefile import make
from tests.kit_tree import kit_clone

REPO_ROOT = Path(__file__).resolve().parent.parent
# The team's job and its own dependency (not one the kit's function lock has).
JOB = "weekly_digest"
DEPENDENCY = "humanize==4.15.0"
JOB_CODE = '''"""The team's job: a digest line formatted by its own dependency, humanize."""

from __future__ import annotations

from pathlib import Path

import humanize

from dedup import RunContext

# Where the demo's runs leave their mark (the team repository's root).
RAN = Path(__file__).resolve().parents[2] / "digest-runs.txt"


def run(context: RunContext) -> dict[str, str]:
    line = f"{context.run_id} {context.schedule_time.isoformat()} {humanize.intcomma(1234567)}"
    with RAN.open("a", encoding="utf-8") as out:
        out.write(line + "\\n")
    return {"digest": line}
'''
STACK_JOB = f"""    - name: weekly-digest
      schedule: "0 7 * * 1"
      timeZone: Europe/Berlin
      attemptDeadlineSeconds: 120
      jobLogic: jobs.{JOB}:run
"""
# What the plan says when it builds the functions' environment (function_python).
BUILDING_FUNCTION_VENV = "building the functions' Python environment"
# The starter's PYTHON and INSTALL (its Makefile), as this test runs its make: the virtualenv
# made without pip, the packages installed by uv_pip_install, the wheel found in the dist
# folder as on a team's package index. pip's way (ensurepip, then a round trip to the index
# per package) takes a minute of a loaded machine for the same packages.
VENV_PYTHON = """#!/bin/sh
if [ "$1 $2" = "-m venv" ]; then shift 2; exec {base} -m venv --without-pip "$@"; fi
exec {base} "$@"
"""
INSTALL = """#!{python}
import sys

sys.path.insert(0, {repo!r})
from tests.dist_helpers import uv_pip_install

uv_pip_install(["--python", ".venv/bin/python", "--find-links", {dist!r}, *sys.argv[1:]])
"""


@dataclass(frozen=True)
class TeamRepo:
    path: Path
    bin: Path

    dist: Path
    """The folder of the kit's wheel: the team's package index, as pip's --find-links."""

    function_venv_seeded: bool = False
    """The plan's function environment is there already (seed_function_venv)."""

    make_venv: tuple[str, ...] = ()
    """The make variables the starter's `.venv/stamp` is built with here (PYTHON, INSTALL:
    VENV_PYTHON and INSTALL above), for any target that rebuilds it."""

    def run(self, *argv: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        """A command of the team's virtualenv (or `make`), in the team's repository, with
        nothing of this checkout on any path."""
        command = [argv[0] if argv[0] == "make" else str(self.bin / argv[0]), *argv[1:]]
        env = {**clean_env(), "PIP_FIND_LINKS": str(self.dist), "UV_FIND_LINKS": str(self.dist)}
        return subprocess.run(command, cwd=self.path, env=env, capture_output=True,
                              text=True, timeout=timeout, check=False)

    def ok(self, *argv: str, timeout: float = 600) -> str:
        result = self.run(*argv, timeout=timeout)
        assert result.returncode == 0, (f"{' '.join(argv)} exited {result.returncode}:\n"
                                        f"{result.stdout[-4000:]}\n{result.stderr[-4000:]}")
        return result.stdout + result.stderr


@pytest.fixture(scope="module")
def team(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TeamRepo]:
    """The wheel, a team repository from `scheduler-dedup init` (run by a first virtualenv
    holding only the wheel and its pinned dependencies), that repository's own virtualenv
    from its requirements.txt (the starter's `make`, the wheel found as in a team's package
    index), and the team's job with its dependency, locked and installed by `make`."""
    root = tmp_path_factory.mktemp("by-version")
    dist = root / "dist"
    wheel = build_wheel(dist)
    installer = TeamRepo(root, fresh_venv(root / "installer").parent, dist)
    install_wheel(wheel, installer.bin / "python", deps=True)
    installer.ok("scheduler-dedup", "init", "team")
    base = getattr(sys, "_base_executable", sys.executable)
    python = executable(root / "python", VENV_PYTHON.format(base=base))
    install = executable(root / "install", INSTALL.format(
        python=sys.executable, repo=str(REPO_ROOT), dist=str(dist)))
    repo = TeamRepo(root / "team", root / "team" / ".venv" / "bin", dist,
                    make_venv=(f"PYTHON={python}", f"INSTALL={install}"))
    make_venv = ("make", ".venv/stamp", *repo.make_venv)
    repo.ok(*make_venv, timeout=900)
    repo.ok("scheduler-dedup", "new-job", JOB)
    (repo.path / "function" / "jobs" / f"{JOB}.py").write_text(JOB_CODE, encoding="utf-8")
    (repo.path / "function" / "jobs" / "requirements.in").write_text(f"{DEPENDENCY}\n")
    stack = repo.path / "stacks" / "Pulumi.dev.yaml"
    stack.write_text(stack.read_text(encoding="utf-8") + STACK_JOB, encoding="utf-8")
    repo.ok("make", "lock")
    repo.ok(*make_venv)  # again: now with the team's lock
    yield replace(repo, function_venv_seeded=seed_function_venv(repo.path, base))


def executable(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    path.chmod(0o755)
    return path


def seed_function_venv(project: Path, base: str) -> bool:
    """The environments the plan's start-up check starts the functions in: a virtualenv of
    each archive's requirements.txt (the installed kit's lock, then the team's, for the
    functions that run jobs; the kit's alone for the watchdog and the proxy), which the
    plan builds with pip on first use into `project`/.cache/function-venv/<its digest>-py
    <version>/ (operator_tools' function_python) and a team's later plans reuse. Built here
    with uv from the same files, as a later plan finds them; pip's build is the kit's own
    (`make plan`, tests/infra/test_startup_parity.py). False when this Python (and `base`,
    its base interpreter) is not the functions' runtime version: the plan then builds its
    own. Seeded again after a `make lock` (which dates the team's lock), it adds the
    environments of the new locks."""
    runtime = FUNCTION_RUNTIME.removeprefix("python")
    if f"{sys.version_info[0]}{sys.version_info[1]}" != runtime:
        return False
    (kit,) = (project / ".venv").glob("lib/python*/site-packages/scheduler_dedup_kit/function")
    for name, requirements in (("team", deployed_requirements(kit, project / "function")),
                               ("kit", kit_requirements(kit))):
        lock = project.parent / f"function-requirements-{name}.txt"
        lock.write_bytes(requirements)
        digest = hashlib.sha256(requirements).hexdigest()[:16]
        venv = project / ".cache" / "function-venv" / f"{digest}-py{runtime}"
        if venv.exists():  # named by its lock: seeded from this one already
            continue
        subprocess.run([str(UV), "venv", "--quiet", "--no-python-downloads", "--python", base,
                        str(venv)], env=clean_env(), check=True, timeout=120)
        uv_pip_install(["--python", str(venv / "bin" / "python"), "--require-hashes",
                        "-r", str(lock)])
    return True


def test_the_installed_kit_is_the_wheel_and_nothing_of_this_checkout(team: TeamRepo) -> None:
    where = team.ok("python", "-c", "import scheduler_dedup_kit as k; "
                    "k.activate(); import infra, dedup.version as v; "
                    "print(k.KIT_ROOT, infra.PROJECT_DIR, v.__file__)")
    kit_root, project, version_file = where.split()
    assert "site-packages" in kit_root and str(REPO_ROOT) not in where
    assert Path(project) == team.path
    assert Path(version_file).is_relative_to(kit_root)


def test_init_writes_the_starter_and_the_first_job_pinned_to_this_version(
    team: TeamRepo,
) -> None:
    starter = sorted(p.as_posix() for p in starter_files())
    for name in [*starter, "function/jobs/hello.py", "tests/jobs/test_hello.py"]:
        assert (team.path / name).is_file(), name
    pins = [line for line in (team.path / "requirements.txt").read_text().splitlines()
            if line and not line.startswith("#")]
    assert KIT_PIN in pins and f"scheduler-dedup-kit=={KIT_VERSION}" == KIT_PIN
    again = team.run("scheduler-dedup", "init", str(team.path))
    assert again.returncode == 2 and "not an empty folder" in again.stderr


def test_make_lock_writes_the_hash_locked_toolchain_the_workflows_install(
    team: TeamRepo, tmp_path: Path,
) -> None:
    """requirements-bootstrap.txt and requirements-deploy.txt: every package with its
    hashes, the kit by the hash of the wheel the team's index serves, the team's own
    dependency at its function lock's version. Installed as ci.yml and deploy.yml install
    them (hash-checked, no dependency resolved, no build tool fetched; by uv from its cache
    rather than pip), the kit and the team's dependency import."""
    bootstrap = team.path / TEAM_WORKFLOWS.bootstrap
    deploy = team.path / TEAM_WORKFLOWS.deploy
    text = deploy.read_text(encoding="utf-8")
    assert unhashed(bootstrap.read_text(encoding="utf-8")) == []
    assert unhashed(text) == []
    (wheel,) = team.dist.glob("*.whl")
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    kit = re.search(r"(?m)^scheduler-dedup-kit==(\S+) \\\n((?:\s+--hash=\S+ ?\\?\n)+)", text)
    assert kit and kit[1] == KIT_VERSION and f"--hash=sha256:{digest}" in kit[2], text[:2000]
    name, version = DEPENDENCY.split("==")
    assert pins(text)[name] == version
    assert {"pulumi", "pydantic", "pytest", "pip", "setuptools"} <= set(pins(text))
    python = fresh_venv(tmp_path / "ci-venv")
    uv_pip_install(["--python", str(python), "--require-hashes", "--no-deps",
                    "--only-binary", ":all:", "-r", str(bootstrap)])
    uv_pip_install(["--python", str(python), "--require-hashes", "--no-deps",
                    "--no-build-isolation", "--find-links", str(team.dist), "-r", str(deploy)])
    imported = subprocess.run(
        [str(python), "-c", "import scheduler_dedup_kit, humanize; "
         "print(scheduler_dedup_kit.__file__)"],
        cwd=tmp_path, env=clean_env(), capture_output=True, text=True, timeout=120,
        check=False)
    assert imported.returncode == 0, imported.stderr
    assert str(tmp_path / "ci-venv") in imported.stdout


def test_the_teams_tests_pass_there(team: TeamRepo) -> None:
    out = team.ok("make", "unit")
    assert re.search(r"\b4 passed\b", out), out  # hello's two tests and the digest's two


def test_the_teams_code_is_held_to_the_kits_ruff_and_mypy(team: TeamRepo) -> None:
    """docs/jobs.md's promise, by version: `make test` lints and type-checks the team's jobs
    and tests (the weekly digest and its dependency's import included) with the kit's
    settings, mypy finding the installed kit's `dedup`."""
    out = team.ok("make", "lint", "typecheck")
    assert "All checks passed!" in out, out
    assert re.search(r"Success: no issues found in \d+ source files", out), out


def test_plan_builds_an_archive_of_the_pinned_runtime_and_the_teams_job(team: TeamRepo) -> None:
    out = team.ok("scheduler-dedup", "plan", "--stack", "dev")
    # It started the functions in the team's own .cache/function-venv, found there.
    assert not team.function_venv_seeded or BUILDING_FUNCTION_VENV not in out, out
    (source_object,) = re.findall(r'sourceObject: "function-source/([0-9a-f]{64})\.zip"', out)
    archive = team.path / "build" / "function-source" / f"{source_object}.zip"
    with zipfile.ZipFile(archive) as zf:
        names = set(zf.namelist())
        version = zf.read("dedup/version.py").decode()
        requirements = zf.read("requirements.txt").decode()
        routes = json.loads(zf.read("job_tables/job_routes.json"))
    assert {f"jobs/{JOB}.py", "jobs/hello.py", "main.py", "dedup/protocol.py"} <= names
    assert f'__version__: Final = "{KIT_VERSION}"' in version
    # the kit's function lock, then the team's: its dependency pinned with hashes
    assert requirements.index("google-cloud-firestore==") < requirements.index(DEPENDENCY)
    assert re.search(rf"{re.escape(DEPENDENCY)} \\\n\s+--hash=sha256:", requirements)
    assert f"jobs.{JOB}:run" in routes.values()
    assert "kitVersion" in out and f'"{KIT_VERSION}"' in out
    # The watchdog's archive (issue 36): the installed kit's code and lock, nothing of the team.
    kit_only = []
    for other in (team.path / "build" / "function-source").glob("*.zip"):
        with zipfile.ZipFile(other) as zf:
            if "job_tables/watch_jobs.json" in zf.namelist():
                kit_only.append(zf.namelist())
                assert DEPENDENCY not in zf.read("requirements.txt").decode()
    assert kit_only and not [n for names in kit_only for n in names
                             if n.startswith(("jobs/", "example_jobs/"))]


def test_policy_check_passes_there(team: TeamRepo) -> None:
    out = team.ok("scheduler-dedup", "policy-check")
    assert "stack dev (stacks/Pulumi.dev.yaml)" in out
    assert "0 mandatory violation(s)" in out


def test_the_demo_runs_the_teams_job_exactly_once_per_run(
    team: TeamRepo, firestore_emulator: FirestoreEmulator,
) -> None:
    ran = team.path / "digest-runs.txt"
    ran.unlink(missing_ok=True)
    # The team's job alone (not the starter's hello nor the demo's own flaky and proxied
    # jobs), 8 runs under the default faults, one worker process, on the tests' Firestore
    # emulator; --no-paths: the kit's own scenes (DST, forced runs). The kit's tests replay
    # all of those and start the demo's own emulator (tests/scheduler_emulator/).
    out = team.ok("scheduler-dedup", "demo", "--stack", "dev", "--job", "weekly-digest",
                  "--ticks", "8", "--workers", "1", "--firestore-host", firestore_emulator.host,
                  "--no-paths", timeout=900)
    assert "RESULT: PASS" in out
    assert "job hello" not in out
    report = out.split("job weekly-digest\n", 1)[1].split("\n\n", 1)[0]
    deliveries = [int(n) for n in re.findall(r"(?m)^ +\d{4}-\S+Z +(\d+) ", report)]
    # Some runs were delivered more than once (the faults): once is the kit's doing.
    assert len(deliveries) >= 8 and max(deliveries) > 1, report
    lines = ran.read_text(encoding="utf-8").splitlines()
    assert lines and all(line.endswith(" 1,234,567") for line in lines)
    # One line per execution: each run (its run_id; a forced run is a run of its own) once.
    run_ids = [line.split()[0] for line in lines]
    assert len(run_ids) == len(set(run_ids)), "a run of the team's job executed twice"


# --- a second release, and the team's upgrade to it -----------------------------------------
# Keep this test last in the file: it upgrades the module's team repository in place (its
# pin, locks and virtualenv), and the tests above check the first version there. Under
# `--dist loadfile` a file's tests run in one worker, in this order.

# The second release's Upgrading steps: one for each kind of repository (CHANGELOG.md's tags).
NEXT_RELEASE_STEPS = (
    "1. [fork] **Only a fork's step** (this test's): `git mv` a file of the kit's.",
    "2. [by version] **Only a team repository's step** (this test's): run `make lock`.",
    "3. [both] **Everyone's step** (this test's): set `scheduler-dedup:aKey` in each stack.",
)
STEP_TAG = re.compile(r"(?m)^\d+\.\s+\[([^\]]+)\]")
RELEASE_HEADING = re.compile(r"(?m)^== (\S+) \(.*\) ==$")


def cut_next_release(clone: Path) -> str:
    """`make release VERSION=` in the kit's clone, at the smallest number CHANGELOG.md's rule
    allows after its latest release (the next major one when Unreleased lists steps)."""
    changelog = parse_changelog((clone / "CHANGELOG.md").read_text(encoding="utf-8"))
    version = min(next_releases(changelog), key=version_key)
    cut = make(clone, "release", f"VERSION={version}", dry_run=False, timeout=300)
    assert cut.returncode == 0, cut.stdout + cut.stderr
    assert "wrote CHANGELOG.md" in cut.stdout and f"git tag v{version}" in cut.stdout
    return version


def assert_only_by_version_steps(out: str, releases: list[Release]) -> None:
    """`out` names `releases`, and under each release's heading lists exactly its steps for
    a repository by version (`[by version]`, `[both]`, or untagged): no `[fork]` step."""
    names = [r.name for r in releases]
    assert RELEASE_HEADING.findall(out) == names, out
    assert f"the steps of {', '.join(names)}, in this order" in out, out
    assert "[fork]" not in out, out
    sections = RELEASE_HEADING.split(out)[2::2]  # the text after each heading
    for release, section in zip(releases, sections, strict=True):
        _, steps = split_steps(release.upgrading or "")
        for step in steps:
            first_line = step.text.splitlines()[0]
            assert (first_line in section) == (step.audience != FORK), (release.name, out)
        assert set(STEP_TAG.findall(section)) <= {BY_VERSION, "both"}, section


@pytest.mark.timeout(900)
def test_a_release_cut_by_the_release_command_upgrades_the_team_to_its_by_version_steps(
    team: TeamRepo, tmp_path: Path,
) -> None:
    """The kit's maintainers cut a release in a clone of the kit (`make release VERSION=`,
    after cutting the clone's Unreleased changes as a release first, so the new release has
    one before it), with one Upgrading step for each kind of repository, and build its wheel
    (`make dist`) onto the team's index. The team upgrades as docs/by-version.md says: the
    kit's pin in requirements.txt, `make lock`, `make test`; verifies the release as it says
    (the lock's hash is the wheel's, `upgrade-check <release>` has nothing to do); and
    `make upgrade-check FROM=<the version it ran>` prints the steps of each release since,
    under its release, for a repository by version only."""
    clone = kit_clone(tmp_path / "kit")
    first_release = KIT_VERSION
    if unreleased_changes(parse_changelog((clone / "CHANGELOG.md").read_text())):
        first_release = cut_next_release(clone)  # what the team runs a build of, released
    changelog_file = clone / "CHANGELOG.md"
    steps = "\n### Upgrading\n\n" + "\n".join(NEXT_RELEASE_STEPS) + "\n"
    changelog_file.write_text(changelog_file.read_text(encoding="utf-8").replace(
        "## [Unreleased]\n", "## [Unreleased]\n" + steps, 1), encoding="utf-8")
    second_release = cut_next_release(clone)
    assert version_key(second_release)[0] == version_key(first_release)[0] + 1  # the steps
    built = make(clone, "dist", dry_run=False, timeout=600)
    assert built.returncode == 0, built.stdout + built.stderr
    (wheel,) = (clone / "dist").glob(f"scheduler_dedup_kit-{second_release}-*.whl")
    shutil.copy2(wheel, team.dist)  # published on the team's index, beside the first

    # The upgrade: the kit's pin, then `make lock` (which installs it first) and `make test`.
    requirements = team.path / "requirements.txt"
    pinned = requirements.read_text(encoding="utf-8")
    assert pinned.count(f"\n{KIT_PIN}\n") == 1, pinned
    requirements.write_text(pinned.replace(
        f"\n{KIT_PIN}\n", f"\nscheduler-dedup-kit=={second_release}\n"), encoding="utf-8")
    team.ok("make", "lock", *team.make_venv)
    # The plan's function environments of the new locks, seeded as the fixture seeds them.
    seeded = seed_function_venv(team.path, getattr(sys, "_base_executable", sys.executable))
    tested = team.ok("make", "test", *team.make_venv)
    assert f'kitVersion: "{second_release}"' in tested, tested[-4000:]
    assert not seeded or BUILDING_FUNCTION_VENV not in tested, tested[-4000:]

    # Knowing it has the release: CI's lock requires the wheel's hash, and the kit installed
    # is the release (docs/by-version.md, "A specific release, and knowing you have it").
    deploy_lock = (team.path / TEAM_WORKFLOWS.deploy).read_text(encoding="utf-8")
    kit = re.search(rf"(?m)^scheduler-dedup-kit=={re.escape(second_release)} \\\n"
                    r"((?:\s+--hash=\S+ ?\\?\n)+)", deploy_lock)
    assert kit and f"--hash=sha256:{hashlib.sha256(wheel.read_bytes()).hexdigest()}" in kit[1]
    current = team.ok("scheduler-dedup", "upgrade-check", second_release)
    assert current.startswith(f"Nothing to do: {second_release} is this checkout's version")

    # The steps since the version it ran: by version's alone, each under its release.
    # (A development build, as the team ran, is before its release: it takes its steps too.)
    changelog = parse_changelog(changelog_file.read_text(encoding="utf-8"))
    release = {r.name: r for r in changelog.releases}
    since = {KIT_VERSION: [first_release, second_release], first_release: [second_release]}
    for deployed, names in since.items():
        result = team.run("make", "upgrade-check", f"FROM={deployed}", *team.make_venv)
        assert result.returncode == 0, result.stdout + result.stderr
        assert_only_by_version_steps(result.stdout, [release[name] for name in names])
