"""A stack that declares no runtime deploys exactly as before runtimes existed: the same
resources under the same URNs with the same inputs (so `pulumi up` replaces and updates
nothing), each function's archive aside, whose name is its content's hash and changes with
any change of the kit's function code, runtimes or not (tests/infra/test_source.py pins that
an archive without `job_modules` is the whole tree, as before).

`data/stacks_before_runtimes.json` is what the program declared for the example stacks dev
and prod at the commit before runtimes (a53a7f0), normalised as below, re-recorded once since
for a deliberate addition: the delivering watchdog's task key (issue 36: dev's watchdog
delivers, so its stack gained the key's secret, version, value, reader and API, the queue
viewer grant, and the key as a secret variable of the watchdog function, an update in
place). A later, deliberate change of what those
stacks declare records it anew: `python -m tests.infra.test_without_runtimes`.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from operator_tools.offline import load_stack_config, run_offline
from tests.stacks import FIXTURE_STACKS_DIR

BEFORE = Path(__file__).parent / "data" / "stacks_before_runtimes.json"
STACKS = ("dev", "prod")
ARCHIVE = re.compile(r"[0-9a-f]{64}\.zip")


def normalised(value: Any) -> Any:
    """`value` with every archive's hash and the build folder's path taken out."""
    if isinstance(value, dict):
        return {k: normalised(v) for k, v in value.items()}
    if isinstance(value, list):
        return [normalised(v) for v in value]
    if isinstance(value, str) and ARCHIVE.search(value):
        return ARCHIVE.sub("<sha256>.zip", value.rsplit("/", 1)[-1] if value.startswith("/")
                           else value)
    return value


def declared(stack: str, build_dir: Path) -> dict[str, Any]:
    run = run_offline(load_stack_config(stack, FIXTURE_STACKS_DIR), stack=stack,
                      build_dir=build_dir)
    return {r.urn: normalised({"type": r.type, "parent": r.parent, "props": r.props})
            for r in run.resources}


@pytest.mark.parametrize("stack", STACKS)
def test_a_stack_without_runtimes_declares_what_it_did_before(
    stack: str, tmp_path: Path
) -> None:
    before = json.loads(BEFORE.read_text(encoding="utf-8"))[stack]
    now = json.loads(json.dumps(declared(stack, tmp_path), default=str))
    assert sorted(now) == sorted(before), "URNs added or gone"
    changed = [urn for urn in before if now[urn] != before[urn]]
    assert not changed, f"inputs changed (an update or a replacement at `pulumi up`): {changed}"


if __name__ == "__main__":  # re-record after a deliberate change
    import tempfile

    with tempfile.TemporaryDirectory() as build:
        data = {s: declared(s, Path(build)) for s in STACKS}
    BEFORE.write_text(json.dumps(data, sort_keys=True, indent=1, default=str) + "\n",
                      encoding="utf-8")
    sys.exit(0)
