"""The team's function dependencies beside the kit's: the two locks read and checked.

Two locks, never mixed, so that neither side's change conflicts with the other's on a merge:

- the kit's: `function/requirements.in` -> `function/requirements.txt` (`make lock-kit`, kit
  maintainers only; its versions are constraints.txt's, the ones the kit is tested with);
- the team's: `function/jobs/requirements.in` -> `function/jobs/requirements.txt` (`make
  lock`): the team's packages and their dependencies, transitive ones included, resolved
  with the kit's function lock as constraints (so every package the deployed function
  shares with the kit keeps the kit's version), each pinned with the hashes of its files; a
  package the kit's lock already pins is left to it. Index options of the team's file
  (`--index-url`, `--extra-index-url`, `--find-links`) are carried into its lock, so Cloud
  Build finds a private package where `make lock` did.

What Cloud Build installs for a function that runs job logic (the dedup function, each
runtime) is their union (`deployed_requirements`: the archive's `requirements.txt`,
infra/source.py), in pip's hash-checking mode; for the proxy and the watchdog, which run
none, the kit's lock alone (`kit_requirements`): no team package is installed, imported or
built with their identities. The team lock's first
line records the digests of the files it was resolved from (the team's `.in`, the kit's
lock), its second the instant it was resolved as of (`RESOLVED_AS_OF`: what the index
offered then); `lock_problems` says, offline, when any of the files changed since (a kit
release that adds, drops or moves a package the team's depend on included), for `make plan`
and `make policy-check` to refuse before a deploy. The lock is not trusted beyond that:
both also resolve it again, as `make lock` does, and refuse any line that differs
(operator_tools/lock.py, which writes and verifies the team's lock).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from infra import KIT_INSTALLED, KIT_ROOT, PROJECT_DIR

KIT_LOCK: Final = Path("function") / "requirements.txt"
TEAM_REQUIREMENTS: Final = Path("function") / "jobs" / "requirements.in"
TEAM_LOCK: Final = Path("function") / "jobs" / "requirements.txt"
FUNCTION_PYTHON: Final = "3.12"
"""The functions' runtime (python312, infra/cloud_function.py), which the locks resolve for."""
DIGEST_PREFIX: Final = "# locked from"
"""The team lock's first line: `# locked from <file> sha256:<hex> ...` per input file."""
RESOLVED_AS_OF: Final = "# resolved from the package index as of"
"""The team lock's second line: `# resolved ... as of <UTC instant>`; resolving again as of
that instant (uv's --exclude-newer) ignores what the index published since."""
FIX: Final = "run `make lock`"
INDEX_OPTIONS: Final = ("--index-url", "--extra-index-url", "--find-links", "-i ", "-f ")
"""Lines of the team's file that say where packages come from: carried into its lock."""

# A pinned requirement as uv writes it: `name==version` or `name[extras] @ url`.
_PIN: Final = re.compile(
    r"^(?P<name>[A-Za-z0-9][A-Za-z0-9_.-]*)(?:\[[^\]]*\])?\s*"
    r"(?:==\s*(?P<version>[^\s\\;]+)|@\s*(?P<url>\S+))"
)


class LockError(RuntimeError):
    """`make lock` could not resolve, or wrote what it cannot read back: the why and the fix."""

    def __init__(self, what: str, fix: str = FIX) -> None:
        self.what, self.fix = what, fix
        separator = "\n" if "\n" in what else ". "  # a long why ends on its own line
        super().__init__(f"{what}{separator}Fix: {fix}")


class IndexUnreachable(LockError):
    """The package index could not be reached, so the team lock could not be resolved (by
    `make lock`) or resolved again to verify it (by `make plan`): never taken as a pass."""


@dataclass(frozen=True)
class Pin:
    """One locked package: its canonical name, version (or URL), and its lines (pin,
    hashes, via comments)."""

    name: str
    version: str
    block: str


