"""Start-up parity: every function the program declares is started offline as Cloud Run would
start it, so what `make plan` and `make policy-check` accept starts once deployed.

`check_job_logic` (called by both, through `operator_tools.offline.run_checked_stack`) takes
the program's run under its mocks and:

- refuses a team lock that `make lock` would write differently (the archives' requirements):
  resolved again, as `make lock` resolves it (operator_tools/lock.py), and refused, saying
  so, when the package index cannot be reached;
- names the config keys whose `module:function` the deployed dedup function imports
  (`job_logic_uses`: each job's own `jobLogic`, and `defaultJobLogic` when it is used);
- starts every declared function from its own archive, environment and Python (the one
  of its archive's lock: operator_tools/function_startup.py), the job-running ones
  (handle_scheduled_job) after importing one by one those of the specs its own job table
  routes to (a runtime's archive holds only its own jobs' modules);

and raises one `ConfigError`: each bad spec under its config key (`jobs[2].jobLogic`,
`defaultJobLogic`) with what is missing and the closest match (among the modules in
`function/jobs/` or the module's attributes), and each function whose start-up raises,
named with what failed and the fix: a package the kit's dev virtualenv has but the
archive's requirements.txt lacks (`No module named 'yaml'`), a deleted module that is still
imported, a setting the function refuses.
"""

from __future__ import annotations

import difflib
import importlib.util
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from dedup.settings import DEFAULT_JOB_ENV
from infra.config import ConfigError, Problem, StackConfig, kit_key
from infra.dedup_service import ENTRY_POINT as JOB_LOGIC_ENTRY_POINT
from infra.lock import FIX as LOCK_FIX
from infra.lock import TEAM_LOCK, LockError
from infra.program import DEFAULT_SOURCE_DIR, DEFAULT_TEAM_DIR
from infra.source import JOB_ROUTES_TABLE, KIT_CODE, read_archive_table
from operator_tools.declared import OfflineRun
from operator_tools.function_startup import (
    REQUIREMENTS_FILE,
    DeclaredStartup,
    declared_startups,
    start_functions,
)
from operator_tools.lock import verify_team_lock

JOBS_PACKAGE: Final = "jobs"
"""The package in `function/` that holds the team's job modules."""
EXAMPLE_JOBS_PACKAGE: Final = "example_jobs"
"""The kit's example job modules (the default jobLogic, the demo's failing job)."""
FIX_DEPENDENCY: Final = (
    "add the package that provides it to function/jobs/requirements.in and run `make lock`"
)
FIX_KIT_DEPENDENCY: Final = (
    "add the package that provides it to the kit's function/requirements.in and run "
    "`make lock-kit` (kit maintainers)"
)

# Runs in the function's environment: argv[1] names a JSON file of the functions to start


@dataclass(frozen=True)
class JobLogicUse:
    """One config key that names job logic, and the `module:function` it names."""

    key: str
    spec: str


def job_logic_uses(values: Mapping[str, Any], config: StackConfig) -> list[JobLogicUse]:
    """The keys whose `module:function` the deployed dedup function imports: each job's own
    `jobLogic`, and `defaultJobLogic` once if some job (not proxied) falls back to it, or if
    no job is left to route (the function, with no routes, imports it to run every job:
    function/dedup/job_logic.py `scheduled_jobs`).

    `values` is the stack's raw config mapping (to tell a job's own jobLogic from the
    default it took), `config` the same validated.
    """
    raw_jobs = values.get(kit_key("jobs"))
    if isinstance(raw_jobs, str):  # the engine's JSON form
        raw_jobs = json.loads(raw_jobs)
    uses: list[JobLogicUse] = []
    routed = default_used = False
    for index, job in enumerate(config.jobs):
        if job.proxy is not None or job.service is not None:  # no job logic of the kit's
            continue
        routed = True
        raw = raw_jobs[index] if isinstance(raw_jobs, list) and index < len(raw_jobs) else {}
        if isinstance(raw, Mapping) and raw.get("jobLogic"):
            uses.append(JobLogicUse(kit_key(f"jobs[{index}].jobLogic"), job.job_logic))
        else:
            default_used = True
    if default_used or not routed:
        uses.append(JobLogicUse(kit_key("defaultJobLogic"), config.dedup.default_job_logic))
    return uses


