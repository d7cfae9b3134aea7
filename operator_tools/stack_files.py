"""The stack files, read as the Pulumi engine would hand their `config:` to the program: the
team's `Pulumi.<stack>.yaml` in the project's stack directory (Pulumi.yaml's
`stackConfigDir`, `stacks/`), and the kit's example stacks (`examples/stacks/`).

A light module (YAML only, no Pulumi SDK): the offline plan, the policy check, the infra
tests (on the example stacks) and the Scheduler emulator read stack files
with it, so a file that is not valid YAML is one line everywhere: file, line, column, fix.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

import yaml

from infra import KIT_ROOT, PROJECT_DIR
from infra.config import PROVIDER_NAMESPACES
from operator_tools.collector import collector_paused

PROJECT_FILE: Final = PROJECT_DIR / "Pulumi.yaml"
"""The Pulumi project's file: this checkout's, or the team repository's (infra.PROJECT_DIR)."""
EXAMPLE_STACKS_DIR: Final = KIT_ROOT / "examples" / "stacks"
EXAMPLES_STAND_IN: Final = PROJECT_DIR == KIT_ROOT
"""In a checkout of the kit (a fork), its example stacks stand in for the team's while it
has none, and a stack name it lacks is the example of that name; in a team's repository
(the kit installed) never: a missing stack there is an error, not somebody else's project."""
"""The kit's example stacks (dev, prod): planned, policy-checked and demoed by `make test`."""


def _stack_config_dir(project_file: Path = PROJECT_FILE) -> Path:
    """Pulumi.yaml's `stackConfigDir` (relative to Pulumi.yaml; unset: beside it), the one
    declaration of where the team's stack files live, for the CLI and the kit alike. No
    project file (an installed kit run outside any project): its folder."""
    if not project_file.is_file():
        return project_file.parent
    document = yaml.safe_load(project_file.read_text(encoding="utf-8")) or {}
    return (project_file.parent / str(document.get("stackConfigDir") or ".")).resolve()


STACK_FILE_DIR: Final = _stack_config_dir()
"""Where the team's stack files live: Pulumi.yaml's `stackConfigDir` (`stacks/`)."""


POLICY_CONFIG_DIR: Final = PROJECT_DIR / "policies"
"""Where a stack's policy config is, `policy-config.<stack>.json` (a team place): the file
CI's `pulumi preview` and `pulumi up` pass as `--policy-pack-config` when it exists
(.github/workflows), which `make policy-check` applies the same way."""


def stack_policy_config(stack: str, directory: Path = POLICY_CONFIG_DIR) -> Path | None:
    """The stack's policy config file, if it has one."""
    path = directory / f"policy-config.{stack}.json"
    return path if path.is_file() else None


class StackFileError(ValueError):
    """A stack file that cannot be read: the file, where, what is wrong and the fix."""


def stack_file(stack: str, directory: Path = STACK_FILE_DIR) -> Path:
    return directory / f"Pulumi.{stack}.yaml"


def stack_names(directory: Path = STACK_FILE_DIR) -> list[str]:
    """The stacks that have a `Pulumi.<stack>.yaml` file, sorted."""
    return sorted(p.name[len("Pulumi.") : -len(".yaml")] for p in directory.glob("Pulumi.*.yaml"))


def checked_stack_files(directory: Path = STACK_FILE_DIR) -> tuple[list[Path], bool]:
    """The stack files `make plan`, `make policy-check` and CI check when given none: the
    team's, or, while it has none yet, the kit's examples. Also says which (True: examples)."""
    team = [stack_file(name, directory) for name in stack_names(directory)]
    if team or not EXAMPLES_STAND_IN:
        return team, False
    return [stack_file(name, EXAMPLE_STACKS_DIR) for name in stack_names(EXAMPLE_STACKS_DIR)], True


def display_path(path: Path) -> str:
    """A stack file's path relative to the project when it is inside it (for messages)."""
    try:
        return str(path.resolve().relative_to(PROJECT_DIR))
    except ValueError:
        return str(path)


def stack_name_of(path: Path) -> str:
    """`Pulumi.<stack>.yaml` (or `.yml`) -> the stack's name; any other file: its stem."""
    name = path.name
    if name.startswith("Pulumi.") and name.endswith((".yaml", ".yml")):
        return name[len("Pulumi.") :].rsplit(".", 1)[0]
    return path.stem


