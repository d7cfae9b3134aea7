"""Entry point of `pulumi up` (Pulumi.yaml: `main: infra/`).

Pulumi runs this file with infra/ as the working directory and on sys.path, so the
repository root is added to import the `infra` package. Config problems, and a project
whose Cloud Resource Manager or Service Usage API is disabled, are reported as one clear
error without a Python traceback, before any resource is declared.
"""

from __future__ import annotations

import sys
from pathlib import Path

_ROOT = str(Path(__file__).resolve().parent.parent)
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

import pulumi  # noqa: E402

from infra.config import ConfigError  # noqa: E402
from infra.preflight import PrerequisiteError  # noqa: E402
from infra.program import main  # noqa: E402

try:
    main()
except (ConfigError, PrerequisiteError) as exc:
    raise pulumi.RunError(str(exc)) from None