def job_modules(
    source_dir: Path = DEFAULT_SOURCE_DIR, team_dir: Path | None = DEFAULT_TEAM_DIR
) -> list[str]:
    """The modules under `function/jobs/` (the team's function/, `team_dir`; unset: in
    `source_dir`) and the kit's `function/example_jobs/` (subpackages too), as
    `jobs.<name>` and `example_jobs.<name>`."""
    found: set[str] = set()
    roots = ((team_dir or source_dir, JOBS_PACKAGE), (source_dir, EXAMPLE_JOBS_PACKAGE))
    paths = [(root, p) for root, package in roots for p in (root / package).rglob("*.py")]
    for root, path in paths:
        parts = path.relative_to(root).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if len(parts) > 1 and "__pycache__" not in parts:
            found.add(".".join(parts))
    return sorted(found)


# --------------------------------------------------------------------------- problems


def _fix_missing(name: str, source_dir: Path | None) -> str:
    """How to make missing module `name` importable: restore it if function/ (`source_dir`)
    is where it lived, else add its package to the function's requirements."""
    top = name.split(".")[0]
    if source_dir is not None and (
        (source_dir / top).exists() or (source_dir / f"{top}.py").exists()
    ):
        return f"{name!r} is part of function/ itself: restore it, or stop importing it"
    dev_only = importlib.util.find_spec(top) is not None
    where = " (the kit's dev virtualenv has it; the function does not)" if dev_only else ""
    return f"{FIX_DEPENDENCY}{where}"


def _fix_missing_in_kit_code(name: str, source_dir: Path) -> str:
    """How to make missing module `name` importable in a function that runs no job logic
    (the proxy, the watchdog), whose archive is the kit's code and the kit's lock alone
    (infra/source.py): never the team's jobs, the kit's example jobs or the team's lock."""
    top = name.split(".")[0]
    if (source_dir / top).exists() or (source_dir / f"{top}.py").exists():
        return (f"{name!r} is in function/ but not in this function's archive, which holds "
                f"only the kit's code ({', '.join(KIT_CODE)}) and lock: this function runs "
                "no job logic, so its code must not import it")
    dev_only = importlib.util.find_spec(top) is not None
    where = " (the kit's dev virtualenv has it; the function does not)" if dev_only else ""
    return (f"{FIX_KIT_DEPENDENCY}: this function runs no job logic and installs the kit's "
            f"lock alone, never function/jobs/requirements.txt{where}")


def _spec_problem(
    use: JobLogicUse, found: Mapping[str, Any], source_dir: Path, team_dir: Path | None
) -> Problem:
    module_name, _, attribute = use.spec.partition(":")
    where = source_dir.name or "function"
    kind, name = found["missing"], str(found["name"])
    modules = job_modules(source_dir, team_dir)
    close = difflib.get_close_matches(module_name, modules, n=1)
    if (kind == "module" and name == JOBS_PACKAGE and not close
            and not ((team_dir or source_dir) / JOBS_PACKAGE).is_dir()):
        module = module_name.split(".")[1] if "." in module_name else "<module>"
        return Problem(
            use.key,
            f"{use.spec!r}: no module {name!r} in {where}/",
            f"{where}/{JOBS_PACKAGE}/ does not exist yet: `make new-job NAME={module}` writes "
            f"{JOBS_PACKAGE}.{module} and its test",
        )
    if kind == "module":
        guess = f"did you mean {close[0]}:{attribute}? " if close else ""
        return Problem(
            use.key,
            f"{use.spec!r}: no module {name!r} in {where}/",
            f"{guess}name a module of {where}/{JOBS_PACKAGE}/ "
            f"({', '.join(modules) or 'none yet'}), as 'module:function'",
        )
    if kind == "dependency":
        return Problem(
            use.key,
            f"{use.spec!r}: importing {module_name} needs {name!r}, which "
            f"{where}/{REQUIREMENTS_FILE} does not install",
            _fix_missing(name, None),
        )
    if kind == "import":
        return Problem(
            use.key,
            f"{use.spec!r}: importing {module_name} failed ({found.get('error')})",
            f"fix {module_name} so that it imports",
        )
    attributes = [str(a) for a in found.get("attributes") or []]
    close = difflib.get_close_matches(attribute, attributes, n=1)
    guess = f"did you mean {module_name}:{close[0]}? " if close else ""
    what = "no attribute" if kind == "attribute" else "a non-callable"
    return Problem(
        use.key,
        f"{use.spec!r}: module {module_name} has {what} {attribute!r}",
        f"{guess}name a function of {module_name} "
        f"({', '.join(attributes) or 'it defines none'})",
    )


