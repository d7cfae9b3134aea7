"""The policy pack without Pulumi's CLI or a cloud account: `python -m operator_tools policy-check`.

For every `Pulumi.<stack>.yaml` in the team's stack directory, `stacks/` (while it has none,
the kit's example stacks; or each `--stack` / `--stack-file`),
validate its config and import its job logic as the deployed function would
(`operator_tools.offline.load_checked_stack`), run the kit's Pulumi program under mocks
(operator_tools/offline.py), hand each declared resource's
camelCase inputs to the resource policies and the declared state of the whole stack to
the stack policies (as `pulumi preview --policy-pack policies` does), print each
violation with its policy, enforcement, resource and message, and exit non-zero if any
mandatory violation was found or a stack could not be declared at all.

Each stack is checked with the policy config CI's `pulumi up` passes it: the project's
`policies/policy-config.<stack>.json` when it exists (enforcement levels, settings such as
`deployers`), named on the stack's line; `--policy-config FILE` applies one file to every
stack instead.

Exit status: 0 clean (advisory violations allowed), 1 mandatory violations, 2 a stack
that cannot be checked (invalid config, program error, no stack file).
"""

from __future__ import annotations

import argparse
import sys
import traceback
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol, TextIO

from infra import PROJECT_DIR
from policies import scheduler
from policies.evaluate import (
    PolicyConfigError,
    Settings,
    Violation,
    evaluate,
    load_pack_config,
    mandatory,
)
from policies.model import Enforcement, Resource, ResourcePolicy
from policies.registry import ALL_POLICIES

EXIT_OK = 0
EXIT_VIOLATIONS = 1
EXIT_ERROR = 2


