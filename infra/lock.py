"""`make lock`: the team's function dependencies, pinned with hashes beside the kit's.

Two locks, never mixed, so that neither side's change conflicts with the other's on a merge:

- the kit's: `function/requirements.in` -> `function/requirements.txt` (`make lock-kit`, kit
  maintainers only; its versions are constraints.txt's, the ones the kit is tested with);
- the team's: `function/jobs/requirements.in` -> `function/jobs/requirements.txt` (`make
  lock`): the team's packages and their dependencies, transitive ones included, resolved
  with constraints.txt (so every package the kit also uses keeps the kit's version), each
  pinned with the hashes of its files; a package the kit's lock already pins is left to it.

What Cloud Build installs is their union (`deployed_requirements`: the archive's
`requirements.txt`, infra/source.py), in pip's hash-checking mode. `lock_problems` says,
offline, when the team's lock is stale (its `.in` changed, or a kit release now pins one of
its packages), for `make plan` and `make policy-check` to refuse before a deploy.

    python -m infra.lock                  # make lock
    python -m infra.lock --root DIR       # the same for another checkout
"""

from __future__ import annotations

import argparse
import hashlib
import re
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

REPO_ROOT: Final = Path(__file__).resolve().parent.parent
KIT_REQUIREMENTS: Final = Path("function") / "requirements.in"
KIT_LOCK: Final = Path("function") / "requirements.txt"
TEAM_REQUIREMENTS: Final = Path("function") / "jobs" / "requirements.in"
TEAM_LOCK: Final = Path("function") / "jobs" / "requirements.txt"
CONSTRAINTS: Final = Path("constraints.txt")
FUNCTION_PYTHON: Final = "3.12"
"""The functions' runtime (python312, infra/cloud_function.py), which the locks resolve for."""
DIGEST_PREFIX: Final = "# locked from function/jobs/requirements.in sha256:"
"""The team lock's first line: the digest of the `.in` it was resolved from."""
FIX: Final = "run `make lock`"

_PIN: Final = re.compile(r"^([A-Za-z0-9][A-Za-z0-9_.-]*)==(\S+)")


class LockError(RuntimeError):
    """`make lock` could not resolve: what conflicts, and the fix."""


@dataclass(frozen=True)
class Pin:
    """One locked package: its canonical name, version, and its lines (pin, hashes, via)."""

    name: str
    version: str
    block: str


def canonical(name: str) -> str:
    """PEP 503's normalized name (`PyYAML` -> `pyyaml`)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def parse_lock(text: str) -> list[Pin]:
    """The pins of a uv/pip-compile lock, each with its continuation and comment lines."""
    pins: list[Pin] = []
    current: list[str] = []

    def close() -> None:
        if current:
            match = _PIN.match(current[0])
            assert match is not None
            pins.append(Pin(canonical(match[1]), match[2], "\n".join(current) + "\n"))
            current.clear()

    for line in text.splitlines():
        if _PIN.match(line):
            close()
            current.append(line)
        elif current and (line.startswith((" ", "\t")) or not line.strip()):
            if line.strip():
                current.append(line)
        else:
            close()
    close()
    return pins


def digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def lock_team(root: Path = REPO_ROOT, uv: str | None = None) -> Path | None:
    """Resolve the team's requirements into its lock; the lock written (None: the team has
    no requirements file, and any old lock is removed). Raises LockError on a conflict."""
    requirements, lock = root / TEAM_REQUIREMENTS, root / TEAM_LOCK
    if not requirements.is_file():
        lock.unlink(missing_ok=True)
        return None
    source = requirements.read_text(encoding="utf-8")
    with tempfile.TemporaryDirectory() as scratch:
        resolved = Path(scratch) / "requirements.txt"
        command = [
            uv or str(Path(sys.executable).with_name("uv")), "pip", "compile",
            str(requirements), "--constraint", str(root / CONSTRAINTS), "--generate-hashes",
            "--python-version", FUNCTION_PYTHON, "--python-platform", "linux",
            "--no-header", "--quiet", "--output-file", str(resolved),
        ]
        result = subprocess.run(command, cwd=root, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise LockError(conflict_message(result.stderr or result.stdout))
        pins = parse_lock(resolved.read_text(encoding="utf-8"))
    kit = {pin.name for pin in parse_lock((root / KIT_LOCK).read_text(encoding="utf-8"))}
    own = [pin for pin in pins if pin.name not in kit]
    lock.write_text(
        f"{DIGEST_PREFIX}{digest(source)}\n"
        "# The team's function dependencies and theirs, pinned with hashes by `make lock`\n"
        "# (resolved with constraints.txt; what the kit's function/requirements.txt pins is\n"
        "# installed from there). Do not edit: change function/jobs/requirements.in.\n"
        + "".join(pin.block for pin in own),
        encoding="utf-8",
    )
    return lock


def conflict_message(resolver_output: str) -> str:
    """uv's explanation, which names the packages on both sides, under what it means here."""
    lines = [line.rstrip() for line in resolver_output.strip().splitlines() if line.strip()]
    explanation = "\n".join(f"  {line}" for line in lines)
    return (
        f"{TEAM_REQUIREMENTS} cannot be resolved together with the kit's pins "
        f"({CONSTRAINTS}: the versions the kit is tested and deployed with):\n{explanation}\n"
        "Fix: choose a version of your package that accepts the kit's version of the package "
        f"named above (loosen or change the pin in {TEAM_REQUIREMENTS}), then {FIX}"
    )


