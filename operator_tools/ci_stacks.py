"""The team's stacks as the workflows deploy and preview them
(`python -m operator_tools ci-stacks`).

Prints `{"reviewed": [...], "unreviewed": [...]}`: every `Pulumi.<stack>.yaml` in the
team's stack directory (Pulumi.yaml's `stackConfigDir`, `stacks/`; never the kit's example
stacks), sorted, by its `reviewBeforeUp` (unset: true, reviewed: CI fails closed).
deploy.yml runs `pulumi up` of the unreviewed ones in the environment `dev` and of the
reviewed ones in `production` (required reviewers); ci.yml previews the unreviewed
ones only. `--github-output` also appends `reviewed=<json>` and `unreviewed=<json>` to
$GITHUB_OUTPUT, the job's outputs.

A stack file that does not validate (as for a deployment: `make plan`'s rules) is an error,
exit 2 with its message, so CI fails loudly instead of skipping a stack or deploying it
without its review. No stack files: both lists empty (nothing to deploy).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Final, TextIO

from infra.config import ConfigError, load_config
from operator_tools.stack_files import (
    STACK_FILE_DIR,
    StackFileError,
    display_path,
    load_stack_config,
    stack_file,
    stack_names,
)

STACK_NAME: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
"""What the workflows accept as a stack name: Pulumi's characters, nothing a shell, a
concurrency group or a file path would read otherwise."""


class CiStacksError(ValueError):
    """A stack the workflows cannot classify: its file and what is wrong."""


def classify(directory: Path = STACK_FILE_DIR) -> dict[str, list[str]]:
    """The stacks of `directory` by whether their `pulumi up` waits for a reviewer."""
    found: dict[str, list[str]] = {"reviewed": [], "unreviewed": []}
    for name in stack_names(directory):
        path = stack_file(name, directory)
        if not STACK_NAME.match(name):
            raise CiStacksError(
                f"{display_path(path)}: {name!r} is not a stack name the workflows deploy. "
                "Fix: rename the file to Pulumi.<stack>.yaml with letters, digits, '.', '_' "
                "or '-' in <stack>, starting with a letter or digit")
        try:
            config = load_config(load_stack_config(path), deploying=True)
        except ConfigError as exc:  # names the keys; the file is the reader's context
            raise CiStacksError(f"{display_path(path)}: {exc}") from None
        except StackFileError as exc:  # names its file, line and column itself
            raise CiStacksError(str(exc)) from None
        found["reviewed" if config.dedup.review_before_up else "unreviewed"].append(name)
    return found


def github_output_lines(stacks: dict[str, list[str]]) -> str:
    """The job outputs: `reviewed=<json>` and `unreviewed=<json>`, one line each."""
    return "".join(f"{key}={json.dumps(stacks[key])}\n" for key in ("reviewed", "unreviewed"))


def main(argv: Sequence[str] | None = None, out: TextIO = sys.stdout,
         err: TextIO = sys.stderr) -> int:
    parser = argparse.ArgumentParser(
        prog="scheduler-dedup ci-stacks",
        description="Print the team's stacks as JSON, by whether CI's pulumi up of each waits "
        "for a reviewer (reviewBeforeUp; unset: reviewed).",
    )
    parser.add_argument(
        "--stack-dir", type=Path, default=STACK_FILE_DIR, metavar="DIR",
        help=f"the directory of the Pulumi.<stack>.yaml files (default: "
        f"{display_path(STACK_FILE_DIR)}, Pulumi.yaml's stackConfigDir)")
    parser.add_argument(
        "--github-output", action="store_true",
        help="also append reviewed=<json> and unreviewed=<json> to $GITHUB_OUTPUT")
    args = parser.parse_args(argv)
    try:
        stacks = classify(args.stack_dir)
    except CiStacksError as exc:
        print(f"error: {exc}", file=err)
        return 2
    if args.github_output:
        target = os.environ.get("GITHUB_OUTPUT")
        if not target:
            print("error: --github-output needs $GITHUB_OUTPUT (set by GitHub Actions in "
                  "every step)", file=err)
            return 2
        with open(target, "a", encoding="utf-8") as output:
            output.write(github_output_lines(stacks))
    print(json.dumps(stacks), file=out)
    return 0


if __name__ == "__main__":
    from operator_tools import not_an_entry_point

    not_an_entry_point("ci-stacks")
