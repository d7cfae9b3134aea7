"""The kit's own example stacks, for its tests.

The tests never read the stack files in the repository root: those belong to the team
that forked the kit (they add, edit or remove them freely), and `make plan` /
`make policy-check` check them. The tests run on these fixture copies instead, which the
team never needs to touch. Load one with
`infra.offline.load_stack_config("dev", FIXTURE_STACKS_DIR)`; the project file
(`Pulumi.yaml`) stays the repository root's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

FIXTURE_STACKS_DIR: Final = Path(__file__).resolve().parent
"""The directory holding the fixture `Pulumi.dev.yaml` and `Pulumi.prod.yaml`."""

FIXTURE_STACKS: Final = ("dev", "prod")
"""The fixture stacks' names, in name order."""


def fixture_stack_file(stack: str) -> Path:
    """The path of the fixture `Pulumi.<stack>.yaml`."""
    return FIXTURE_STACKS_DIR / f"Pulumi.{stack}.yaml"
