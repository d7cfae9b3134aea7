"""The protocol installed alone, from its wheel (`make protocol-dist`, protocol/), into fresh
virtualenvs: one at the lower bounds its metadata declares (uv's `lowest-direct`: each
declared dependency at its lowest allowed version, what they need at current releases) and
one at current releases (`highest`). Each imports every module the wheel carries, verifies
ID tokens as DEDUP_VERIFY_TOKEN_AUDIENCE does (google-auth's jwt.decode, the reason for its
lower bound: tokens signed with a local key, certificates fetched from a local endpoint),
and serves both example apps through the served tests of test_served_examples.py (imported
below, so they run here again with these virtualenvs' python as the apps' interpreter,
nothing of the checkout on its path).

The apps' servers and FastAPI are not the protocol's dependencies: they are installed at
current releases in both. uv's cache is build/uv-cache: after the first run the installs
are offline. One virtualenv per bound, shared by both apps."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from local_stack.deliveries import INVOKER
from local_stack.processes import REPO_ROOT
from tests.adapters.test_served_examples import (
    test_a_delivery_without_schedulers_headers_is_a_400_and_writes_nothing,
    test_a_failed_run_is_answered_500_and_its_retry_runs,
    test_a_retry_after_completion_runs_nothing,
    test_concurrent_duplicate_deliveries_execute_once,
)
from tests.dist_helpers import UV, clean_env, wheel_metadata
from tests.function.signed_tokens import AUDIENCE, SigningKey, id_token_claims, served_certs

# The served tests, run here with each bound's interpreter (the `apps_python` below).
__all__ = [
    "test_a_delivery_without_schedulers_headers_is_a_400_and_writes_nothing",
    "test_a_failed_run_is_answered_500_and_its_retry_runs",
    "test_a_retry_after_completion_runs_nothing",
    "test_concurrent_duplicate_deliveries_execute_once",
]

PROTOCOL_DIR = REPO_ROOT / "protocol"
UV_CACHE = REPO_ROOT / "build" / "uv-cache"
# uv's resolution for each bound.
BOUNDS = {"lower": "lowest-direct", "current": "highest"}
EXTRAS = ("flask",)
# What the example apps need besides the protocol: their servers, and FastAPI.
SERVERS = ("uvicorn", "fastapi")


def uv(*argv: str) -> None:
    """`uv argv`, offline first (the cache usually holds every file), else online."""
    env = {**clean_env(), "UV_CACHE_DIR": str(UV_CACHE)}
    command = [str(UV), *argv, "--quiet"]
    offline = subprocess.run([*command, "--offline"], env=env, capture_output=True,
                             timeout=900, check=False)
    if offline.returncode != 0:
        subprocess.run(command, env=env, check=True, timeout=900)


@pytest.fixture(scope="module")
def protocol_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("protocol-dist")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
         "--disable-pip-version-check", "--no-index", "-w", str(out), str(PROTOCOL_DIR)],
        env=clean_env(), check=True, timeout=300)
    (wheel,) = out.glob("scheduler_dedup_protocol-*.whl")
    return wheel


def declared(wheel: Path) -> list[Requirement]:
    """The wheel's dependencies, its EXTRAS' included."""
    requirements = [Requirement(line)
                    for line in wheel_metadata(wheel).get_all("Requires-Dist", [])]
    return [r for r in requirements
            if r.marker is None or any(r.marker.evaluate({"extra": e}) for e in EXTRAS)]


def lower_bound(requirement: Requirement) -> str:
    (low,) = [s.version for s in requirement.specifier if s.operator == ">="]
    return low


_venvs: dict[str, Path] = {}


@pytest.fixture(scope="module", params=sorted(BOUNDS))
def apps_python(request: pytest.FixtureRequest, protocol_wheel: Path,
                tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtualenv with the protocol at one bound (built once per bound); its python."""
    bound = str(request.param)
    if bound not in _venvs:
        venv = tmp_path_factory.mktemp(f"protocol-{bound}") / "venv"
        uv("venv", "--no-python-downloads", "--python",
           getattr(sys, "_base_executable", sys.executable), str(venv))
        python = venv / "bin" / "python"
        # The declared requirements given as direct ones, so lowest-direct takes their lower
        # bounds; pinned there too: offline, uv would take the lowest version it has cached.
        requirements = [f"{r.name}=={lower_bound(r)}" if bound == "lower" else str(r)
                        for r in declared(protocol_wheel)]
        uv("pip", "install", "--python", str(python), "--resolution", BOUNDS[bound],
           f"{protocol_wheel}[{','.join(EXTRAS)}]", *requirements)
        uv("pip", "install", "--python", str(python), *SERVERS)
        _venvs[bound] = python
    return _venvs[bound]


