"""infra/__main__.py as `pulumi up` runs it: `runpy.run_path("infra/")` with infra/ as the
working directory and only infra/ (not the repository root) on sys.path."""

from __future__ import annotations

from pathlib import Path

import pytest

from operator_tools.offline import load_stack_config
from tests.infra.helpers import run_entrypoint
from tests.stacks import FIXTURE_STACKS_DIR


@pytest.mark.timeout(180)
def test_main_declares_the_stack_from_infra_dir(kit_checkout: Path) -> None:
    outcome = run_entrypoint(kit_checkout, load_stack_config("dev", FIXTURE_STACKS_DIR))
    assert outcome["outcome"] == "ok"
    assert "gcp:cloudfunctionsv2/function:Function" in outcome["declared"]
    # The three jobs of the stack file and the run watchdog's own.
    assert outcome["declared"].count("gcp:cloudscheduler/job:Job") == 4


@pytest.mark.timeout(180)
def test_main_reports_a_config_error_without_declaring(kit_checkout: Path) -> None:
    config = load_stack_config("dev", FIXTURE_STACKS_DIR)
    config["scheduler-dedup:jobs"][0]["schedule"] = "every 5 minutes"
    outcome = run_entrypoint(kit_checkout, config)
    assert outcome["outcome"].startswith("RunError: invalid stack config")
    assert "scheduler-dedup:jobs[0].schedule" in outcome["outcome"]
    assert outcome["declared"] == []
