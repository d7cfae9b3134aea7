"""Every function the program declares, started offline as Cloud Run would start it (the
start-up half of operator_tools/job_logic.py's check).

For each declared Cloud Run function, from the program's run under mocks:

- the very source archive the program declared for it (its `buildConfig.source` object's
  FileAsset), unpacked: the code, and whatever else travels in the archive (job tables);
- its declared environment (`serviceConfig.environmentVariables`; each secret environment
  variable gets a placeholder of the secret's shape), plus what the platform sets
  (FUNCTION_TARGET, K_SERVICE, PORT, ...) and a stand-in for the runtime account's
  credentials (no network is used);
- a Python environment built only from the archive's `requirements.txt`, hash-checked as
  Cloud Build installs it (operator_tools/function_venv.py): the functions that run job
  logic ship the kit's lock and the team's, the proxy and the watchdog the kit's alone
  (infra/source.py), so each is started in the environment of its own lock.

In one subprocess per stack and lock, each function is then started by functions-framework itself
(`create_app`: main.py imported with the entry point as target, the archive's directory
appended to `sys.path`, as the runtime does), each from a clean slate (none of the
archives' modules left imported, only its own environment). The function that runs job
logic first imports each `module:function` spec it is given, one by one, so that each is
judged on its own. `start_functions` reports, per spec and per function, what failed.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import tempfile
import zipfile
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from operator_tools.declared import DeclaredResource
from operator_tools.function_venv import FUNCTION_VENVS_DIR, function_python

REQUIREMENTS_FILE: Final = "requirements.txt"
"""What Cloud Build installs for a Python function: the file beside main.py."""
STARTUP_TIMEOUT_SECONDS: Final = 120
FUNCTION_TYPE: Final = "gcp:cloudfunctionsv2/function:Function"
SOURCE_OBJECT_TYPE: Final = "gcp:storage/bucketObject:BucketObject"

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
    """Start every function in the virtualenv of the requirements.txt its archive ships,
    one subprocess per lock (see the module docstring); once per process for the same ones."""
    key = _startup_key(startups, venvs_dir)
    if key not in _STARTED:
        _STARTED[key] = _start_in_subprocesses(startups, venvs_dir)
    results = _STARTED[key]
    return StartupResults(results["specs"], results["functions"])


def _start_in_subprocesses(
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
        # The functions by the lock their archive ships (the kit's alone, or the kit's and
        # the team's), in declaration order: the environment each is started in.
        by_lock: dict[bytes, list[int]] = {}
        for index, startup in enumerate(startups):
            lock = (unpacked[startup.archive] / REQUIREMENTS_FILE).read_bytes()
            by_lock.setdefault(lock, []).append(index)
        # Every venv first (built once per lock, then cached), then the start-ups side by
        # side: a team's stack has two locks, and its plan waits for the slower only.
        groups = [
            (function_python(unpacked[startups[indexes[0]].archive] / REQUIREMENTS_FILE,
                             venvs_dir), indexes)
            for indexes in by_lock.values()
        ]
        # The runtime account's credentials, which the metadata server gives a deployed
        # function: any client built at start-up finds these and uses no network until called.
        credentials = work / "credentials.json"
        credentials.write_text(json.dumps({
            "type": "authorized_user", "client_id": "offline", "client_secret": "offline",
            "refresh_token": "offline",
        }))
        plans = []
        for number, (python, indexes) in enumerate(groups):
            plan = [
                {"archive": str(unpacked[s.archive]), "entry_point": s.entry_point,
                 "environment": dict(s.environment), "specs": sorted(set(s.specs))}
                for s in (startups[i] for i in indexes)
            ]
            folder = work / f"lock{number}"
            folder.mkdir()
            (folder / "plan.json").write_text(json.dumps(plan), encoding="utf-8")
            plans.append((python, folder))
        with ThreadPoolExecutor(max_workers=len(plans)) as pool:
            ran = list(pool.map(lambda p: _run_starter(p[0], p[1], work, credentials), plans))
    results: dict[str, Any] = {"specs": {}, "functions": [None] * len(startups)}
    for (_, indexes), group in zip(groups, ran, strict=True):
        results["specs"].update(group["specs"])
        for index, started in zip(indexes, group["functions"], strict=True):
            results["functions"][index] = started
    return results


def _run_starter(python: Path, folder: Path, home: Path, credentials: Path) -> dict[str, Any]:
    """Run _STARTER with `python` over `folder`/plan.json; its results."""
    # Nothing of this machine's environment but PATH: no PYTHONPATH, no emulator hosts,
    # no gcloud config (HOME is the scratch directory).
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(home),
           "GOOGLE_APPLICATION_CREDENTIALS": str(credentials)}
    try:
        result = subprocess.run(
            # -P: nothing prepended to sys.path (no working directory), as the runtime's
            # functions-framework script has it; the archive is appended by create_app.
            [str(python), "-P", "-c", _STARTER, str(folder / "plan.json"),
             str(folder / "results.json")],
            cwd=folder, env=env, capture_output=True, text=True,
            timeout=STARTUP_TIMEOUT_SECONDS, check=False,
        )
    except subprocess.TimeoutExpired:
        raise RuntimeError(
            f"starting the functions offline took over {STARTUP_TIMEOUT_SECONDS} s: a "
            "module waits at import (for the network?); the deployed start-up would too"
        ) from None
    results_path = folder / "results.json"
    if result.returncode != 0 or not results_path.exists():
        raise RuntimeError(
            "starting the functions offline failed: "
            f"{(result.stderr or result.stdout).strip()[-2000:]}"
        )
    results: dict[str, Any] = json.loads(results_path.read_text(encoding="utf-8"))
    return results
