"""infra/gcp.py is how the program reaches pulumi-gcp: mypy skips the package's __init__
(pyproject.toml, for a cold mypy in seconds, not minutes); this shows that the skip never
turns a resource's arguments into Any."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from infra import KIT_ROOT

SPELT_RIGHT = "gcp.cloudrunv2.Service('s', location='europe-west1', ingress='INGRESS_TRAFFIC_ALL')"
MISSPELT = "gcp.cloudrunv2.Service('s', location='europe-west1', ingres='INGRESS_TRAFFIC_ALL')"


def test_a_misspelt_resource_argument_is_a_type_error_and_the_right_one_is_not(
    tmp_path: Path,
) -> None:
    right, wrong = tmp_path / "right.py", tmp_path / "wrong.py"
    right.write_text(f"from infra import gcp\n\n{SPELT_RIGHT}\n")
    wrong.write_text(f"from infra import gcp\n\n{MISSPELT}\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    # A cache of its own: the checkout's .mypy_cache is copied by tests/test_fork.py on the
    # other worker, and must not change under it.
    checked = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(KIT_ROOT / "pyproject.toml"),
         "--cache-dir", str(tmp_path / "mypy-cache"), str(right), str(wrong)],
        cwd=KIT_ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)
    output = checked.stdout + checked.stderr
    assert checked.returncode == 1, output
    assert f'{wrong}:3: error: Unexpected keyword argument "ingres"' in output, output
    assert str(right) not in output, output
