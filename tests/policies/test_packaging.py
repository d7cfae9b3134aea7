"""The pack's files: PulumiPolicy.yaml, __main__.py, imports, config file, CI workflow."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from policies.evaluate import PolicyConfigError, parse_policy_config
from policies.model import Enforcement
from policies.registry import ALL_POLICIES

ROOT = Path(__file__).resolve().parents[2]
PACK = ROOT / "policies"


def test_policy_project_file() -> None:
    document = yaml.safe_load((PACK / "PulumiPolicy.yaml").read_text(encoding="utf-8"))
    assert document["runtime"]["name"] == "python"
    assert document["description"].strip()
    # The path as written (.venv itself is a link to the virtualenv of its Python version).
    venv = Path(os.path.normpath(PACK / document["runtime"]["options"]["virtualenv"]))
    assert venv == ROOT / ".venv"


def test_main_only_builds_the_pack() -> None:
    tree = ast.parse((PACK / "__main__.py").read_text(encoding="utf-8"))
    calls = [
        n.func.id
        for n in ast.walk(tree)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
    ]
    assert calls.count("PolicyPack") == 1
    assert not [n for n in tree.body if isinstance(n, ast.FunctionDef | ast.ClassDef)]


def test_pack_modules_import_without_the_program_or_the_repo_on_the_path(
    kit_checkout: Path,
) -> None:
    """The pack's own process loads only pulumi_policy, croniter, scheduler_rules and
    infra.source (which reads the job tables from a function's source archive: stdlib
    only, with the tables' names from function/dedup/tables.py, infra.lock's union of
    the locks it writes into an archive and infra.job_modules's choice of the team's
    files, stdlib only too, and infra.shared_facts, the facts config and pack share)."""
    script = (
        "import sys; sys.path.insert(0, sys.argv[1]);"
        "import policies.pack, policies.registry, policies.evaluate;"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('pulumi_gcp', 'infra') and m not in "
        "('infra', 'infra.scheduler_rules', 'infra.source', 'infra.lock', "
        "'infra.job_modules', 'infra.shared_facts'));"
        "print(bad)"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = subprocess.run(
        [sys.executable, "-c", script, str(kit_checkout)],
        cwd=kit_checkout / PACK.relative_to(ROOT),
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    assert result.stdout.strip() == "[]"


def test_example_policy_config() -> None:
    document = json.loads((PACK / "policy-config.example.json").read_text(encoding="utf-8"))
    levels = parse_policy_config(document)
    assert sorted(levels.values()) == sorted([Enforcement.ADVISORY, Enforcement.DISABLED])


def test_policy_config_all_and_overrides() -> None:
    names = {p.name for p in ALL_POLICIES}
    levels = parse_policy_config(
        {"all": "advisory", "dedup-ttl-policy": {"enforcementLevel": "remediate"}}
    )
    assert set(levels) == names
    assert levels["dedup-ttl-policy"] is Enforcement.MANDATORY
    assert {levels[n] for n in names - {"dedup-ttl-policy"}} == {Enforcement.ADVISORY}
    assert parse_policy_config({"dedup-ttl-policy": {"someSetting": 1}}) == {}


@pytest.mark.parametrize(
    "document",
    [{"nope": "advisory"}, {"dedup-ttl-policy": "sometimes"}, {"all": {"enforcementLevel": 3}}],
)
def test_policy_config_errors(document: dict[str, Any]) -> None:
    with pytest.raises(PolicyConfigError):
        parse_policy_config(document)


def test_ci_workflow() -> None:
    workflow = yaml.safe_load((ROOT / ".github" / "workflows" / "ci.yml").read_text("utf-8"))
    triggers = workflow[True]  # YAML 1.1 reads the key `on` as true
    # Pull requests; pushes to main run deploy.yml (make test, then pulumi up per stack).
    assert "pull_request" in triggers
    jobs = workflow["jobs"]
    assert any(s.get("run") == ".ci/run" for s in jobs["test"]["steps"])
    preview = jobs["preview"]
    assert "pull_request" in preview["if"]
    assert preview["permissions"]["id-token"] == "write"
    steps = {s.get("uses", "").split("@")[0]: s for s in preview["steps"]}
    auth = steps["google-github-actions/auth"]["with"]
    assert set(auth) == {"workload_identity_provider", "service_account"}
    pulumi = steps["pulumi/actions"]["with"]
    assert pulumi["command"] == "preview"
    assert pulumi["policyPacks"] == "policies"
    assert "matrix.stack" in pulumi["stack-name"]
