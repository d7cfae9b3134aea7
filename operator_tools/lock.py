"""`make lock` (python -m operator_tools lock [--root DIR]): the team's requirements
(function/jobs/requirements.in) resolved with the kit's function lock as constraints, and
written, with hashes, as the team's lock (infra/lock.py reads and checks both); and the
same resolution run again to verify that lock (`verify_team_lock`, for `make plan` and
`make policy-check`: operator_tools/job_logic.py).

One way to compute the lock (`resolve_team_lock`), so what `make plan` accepts is exactly
what `make lock` writes: a hand-edited line (a URL requirement, another version, another
hash) is refused, and an index that cannot be reached is an error, never a pass. The lock
records the instant it was resolved as of, and both resolve as of it (uv's
`--exclude-newer`, when the team names no index of its own: PyPI says when each file was
uploaded, a private index may not), so a release published since does not make a lock
`make lock` wrote stale.
"""

from __future__ import annotations

import argparse
import difflib
import functools
import hashlib
import re
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Final

from infra import PROJECT_DIR
from infra.lock import (
    FIX,
    FUNCTION_PYTHON,
    KIT_LOCK,
    RESOLVED_AS_OF,
    TEAM_LOCK,
    TEAM_REQUIREMENTS,
    IndexUnreachable,
    LockError,
    digest_line,
    index_options,
    kit_root_of,
    lock_problems,
    parse_lock,
    resolved_as_of,
)

VERIFIED_LOCKS: Final = Path(".cache") / "team-lock-verified"
"""Under the project (gitignored, beside .cache/function-venv/): one empty file per team
lock verified, named by `verification_key`, so a second plan with the same inputs does not
resolve again."""
OWN_INDEX_OPTIONS: Final = ("--index-url", "--extra-index-url", "-i ")
"""Options of the team's file that name an index of its own, which may not say when its
files were uploaded: resolved without the cutoff (uv would see no file of it)."""
CONTINUATION: Final = "\\"
"""How a lock line says its hashes follow: not shown in a refusal."""
SHOWN_LINES: Final = 12
"""The differing lines a refusal names; the rest are counted."""


def uv_command(uv: str | None = None) -> str:
    """The uv that resolves (pinned in requirements-tools.txt, beside this interpreter)."""
    return uv or str(Path(sys.executable).with_name("uv"))


def resolve_team_lock(
    root: Path, kit_root: Path, as_of: str, uv: str | None = None, action: str = "written"
) -> str:
    """The team lock `make lock` writes for the project `root` (its requirements file must
    exist) with the kit's lock in `kit_root` as constraints, resolved from the package index
    as of the UTC instant `as_of`. Raises IndexUnreachable when the index cannot be reached
    (`action`: what could not be done to the lock then, "written" or "verified"), LockError
    when the requirements cannot be resolved with the kit's pins, or uv fails."""
    requirements = root / TEAM_REQUIREMENTS
    kit_pins = parse_lock((kit_root / KIT_LOCK).read_text(encoding="utf-8"))
    options = index_options(requirements.read_text(encoding="utf-8"))
    cutoff = [] if any(o.startswith(OWN_INDEX_OPTIONS) for o in options) else [
        "--exclude-newer", as_of]
    with tempfile.TemporaryDirectory() as scratch:
        constraints = Path(scratch) / "kit-constraints.txt"
        constraints.write_text("".join(f"{p.name}=={p.version}\n" for p in kit_pins
                                       if "://" not in p.version))
        resolved = Path(scratch) / "requirements.txt"
        command = [
            uv_command(uv), "pip", "compile",
            str(requirements), "--constraint", str(constraints), "--generate-hashes",
            "--python-version", FUNCTION_PYTHON, "--python-platform", "linux", *cutoff,
            "--no-header", "--quiet", "--output-file", str(resolved),
        ]
        result = run_uv(command, cwd=root)
        if result.returncode != 0:
            output = result.stderr or result.stdout
            if (unreachable := unreachable_index(output)) is not None:
                raise IndexUnreachable(
                    f"the package index could not be reached ({unreachable}): "
                    f"{TEAM_REQUIREMENTS} could not be resolved, so {TEAM_LOCK} could not "
                    f"be {action}",
                    "run it again where the package index can be reached (check the "
                    f"network, and the index options of {TEAM_REQUIREMENTS} and UV_INDEX_URL)",
                )
            raise LockError(*resolver_message(output))
        pins = parse_lock(resolved.read_text(encoding="utf-8"))
    kit = {pin.name for pin in kit_pins}
    own = [pin for pin in pins if pin.name not in kit]
    return (
        f"{digest_line(root, kit_root)}\n"
        f"{RESOLVED_AS_OF} {as_of}\n"
        "# The team's function dependencies and theirs, pinned with hashes by `make lock`\n"
        "# (resolved with the kit's function/requirements.txt as constraints; what that\n"
        "# file pins is installed from there). Do not edit: change requirements.in.\n"
        "# `make plan` resolves it again and refuses any line that differs.\n"
        + "".join(f"{option}\n" for option in options)
        + "".join(pin.block for pin in own)
    )


