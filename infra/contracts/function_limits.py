"""The documented limits of a Cloud Run function (2nd gen) that no client type encodes: its
ID, its environment variables (the kit's and a runtime's settings together), its secrets
(as environment variables or files) and its VPC egress (a connector, or Direct VPC).

Each limit is declared once, here, with the page that documents it
(infra/contracts/sources.py); the other resource types' are in infra/contracts/limits.py.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Final

from infra.contracts import sources
from infra.contracts.convert import Declared, api_value
from infra.contracts.findings import Finding, Rule
from infra.contracts.limits import (
    SECRET_ID,
    LimitCheck,
    finding,
    labels_limits,
    matches,
    utf8_len,
)

FUNCTION_ENV_VARS_MAX_BYTES: Final = 32 * 1024
"""A function's runtime environment variables, names and values together (UTF-8)."""
ENV_VAR_VALUE_MAX_BYTES: Final = 32_768
ENV_VARS_MAX_COUNT: Final = 1000
"""Of a Cloud Run service: its plain and its secret environment variables together."""
RESERVED_ENV_VAR_NAMES: Final = frozenset(
    {"PORT", "K_SERVICE", "K_REVISION", "K_CONFIGURATION", "FUNCTION_TARGET",
     "FUNCTION_SIGNATURE_TYPE"}
)
# Keys: not empty, no "=", not starting X_GOOGLE_ (and not the reserved names above).
RESERVED_ENV_VAR_PREFIX: Final = "X_GOOGLE_"
FUNCTION_ID: Final = re.compile(r"[a-z0-9-]{4,63}")
SECRET_VERSION: Final = re.compile(r"latest|[1-9][0-9]*")
CONNECTOR_NAME: Final = re.compile(r"projects/[^/]+/locations/[^/]+/connectors/(?P<id>[^/]+)")
CONNECTOR_ID: Final = re.compile(r"[a-z][-a-z0-9]{0,23}[a-z0-9]")
DIRECT_VPC_MAX_INTERFACES: Final = 1

_SECRETS_FIX: Final = "runtimes[].secrets in the stack file"

R_FUNCTION_ID: Final = Rule(
    "a function ID is 4-63 characters of lowercase letters, digits and hyphens",
    sources.FUNCTIONS_API)
R_ENV_TOTAL: Final = Rule(
    f"a function's runtime environment variables, names and values together, are at "
    f"most {FUNCTION_ENV_VARS_MAX_BYTES // 1024} KiB (the kit's own variables count with a "
    "runtime's settings)", sources.FUNCTIONS_ENV_VARS,
    fix="shorten the largest settings of the function's runtime (runtimes[].settings), or "
    "move a large value out of the environment: into a secret mounted as a file "
    "(runtimes[].secrets[].path) or into the job's code")
R_ENV_VALUE: Final = Rule(
    f"an environment variable's value is at most {ENV_VAR_VALUE_MAX_BYTES:,} bytes",
    sources.RUN_ENV_VAR_API)
R_ENV_COUNT: Final = Rule(
    f"a service has at most {ENV_VARS_MAX_COUNT:,} environment variables (secret ones "
    "included)", sources.RUN_ENV_VARS)
R_ENV_RESERVED: Final = Rule(
    f"reserved environment variable names ({', '.join(sorted(RESERVED_ENV_VAR_NAMES))}) "
    "are set by Cloud Run and cannot be declared", sources.RUN_ENV_VARS)
R_ENV_NAME: Final = Rule(
    f"an environment variable's name is not empty, has no '=' and does not start with "
    f"{RESERVED_ENV_VAR_PREFIX}", sources.RUN_ENV_VARS)
R_SECRET_NAME: Final = Rule(
    "a function's secret is the name of the secret in Secret Manager, not its full resource "
    "name: a secret ID (at most 255 letters, digits, hyphens and underscores)",
    sources.FUNCTIONS_SERVICE_CONFIG_API, fix=f"give the secret's ID ({_SECRETS_FIX})")
R_SECRET_VERSION: Final = Rule(
    "a secret's version is a version number or the string 'latest'",
    sources.FUNCTIONS_SERVICE_CONFIG_API, fix=f"use 'latest' or a number ({_SECRETS_FIX})")
