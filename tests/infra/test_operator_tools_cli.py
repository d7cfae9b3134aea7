"""`python -m operator_tools <command>`: the one entry point of the operator tools. Every
command answers --help; a module run directly, or an entry point from before the tools had
a room of their own, fails naming the command instead of exiting 0 having done nothing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from operator_tools.__main__ import COMMANDS, main


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_command_answers_help(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main([command, "--help"])
    assert exited.value.code == 0
    assert f"scheduler-dedup {command}" in capsys.readouterr().out


def test_no_command_is_a_usage_error_and_an_unknown_one_names_itself(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main([]) == 2
    assert "commands:" in capsys.readouterr().err
    assert main(["deploy"]) == 2
    assert "no command 'deploy'" in capsys.readouterr().err


@pytest.mark.parametrize(("module", "command"), [
    ("operator_tools.plan", "plan"),
    ("operator_tools.rerun", "rerun"),
    ("policies.offline_check", "policy-check"),
    ("infra.lock", "lock"),
    ("demo.serve", "serve"),
])
def test_a_module_run_directly_fails_naming_the_command(
    module: str, command: str, kit_checkout: Path
) -> None:
    result = subprocess.run([sys.executable, "-m", module, "dev"], cwd=kit_checkout,
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 1, result
    assert f"run `scheduler-dedup {command}`" in result.stderr
    assert result.stdout == ""