def installed(python: Path, name: str) -> str:
    return subprocess.run(
        [str(python), "-c", f"import importlib.metadata as m; print(m.version({name!r}))"],
        env=clean_env(), capture_output=True, text=True, check=True, cwd="/").stdout.strip()


def test_it_installs_at_its_bounds_and_every_module_it_carries_imports(
    request: pytest.FixtureRequest, apps_python: Path, protocol_wheel: Path,
) -> None:
    bound = request.node.callspec.params["apps_python"]
    if bound == "lower":
        for requirement in declared(protocol_wheel):
            assert installed(apps_python, requirement.name) == lower_bound(requirement)
    with zipfile.ZipFile(protocol_wheel) as archive:
        modules = [name.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
                   for name in archive.namelist() if name.endswith(".py")]
    assert "dedup.adapters.wsgi" in modules and not any("watchdog" in m for m in modules)
    # Every module, alone in the virtualenv (cwd away from the checkout): nothing the wheel
    # carries needs what it leaves out.
    subprocess.run([str(apps_python), "-c", f"import importlib\nfor m in {modules!r}: "
                    "importlib.import_module(m)"],
                   env=clean_env(), check=True, cwd="/", timeout=120)


# Run in the virtualenv: each token (stdin: JSON) checked as a service with
# DEDUP_VERIFY_TOKEN_AUDIENCE checks it, Google's certificates fetched from the given URL;
# prints each token's refusal (None: admitted).
CHECK_TOKENS = """
import functools, json, sys
from dedup.entry import id_tokens
from dedup.entry.callers import check_caller
from dedup.keys import lower_keys
given = json.load(sys.stdin)
id_tokens.GOOGLE_CERTS = id_tokens.GoogleCerts(
    functools.partial(id_tokens.fetch_certs, given["certs_url"]))
refusals = {}
for name, token in given["tokens"].items():
    refusal = check_caller(lower_keys({"Authorization": "Bearer " + token}),
                           frozenset({given["invoker"]}), given["audience"])
    refusals[name] = None if refusal is None else refusal.reason
print(json.dumps(refusals))
"""


def test_it_verifies_callers_tokens_at_its_bounds(apps_python: Path) -> None:
    google = SigningKey.generate()
    tokens = {
        "google's": google.sign(id_token_claims(INVOKER)),
        "forged": SigningKey.generate().sign(id_token_claims(INVOKER)),
        "expired": google.sign(id_token_claims(INVOKER, exp=1_000_000_000, iat=999_996_400)),
        "another audience": google.sign(id_token_claims(INVOKER, "https://other.a.run.app")),
    }
    with served_certs({google.key_id: google.certificate_pem}) as (url, endpoint):
        given = {"certs_url": url, "audience": AUDIENCE, "invoker": INVOKER, "tokens": tokens}
        done = subprocess.run([str(apps_python), "-c", CHECK_TOKENS], input=json.dumps(given),
                              env=clean_env(), capture_output=True, text=True, cwd="/",
                              timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    refusals = json.loads(done.stdout)
    assert refusals["google's"] is None, refusals
    assert "signature" in refusals["forged"], refusals
    assert "expired" in refusals["expired"], refusals
    assert "audience" in refusals["another audience"], refusals
    assert endpoint.requests == 1  # fetched once, for every token


# A service's own code, type-checked against the installed wheel: a wrong type is reported
# only if mypy reads dedup's hints (its py.typed marker), not Any for an untyped package.
SERVICE_CODE = """
from dedup.run_context import RunContext


def run_id(run: RunContext) -> int:
    return run.run_id
"""


def test_a_services_mypy_reads_its_types(apps_python: Path, tmp_path: Path) -> None:
    (tmp_path / "service.py").write_text(SERVICE_CODE)
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--python-executable", str(apps_python),
         "--no-incremental", "--strict", "service.py"],
        env=clean_env(), capture_output=True, text=True, cwd=tmp_path, timeout=300,
        check=False)
    assert 'Incompatible return value type (got "str", expected "int")' in done.stdout, (
        done.stdout)
    assert "missing library stubs or py.typed marker" not in done.stdout, done.stdout
