"""The functions' own Python environment, for starting them offline as Cloud Run would
(operator_tools/function_startup.py): a virtualenv that holds what the functions' archive's
`requirements.txt` pins and nothing else, installed hash-checked as Cloud Build installs it,
built once per lock and Python version under `.cache/function-venv/` (gitignored).
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Final

from infra import PROJECT_DIR
from infra.cloud_function import FUNCTION_RUNTIME

VENV_BUILD_TIMEOUT_SECONDS: Final = 900
FUNCTION_VENVS_DIR: Final = PROJECT_DIR / ".cache" / "function-venv"
"""The cached virtualenvs, one per (requirements.txt, Python version): gitignored."""
MIN_PIP: Final = "24"
"""The oldest pip that installs a hash-pinned lock with extras (see `_build_venv`)."""


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