def canonical(name: str) -> str:
    """PEP 503's normalized name (`PyYAML` -> `pyyaml`)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def parse_lock(text: str) -> list[Pin]:
    """The pins of a uv/pip-compile lock, each with its continuation and comment lines.
    Comments, blank lines and index options are skipped; any other line is a LockError
    (a lock this module cannot read is never half-read)."""
    pins: list[Pin] = []
    current: list[str] = []

    def close() -> None:
        if current:
            match = _PIN.match(current[0])
            assert match is not None
            version = match["version"] or match["url"]
            pins.append(Pin(canonical(match["name"]), version, "\n".join(current) + "\n"))
            current.clear()

    for line in text.splitlines():
        if _PIN.match(line):
            close()
            current.append(line)
        elif current and line.startswith((" ", "\t")):
            current.append(line)
        elif not line.strip() or line.lstrip().startswith("#") or line.startswith(INDEX_OPTIONS):
            close()
        else:
            raise LockError(f"cannot read the lock line {line[:80]!r}")
    close()
    return pins


def index_options(text: str) -> list[str]:
    """The index option lines of a requirements file, as written."""
    return [line.strip() for line in text.splitlines() if line.startswith(INDEX_OPTIONS)]


def resolved_as_of(text: str) -> str | None:
    """The UTC instant a team lock was resolved as of (its RESOLVED_AS_OF line), if it says."""
    for line in text.splitlines()[:3]:
        if line.startswith(RESOLVED_AS_OF):
            words = line.removeprefix(RESOLVED_AS_OF).split()
            return words[0] if words else None
    return None


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def digest_line(root: Path, kit_root: Path | None = None) -> str:
    """The team lock's first line for the files it is resolved from, as they are now: the
    team's file in the project `root`, the kit's lock in `kit_root` (unset: the same)."""
    files = ((TEAM_REQUIREMENTS, root), (KIT_LOCK, kit_root or root))
    return f"{DIGEST_PREFIX} " + " ".join(
        f"{name} sha256:{_digest(folder / name)}" for name, folder in files
    )


def kit_root_of(root: Path) -> Path:
    """Where the kit's lock is for the project `root`: the installed kit's when the kit runs
    from its wheel (whatever else `root` holds: a team's own function/requirements.txt is
    not the kit's lock); in a checkout, `root`'s own when it has one (a fork)."""
    return root if not KIT_INSTALLED and (root / KIT_LOCK).is_file() else KIT_ROOT


def lock_problems(root: Path = PROJECT_DIR, kit_root: Path | None = None) -> list[str]:
    """Why the team's lock (in the project `root`) is not what `make lock` would write now
    against the kit's lock (in `kit_root`, unset: `kit_root_of(root)`), one line each (the
    fix of every one: FIX)."""
    kit_root = kit_root or kit_root_of(root)
    requirements, lock = root / TEAM_REQUIREMENTS, root / TEAM_LOCK
    if not requirements.is_file():
        if lock.is_file():
            return [f"{TEAM_LOCK} exists without {TEAM_REQUIREMENTS} (make lock removes it)"]
        return []
    if not lock.is_file():
        return [f"{TEAM_REQUIREMENTS} is not locked yet"]
    text = lock.read_text(encoding="utf-8")
    first = text.split("\n", 1)[0]
    if first != digest_line(root, kit_root):
        return [f"{TEAM_LOCK} was resolved from another {TEAM_REQUIREMENTS} or another kit "
                f"lock ({KIT_LOCK}, which a kit release changes)"]
    problems: list[str] = []
    try:
        pins = parse_lock(text)
    except LockError as exc:
        return [exc.what]
    for pin in pins:
        if "--hash=sha256:" not in pin.block:
            problems.append(f"{pin.name} in {TEAM_LOCK} has no --hash")
    return problems


def kit_requirements(source_dir: Path) -> bytes:
    """The `requirements.txt` Cloud Build installs for a function of `source_dir` (the
    kit's function/) that runs no job logic (the proxy, the watchdog): the kit's lock alone."""
    return (source_dir / KIT_LOCK.name).read_bytes()


def deployed_requirements(source_dir: Path, team_dir: Path | None = None) -> bytes:
    """The `requirements.txt` Cloud Build installs for a function of `source_dir` (the
    kit's function/) that runs job logic: the kit's lock, then the team's pins if it has
    any (in `team_dir`, the team's function/, unset: `source_dir`)."""
    kit = kit_requirements(source_dir)
    team = (team_dir or source_dir) / TEAM_LOCK.relative_to("function")
    if not team.is_file():
        return kit
    return kit + b"# The team's, from function/jobs/requirements.txt:\n" + team.read_bytes()


if __name__ == "__main__":  # the entry point it was: say where it went, and fail
    raise SystemExit("run `scheduler-dedup lock` (or the make target that calls it)")
