"""Start-up parity: every function the program declares is started offline as Cloud Run would
start it, so what `make plan` and `make policy-check` accept starts once deployed.

`check_job_logic` (called by both, through `operator_tools.offline.load_checked_stack`) runs the
program under its mocks, and for each declared Cloud Run function takes:

- the very source archive the program declared for it (its `buildConfig.source` object's
  FileAsset), unpacked: the code, and whatever else travels in the archive (job tables);
- its declared environment (`serviceConfig.environmentVariables`; each secret environment
  variable gets a placeholder of the secret's shape), plus what the platform sets
  (FUNCTION_TARGET, K_SERVICE, PORT, ...) and a stand-in for the runtime account's
  credentials (no network is used);
- a Python environment built only from the archive's `requirements.txt`, hash-checked as
  Cloud Build installs it (`function_python`: a virtualenv cached per lock, built once).

In one subprocess per stack, each function is then started by functions-framework itself
(`create_app`: main.py imported with the entry point as target, the archive's directory
appended to `sys.path`, as the runtime does), each from a clean slate (none of the
archives' modules left imported, only its own environment). A start-up that raises fails
the plan as a `ConfigError` naming the function, what failed, and the fix: a package the
kit's dev virtualenv has but the archive's requirements.txt lacks (`No module named 'yaml'`),
a deleted module that is still imported, a setting the function refuses.

Before its start-up, the function that runs job logic (handle_scheduled_job) imports each
spec the stack names, one by one, so that each bad one is reported under its config key
(`jobs[2].jobLogic`, `defaultJobLogic`) with what is missing and the closest match (among
the modules in `function/jobs/` or the module's attributes).
"""

from __future__ import annotations

import difflib
import functools
import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from infra import PROJECT_DIR
from infra.cloud_function import FUNCTION_RUNTIME
from infra.config import ConfigError, Problem, StackConfig, kit_key
from infra.dedup_service import ENTRY_POINT as JOB_LOGIC_ENTRY_POINT
from infra.lock import FIX as LOCK_FIX
from infra.lock import TEAM_LOCK, lock_problems
from infra.program import DEFAULT_BUILD_DIR, DEFAULT_SOURCE_DIR, DEFAULT_TEAM_DIR

if TYPE_CHECKING:
    from operator_tools.offline import DeclaredResource, OfflineRun

JOBS_PACKAGE: Final = "jobs"
"""The package in `function/` that holds the team's job modules."""
EXAMPLE_JOBS_PACKAGE: Final = "example_jobs"
"""The kit's example job modules (the default jobLogic, the demo's failing job)."""
REQUIREMENTS_FILE: Final = "requirements.txt"
"""What Cloud Build installs for a Python function: the file beside main.py."""
STARTUP_TIMEOUT_SECONDS: Final = 120
VENV_BUILD_TIMEOUT_SECONDS: Final = 900
FUNCTION_VENVS_DIR: Final = PROJECT_DIR / ".cache" / "function-venv"
"""The cached virtualenvs, one per (requirements.txt, Python version): gitignored."""
MIN_PIP: Final = "24"
"""The oldest pip that installs a hash-pinned lock with extras (see `_build_venv`)."""
FUNCTION_TYPE: Final = "gcp:cloudfunctionsv2/function:Function"
SOURCE_OBJECT_TYPE: Final = "gcp:storage/bucketObject:BucketObject"
FIX_DEPENDENCY: Final = (
    "add the package that provides it to function/jobs/requirements.in and run `make lock`"
)

