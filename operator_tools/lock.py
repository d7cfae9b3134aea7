"""`make lock` (python -m operator_tools lock [--root DIR]): the team's requirements
(function/jobs/requirements.in) resolved with the kit's function lock as constraints, and
written, with hashes, as the team's lock (infra/lock.py reads and checks both)."""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from infra import PROJECT_DIR
from infra.lock import (
    FIX,
    FUNCTION_PYTHON,
    KIT_LOCK,
    TEAM_LOCK,
    TEAM_REQUIREMENTS,
    LockError,
    digest_line,
    index_options,
    kit_root_of,
    parse_lock,
)


def lock_team(
    root: Path = PROJECT_DIR, uv: str | None = None, kit_root: Path | None = None
) -> Path | None:
    """Resolve the team's requirements (in the project `root`) into its lock, with the
    kit's lock (in `kit_root`; unset: `kit_root_of(root)`) as constraints; the lock written
    (None: the team has no requirements file, and any old lock is removed). Raises
    LockError when they cannot be resolved with the kit's pins, or uv fails."""
    kit_root = kit_root or kit_root_of(root)
    requirements, lock = root / TEAM_REQUIREMENTS, root / TEAM_LOCK
    if not requirements.is_file():
        lock.unlink(missing_ok=True)
        return None
    kit_pins = parse_lock((kit_root / KIT_LOCK).read_text(encoding="utf-8"))
    with tempfile.TemporaryDirectory() as scratch:
        constraints = Path(scratch) / "kit-constraints.txt"
        constraints.write_text("".join(f"{p.name}=={p.version}\n" for p in kit_pins
                                       if "://" not in p.version))
        resolved = Path(scratch) / "requirements.txt"
        command = [
            uv or str(Path(sys.executable).with_name("uv")), "pip", "compile",
            str(requirements), "--constraint", str(constraints), "--generate-hashes",
            "--python-version", FUNCTION_PYTHON, "--python-platform", "linux",
            "--no-header", "--quiet", "--output-file", str(resolved),
        ]
        result = subprocess.run(command, cwd=root, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise LockError(resolver_message(result.stderr or result.stdout))
        pins = parse_lock(resolved.read_text(encoding="utf-8"))
    kit = {pin.name for pin in kit_pins}
    own = [pin for pin in pins if pin.name not in kit]
    options = index_options(requirements.read_text(encoding="utf-8"))
    lock.write_text(
        f"{digest_line(root, kit_root)}\n"
        "# The team's function dependencies and theirs, pinned with hashes by `make lock`\n"
        "# (resolved with the kit's function/requirements.txt as constraints; what that\n"
        "# file pins is installed from there). Do not edit: change requirements.in.\n"
        + "".join(f"{option}\n" for option in options)
        + "".join(pin.block for pin in own),
        encoding="utf-8",
    )
    return lock


def resolver_message(output: str) -> str:
    """uv's explanation, which names the packages on both sides of a conflict, under what
    it means here."""
    lines = [line.rstrip() for line in output.strip().splitlines() if line.strip()]
    explanation = "\n".join(f"  {line}" for line in lines)
    flat = " ".join(output.split())  # uv wraps its lines to the terminal's width
    if "No solution found" not in flat or "not found in the package registry" in flat:
        return (f"resolving {TEAM_REQUIREMENTS} failed:\n{explanation}\nFix: check the "
                f"package names and versions there and that the package index is "
                f"reachable, then {FIX}")
    return (
        f"{TEAM_REQUIREMENTS} cannot be resolved together with the kit's pins "
        f"({KIT_LOCK}: the versions the deployed function runs):\n{explanation}\n"
        "Fix: choose a version of your package that accepts the kit's version of the package "
        f"named above (loosen or change the pin in {TEAM_REQUIREMENTS}), then {FIX}"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="scheduler-dedup lock",
        description=f"Pin {TEAM_REQUIREMENTS} (and what it needs) with hashes into {TEAM_LOCK}.",
    )
    parser.add_argument("--root", type=Path, default=PROJECT_DIR,
                        help="the project (default: the one around the working directory)")
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
    from operator_tools import not_an_entry_point

    not_an_entry_point("lock")
