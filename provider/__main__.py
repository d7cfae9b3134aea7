"""The kit's component package: serves `SchedulerDedup` (infra/component.py) to Pulumi
programs in any language (`pulumi package add`, docs/component-package.md).

Pulumi's Python language host runs this file with the plugin's virtualenv, where
requirements.txt installed the kit (`scheduler-dedup-kit`, the release of this folder);
`activate()` puts the kit's tree on sys.path before anything of it is imported. The schema
the host infers is checked in beside this file (schema.json, `make schema`).
"""

from __future__ import annotations

import sys
from pathlib import Path


def _activate_kit() -> None:
    """The installed kit, or, run from a checkout without it, the checkout's own tree."""
    try:
        import scheduler_dedup_kit
    except ImportError:
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
        import scheduler_dedup_kit
    scheduler_dedup_kit.activate()


def main() -> None:
    _activate_kit()
    from infra.component_host import (
        PACKAGE_NAME,
        PACKAGE_VERSION,
        components,
        pulumi_provider_importable,
    )

    pulumi_provider_importable()  # before the SDK's provider side is imported
    from pulumi.provider.experimental import component_provider_host

    component_provider_host(components=components(), name=PACKAGE_NAME,
                            version=PACKAGE_VERSION)


if __name__ == "__main__":
    main()
