"""infra/contracts/types_only.py: Google's message types without their clients, and the
real package, the same classes in it, for whatever imports it later. In a fresh
interpreter: this one has the real packages imported already."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

SCRIPT = textwrap.dedent(
    """
    import json, sys, warnings
    warnings.simplefilter("ignore")
    from infra.contracts.types_only import DeferredPackage, import_types

    types = import_types("google.cloud.tasks_v2.types")
    seen = {"deferred": type(sys.modules["google.cloud.tasks_v2"]) is DeferredPackage,
            "clients_loaded": "google.cloud.tasks_v2.services" in sys.modules
                              or "google.api_core.gapic_v1" in sys.modules}

    import google.cloud
    import google.cloud.tasks_v2 as tasks
    from google.cloud.tasks_v2 import CloudTasksClient, Queue
    from google.auth.credentials import AnonymousCredentials

    seen["same_class"] = Queue is types.Queue is tasks.types.Queue
    seen["bound_in_parent"] = google.cloud.tasks_v2 is tasks
    seen["version"] = tasks.__version__
    client = CloudTasksClient(credentials=AnonymousCredentials())
    seen["client"] = client.queue_path("p", "l", "q")
    seen["missing"] = hasattr(tasks, "NoSuchThing")
    already = import_types("google.cloud.tasks_v2.types")  # imported: used as it is
    seen["again"] = already is types
    print(json.dumps(seen))
    """
)


def test_types_load_without_the_client_and_the_package_still_works(kit_checkout: Path) -> None:
    done = subprocess.run([sys.executable, "-c", SCRIPT], cwd=kit_checkout, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen == {
        "deferred": True, "clients_loaded": False, "same_class": True,
        "bound_in_parent": True, "version": seen["version"],
        "client": "projects/p/locations/l/queues/q", "missing": False, "again": True,
    }
    assert seen["version"][0].isdigit()
