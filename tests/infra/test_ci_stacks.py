"""`python -m operator_tools ci-stacks`: the team's stacks as the workflows deploy and preview them,
by `reviewBeforeUp` (unset: reviewed, failing closed), an invalid stack file an
error (exit 2), and the `--github-output` lines the workflows read."""

from __future__ import annotations

import inspect
import io
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra import KIT_ROOT as REPO_ROOT
from operator_tools.ci_stacks import classify, github_output_lines, main
from operator_tools.stack_files import STACK_FILE_DIR

ONCALL = {"emails": ["oncall@example.com"]}


def write_stack(directory: Path, name: str, **settings: Any) -> Path:
    """A valid `Pulumi.<name>.yaml` in `directory`: one job, plus the kit's `settings`
    (e.g. deleteProtection=False); a delete-protected stack gets an on-call address, as a
    deployment needs."""
    config: dict[str, Any] = {
        "gcp:project": "acme-billing-1",
        "gcp:region": "europe-west1",
        "scheduler-dedup:namePrefix": f"dedup-{name}",
        "scheduler-dedup:jobs": [{"name": "nightly", "schedule": "0 2 * * *"}],
    }
    if settings.get("deleteProtection", True):
        config["scheduler-dedup:alerts"] = ONCALL
    config.update({f"scheduler-dedup:{key}": value for key, value in settings.items()})
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"Pulumi.{name}.yaml"
    path.write_text(yaml.safe_dump({"config": config}, sort_keys=False), encoding="utf-8")
    return path


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    status = main(list(argv), out=out, err=err)
    return status, out.getvalue(), err.getvalue()


def test_every_stack_is_reviewed_unless_its_file_says_otherwise(tmp_path: Path) -> None:
    # Fails closed: staging without delete protection still waits for a reviewer (turning
    # protection off on prod must not also remove prod's reviewer).
    write_stack(tmp_path, "staging", deleteProtection=False)
    write_stack(tmp_path, "prod")
    write_stack(tmp_path, "dev", deleteProtection=False, reviewBeforeUp=False)
    status, out, err = run("--stack-dir", str(tmp_path))
    assert (status, err) == (0, "")
    assert json.loads(out) == {"reviewed": ["prod", "staging"], "unreviewed": ["dev"]}


@pytest.mark.parametrize(
    ("settings", "reviewed"),
    [
        ({"deleteProtection": False, "reviewBeforeUp": True}, True),
        ({"reviewBeforeUp": False}, False),  # delete-protected, yet deployed without review
        ({"deleteProtection": False, "reviewBeforeUp": "true"}, True),  # as the engine gives it
        ({"deleteProtection": True, "reviewBeforeUp": "false"}, False),
        ({"deleteProtection": False}, True),
        ({}, True),
    ],
)
def test_review_before_up_alone_decides(
    settings: dict[str, Any], reviewed: bool, tmp_path: Path
) -> None:
    write_stack(tmp_path, "qa", **settings)
    stacks = classify(tmp_path)
    assert stacks == ({"reviewed": ["qa"], "unreviewed": []} if reviewed
                      else {"reviewed": [], "unreviewed": ["qa"]})


@pytest.mark.parametrize(
    ("write", "expected"),
    [
        (lambda d: write_stack(d, "staging", deleteProtection=False, reviewBeforeUp="yes"),
         "scheduler-dedup:reviewBeforeUp: 'yes' is not a boolean. Fix: use true or false"),
        # As for a deployment: a protected stack that alerts nobody is refused (make plan's rule).
        (lambda d: (d / "Pulumi.prod.yaml").write_text(
            "config:\n  gcp:project: acme-billing-1\n  gcp:region: europe-west1\n"
            "  scheduler-dedup:jobs: [{name: nightly, schedule: '0 2 * * *'}]\n"),
         "scheduler-dedup:alerts.emails: is empty while deleteProtection is true"),
        (lambda d: (d / "Pulumi.dev.yaml").write_text("config:\n  gcp:project: [\n"),
         "not valid YAML"),
        (lambda d: write_stack(d, "dev;rm", deleteProtection=False),
         "'dev;rm' is not a stack name the workflows deploy"),
    ],
    ids=["not-a-boolean", "deploy-rule", "not-yaml", "odd-name"],
)
def test_an_invalid_stack_file_fails_with_its_message(
    write: Any, expected: str, tmp_path: Path
) -> None:
    """CI fails loudly instead of skipping the stack (or deploying it unreviewed)."""
    write_stack(tmp_path, "ok", deleteProtection=False)
    write(tmp_path)
    status, out, err = run("--stack-dir", str(tmp_path), "--github-output")
    assert status == 2
    assert out == ""
    assert err.startswith("error: ") and expected in err, err
    assert "Pulumi." in err  # names the file


def test_no_stacks_no_lists(tmp_path: Path) -> None:
    assert run("--stack-dir", str(tmp_path)) == (0, '{"reviewed": [], "unreviewed": []}\n', "")
    assert run("--stack-dir", str(tmp_path / "missing"))[0] == 0


def test_the_github_output_lines(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_stack(tmp_path / "stacks", "prod")
    write_stack(tmp_path / "stacks", "staging", deleteProtection=False, reviewBeforeUp=False)
    write_stack(tmp_path / "stacks", "dev", deleteProtection=False, reviewBeforeUp=False)
    output = tmp_path / "github-output"
    output.write_text("earlier=1\n")  # GitHub's file may hold other steps' outputs: appended
    monkeypatch.setenv("GITHUB_OUTPUT", str(output))
    status, out, _ = run("--stack-dir", str(tmp_path / "stacks"), "--github-output")
    assert status == 0
    assert output.read_text() == (
        'earlier=1\nreviewed=["prod"]\nunreviewed=["dev", "staging"]\n')
    assert json.loads(out) == {"reviewed": ["prod"], "unreviewed": ["dev", "staging"]}
    assert github_output_lines({"reviewed": [], "unreviewed": []}) == (
        "reviewed=[]\nunreviewed=[]\n")  # the workflows' `!= '[]'` conditions


def test_github_output_without_the_variable_is_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("GITHUB_OUTPUT", raising=False)
    status, _, err = run("--stack-dir", str(tmp_path), "--github-output")
    assert status == 2 and "$GITHUB_OUTPUT" in err


def test_by_default_the_team_stack_directory_never_the_examples(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Pulumi.yaml's stackConfigDir, stacks/; the kit's example stacks (examples/stacks/)
    are never deployed by CI. (The kit's tests never read the team's stack files.)"""
    assert STACK_FILE_DIR == REPO_ROOT / "stacks"
    assert inspect.signature(classify).parameters["directory"].default == STACK_FILE_DIR
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "(default: stacks, Pulumi.yaml's stackConfigDir)" in " ".join(
        capsys.readouterr().out.split())