# Runs in the function's environment: argv[1] names a JSON file of the functions to start
# (archive, entry point, environment, and for the job-running one the `module:function`
# specs to import first); argv[2] the JSON file it writes: per spec null (resolves to a
# callable) or what went wrong, per function null (started) or the error.
_STARTER = r"""
import importlib, json, os, sys

with open(sys.argv[1], encoding="utf-8") as plan_file:
    functions = json.load(plan_file)
archives = [function["archive"] for function in functions]
platform_env = dict(os.environ)
interpreter_path = list(sys.path)


def from_archive(module):
    places = [getattr(module, "__file__", None), *(getattr(module, "__path__", None) or [])]
    return any(str(place).startswith(archive + os.sep) for place in places if place
               for archive in archives)


def fresh_instance(function):
    # As a new instance of this function: none of any archive's modules imported (what one
    # function imported must not satisfy another's imports), its own environment alone.
    for name in [n for n, m in list(sys.modules.items()) if n == "main" or from_archive(m)]:
        del sys.modules[name]
    sys.path[:] = interpreter_path
    importlib.invalidate_caches()
    os.environ.clear()
    os.environ.update(platform_env)
    os.environ.update(function["environment"])
    os.chdir(function["archive"])


def missing_module(error):
    while error is not None:
        if isinstance(error, ModuleNotFoundError):
            return error.name
        error = error.__cause__ or error.__context__
    return None


def resolve(spec):
    module_name, _, attribute = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        missing = exc.name or module_name
        own = module_name == missing or module_name.startswith(missing + ".")
        return {"missing": "module" if own else "dependency", "name": missing}
    except BaseException as exc:
        return {"missing": "import", "name": module_name, "error": f"{type(exc).__name__}: {exc}"}
    found = getattr(module, attribute, None)
    if callable(found):
        return None
    names = sorted(n for n, v in vars(module).items() if not n.startswith("_")
                   and callable(v) and getattr(v, "__module__", None) == module_name)
    return {"missing": "attribute" if found is None else "callable", "name": attribute,
            "attributes": names}


import functions_framework

results = {"specs": {}, "functions": []}
for function in functions:
    if function["specs"]:
        fresh_instance(function)
        sys.path.append(function["archive"])  # where functions-framework puts it
        results["specs"].update({spec: resolve(spec) for spec in function["specs"]})
    fresh_instance(function)
    try:
        functions_framework.create_app(
            function["entry_point"], os.path.join(function["archive"], "main.py")
        )
        results["functions"].append(None)
    except BaseException as exc:
        results["functions"].append({
            "error": f"{type(exc).__name__}: {exc}"[:2000], "missing": missing_module(exc),
        })
with open(sys.argv[2], "w", encoding="utf-8") as results_file:
    json.dump(results, results_file)
sys.stdout.flush()
os._exit(0)  # a client a start-up left running must not hold the plan
"""


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
        if job.proxy is not None:
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


# --------------------------------------------------------------------------- the venv


def _runtime_python_name(runtime: str = FUNCTION_RUNTIME) -> str:
    """"python312" (the functions' runtime) -> "python3.12"."""
    digits = runtime.removeprefix("python")
    return f"python{digits[0]}.{digits[1:]}"


@functools.cache  # once per plan: a pyenv shim takes a fifth of a second to answer
def _version_tag(python: str) -> str | None:
    """"311" for a working Python 3.11 at `python`; None if it does not run (a pyenv shim
    of a version that is not selected)."""
    try:
        probe = subprocess.run(
            [python, "-c", "import sys; print(f'{sys.version_info[0]}{sys.version_info[1]}')"],
            capture_output=True, text=True, timeout=30, check=False,
        )
    except OSError:
        return None
    return probe.stdout.strip() if probe.returncode == 0 else None


