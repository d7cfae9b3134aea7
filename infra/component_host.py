"""The kit's component package as Pulumi's host serves it (provider/__main__.py): its name,
its components and version, and `component_provider()`, the ComponentProvider that
`component_provider_host` builds from them, for the schema (`make schema`) and the tests.

Importing Pulumi's provider side (`pulumi.provider`) beside Google's client libraries needs
one fix first, `pulumi_provider_importable()`: pulumi 3.272.0's provider server imports a
copy of google/rpc/status.proto of its own (pulumi/runtime/proto/status_pb2.py, registered
under the file name google/protobuf/status.proto), and googleapis-common-protos, which the
kit imports through google.api_core, registers the same message `google.rpc.Status` as
google/rpc/status.proto. Protobuf's default descriptor pool refuses the second, whichever
comes first ("duplicate symbol 'google.rpc.Status'"), so the provider could not even start.
Both define the same message (code, message, details), so the SDK's module is pointed at
Google's before the SDK imports it.

Not imported by the program: only the provider, `make schema` and the tests need it.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Final

from dedup.version import __version__ as KIT_VERSION
from infra.component import SchedulerDedup
from infra.config import PROJECT_NAME

if TYPE_CHECKING:
    import pulumi
    from pulumi.provider.experimental.component import ComponentProvider

PACKAGE_NAME: Final = PROJECT_NAME
"""The package's name: the first part of its type tokens (scheduler-dedup:index:...)."""


def package_version(kit_version: str) -> str:
    """The kit's PEP 440 version as the Semantic Version a Pulumi package schema needs: a
    development version `2.0.0.dev0` is `2.0.0-dev.0`, a release the same."""
    release, dev, number = kit_version.partition(".dev")
    return f"{release}-dev.{number}" if dev else release


PACKAGE_VERSION: Final = package_version(KIT_VERSION)
"""The package's version is the kit's (function/dedup/version.py)."""
_PULUMI_STATUS: Final = "pulumi.runtime.proto.status_pb2"


def components() -> list[type[pulumi.ComponentResource]]:
    """The components the package serves."""
    return [SchedulerDedup]


def pulumi_provider_importable() -> None:
    """Point the Pulumi SDK's copy of google.rpc.Status at Google's (see the module's
    docstring); idempotent, and a no-op once the SDK's own copy is loaded."""
    if _PULUMI_STATUS in sys.modules:
        return
    import google.rpc.status_pb2 as google_status  # type: ignore[import-untyped]
    import pulumi.runtime.proto as pulumi_proto

    sys.modules[_PULUMI_STATUS] = google_status
    pulumi_proto.status_pb2 = google_status


def component_provider() -> ComponentProvider:
    """The provider `component_provider_host` serves: the same class, the same arguments
    (pulumi/provider/experimental/host.py), so the same inferred schema."""
    pulumi_provider_importable()
    from pulumi.provider.experimental.component import ComponentProvider

    return ComponentProvider(components(), PACKAGE_NAME, None, PACKAGE_VERSION)