def lock_problems(root: Path = REPO_ROOT) -> list[str]:
    """Why the team's lock is not what `make lock` would write now, one line each (the fix
    of every one: FIX)."""
    requirements, lock = root / TEAM_REQUIREMENTS, root / TEAM_LOCK
    if not requirements.is_file():
        if lock.is_file():
            return [f"{TEAM_LOCK} exists without {TEAM_REQUIREMENTS} (make lock removes it)"]
        return []
    if not lock.is_file():
        return [f"{TEAM_REQUIREMENTS} is not locked yet"]
    text = lock.read_text(encoding="utf-8")
    first = text.split("\n", 1)[0]
    problems: list[str] = []
    if first != f"{DIGEST_PREFIX}{digest(requirements.read_text(encoding='utf-8'))}":
        problems.append(f"{TEAM_REQUIREMENTS} changed since it was locked")
    kit = {pin.name: pin.version for pin in parse_lock((root / KIT_LOCK).read_text("utf-8"))}
    for pin in parse_lock(text):
        if pin.name in kit:
            problems.append(
                f"{pin.name} is pinned in {TEAM_LOCK} ({pin.version}) and, since a kit "
                f"release, in {KIT_LOCK} ({kit[pin.name]})"
            )
        if "--hash=sha256:" not in pin.block:
            problems.append(f"{pin.name}=={pin.version} in {TEAM_LOCK} has no --hash")
    return problems


def deployed_requirements(source_dir: Path) -> bytes:
    """The `requirements.txt` Cloud Build installs for a function of `source_dir`
    (function/): the kit's lock, then the team's pins if it has any."""
    kit = (source_dir / KIT_LOCK.name).read_bytes()
    team = source_dir / TEAM_LOCK.relative_to("function")
    if not team.is_file():
        return kit
    return kit + b"# The team's, from function/jobs/requirements.txt:\n" + team.read_bytes()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m infra.lock",
        description=f"Pin {TEAM_REQUIREMENTS} (and what it needs) with hashes into {TEAM_LOCK}.",
    )
    parser.add_argument("--root", type=Path, default=REPO_ROOT, help="the checkout")
    args = parser.parse_args(argv)
    try:
        written = lock_team(args.root)
    except LockError as exc:
        print(f"make lock: {exc}", file=sys.stderr)
        return 2
    if written is None:
        print(f"make lock: no {TEAM_REQUIREMENTS}: your jobs use the kit's packages only "
              f"(add theirs there, one per line, then {FIX})")
        return 0
    count = len(parse_lock(written.read_text(encoding="utf-8")))
    print(f"make lock: wrote {TEAM_LOCK} ({count} package(s) beside the kit's {KIT_LOCK})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