def function_python(requirements: Path, venvs_dir: Path = FUNCTION_VENVS_DIR) -> Path:
    """The interpreter of a virtualenv that holds what `requirements` pins and nothing else,
    installed as Cloud Build installs it (pip, hash-checked); built on first use, then reused
    while the lock is unchanged (`<venvs_dir>/<sha256 of the lock>-py<version>/`).

    Python is the functions' runtime version: the one running this if it is that version,
    else that version's on PATH, else the one running this (the lock, made for Linux and
    the runtime's version, installs on 3.11 too).
    """
    digest = hashlib.sha256(requirements.read_bytes()).hexdigest()[:16]
    runtime_tag = _runtime_python_name().removeprefix("python").replace(".", "")
    runtime_venv = venvs_dir / f"{digest}-py{runtime_tag}"
    if (runtime_venv / "bin" / "python").exists():
        return runtime_venv / "bin" / "python"
    own_tag = f"{sys.version_info[0]}{sys.version_info[1]}"
    if own_tag == runtime_tag:  # the tools run on the runtime's version (the Makefile's)
        return _build_venv(sys.executable, requirements, runtime_venv)
    runtime = shutil.which(_runtime_python_name())
    if runtime is not None and _version_tag(runtime) == runtime_tag:
        return _build_venv(runtime, requirements, runtime_venv)
    _warn_other_python(_runtime_python_name(), f"{sys.version_info[0]}.{sys.version_info[1]}")
    return _build_venv(sys.executable, requirements, venvs_dir / f"{digest}-py{own_tag}")


@functools.cache  # said once per plan, not once per stack
def _warn_other_python(runtime: str, own: str) -> None:
    print(
        f"warning: {runtime} (the functions' runtime) does not run here: the functions' "
        f"start-up is checked with Python {own}, so an import the runtime's Python lacks "
        f"(distutils, imp) is not caught. Fix: install {runtime} on PATH",
        file=sys.stderr,
    )


def _build_venv(base_python: str, requirements: Path, venv: Path) -> Path:
    python = venv / "bin" / "python"
    if python.exists():
        return python
    # Built aside and renamed into place once complete: a venv that exists is whole, and two
    # plans building it at once both end with one (bin/python runs from any path).
    venv.parent.mkdir(parents=True, exist_ok=True)
    building = Path(tempfile.mkdtemp(prefix=f".{venv.name}.", dir=venv.parent))
    print(f"building the functions' Python environment from {requirements} in {venv} "
          "(once per lock)", file=sys.stderr, flush=True)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    try:
        pip = [str(building / "bin" / "python"), "-m", "pip", "install", "--quiet",
               "--disable-pip-version-check", "--no-input"]
        for argv in (
            [base_python, "-m", "venv", str(building)],
            # The pip that Python 3.11's venv bundles (23.2) refuses the lock in hash-checking
            # mode: it takes the pinned google-api-core for unpinned once wanted with its
            # [grpc] extra (pypa/pip#12345, fixed in pip 24). The installer, not the function.
            [*pip, "--upgrade", f"pip>={MIN_PIP}"],
            [*pip, "--require-hashes", "-r", str(requirements)],
        ):
            result = subprocess.run(
                argv, env=env, capture_output=True, text=True,
                timeout=VENV_BUILD_TIMEOUT_SECONDS, check=False,
            )
            if result.returncode != 0:
                raise RuntimeError(
                    f"building the functions' Python environment failed ({' '.join(argv)}): "
                    f"{(result.stderr or result.stdout).strip()[-2000:]}"
                )
        try:
            building.rename(venv)
        except OSError:
            if not python.exists():
                raise
    finally:
        shutil.rmtree(building, ignore_errors=True)
    return python


# --------------------------------------------------------------------------- the functions


@dataclass(frozen=True)
class DeclaredStartup:
    """What one declared function starts from."""

    resource: str
    """The function's Pulumi name (`dedup-function`)."""
    function_name: str
    entry_point: str
    archive: Path
    """The zip its source object uploads."""
    environment: Mapping[str, str]
    """Its declared environment, secrets as placeholders, with what the platform sets."""
    specs: tuple[str, ...] = field(default=())
    """The job logic it imports before its start-up (the job-running function's)."""

    @property
    def key(self) -> str:
        return f"function {self.function_name} ({self.resource}, {self.entry_point})"


def secret_placeholder(secret: str) -> str:
    """A stand-in for a secret's value, of its shape (the stack's secrets are 64 characters)."""
    return hashlib.sha256(f"offline placeholder of {secret}".encode()).hexdigest()