def lock_team(
    root: Path = PROJECT_DIR, uv: str | None = None, kit_root: Path | None = None
) -> Path | None:
    """Resolve the team's requirements (in the project `root`) into its lock, with the
    kit's lock (in `kit_root`; unset: `kit_root_of(root)`) as constraints, as of now; the
    lock written (None: the team has no requirements file, and any old lock is removed).
    Raises LockError (IndexUnreachable) as `resolve_team_lock`."""
    kit_root = kit_root or kit_root_of(root)
    requirements, lock = root / TEAM_REQUIREMENTS, root / TEAM_LOCK
    if not requirements.is_file():
        lock.unlink(missing_ok=True)
        return None
    as_of = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    lock.write_text(resolve_team_lock(root, kit_root, as_of, uv), encoding="utf-8")
    # What was just resolved needs no second resolution: the next plan finds it verified.
    _record_verified(root, kit_root, uv)
    return lock


def verify_team_lock(
    root: Path = PROJECT_DIR, kit_root: Path | None = None, uv: str | None = None
) -> list[str]:
    """Why the team's lock (in the project `root`) is not what `make lock` writes from its
    requirements and the kit's lock (in `kit_root`; unset: `kit_root_of(root)`), one line
    each (the fix of every one: FIX); [] when it is, or when the team has no requirements
    file and no lock. First the offline checks (`lock_problems`), then the lock resolved
    again as of the instant it records, unless these inputs were verified before
    (`VERIFIED_LOCKS`). Raises IndexUnreachable when the index cannot be reached: the lock
    is then not verified, and never passes."""
    kit_root = kit_root or kit_root_of(root)
    problems = lock_problems(root, kit_root)
    if problems or not (root / TEAM_REQUIREMENTS).is_file():
        return problems
    marker = root / VERIFIED_LOCKS / verification_key(root, kit_root, uv)
    if marker.is_file():
        return []
    text = (root / TEAM_LOCK).read_text(encoding="utf-8")
    as_of = resolved_as_of(text)
    if as_of is None:
        return [f"{TEAM_LOCK} does not say when it was resolved (its line "
                f"{RESOLVED_AS_OF!r}): an older `make lock` or a hand wrote it"]
    try:
        expected = resolve_team_lock(root, kit_root, as_of, uv, action="verified")
    except IndexUnreachable:
        raise  # not verified: the caller refuses, saying so
    except LockError as exc:  # e.g. a version pinned there has since been removed
        return [f"{TEAM_LOCK} cannot be resolved again: {exc.what}"]
    if expected != text:
        return [differing_lines(text, expected, as_of)]
    _record_verified(root, kit_root, uv)
    return []