def stack_path(stack_or_path: str | Path, directory: Path = STACK_FILE_DIR) -> Path:
    """The stack file of a stack name (`Pulumi.<stack>.yaml` in `directory`; in the team's
    stack directory, a name it does not have is the kit's example of that name, so a fresh
    clone's `dev` is examples/stacks/Pulumi.dev.yaml) or a path."""
    path = Path(stack_or_path)
    if path.suffix not in (".yaml", ".yml"):
        path = stack_file(str(stack_or_path), directory)
        example = stack_file(str(stack_or_path), EXAMPLE_STACKS_DIR)
        if (not path.exists() and directory == STACK_FILE_DIR and EXAMPLES_STAND_IN
                and example.exists()):
            path = example
    if not path.exists():
        known = ", ".join(stack_names(directory)) or "none"
        examples = (f"; the kit's examples: {', '.join(stack_names(EXAMPLE_STACKS_DIR))}"
                    if EXAMPLES_STAND_IN else "")
        raise FileNotFoundError(f"no stack file {path} (stacks: {known}{examples})")
    return path


_FAST_SAFE_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_stack_config(
    stack_or_path: str | Path, directory: Path = STACK_FILE_DIR
) -> dict[str, Any]:
    """The `config:` mapping of a stack file, by stack name or by path.

    Raises FileNotFoundError, or `StackFileError` (one line: file, line, column, fix) for a
    file that is not valid YAML or has no `config:` mapping.
    """
    path = stack_path(stack_or_path, directory)
    text = path.read_text(encoding="utf-8")
    try:
        # libyaml when present: the pure-Python parser took 12 s for a 1,000-job stack.
        with collector_paused():
            document = yaml.load(text, Loader=_FAST_SAFE_LOADER) or {}
    except yaml.YAMLError:
        try:  # the pure-Python parser's messages and marks, the ones _yaml_error words
            document = yaml.safe_load(text) or {}
        except yaml.YAMLError as exc:
            raise StackFileError(_yaml_error(path, exc)) from None
    if not isinstance(document, Mapping):
        raise StackFileError(f"{path} is not a YAML mapping. Fix: start it with 'config:'")
    config = document.get("config") or {}
    if not isinstance(config, Mapping):
        raise StackFileError(f"{path}: 'config' is not a mapping. Fix: indent the settings "
                             "under 'config:' as 'key: value' lines")
    values: dict[str, Any] = {}
    for key, value in config.items():
        if _is_secret(value):
            if str(key).rpartition(":")[0] in PROVIDER_NAMESPACES:
                continue  # the providers are mocked offline: their secrets are not needed
            raise StackFileError(
                f"{path}: {key} is a secret, which the offline plan and policy check cannot "
                "decrypt. Fix: give the kit's settings in plain text (none of them is secret)"
            )
        values[str(key)] = _unwrap_config_value(value)
    return values


def _yaml_error(path: Path, exc: yaml.YAMLError) -> str:
    """One line for a YAML syntax error: where, what, and how to fix it."""
    mark = getattr(exc, "problem_mark", None)
    where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(path)
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    context = getattr(exc, "context", None)
    what = f"{context}, {problem}" if context else problem
    opened = getattr(exc, "context_mark", None)
    if opened is not None and mark is not None and opened.line != mark.line:
        what += f" (the construct starts at line {opened.line + 1}, column {opened.column + 1})"
    if "\\t" in problem or "tab" in problem:
        fix = "indent with spaces, not tabs"
    else:
        fix = ("check that line and the one before: indent with spaces as the lines around it, "
               "put a space after each ':', and quote values that contain ': ' or '#' or start "
               "with '*', '&', '{' or '['")
    return f"{where}: not valid YAML: {what}. Fix: {fix}"


def _unwrap_config_value(value: Any) -> Any:
    """Stack files may write `key: {value: ...}`."""
    if isinstance(value, Mapping) and set(value) == {"value"}:
        return value["value"]
    return value


def _is_secret(value: Any) -> bool:
    """`key: {secure: <ciphertext>}`: only the Pulumi CLI can decrypt it."""
    return isinstance(value, Mapping) and set(value) == {"secure"}