def platform_environment(function_name: str, entry_point: str) -> dict[str, str]:
    """What Cloud Run sets in every function's container (PORT, K_SERVICE, K_REVISION,
    K_CONFIGURATION) and what functions-framework is started with (FUNCTION_TARGET,
    FUNCTION_SIGNATURE_TYPE)."""
    return {
        "PORT": "8080",
        "K_SERVICE": function_name,
        "K_REVISION": f"{function_name}-00001-off",
        "K_CONFIGURATION": function_name,
        "FUNCTION_TARGET": entry_point,
        "FUNCTION_SIGNATURE_TYPE": "http",
    }


def declared_startups(resources: Sequence[DeclaredResource]) -> list[DeclaredStartup]:
    """Each declared function with its archive and environment, as the program declared."""
    archives: dict[tuple[str, str], Path] = {}
    for resource in resources:
        source = resource.props.get("source")
        if (resource.type == SOURCE_OBJECT_TYPE and isinstance(source, Mapping)
                and source.get("__asset") == "file"):
            key = (str(resource.props.get("bucket")), str(resource.props.get("name")))
            archives[key] = Path(str(source["path"]))
    startups: list[DeclaredStartup] = []
    for resource in resources:
        if resource.type != FUNCTION_TYPE:
            continue
        build = resource.props.get("buildConfig") or {}
        storage = (build.get("source") or {}).get("storageSource") or {}
        where = (str(storage.get("bucket")), str(storage.get("object")))
        if where not in archives:
            raise RuntimeError(
                f"{resource.name}: its source gs://{where[0]}/{where[1]} is no object the "
                "program uploads from a file"
            )
        service = resource.props.get("serviceConfig") or {}
        name, entry_point = str(resource.props.get("name")), str(build.get("entryPoint"))
        environment = {
            **platform_environment(name, entry_point),
            **{str(k): str(v) for k, v in (service.get("environmentVariables") or {}).items()},
            **{
                str(secret["key"]): secret_placeholder(str(secret.get("secret")))
                for secret in service.get("secretEnvironmentVariables") or []
            },
        }
        startups.append(DeclaredStartup(resource.name, name, entry_point, archives[where],
                                        environment))
    return startups


@dataclass(frozen=True)
class StartupResults:
    specs: Mapping[str, Mapping[str, Any] | None]
    """spec -> None (resolves to a callable) or what is missing."""
    functions: Sequence[Mapping[str, Any] | None]
    """Per started function, in order: None (started) or its error."""


# What the same start-ups gave earlier in this process (a test session plans the same
# stacks many times): the same archive bytes, environment and specs start the same way.
_STARTED: dict[tuple[Any, ...], dict[str, Any]] = {}


def _startup_key(startups: Sequence[DeclaredStartup], venvs_dir: Path) -> tuple[Any, ...]:
    return (str(venvs_dir), tuple(
        (hashlib.sha256(s.archive.read_bytes()).hexdigest(), s.entry_point,
         tuple(sorted(s.environment.items())), tuple(sorted(set(s.specs))))
        for s in startups
    ))


def start_functions(
    startups: Sequence[DeclaredStartup], venvs_dir: Path = FUNCTION_VENVS_DIR
) -> StartupResults:
    """Start every function in one subprocess, in the virtualenv of the requirements.txt
    their archives ship (see the module docstring); once per process for the same ones."""
    key = _startup_key(startups, venvs_dir)
    if key not in _STARTED:
        _STARTED[key] = _start_in_subprocess(startups, venvs_dir)
    results = _STARTED[key]
    return StartupResults(results["specs"], results["functions"])


