"""The kit's wheel for tests (`make dist`'s build, into a folder of the test's): build it,
read it, install it into a fresh virtualenv. tests/test_dist.py checks the wheel with these;
an end-to-end test installs it with its dependencies the same way."""

from __future__ import annotations

import email.message
import email.parser
import os
import subprocess
import sys
import zipfile
from collections.abc import Sequence
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "scheduler_dedup_kit"
# uv, pinned in requirements-tools.txt, beside this interpreter (operator_tools/lock.py too).
UV = Path(sys.executable).with_name("uv")


def clean_env() -> dict[str, str]:
    """This process's environment without what would let a subprocess see this checkout or
    this virtualenv (PYTHONPATH, the active venv): the installed kit must stand alone."""
    return {k: v for k, v in os.environ.items()
            if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONSAFEPATH")}


def build_wheel(out_dir: Path, source: Path = REPO_ROOT) -> Path:
    """The wheel of `source` (a checkout of the kit) in `out_dir` (a folder of its own),
    built as `make dist` builds it: pip with this virtualenv's pinned hatchling, no build
    isolation, nothing downloaded."""
    out_dir.mkdir(parents=True, exist_ok=True)
    result = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
         "--disable-pip-version-check", "--no-index", "-w", str(out_dir), str(source)],
        env=clean_env(), capture_output=True, text=True, timeout=300, check=False,
    )
    if result.returncode != 0:
        raise RuntimeError(f"building the wheel of {source} failed:\n{result.stdout}"
                           f"{result.stderr}")
    built = sorted(out_dir.glob(f"{PACKAGE}-*.whl"))
    assert len(built) == 1, f"{out_dir} should be a folder of its own: {built}"
    return built[0]


def wheel_files(wheel: Path) -> list[str]:
    """The wheel's files (no folders), its .dist-info included."""
    with zipfile.ZipFile(wheel) as archive:
        return sorted(name for name in archive.namelist() if not name.endswith("/"))


def _dist_info_file(wheel: Path, name: str) -> str:
    with zipfile.ZipFile(wheel) as archive:
        (member,) = [m for m in archive.namelist()
                     if m.count("/") == 1 and m.endswith(f".dist-info/{name}")]
        return archive.read(member).decode("utf-8")


def wheel_metadata(wheel: Path) -> email.message.Message:
    """Its METADATA (`Version`, `Requires-Dist` via get_all, ...)."""
    return email.parser.Parser().parsestr(_dist_info_file(wheel, "METADATA"))


def wheel_entry_points(wheel: Path) -> str:
    return _dist_info_file(wheel, "entry_points.txt")


def fresh_venv(path: Path) -> Path:
    """A new virtualenv at `path` of this interpreter's base Python, without this one's
    packages (no --system-site-packages); its python."""
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([str(UV), "venv", "--quiet", "--no-python-downloads", "--python", base,
                    str(path)], env=clean_env(), check=True, timeout=120)
    return path / "bin" / "python"


def install_wheel(wheel: Path, python: Path, *, deps: bool = False,
                  extra: Sequence[str] = ()) -> None:
    """Install `wheel` into the virtualenv of `python`: alone and offline (the default), or
    with its pinned dependencies (`deps=True`, `extra` for more uv pip install arguments,
    e.g. `["--constraint", "constraints.txt"]`: see uv_pip_install)."""
    argv = ["--python", str(python), str(wheel), *extra]
    if deps:
        uv_pip_install(argv)
    else:
        subprocess.run([str(UV), "pip", "install", "--quiet", *argv, "--no-deps", "--offline"],
                       env=clean_env(), check=True, timeout=900)


def uv_pip_install(argv: Sequence[str]) -> None:
    """`uv pip install argv`, from uv's cache alone when it holds every package (the dev
    virtualenv's build filled it), else from the package index: online, uv asks the index
    about every package, seconds of round trips per install for the same files."""
    command = [str(UV), "pip", "install", "--quiet", *argv]
    offline = subprocess.run([*command, "--offline"], env=clean_env(), capture_output=True,
                             timeout=900, check=False)
    if offline.returncode != 0:
        subprocess.run(command, env=clean_env(), check=True, timeout=900)