R_SECRET_FILE_PATH: Final = Rule(
    "a secret volume's file path is relative to its mountPath (a file name or a relative "
    "path, no '..')", sources.FUNCTIONS_SERVICE_CONFIG_API)
R_SECRET_MOUNT_PATH: Final = Rule(
    "a secret volume's mountPath directory is completely shadowed and unavailable to mount "
    "any other secrets: one secret volume per mountPath", sources.FUNCTIONS_SERVICE_CONFIG_API,
    fix=f"give each file secret a folder of its own ({_SECRETS_FIX})")
R_CONNECTOR_NAME: Final = Rule(
    "a function's vpcConnector is the connector's full name, "
    "projects/<project>/locations/<region>/connectors/<connector ID>",
    sources.FUNCTIONS_SERVICE_CONFIG_API,
    fix="give the connector's full name (runtimes[].network.vpcConnector)")
R_CONNECTOR_ID: Final = Rule(
    "a connector ID is 2-25 characters: a lowercase letter first, then lowercase letters, "
    "digits or hyphens, a letter or digit last", sources.VPC_ACCESS_CONNECTORS_API)
R_DIRECT_VPC_WITH_CONNECTOR: Final = Rule(
    "Direct VPC egress and a Serverless VPC Access connector cannot be used at the same time",
    sources.FUNCTIONS_DIRECT_VPC, fix="keep one of runtimes[].network.vpcConnector and "
    "runtimes[].network.directVpc")
R_DIRECT_VPC_INTERFACES: Final = Rule(
    f"a function has at most {DIRECT_VPC_MAX_INTERFACES} Direct VPC network interface, each "
    "naming a VPC network or a subnet, or both", sources.FUNCTIONS_SERVICE_CONFIG_API,
    fix="give runtimes[].network.directVpc a network, a subnetwork, or both")


def function_limits(resource: Declared) -> Iterator[Finding]:
    name = resource.props.get("name")
    if not matches(FUNCTION_ID, name):
        yield finding(resource, "name", name, R_FUNCTION_ID)
    service = _mapping(api_value(resource.props.get("serviceConfig")))
    yield from _environment_limits(resource, name, service)
    yield from _secret_limits(resource, service)
    yield from _egress_limits(resource, service)


def _environment_limits(
    resource: Declared, function: Any, service: Mapping[str, Any]
) -> Iterator[Finding]:
    env = _mapping(service.get("environmentVariables"))
    secrets = _entries(service.get("secretEnvironmentVariables"))
    prop = "serviceConfig.environmentVariables"
    total = sum(utf8_len(key) + utf8_len(value) for key, value in env.items())
    if total > FUNCTION_ENV_VARS_MAX_BYTES:
        # Imported here, on the failing path only: infra.config imports the function's code
        # and google.api_core, which the contract checks otherwise never load.
        from infra.config.runtimes import KIT_ENV_PREFIX

        kit = sum(utf8_len(key) + utf8_len(value) for key, value in env.items()
                  if str(key).startswith(KIT_ENV_PREFIX))
        sizes = sorted(((utf8_len(k) + utf8_len(v), k) for k, v in env.items()), reverse=True)
        largest = ", ".join(f"{key} {size:,} B" for size, key in sizes[:3])
        yield finding(resource, prop, f"{total:,} bytes", R_ENV_TOTAL,
                      f"function {function!r}: the kit's {KIT_ENV_PREFIX}* variables {kit:,} B, "
                      f"the others {total - kit:,} B; largest: {largest}")
    if len(env) + len(secrets) > ENV_VARS_MAX_COUNT:
        yield finding(resource, prop, f"{len(env):,} variables and {len(secrets):,} from "
                      "secrets", R_ENV_COUNT)
    for key, value in env.items():
        if utf8_len(value) > ENV_VAR_VALUE_MAX_BYTES:
            yield finding(resource, f"{prop}.{key}", value, R_ENV_VALUE)
        yield from _env_name_limits(resource, f"{prop}.{key}", key, value)
    for index, secret in enumerate(secrets):
        if (secret_key := secret.get("key")) is not None:  # None: unknown until deployed
            where = f"serviceConfig.secretEnvironmentVariables[{index}].key"
            yield from _env_name_limits(resource, where, str(secret_key), secret_key)