def _startup_problem(
    startup: DeclaredStartup, failed: Mapping[str, Any], source_dir: Path
) -> Problem:
    missing = failed.get("missing")
    if missing and startup.entry_point != JOB_LOGIC_ENTRY_POINT:
        fix = _fix_missing_in_kit_code(str(missing), source_dir)
        message = f"does not start: importing {missing!r} fails ({failed['error']})"
    elif missing:
        fix = _fix_missing(str(missing), source_dir)
        message = f"does not start: importing {missing!r} fails ({failed['error']})"
    else:
        fix = "fix what the error names: the function runs this at every cold start"
        message = f"does not start: {failed['error']}"
    return Problem(startup.key, message, fix)


def _imported_specs(startup: DeclaredStartup) -> set[str]:
    """The `module:function` specs a job-running function imports at start: its job
    table's routes, or DEDUP_JOB when it has none (function/dedup/job_logic.py
    `scheduled_jobs`). A runtime's archive carries only its own jobs' modules: another
    runtime's spec is not importable there, and not asked of it."""
    routes = json.loads(read_archive_table(startup.archive, JOB_ROUTES_TABLE) or "{}")
    if routes:
        return {str(spec) for spec in routes.values()}
    return {startup.environment[DEFAULT_JOB_ENV]} if DEFAULT_JOB_ENV in startup.environment \
        else set()


def check_job_logic(
    values: Mapping[str, Any],
    config: StackConfig,
    run: OfflineRun,
    source_dir: Path = DEFAULT_SOURCE_DIR,
) -> None:
    """Raise `ConfigError` naming every job-logic key whose `module:function` the deployed
    function could not import, and every declared function that would not start (see the
    module docstring). `values` is the stack's config mapping, `config` the same validated,
    `run` the program's run under mocks for it (operator_tools.offline.run_offline), whose
    archives were built from `source_dir`."""
    # The team's function/ is the one the program's archives took theirs from (its default).
    team_dir = DEFAULT_TEAM_DIR
    try:
        stale = verify_team_lock((team_dir or source_dir).parent, source_dir.parent)
    except LockError as exc:  # not verified (the index unreachable: IndexUnreachable) is not passed
        raise ConfigError([Problem(str(TEAM_LOCK), exc.what, exc.fix)]) from exc
    if stale:  # the archive's requirements.txt would not be what make lock would write
        raise ConfigError([Problem(str(TEAM_LOCK), what, LOCK_FIX) for what in stale])
    uses = job_logic_uses(values, config)
    startups = [
        DeclaredStartup(s.resource, s.function_name, s.entry_point, s.archive, s.environment,
                        tuple(u.spec for u in uses if u.spec in _imported_specs(s)))
        if s.entry_point == JOB_LOGIC_ENTRY_POINT else s
        for s in declared_startups(run.resources)
    ]
    if not startups:
        return
    results = start_functions(startups)
    unresolved = {u.spec for u in uses} - set(results.specs)
    if unresolved:  # the program declared no function that runs job logic
        raise RuntimeError(f"no declared {JOB_LOGIC_ENTRY_POINT} function imported {unresolved}")
    problems = [
        _spec_problem(use, found, source_dir, team_dir)
        for use in uses
        if (found := results.specs.get(use.spec)) is not None
    ]
    for startup, failed in zip(startups, results.functions, strict=True):
        # A job-logic problem above is why its function fails: named once, by its key.
        if failed is not None and not (problems and startup.specs):
            problems.append(_startup_problem(startup, failed, source_dir))
    if problems:
        raise ConfigError(problems)
