"""infra/gcp.py is how the program reaches pulumi-gcp: mypy skips the package's __init__
(pyproject.toml, for a cold mypy in seconds, not minutes); these show that the skip
never turns a resource's arguments into Any."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from infra import KIT_ROOT


def mypy_on(snippet: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """mypy with the kit's pyproject.toml settings on one file importing from this tree."""
    source = tmp_path / "snippet.py"
    source.write_text(snippet)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(KIT_ROOT / "pyproject.toml"),
         str(source)],
        cwd=KIT_ROOT, env=env, capture_output=True, text=True, timeout=240, check=False)


def test_a_misspelt_resource_argument_is_a_type_error(tmp_path: Path) -> None:
    checked = mypy_on(
        "from infra import gcp\n\n"
        "gcp.cloudrunv2.Service('s', location='europe-west1', ingres='INGRESS_TRAFFIC_ALL')\n",
        tmp_path)
    assert checked.returncode == 1, checked.stdout + checked.stderr
    assert 'Unexpected keyword argument "ingres"' in checked.stdout, checked.stdout


def test_the_same_resource_spelt_right_passes(tmp_path: Path) -> None:
    checked = mypy_on(
        "from infra import gcp\n\n"
        "gcp.cloudrunv2.Service('s', location='europe-west1', ingress='INGRESS_TRAFFIC_ALL')\n",
        tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr

