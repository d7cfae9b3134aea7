"""infra/__main__.py as `pulumi up` runs it: `runpy.run_path("infra/")` with infra/ as the
working directory and only infra/ (not the repository root) on sys.path."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest

from infra.offline import engine_config, load_stack_config
from infra.program import REPO_ROOT

# Runs in a fresh interpreter; mimics pulumi-language-python-exec with minimal mocks.
SCRIPT = r"""
import json, os, runpy, sys
repo = os.path.dirname(os.getcwd())
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") not in (repo, os.getcwd())]
import pulumi
from pulumi.runtime import mocks
from pulumi.runtime.stack import run_pulumi_func
from pulumi.runtime.sync_await import _sync_await

declared = []

class Mocks(mocks.Mocks):
    def new_resource(self, args):
        state = dict(args.inputs)
        if args.typ == "gcp:serviceaccount/account:Account":
            state["email"] = f"{state['accountId']}@p.iam.gserviceaccount.com"
            state["member"] = "serviceAccount:" + state["email"]
            state["name"] = "projects/p/serviceAccounts/" + state["email"]
        if args.typ == "gcp:cloudfunctionsv2/function:Function":
            state["serviceConfig"] = {
                **state["serviceConfig"],
                "uri": "https://fn-abc-ew.a.run.app",
                "service": "projects/p/locations/l/services/fn",
            }
        declared.append(args.typ)
        return args.name + "-id", state

    def call(self, args):
        return {"number": "42"}, []

mocks.set_mocks(Mocks(), project="scheduler-dedup", stack="dev", preview=False)
pulumi.runtime.set_all_config(json.loads(sys.argv[1]))
try:
    _sync_await(run_pulumi_func(lambda: runpy.run_path(".", run_name="__main__")))
    outcome = "ok"
except Exception as exc:
    outcome = f"{type(exc).__name__}: {exc}"
print(json.dumps({"outcome": outcome, "declared": declared}))
"""


def run_entrypoint(config: dict[str, Any]) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT, json.dumps(engine_config(config))],
        cwd=REPO_ROOT / "infra",
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    parsed: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    return parsed


@pytest.mark.timeout(180)
def test_main_declares_the_stack_from_infra_dir() -> None:
    outcome = run_entrypoint(load_stack_config("dev"))
    assert outcome["outcome"] == "ok"
    assert "gcp:cloudfunctionsv2/function:Function" in outcome["declared"]
    assert outcome["declared"].count("gcp:cloudscheduler/job:Job") == 3


@pytest.mark.timeout(180)
def test_main_reports_a_config_error_without_declaring() -> None:
    config = load_stack_config("dev")
    config["scheduler-dedup:jobs"][0]["schedule"] = "every 5 minutes"
    outcome = run_entrypoint(config)
    assert outcome["outcome"].startswith("RunError: invalid stack config")
    assert "scheduler-dedup:jobs[0].schedule" in outcome["outcome"]
    assert outcome["declared"] == []
