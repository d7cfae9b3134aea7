"""Resolve every job's `module:function` offline, as the deployed function does at start-up.

The dedup function imports each job's logic (`jobLogic`, else `defaultJobLogic`) once per
instance with `function/` first on `sys.path` (function/dedup/job_logic.py). A typo there
would deploy cleanly and then fail every delivery; `make plan` and `make policy-check`
call `check_job_logic` so it fails before anything is deployed instead.

The imports run in one subprocess per stack, with the same Python (the kit's virtualenv,
which holds the function's requirements), `function/` as working directory and first on
`sys.path`, and nothing of the repository root importable: what imports there imports in
the function. A missing module or attribute is reported as a `ConfigError` naming the
config key, what is missing and the closest match (among the modules in `function/jobs/`
or the module's attributes).
"""

from __future__ import annotations

import difflib
import json
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from infra.config import ConfigError, Problem, StackConfig, kit_key
from infra.program import DEFAULT_SOURCE_DIR

JOBS_PACKAGE: Final = "jobs"
"""The package in `function/` that holds the team's job modules."""
IMPORT_TIMEOUT_SECONDS: Final = 120

# Runs in the function's environment: argv[1] is a JSON list of `module:function` specs;
# prints one JSON object: spec -> null (resolves to a callable) or what went wrong.
_RESOLVER = r"""
import importlib, json, sys
results = {}
for spec in json.loads(sys.argv[1]):
    module_name, _, attribute = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        missing = exc.name or module_name
        own = module_name == missing or module_name.startswith(missing + ".")
        results[spec] = {"missing": "module" if own else "dependency", "name": missing}
        continue
    except BaseException as exc:
        results[spec] = {"missing": "import", "name": module_name,
                         "error": f"{type(exc).__name__}: {exc}"}
        continue
    found = getattr(module, attribute, None)
    if callable(found):
        results[spec] = None
    else:
        names = sorted(n for n, v in vars(module).items() if not n.startswith("_")
                       and callable(v) and getattr(v, "__module__", None) == module_name)
        results[spec] = {"missing": "attribute" if found is None else "callable",
                         "name": attribute, "attributes": names}
print(json.dumps(results))
"""


@dataclass(frozen=True)
class JobLogicUse:
    """One config key that names job logic, and the `module:function` it names."""

    key: str
    spec: str


def job_logic_uses(values: Mapping[str, Any], config: StackConfig) -> list[JobLogicUse]:
    """The keys whose `module:function` the deployed function imports: each job's own
    `jobLogic`, and `defaultJobLogic` once if some job (not proxied) falls back to it.

    `values` is the stack's raw config mapping (to tell a job's own jobLogic from the
    default it took), `config` the same validated.
    """
    raw_jobs = values.get(kit_key("jobs"))
    if isinstance(raw_jobs, str):  # the engine's JSON form
        raw_jobs = json.loads(raw_jobs)
    uses: list[JobLogicUse] = []
    default_used = False
    for index, job in enumerate(config.jobs):
        if job.proxy is not None:
            continue
        raw = raw_jobs[index] if isinstance(raw_jobs, list) and index < len(raw_jobs) else {}
        if isinstance(raw, Mapping) and raw.get("jobLogic"):
            uses.append(JobLogicUse(kit_key(f"jobs[{index}].jobLogic"), job.job_logic))
        else:
            default_used = True
    if default_used:
        uses.append(JobLogicUse(kit_key("defaultJobLogic"), config.dedup.default_job_logic))
    return uses


def job_modules(source_dir: Path = DEFAULT_SOURCE_DIR) -> list[str]:
    """The modules under `function/jobs/` (subpackages too), as `jobs.<name>`."""
    found: set[str] = set()
    for path in (source_dir / JOBS_PACKAGE).rglob("*.py"):
        parts = path.relative_to(source_dir).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if len(parts) > 1 and "__pycache__" not in parts:
            found.add(".".join(parts))
    return sorted(found)


def resolve_specs(
    specs: Sequence[str], source_dir: Path = DEFAULT_SOURCE_DIR, python: str = sys.executable
) -> dict[str, dict[str, Any] | None]:
    """Import each `module:function` in the function's environment (one subprocess):
    spec -> None when it names a callable, else what is missing."""
    # `python -c` in function/ puts function/ first on sys.path, as the function's runtime
    # has it; without PYTHONPATH nothing of the repository root is importable.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = subprocess.run(
        [python, "-c", _RESOLVER, json.dumps(sorted(set(specs)))],
        cwd=source_dir,
        env=env,
        capture_output=True,
        text=True,
        timeout=IMPORT_TIMEOUT_SECONDS,
        check=False,
    )
    if result.returncode != 0 or not result.stdout.strip():
        raise RuntimeError(
            f"resolving job logic in {source_dir} failed: {result.stderr.strip()[-2000:]}"
        )
    resolved: dict[str, dict[str, Any] | None] = json.loads(result.stdout.strip().splitlines()[-1])
    return resolved


def _problem(use: JobLogicUse, found: Mapping[str, Any], source_dir: Path) -> Problem:
    module_name, _, attribute = use.spec.partition(":")
    where = source_dir.name or "function"
    kind, name = found["missing"], str(found["name"])
    if kind == "module":
        close = difflib.get_close_matches(module_name, job_modules(source_dir), n=1)
        guess = f"did you mean {close[0]}:{attribute}? " if close else ""
        return Problem(
            use.key,
            f"{use.spec!r}: no module {name!r} in {where}/",
            f"{guess}name a module of {where}/{JOBS_PACKAGE}/ "
            f"({', '.join(job_modules(source_dir)) or 'none yet'}), as 'module:function'",
        )
    if kind == "dependency":
        return Problem(
            use.key,
            f"{use.spec!r}: importing {module_name} needs {name!r}, which is not installed",
            f"add the package that provides {name!r} to the function's requirements and "
            "rebuild the virtualenv",
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


def check_job_logic(
    values: Mapping[str, Any],
    config: StackConfig,
    source_dir: Path = DEFAULT_SOURCE_DIR,
    python: str = sys.executable,
) -> None:
    """Raise `ConfigError` naming every job-logic key whose `module:function` the deployed
    function could not import (see the module docstring)."""
    uses = job_logic_uses(values, config)
    if not uses:
        return
    resolved = resolve_specs([u.spec for u in uses], source_dir, python)
    problems = [
        _problem(use, found, source_dir)
        for use in uses
        if (found := resolved.get(use.spec)) is not None
    ]
    if problems:
        raise ConfigError(problems)