def _start_in_subprocess(
    startups: Sequence[DeclaredStartup], venvs_dir: Path
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="startup-parity-") as scratch:
        work = Path(scratch)
        unpacked: dict[Path, Path] = {}
        for startup in startups:
            if startup.archive not in unpacked:
                target = work / f"archive{len(unpacked)}"
                with zipfile.ZipFile(startup.archive) as archive:
                    archive.extractall(target)
                unpacked[startup.archive] = target
        locks = {(root / REQUIREMENTS_FILE).read_bytes() for root in unpacked.values()}
        if len(locks) != 1:  # the kit ships function/'s one lock in every archive
            raise RuntimeError(f"the functions' archives hold {len(locks)} different locks")
        python = function_python(next(iter(unpacked.values())) / REQUIREMENTS_FILE, venvs_dir)
        # The runtime account's credentials, which the metadata server gives a deployed
        # function: any client built at start-up finds these and uses no network until called.
        credentials = work / "credentials.json"
        credentials.write_text(json.dumps({
            "type": "authorized_user", "client_id": "offline", "client_secret": "offline",
            "refresh_token": "offline",
        }))
        plan = [
            {"archive": str(unpacked[s.archive]), "entry_point": s.entry_point,
             "environment": dict(s.environment), "specs": sorted(set(s.specs))}
            for s in startups
        ]
        (work / "plan.json").write_text(json.dumps(plan), encoding="utf-8")
        # Nothing of this machine's environment but PATH: no PYTHONPATH, no emulator hosts,
        # no gcloud config (HOME is the scratch directory).
        env = {"PATH": os.environ.get("PATH", ""), "HOME": str(work),
               "GOOGLE_APPLICATION_CREDENTIALS": str(credentials)}
        try:
            result = subprocess.run(
                # -P: nothing prepended to sys.path (no working directory), as the runtime's
                # functions-framework script has it; the archive is appended by create_app.
                [str(python), "-P", "-c", _STARTER, str(work / "plan.json"),
                 str(work / "results.json")],
                cwd=work, env=env, capture_output=True, text=True,
                timeout=STARTUP_TIMEOUT_SECONDS, check=False,
            )
        except subprocess.TimeoutExpired:
            raise RuntimeError(
                f"starting the functions offline took over {STARTUP_TIMEOUT_SECONDS} s: a "
                "module waits at import (for the network?); the deployed start-up would too"
            ) from None
        results_path = work / "results.json"
        if result.returncode != 0 or not results_path.exists():
            raise RuntimeError(
                "starting the functions offline failed: "
                f"{(result.stderr or result.stdout).strip()[-2000:]}"
            )
        results: dict[str, Any] = json.loads(results_path.read_text(encoding="utf-8"))
    return results


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
    if missing:
        fix = _fix_missing(str(missing), source_dir)
        message = f"does not start: importing {missing!r} fails ({failed['error']})"
    else:
        fix = "fix what the error names: the function runs this at every cold start"
        message = f"does not start: {failed['error']}"
    return Problem(startup.key, message, fix)


def check_job_logic(
    values: Mapping[str, Any],
    config: StackConfig,
    source_dir: Path = DEFAULT_SOURCE_DIR,
    build_dir: Path = DEFAULT_BUILD_DIR,
    run: OfflineRun | None = None,
) -> None:
    """Raise `ConfigError` naming every job-logic key whose `module:function` the deployed
    function could not import, and every declared function that would not start (see the
    module docstring). `run`: the program's run for `values`, if the caller made one."""
    # The team's function/ is the one the program's archives took theirs from (its default).
    team_dir = DEFAULT_TEAM_DIR
    stale = lock_problems((team_dir or source_dir).parent, source_dir.parent)
    if stale:  # the archive's requirements.txt would not be what make lock would write
        raise ConfigError([Problem(str(TEAM_LOCK), what, LOCK_FIX) for what in stale])
    if run is None:
        # Imported here: operator_tools.offline imports this module (load_checked_stack).
        from operator_tools.offline import run_offline

        run = run_offline(values, source_dir=source_dir, build_dir=build_dir)
    uses = job_logic_uses(values, config)
    startups = [
        DeclaredStartup(s.resource, s.function_name, s.entry_point, s.archive, s.environment,
                        tuple(u.spec for u in uses))
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
