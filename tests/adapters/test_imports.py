"""What importing the adapters (and the kit's scheduled-job function wiring) loads: not the
idempotent proxy (dedup/proxy/, which imports `requests` itself), imported only where the
proxy is built (dedup/entry/app.py build_proxy_handler)."""

from __future__ import annotations

import subprocess
import sys


def test_the_adapters_and_the_job_wiring_do_not_import_the_proxy() -> None:
    code = ("import sys; import dedup.adapters.wsgi, dedup.adapters.asgi, "
            "dedup.adapters.functions_framework, dedup.entry.app; "
            "print(sorted(m for m in sys.modules if m.startswith('dedup.proxy')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, cwd="function")
    assert done.stdout.strip() == "[]"