class Declared(Protocol):
    """What operator_tools.offline.DeclaredResource provides (inputs and the mocked state)."""

    @property
    def type(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def urn(self) -> str: ...
    @property
    def props(self) -> Mapping[str, Any]: ...
    @property
    def parent(self) -> str | None: ...
    @property
    def outputs(self) -> Mapping[str, Any]: ...
    @property
    def dependencies(self) -> tuple[str, ...]: ...


@dataclass
class StackReport:
    stack: str
    path: Path
    resources: int = 0
    violations: list[Violation] = field(default_factory=list)
    error: str | None = None
    policy_config: Path | None = None  # the --policy-pack-config file applied, if any

    @property
    def failed(self) -> bool:
        return self.error is not None or bool(mandatory(self.violations))


def stack_name(path: Path) -> str:
    from operator_tools.offline import stack_name_of  # the program needs pulumi_gcp

    return stack_name_of(path)


def stack_files(directory: Path = PROJECT_DIR) -> list[Path]:
    """`Pulumi.<stack>.yaml` files (not the project file `Pulumi.yaml`), by name."""
    return sorted(p for p in directory.glob("Pulumi.*.y*ml") if p.suffix in (".yaml", ".yml"))


DstChosen = Mapping[str, frozenset[str]]
"""Each Scheduler job ID -> the DST behaviours its stack file chose (OfflineRun.dst_chosen)."""


def check_declared(
    declared: Iterable[Declared],
    levels: Mapping[str, Enforcement] | None = None,
    settings: Settings | None = None,
    dst_chosen: DstChosen | None = None,
) -> list[Violation]:
    """The offline check's core: the pack's policies over resources declared under mocks.

    Resource policies get each resource's inputs, stack policies each resource's state
    (inputs plus the outputs the mocks computed), as the CLI's Analyze and AnalyzeStack.
    The DST advisory leaves out what `dst_chosen` says the stack file chose: the pack under
    the CLI sees only the declared job, whose headers carry the choice in force either way.
    """
    items = list(declared)
    inputs = [Resource(d.type, d.name, d.urn, d.props, d.parent) for d in items]
    state = [
        Resource(d.type, d.name, d.urn, d.outputs or d.props, d.parent, tuple(d.dependencies))
        for d in items
    ]
    policies = ALL_POLICIES
    if dst_chosen:
        policies = tuple(
            replace(p, check=scheduler.dst_changes_unless_chosen(dst_chosen))
            if isinstance(p, ResourcePolicy) and p.name == scheduler.DST_POLICY else p
            for p in ALL_POLICIES)
    return evaluate(inputs, levels, policies, stack_resources=state, settings=settings)


def declare(path: Path) -> tuple[list[Declared], DstChosen]:
    """Run the Pulumi program under mocks with the stack file's config, once the config is
    valid and every job's logic imports: what it declared, and the DST choices it made."""
    from operator_tools.offline import run_checked_stack  # the program needs pulumi_gcp

    run = run_checked_stack(path)
    return list(run.resources), run.dst_chosen


def check_stack_file(
    path: Path,
    levels: Mapping[str, Enforcement] | None = None,
    settings: Settings | None = None,
) -> StackReport:
    report = StackReport(stack_name(path), path)
    try:
        declared, dst_chosen = declare(path)
    except Exception as exc:  # a config error, or the program failing: report, don't crash
        report.error = _describe(exc)
        return report
    report.resources = len(declared)
    report.violations = check_declared(declared, levels, settings, dst_chosen)
    return report


def check_with_config(path: Path, policy_config: Path | None) -> StackReport:
    """check_stack_file with the levels and settings of `policy_config`, as `pulumi up
    --policy-pack-config <policy_config>` applies them (none: every policy as declared)."""
    levels: Mapping[str, Enforcement] = {}
    settings: Settings = {}
    if policy_config is not None:
        try:
            config = load_pack_config(policy_config)
        except (OSError, PolicyConfigError) as exc:
            return StackReport(stack_name(path), path, error=f"policy config: {exc}",
                               policy_config=policy_config)
        levels, settings = config.levels, config.settings
    report = check_stack_file(path, levels, settings)
    report.policy_config = policy_config
    return report


def _describe(exc: BaseException) -> str:
    from infra.config import ConfigError

    if isinstance(exc, ConfigError):
        return str(exc)  # "invalid stack config: <key>: ...", before any resource
    if isinstance(exc, FileNotFoundError | ValueError):
        return str(exc)
    return "the program failed under mocks:\n" + "".join(traceback.format_exception(exc)).rstrip()


def _shown(path: Path) -> Path:
    """A path relative to the project when it is inside it (for messages)."""
    try:
        return path.resolve().relative_to(PROJECT_DIR)
    except ValueError:
        return path


def print_report(report: StackReport, out: TextIO) -> None:
    shown = _shown(report.path)
    if report.error is not None:
        print(f"stack {report.stack} ({shown}): ERROR {report.error}", file=out)
        return
    must = mandatory(report.violations)
    config = ("" if report.policy_config is None
              else f", policy config {_shown(report.policy_config)}")
    print(
        f"stack {report.stack} ({shown}{config}): {report.resources} resources, "
        f"{len(must)} mandatory and {len(report.violations) - len(must)} advisory violation(s)",
        file=out,
    )
    for v in report.violations:
        print(f"  [{v.enforcement.value}] {v.policy}: {v.resource}", file=out)
        print(f"      {v.message}", file=out)


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    parser = argparse.ArgumentParser(
        prog="scheduler-dedup policy-check",
        description="Run the CrossGuard policies against every stack under Pulumi's mocks.",
    )
    parser.add_argument(
        "--stack-file",
        action="append",
        type=Path,
        default=[],
        help="check this stack file instead of every Pulumi.<stack>.yaml (repeatable)",
    )
    parser.add_argument(
        "--stack",
        action="append",
        default=[],
        help="check Pulumi.<STACK>.yaml of the repository root (repeatable; make "
        "policy-check STACK=<name>)",
    )
    parser.add_argument(
        "--policy-config",
        type=Path,
        help="a --policy-pack-config JSON file (enforcement levels per policy, or 'all'; "
        "settings such as deployers per policy) for every stack, instead of each stack's "
        "policies/policy-config.<stack>.json",
    )
    args = parser.parse_args(argv)

    if args.policy_config is not None:
        try:
            load_pack_config(args.policy_config)
        except (OSError, PolicyConfigError) as exc:
            print(f"policy config: {exc}", file=out)
            return EXIT_ERROR

    from operator_tools.stack_files import (
        STACK_FILE_DIR,
        checked_stack_files,
        display_path,
        stack_name_of,
        stack_path,
        stack_policy_config,
    )

    try:
        paths = [*args.stack_file, *(stack_path(name) for name in args.stack)]
    except FileNotFoundError as exc:
        print(f"policy check: {exc}", file=out)
        return EXIT_ERROR
    if not paths:
        paths, examples = checked_stack_files()
        if examples:
            print(f"no Pulumi.<stack>.yaml in {display_path(STACK_FILE_DIR)}/ yet: checking the "
                  "kit's example stacks", file=out)
    if not paths:
        print(f"no Pulumi.<stack>.yaml in {STACK_FILE_DIR}: nothing to check", file=out)
        return EXIT_ERROR

    reports = [check_with_config(p, args.policy_config or stack_policy_config(stack_name_of(p)))
               for p in paths]
    for report in reports:
        print_report(report, out)
    errors = sum(r.error is not None for r in reports)
    must = sum(len(mandatory(r.violations)) for r in reports)
    print(
        f"policy check: {len(reports)} stack(s), {len(ALL_POLICIES)} policies, "
        f"{must} mandatory violation(s), {errors} stack(s) not checkable",
        file=out,
    )
    if errors:
        return EXIT_ERROR
    return EXIT_VIOLATIONS if must else EXIT_OK


if __name__ == "__main__":  # the entry point it was: say where it went, and fail
    raise SystemExit("run `scheduler-dedup policy-check` (or the make target that calls it)")