def differing_lines(text: str, expected: str, as_of: str) -> str:
    """The refusal of a lock `text` that is not `expected` (what `make lock` writes): each
    line that differs, `-` as the lock has it, `+` as `make lock` writes it."""
    diff = [
        f"  {line[0]} {line[1:].strip().removesuffix(CONTINUATION).rstrip() or '(blank)'}"
        for line in difflib.unified_diff(text.splitlines(), expected.splitlines(),
                                         lineterm="", n=0)
        if line.startswith(("-", "+")) and not line.startswith(("---", "+++"))
    ]
    more = len(diff) - SHOWN_LINES
    shown = diff[:SHOWN_LINES] + ([f"  ... and {more} more line(s)"] if more > 0 else [])
    return (
        f"{TEAM_LOCK} is not what `make lock` resolves from {TEAM_REQUIREMENTS} and the kit's "
        f"lock as of {as_of} (edited by hand, or a version since yanked from the index):\n"
        + "\n".join(shown)
        + f"\n  (-: the line in {TEAM_LOCK}; +: the line `make lock` writes)"
    )


def verification_key(root: Path, kit_root: Path, uv: str | None = None) -> str:
    """The digest of everything a verification depends on: the team's requirements, the
    kit's lock, the team's lock, the resolver's version (and the runtime it resolves for)."""
    digest = hashlib.sha256(b"team-lock-verification 1\0")
    for part in (root / TEAM_REQUIREMENTS, kit_root / KIT_LOCK, root / TEAM_LOCK):
        digest.update(hashlib.sha256(part.read_bytes()).digest())
    digest.update(f"{resolver_version(uv_command(uv))}\0{FUNCTION_PYTHON}".encode())
    return digest.hexdigest()


@functools.cache  # asked once per plan, not once per stack
def resolver_version(uv: str) -> str:
    """`uv --version`'s answer, e.g. "uv 0.13.9": another resolver may resolve otherwise."""
    return run_uv([uv, "--version"]).stdout.strip()


def run_uv(command: list[str], cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """uv's answer to `command` (its exit status checked by the caller); LockError when uv
    does not run at all."""
    try:
        return subprocess.run(command, cwd=cwd, capture_output=True, text=True, check=False)
    except OSError as exc:
        raise LockError(f"uv, which resolves the team's lock, does not run ({exc})",
                        "reinstall the virtualenv that runs the kit (.venv): uv is one of "
                        "its packages") from exc


def _record_verified(root: Path, kit_root: Path, uv: str | None) -> None:
    marker = root / VERIFIED_LOCKS / verification_key(root, kit_root, uv)
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.touch()  # empty: its name is what was verified


# uv's causes when no answer came from the index: a refused or timed-out connection, an
# unknown host, or an index that answered with a server error.
_NO_ANSWER: Final = re.compile(
    r"error sending request|dns error|connect error|timed out|server error", re.IGNORECASE)
_FAILED_URL: Final = re.compile(r"Failed to fetch:?\s*`?(?P<url>[^\s`]+)")


def unreachable_index(output: str) -> str | None:
    """The URL uv could not fetch from the package index, when its `output` says the index
    could not be reached (None: it failed otherwise)."""
    flat = " ".join(output.split())
    failed = _FAILED_URL.search(flat)
    if failed is None or not _NO_ANSWER.search(flat):
        return None
    return failed["url"]


def resolver_message(output: str) -> tuple[str, str]:
    """uv's explanation, which names the packages on both sides of a conflict, under what
    it means here; and the fix."""
    lines = [line.rstrip() for line in output.strip().splitlines() if line.strip()]
    explanation = "\n".join(f"  {line}" for line in lines)
    flat = " ".join(output.split())  # uv wraps its lines to the terminal's width
    if "No solution found" not in flat or "not found in the package registry" in flat:
        return (f"resolving {TEAM_REQUIREMENTS} failed:\n{explanation}",
                "check the package names and versions there and that the package index is "
                f"reachable, then {FIX}")
    return (
        f"{TEAM_REQUIREMENTS} cannot be resolved together with the kit's pins "
        f"({KIT_LOCK}: the versions the deployed function runs):\n{explanation}",
        "choose a version of your package that accepts the kit's version of the package "
        f"named above (loosen or change the pin in {TEAM_REQUIREMENTS}), then {FIX}",
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
