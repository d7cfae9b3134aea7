"""function/requirements.txt (the kit's part of what Cloud Build installs) is `make lock-kit`'s
current output:
checked offline, without the package index.

- every line pins `name==version` with at least one `--hash` (pip's hash-checking mode
  refuses the whole install otherwise);
- it holds exactly the packages function/requirements.in needs, transitive ones included,
  for the functions' Python on Linux: the dependency closure read from the installed
  packages' metadata (the test environment installs function/requirements.in);
- every version is constraints.txt's (the versions `make test` ran with);
- `make lock-kit` resolves for the functions' runtime (infra/cloud_function.py).

Regenerating and diffing would need the index (hashes are not in the pip cache), so the
check is structural; `make lock-kit` is the one way to fix whatever it reports.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from importlib import metadata

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from infra.cloud_function import FUNCTION_RUNTIME
from local_stack.processes import REPO_ROOT

IN_FILE = REPO_ROOT / "function" / "requirements.in"
LOCK_FILE = REPO_ROOT / "function" / "requirements.txt"
CONSTRAINTS = REPO_ROOT / "constraints.txt"
FIX = "run `make lock-kit`"
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9_.-]*)==([^\s\\;]+)")
_HASH = re.compile(r"--hash=sha256:[0-9a-f]{64}")


def runtime_python(runtime: str = FUNCTION_RUNTIME) -> str:
    """python312 -> 3.12"""
    match = re.fullmatch(r"python(\d)(\d+)", runtime)
    assert match, runtime
    return f"{match[1]}.{match[2]}"


def marker_environment() -> dict[str, str]:
    version = runtime_python()
    return {
        "python_version": version, "python_full_version": f"{version}.0",
        "sys_platform": "linux", "platform_system": "Linux", "os_name": "posix",
        "platform_machine": "x86_64", "implementation_name": "cpython",
        "platform_python_implementation": "CPython",
    }


def requirement_lines(text: str) -> list[str]:
    """Requirement lines, with `\\`-continued hash lines joined, comments dropped."""
    joined = re.sub(r"\\\n\s*", " ", text)
    lines = (line.split("#", 1)[0].strip() for line in joined.splitlines())
    return [line for line in lines if line]


def pins(text: str) -> dict[str, str]:
    found: dict[str, str] = {}
    for line in requirement_lines(text):
        match = _PIN.match(line)
        if match:
            found[canonicalize_name(match[1])] = match[2]
    return found


def closure(roots: Iterable[str], environment: Mapping[str, str] | None = None) -> set[str]:
    """Every distribution `roots` need where markers read `environment` (default: the
    functions' runtime), from the installed packages' metadata."""
    environment = environment if environment is not None else marker_environment()
    extras_of: dict[str, set[str]] = {}
    todo = [Requirement(root) for root in roots]
    while todo:
        requirement = todo.pop()
        name = canonicalize_name(requirement.name)
        known = extras_of.get(name)
        if known is not None and set(requirement.extras) <= known:
            continue
        extras_of[name] = (known or set()) | set(requirement.extras)
        for raw in metadata.requires(requirement.name) or []:
            dependency = Requirement(raw)
            if dependency.marker is None or any(
                dependency.marker.evaluate({**environment, "extra": extra})
                for extra in extras_of[name] or {""}
            ):
                todo.append(dependency)
    return set(extras_of)


def lock_problems(in_text: str, lock_text: str, constraints_text: str) -> list[str]:
    """What makes the lock stale or unsafe, one line each (empty: current)."""
    problems: list[str] = []
    locked: dict[str, str] = {}
    for line in requirement_lines(lock_text):
        match = _PIN.match(line)
        if match is None:
            problems.append(f"{line[:80]!r} is not a `name==version` pin: {FIX}")
            continue
        locked[canonicalize_name(match[1])] = match[2]
        if not _HASH.search(line):
            problems.append(f"{match[1]}=={match[2]} has no --hash: {FIX}")
    constrained = pins(constraints_text)
    for name, version in sorted(locked.items()):
        if name not in constrained:
            problems.append(f"{name}=={version} is not in constraints.txt: add it there (the "
                            f"version the tests run with), then {FIX}")
        elif constrained[name] != version:
            problems.append(f"{name} is {version} in the lock but {constrained[name]} in "
                            f"constraints.txt: {FIX}")
    roots = requirement_lines(in_text)
    try:
        needed = closure(roots)
    except metadata.PackageNotFoundError as exc:
        return [*problems, f"{exc} is not installed: rebuild the environment (`make`), "
                f"then {FIX}"]
    for name in sorted(needed - set(locked)):
        problems.append(f"{name} is needed by function/requirements.in but not locked: {FIX}")
    for name in sorted(set(locked) - needed):
        problems.append(f"{name} is locked but nothing in function/requirements.in needs "
                        f"it: {FIX}")
    return problems


def test_the_lock_is_current_and_fully_hashed() -> None:
    problems = lock_problems(
        IN_FILE.read_text(), LOCK_FILE.read_text(), CONSTRAINTS.read_text()
    )
    assert problems == [], "\n".join(problems)
    assert len(pins(LOCK_FILE.read_text())) > len(requirement_lines(IN_FILE.read_text()))


def test_make_lock_resolves_for_the_functions_runtime() -> None:
    makefile = (REPO_ROOT / "Makefile").read_text()
    recipe = makefile.split("\nlock-kit:", 1)[1].split("\n\n", 1)[0]
    assert "--generate-hashes" in recipe
    assert f"--python-version {runtime_python()}" in recipe
    assert "--constraint constraints.txt" in recipe
    assert "--output-file function/requirements.txt" in recipe


LOCK = (REPO_ROOT / "function" / "requirements.txt").read_text()
IN_TEXT = IN_FILE.read_text()
CONSTRAINTS_TEXT = CONSTRAINTS.read_text()
REQUESTS_PIN = pins(LOCK)["requests"]


@pytest.mark.parametrize(
    ("case", "in_text", "lock_text", "constraints_text", "expected"),
    [
        ("a hash removed", IN_TEXT,
         re.sub(r"(requests==\S+) \\\n(\s*--hash=\S+ \\\n)*\s*--hash=\S+", r"\1", LOCK),
         CONSTRAINTS_TEXT, f"requests=={REQUESTS_PIN} has no --hash"),
        ("a constraint moved on", IN_TEXT, LOCK,
         CONSTRAINTS_TEXT.replace(f"requests=={REQUESTS_PIN}", "requests==0.0.1"),
         f"requests is {REQUESTS_PIN} in the lock but 0.0.1 in constraints.txt"),
        ("a dependency added", IN_TEXT + "\npytest\n", LOCK, CONSTRAINTS_TEXT,
         "pytest is needed by function/requirements.in but not locked"),
        ("a dependency dropped", IN_TEXT.replace("croniter", "# croniter"), LOCK,
         CONSTRAINTS_TEXT, "croniter is locked but nothing in function/requirements.in"),
        ("a loose line", IN_TEXT, LOCK + "\nsomething>=1\n", CONSTRAINTS_TEXT,
         "'something>=1' is not a `name==version` pin"),
    ],
)
def test_a_stale_or_unhashed_lock_is_reported(
    case: str, in_text: str, lock_text: str, constraints_text: str, expected: str
) -> None:
    problems = lock_problems(in_text, lock_text, constraints_text)
    assert any(expected in problem for problem in problems), (case, problems)
    assert all(FIX in problem for problem in problems)
