"""The kit's example stacks (examples/stacks/), which its tests run on.

The tests never read the team's stack files (stacks/, Pulumi.yaml's `stackConfigDir`): the
team adds, edits or removes them freely, and `make plan` / `make policy-check` check them.
The examples are the kit's files, which a team never needs to touch. Load one with
`operator_tools.offline.load_stack_config("dev", FIXTURE_STACKS_DIR)`; the project file
(`Pulumi.yaml`) stays the repository root's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

from operator_tools.stack_files import EXAMPLE_STACKS_DIR, stack_file, stack_names

FIXTURE_STACKS_DIR: Final = EXAMPLE_STACKS_DIR
"""The directory holding the example `Pulumi.dev.yaml` and `Pulumi.prod.yaml`."""

FIXTURE_STACKS: Final = tuple(stack_names(EXAMPLE_STACKS_DIR))
"""The example stacks' names, in name order."""


def fixture_stack_file(stack: str) -> Path:
    """The path of the example `Pulumi.<stack>.yaml`."""
    return stack_file(stack, EXAMPLE_STACKS_DIR)
