"""The kit as a package (`pip install scheduler-dedup-kit`): where its tree is, and the two
doors a team's repository uses: the `scheduler-dedup` command (`cli.main`), the Pulumi
program its `__main__.py` runs (`run_program`) and the policy pack its `policy/` folder runs
(`run_policy_pack`); examples/team-repo/ is that repository, as `scheduler-dedup init` writes
it.

The kit's modules import as this repository lays them out (`infra`, `operator_tools`,
`policies`, ..., and `dedup` from the function's source root `function/`), so the wheel
carries the same tree under `scheduler_dedup_kit/` and `activate()` puts it on sys.path
(docs/by-version.md). Nothing is imported before `activate()` runs.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Final

_HERE = Path(__file__).resolve().parent
# Installed (make dist): the kit's tree sits beside this file. A checkout: this folder is
# one room of the tree, which is its parent.
KIT_ROOT: Final = _HERE if (_HERE / "infra").is_dir() else _HERE.parent
"""The kit's tree: infra/, function/, operator_tools/, policies/, examples/, ..."""


def activate() -> None:
    """Put the kit's tree on sys.path, and through `infra` (which runs first) the function's
    source roots: the kit's `function/` (dedup) and the project's (your `jobs`)."""
    if str(KIT_ROOT) not in sys.path:
        sys.path.insert(0, str(KIT_ROOT))
    import infra  # noqa: F401  (puts the function source roots on sys.path)


def _run_entry_point(room: str) -> None:
    """Run the kit's `<room>/__main__.py` as the Pulumi CLI runs it in this repository."""
    activate()
    import runpy

    runpy.run_path(str(KIT_ROOT / room / "__main__.py"), run_name="__main__")


def run_program() -> None:
    """What `pulumi up` runs in a team's repository (its `__main__.py` calls this): the kit's
    program, exactly as infra/__main__.py runs it in this repository."""
    _run_entry_point("infra")


def run_policy_pack() -> None:
    """What `pulumi preview|up --policy-pack policy` runs in a team's repository (its
    policy/__main__.py calls this): the kit's pack, as policies/__main__.py builds it here."""
    _run_entry_point("policies")
