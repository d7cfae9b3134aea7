"""Which files are the team's: the one declaration of the places a fork writes in.

Everything else in the repository is the kit's, and the kit ships nothing in these places,
so a kit release (a merge of upstream) never touches a team's file and a team never edits
a kit file for a normal change: a job, a dependency, a stack, CI for its stacks.
docs/adopting.md lists the same places (tests/test_upgrade_merge.py checks both, and that
such a merge has no conflict).
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from typing import Final

from infra import PROJECT_DIR
from operator_tools.stack_files import STACK_FILE_DIR


@dataclass(frozen=True)
class TeamPlace:
    """A path pattern relative to the repository (`dir/` for a whole directory) and what
    the team keeps there."""

    pattern: str
    holds: str

    def matches(self, path: str) -> bool:
        if self.pattern.endswith("/"):
            return path.startswith(self.pattern)
        return fnmatch.fnmatchcase(path, self.pattern)


STACK_DIR: Final = f"{STACK_FILE_DIR.relative_to(PROJECT_DIR).as_posix()}/"

TEAM_PLACES: Final = (
    TeamPlace(STACK_DIR, "your stack files, `Pulumi.<stack>.yaml` (Pulumi.yaml's "
              "`stackConfigDir`): project, region, jobs, scaling, alerts, CI review"),
    TeamPlace("function/jobs/", "your job logic (`jobLogic: jobs.<module>:<function>`), and "
              "its dependencies: `requirements.in`, pinned by `make lock` into "
              "`requirements.txt`"),
    TeamPlace("tests/jobs/", "your job tests, run by `make test` (`make new-job` writes one "
              "per job)"),
    TeamPlace("policies/policy-config.*.json", "optional, one per stack: a policy turned "
              "advisory or off, the `deployers` setting"),
)

KIT_FILES_IN_TEAM_PATTERNS: Final = frozenset({"policies/policy-config.example.json"})
"""The kit's own files a pattern above would match: the example policy config."""


def is_team_file(path: str) -> bool:
    """Is `path` (relative to the repository, `/`-separated) one of the team's files?"""
    if path in KIT_FILES_IN_TEAM_PATTERNS:
        return False
    return any(place.matches(path) for place in TEAM_PLACES)