def _env_name_limits(resource: Declared, prop: str, key: str, value: Any) -> Iterator[Finding]:
    if key in RESERVED_ENV_VAR_NAMES:
        yield finding(resource, prop, value, R_ENV_RESERVED)
    if not key or "=" in key or key.upper().startswith(RESERVED_ENV_VAR_PREFIX):
        yield finding(resource, prop, value, R_ENV_NAME)


def _secret_limits(resource: Declared, service: Mapping[str, Any]) -> Iterator[Finding]:
    for index, secret in enumerate(_entries(service.get("secretEnvironmentVariables"))):
        where = f"serviceConfig.secretEnvironmentVariables[{index}]"
        yield from _secret_reference_limits(resource, where, secret.get("secret"),
                                            [(f"{where}.version", secret.get("version"))])
    mounted: set[str] = set()
    for index, volume in enumerate(_entries(service.get("secretVolumes"))):
        where = f"serviceConfig.secretVolumes[{index}]"
        versions = _entries(volume.get("versions"))
        yield from _secret_reference_limits(
            resource, where, volume.get("secret"),
            [(f"{where}.versions[{i}].version", v.get("version")) for i, v in enumerate(versions)])
        for i, version in enumerate(versions):
            path = version.get("path")
            if isinstance(path, str) and (not path or path.startswith("/") or ".." in
                                          posixpath.normpath(path).split("/")):
                yield finding(resource, f"{where}.versions[{i}].path", path, R_SECRET_FILE_PATH)
        mount = volume.get("mountPath")
        if not isinstance(mount, str):
            continue  # the strict parse reports a missing or wrong mountPath
        if posixpath.normpath(mount) in mounted:
            yield finding(resource, f"{where}.mountPath", mount, R_SECRET_MOUNT_PATH)
        mounted.add(posixpath.normpath(mount))


def _secret_reference_limits(
    resource: Declared, where: str, secret: Any, versions: list[tuple[str, Any]]
) -> Iterator[Finding]:
    """Its secret and versions; one unknown until deployed (None: e.g. the version a secret
    version resource will have) is not judged."""
    if secret is not None and not matches(SECRET_ID, secret):
        yield finding(resource, f"{where}.secret", secret, R_SECRET_NAME)
    for prop, version in versions:
        if version is not None and not matches(SECRET_VERSION, version):
            yield finding(resource, prop, version, R_SECRET_VERSION)


def _egress_limits(resource: Declared, service: Mapping[str, Any]) -> Iterator[Finding]:
    connector = service.get("vpcConnector")
    interfaces = service.get("directVpcNetworkInterfaces")
    if connector is not None:
        name = CONNECTOR_NAME.fullmatch(connector) if isinstance(connector, str) else None
        if name is None:
            yield finding(resource, "serviceConfig.vpcConnector", connector, R_CONNECTOR_NAME)
        elif not matches(CONNECTOR_ID, name.group("id")):
            yield finding(resource, "serviceConfig.vpcConnector", connector, R_CONNECTOR_ID)
    if interfaces is None:
        return
    prop = "serviceConfig.directVpcNetworkInterfaces"
    if connector is not None:
        yield finding(resource, prop, interfaces, R_DIRECT_VPC_WITH_CONNECTOR)
    entries = _entries(interfaces)
    if len(entries) > DIRECT_VPC_MAX_INTERFACES or any(
        not (entry.get("network") or entry.get("subnetwork")) for entry in entries
    ):
        yield finding(resource, prop, interfaces, R_DIRECT_VPC_INTERFACES)


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _entries(value: Any) -> list[Mapping[str, Any]]:
    """A list property's entries that are objects (the strict parse reports the others)."""
    items = value if isinstance(value, Sequence) and not isinstance(value, str) else []
    return [item for item in items if isinstance(item, Mapping)]


LIMITS: Final[Mapping[str, tuple[LimitCheck, ...]]] = {
    "gcp:cloudfunctionsv2/function:Function": (function_limits, labels_limits("labels")),
}
