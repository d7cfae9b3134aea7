"""Each declared resource as the request Google's API would receive, parsed strictly with
Google's own client type.

pulumi-gcp's property names are Terraform's, camelCased; most nested names equal the
REST API's JSON names, some do not (a Secret's `replication.auto` is the API's
`replication.automatic`, a Firestore field's `indexConfig.indexes[]` are the API's
`Index` messages with a field path). A `Contract` says, per resource type, which
top-level properties go into the request body under the same name (their nested keys
are then judged by the strict parse), which are the provider's own settings or the
request's path parameters (not in the body), and how the rest is built. A property in
none of these is a finding: the converter fails closed, so a new pulumi-gcp property
cannot slip past it unchecked.

Google's message types are imported on first use, once per process, without their
clients (infra/contracts/types_only.py): about 0.2 s.
"""

from __future__ import annotations

import base64
import functools
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from infra.contracts import sources
from infra.contracts.api_additions import FUNCTIONS_V2_DIRECT_VPC, ProtoAdditions, with_additions
from infra.contracts.findings import Finding, Rule, Source
from infra.contracts.types_only import import_types

Props = Mapping[str, Any]

# How the engine (and so the offline mocks) marks a secret input, its value under "value"
# (pulumi.runtime.rpc's secret signature).
PULUMI_SECRET_SIGNATURE: Final = "4dabf18193072939515e22adb298388d"


@dataclass(frozen=True)
class ApiType:
    """A Google client message type, named so that its module loads only when used."""

    module: str
    name: str
    additions: ProtoAdditions | None = None
    """Fields the REST API documents that the installed type lacks
    (infra/contracts/api_additions.py)."""

    @property
    def full_name(self) -> str:
        return f"{self.module}.{self.name}"

    def message_class(self) -> Any:
        """The protobuf message class (proto-plus types give their `pb()` class)."""
        return _message_class(self.module, self.name, self.additions)


@functools.cache
def _message_class(module: str, name: str, additions: ProtoAdditions | None) -> Any:
    cls = getattr(import_types(module), name)
    pb = getattr(cls, "pb", None)
    message_class = pb() if callable(pb) else cls
    return message_class if additions is None else with_additions(message_class, additions)


def _no_extra_fields(props: Props) -> dict[str, Any]:
    return {}


@dataclass(frozen=True)
class Contract:
    """How one pulumi-gcp resource type becomes one API request body."""

    resource_type: str
    api_type: ApiType
    source: Source
    same_names: frozenset[str]
    """Properties that are request-body fields of the same name (nested keys included)."""
    provider_only: frozenset[str] = frozenset()
    """The provider's own settings and the request's path or query parameters (e.g.
    project, location, deletionPolicy, a create call's resource ID)."""
    built_from: frozenset[str] = frozenset()
    """Properties `build` turns into differently named or shaped body fields."""
    build: Callable[[Props], dict[str, Any]] = field(default=_no_extra_fields)
    parsed_apart: Mapping[str, ApiType] = field(default_factory=dict)
    """Properties parsed on their own, each with its own client type (for a field the
    installed client's version of the main type does not have yet)."""

    def known(self) -> frozenset[str]:
        return self.same_names | self.provider_only | self.built_from | set(self.parsed_apart)


def api_value(value: Any) -> Any:
    """A props value as JSON for the API: secrets unwrapped, unset (None) entries dropped."""
    if isinstance(value, Mapping):
        if PULUMI_SECRET_SIGNATURE in value:
            return api_value(value.get("value"))
        converted = {k: api_value(v) for k, v in value.items()}
        return {k: v for k, v in converted.items() if v is not None}
    if isinstance(value, list | tuple):
        return [api_value(v) for v in value]
    return value


# --------------------------------------------------------------------------- builders


def _full_name(template: str, *keys: str) -> Callable[[Props], dict[str, Any]]:
    """A builder giving the body's `name` from props, e.g. projects/{project}/..."""

    def build(props: Props) -> dict[str, Any]:
        return {"name": template.format(*(props.get(key, "-") for key in keys))}

    return build


def _firestore_field(props: Props) -> dict[str, Any]:
    body = _full_name(
        "projects/{}/databases/{}/collectionGroups/{}/fields/{}",
        "project", "database", "collection", "field",
    )(props)
    index_config = props.get("indexConfig")
    if isinstance(index_config, Mapping):
        # Terraform's index entry {queryScope, order | arrayConfig} is the API's Index
        # {queryScope, fields: [{fieldPath, order | arrayConfig}]} on this one field.
        indexes = []
        for index in index_config.get("indexes") or []:
            entry = dict(index) if isinstance(index, Mapping) else {"invalid": index}
            scope = entry.pop("queryScope", None)
            api_index: dict[str, Any] = {"fields": [{"fieldPath": props.get("field"), **entry}]}
            if scope is not None:
                api_index["queryScope"] = scope
            indexes.append(api_index)
        rest = {k: v for k, v in index_config.items() if k != "indexes"}
        body["indexConfig"] = {**rest, "indexes": indexes}
    if "ttlConfig" in props:
        # The API's names; firestore_admin_v1's Field.TtlConfig does not have the newer
        # expirationOffset yet, so a field using it is a finding until this maps it.
        body["ttlConfig"] = props["ttlConfig"]
    return body


def _function(props: Props) -> dict[str, Any]:
    body = _full_name("projects/{}/locations/{}/functions/{}", "project", "location",
                      "name")(props)
    service = props.get("serviceConfig")
    if isinstance(service, Mapping):
        # Terraform's direct_vpc_network_interface blocks, a list pulumi-gcp names in the
        # plural, are the API's directVpcNetworkInterface[]; every other name is the API's.
        body["serviceConfig"] = {
            ("directVpcNetworkInterface" if key == "directVpcNetworkInterfaces" else key): value
            for key, value in service.items()
        }
    return body


def _secret(props: Props) -> dict[str, Any]:
    body = _full_name("projects/{}/secrets/{}", "project", "secretId")(props)
    replication = props.get("replication")
    if isinstance(replication, Mapping):
        # Terraform's replication.auto is the API's replication.automatic.
        body["replication"] = {
            ("automatic" if key == "auto" else key): value for key, value in replication.items()
        }
    return body


def _secret_payload(props: Props) -> dict[str, Any]:
    """AddSecretVersion's payload; empty while the data is unknown (an output)."""
    data = api_value(props.get("secretData"))
    if not isinstance(data, str):
        return {}
    encoded = data if props.get("isSecretDataBase64") else base64.b64encode(
        data.encode()
    ).decode()
    return {"data": encoded}


def _notification_channel(props: Props) -> dict[str, Any]:
    sensitive = props.get("sensitiveLabels")
    if not isinstance(sensitive, Mapping):
        return {}
    # Terraform keeps the channel's secret labels apart; the API has them in labels.
    names = {"authToken": "auth_token", "password": "password", "serviceKey": "service_key"}
    labels = dict(props.get("labels") or {})
    labels.update({names[k]: v for k, v in sensitive.items() if k in names})
    unmapped = {k: v for k, v in sensitive.items() if k not in names}
    # Kept under Terraform's name, which the strict parse refuses: mapped, or a finding.
    return {"labels": labels} | ({"sensitiveLabels": unmapped} if unmapped else {})


def _service_account(props: Props) -> dict[str, Any]:
    account = {
        key: props[key] for key in ("displayName", "description", "disabled") if key in props
    }
    return {"name": f"projects/{props.get('project', '-')}", "accountId": props.get("accountId"),
            "serviceAccount": account}


def _custom_role(props: Props) -> dict[str, Any]:
    role = {key: props[key] for key in ("title", "description", "stage") if key in props}
    if "permissions" in props:
        role["includedPermissions"] = props["permissions"]
    return {"parent": f"projects/{props.get('project', '-')}", "roleId": props.get("roleId"),
            "role": role}


def _binding(props: Props) -> dict[str, Any]:
    body: dict[str, Any] = {"role": props.get("role"), "members": [props.get("member")]}
    if "condition" in props:
        body["condition"] = props["condition"]
    return body


# --------------------------------------------------------------------------- contracts

_BINDING: Final = ApiType("google.iam.v1.policy_pb2", "Binding")
_BINDING_FIELDS: Final = frozenset({"role", "member", "condition"})


def _iam_member(resource_type: str, *locator: str) -> Contract:
    """An `*IamMember`: one binding of one member (the resource it is on: `locator`)."""
    return Contract(resource_type, _BINDING, sources.IAM_POLICY_BINDING, frozenset(),
                    frozenset(locator), _BINDING_FIELDS, _binding)


CONTRACTS: Final[Mapping[str, Contract]] = {
    contract.resource_type: contract
    for contract in (
        Contract(
            "gcp:cloudscheduler/job:Job",
            ApiType("google.cloud.scheduler_v1.types", "Job"),
            sources.SCHEDULER_JOBS_API,
            frozenset({"description", "schedule", "timeZone", "attemptDeadline", "retryConfig",
                       "httpTarget", "pubsubTarget", "appEngineHttpTarget"}),
            # paused: the API pauses with a method of its own (state is output only).
            frozenset({"project", "region", "paused", "deletionPolicy"}),
            frozenset({"name"}),
            _full_name("projects/{}/locations/{}/jobs/{}", "project", "region", "name"),
        ),
        Contract(
            "gcp:cloudfunctionsv2/function:Function",
            # google-cloud-functions' types do not model Direct VPC egress yet: they are
            # parsed with the fields the REST reference documents added.
            ApiType("google.cloud.functions_v2.types", "Function", FUNCTIONS_V2_DIRECT_VPC),
            sources.FUNCTIONS_API,
            frozenset({"description", "buildConfig", "eventTrigger", "labels", "kmsKeyName"}),
            frozenset({"project", "location", "deletionPolicy"}),
            frozenset({"name", "serviceConfig"}),
            _function,
        ),
        Contract(
            "gcp:monitoring/alertPolicy:AlertPolicy",
            ApiType("google.cloud.monitoring_v3.types", "AlertPolicy"),
            sources.MONITORING_ALERT_POLICIES_API,
            frozenset({"displayName", "combiner", "conditions", "alertStrategy",
                       "documentation", "enabled", "notificationChannels", "severity",
                       "userLabels"}),
            frozenset({"project", "deletionPolicy"}),
        ),
        Contract(
            "gcp:monitoring/notificationChannel:NotificationChannel",
            ApiType("google.cloud.monitoring_v3.types", "NotificationChannel"),
            sources.MONITORING_NOTIFICATION_CHANNELS_API,
            frozenset({"type", "displayName", "description", "enabled", "userLabels"}),
            frozenset({"project", "deletionPolicy", "forceDelete"}),
            frozenset({"labels", "sensitiveLabels"}),
            lambda props: {"labels": props.get("labels") or {}} | _notification_channel(props),
        ),
        Contract(
            "gcp:logging/metric:Metric",
            ApiType("google.cloud.logging_v2.types", "LogMetric"),
            sources.LOGGING_METRICS_API,
            frozenset({"name", "description", "filter", "metricDescriptor", "labelExtractors",
                       "valueExtractor", "bucketOptions", "disabled", "bucketName"}),
            frozenset({"project", "deletionPolicy"}),
        ),
        Contract(
            "gcp:firestore/database:Database",
            ApiType("google.cloud.firestore_admin_v1.types", "Database"),
            sources.FIRESTORE_DATABASES_API,
            frozenset({"locationId", "type", "concurrencyMode", "appEngineIntegrationMode",
                       "pointInTimeRecoveryEnablement", "deleteProtectionState", "cmekConfig",
                       "databaseEdition", "tags", "firestoreDataAccessMode",
                       "mongodbCompatibleDataAccessMode", "realtimeUpdatesMode"}),
            frozenset({"project", "deletionPolicy"}),
            frozenset({"name"}),
            _full_name("projects/{}/databases/{}", "project", "name"),
        ),
        Contract(
            "gcp:firestore/field:Field",
            ApiType("google.cloud.firestore_admin_v1.types", "Field"),
            sources.FIRESTORE_FIELDS_API,
            frozenset(),
            frozenset({"project", "database", "collection", "field", "deletionPolicy",
                       "skipWait"}),
            frozenset({"indexConfig", "ttlConfig"}),
            _firestore_field,
        ),
        Contract(
            "gcp:secretmanager/secret:Secret",
            ApiType("google.cloud.secretmanager_v1.types", "Secret"),
            sources.SECRETS_API,
            frozenset({"labels", "annotations", "expireTime", "ttl", "rotation", "topics",
                       "versionAliases", "versionDestroyTtl", "tags"}),
            frozenset({"project", "deletionPolicy", "deletionProtection"}),
            frozenset({"secretId", "replication"}),
            _secret,
        ),
        Contract(
            "gcp:secretmanager/secretVersion:SecretVersion",
            ApiType("google.cloud.secretmanager_v1.types", "SecretPayload"),
            sources.SECRET_PAYLOAD_API,
            frozenset(),
            # secret: AddSecretVersion's parent; enabled: a later enable/disable call.
            frozenset({"secret", "project", "enabled", "deletionPolicy",
                       "isSecretDataBase64"}),
            frozenset({"secretData"}),
            _secret_payload,
        ),
        Contract(
            "gcp:serviceaccount/account:Account",
            ApiType("google.cloud.iam_admin_v1.types", "CreateServiceAccountRequest"),
            sources.IAM_SERVICE_ACCOUNTS_API,
            frozenset(),
            frozenset({"project", "createIgnoreAlreadyExists", "deletionPolicy"}),
            frozenset({"accountId", "displayName", "description", "disabled"}),
            _service_account,
        ),
        Contract(
            "gcp:projects/iAMCustomRole:IAMCustomRole",
            ApiType("google.cloud.iam_admin_v1.types", "CreateRoleRequest"),
            sources.IAM_ROLES_API,
            frozenset(),
            frozenset({"project", "deletionPolicy"}),
            frozenset({"roleId", "title", "description", "stage", "permissions"}),
            _custom_role,
        ),
        Contract(
            "gcp:cloudtasks/queue:Queue",
            ApiType("google.cloud.tasks_v2.types", "Queue"),
            sources.TASKS_QUEUES_API,
            frozenset({"appEngineRoutingOverride", "rateLimits", "retryConfig",
                       "stackdriverLoggingConfig"}),
            # desiredState: the API pauses and resumes with methods (state is output only).
            frozenset({"project", "location", "deletionPolicy", "desiredState"}),
            frozenset({"name"}),
            _full_name("projects/{}/locations/{}/queues/{}", "project", "location", "name"),
            # The REST API's v2 Queue has httpTarget (queue-level HTTP task defaults); the
            # v2 protos of google-cloud-tasks 2.23 do not yet, v2beta3's have the same
            # HttpTarget message (uriOverride, httpMethod, headerOverrides, oauthToken,
            # oidcToken), so that part is parsed with it.
            parsed_apart={"httpTarget": ApiType("google.cloud.tasks_v2beta3.types",
                                                "HttpTarget")},
        ),
        _iam_member("gcp:projects/iAMMember:IAMMember", "project"),
        _iam_member("gcp:serviceaccount/iAMMember:IAMMember", "serviceAccountId"),
        _iam_member("gcp:cloudrunv2/serviceIamMember:ServiceIamMember",
                    "project", "location", "name"),
        _iam_member("gcp:artifactregistry/repositoryIamMember:RepositoryIamMember",
                    "project", "location", "repository"),
        _iam_member("gcp:secretmanager/secretIamMember:SecretIamMember", "project", "secretId"),
        _iam_member("gcp:cloudtasks/queueIamMember:QueueIamMember",
                    "project", "location", "name"),
        # A runtime's grants (infra/job_runtime.py): on a bucket, a dataset, a topic.
        _iam_member("gcp:storage/bucketIAMMember:BucketIAMMember", "bucket"),
        _iam_member("gcp:bigquery/datasetIamMember:DatasetIamMember", "project", "datasetId"),
        _iam_member("gcp:pubsub/topicIAMMember:TopicIAMMember", "project", "topic"),
    )
}

UNKNOWN_PROPERTY_RULE_TEXT: Final = (
    "a property the contract converter does not know (it fails closed): map it to the "
    "API's request in infra/contracts/convert.py"
)


class Declared(Protocol):
    """What a check reads of a declared resource (operator_tools/offline.py's DeclaredResource
    has it)."""

    @property
    def type(self) -> str: ...

    @property
    def name(self) -> str: ...

    @property
    def props(self) -> Props: ...


def request_body(contract: Contract, props: Props) -> dict[str, Any]:
    """The API request body of a declaration (unknown properties are left out)."""
    body = {key: props[key] for key in contract.same_names if key in props}
    body.update(contract.build(props))
    cleaned = api_value(body)
    assert isinstance(cleaned, dict)
    return cleaned


def unknown_properties(contract: Contract, resource: Declared) -> Iterator[Finding]:
    rule = Rule(UNKNOWN_PROPERTY_RULE_TEXT, contract.source)
    for key in sorted(set(resource.props) - contract.known()):
        yield Finding(resource.type, resource.name, key, resource.props[key], rule)


# 'Failed to parse retryConfig field: ... at Job.retryConfig.minBackoffDuration.' or
# 'Message type "..." has no field named "foo" at "Job.retryConfig".'
_PARSE_ERROR_PATH: Final = re.compile(r'(?:has no field named "(?P<field>[^"]+)" )?at "?'
                                      r'(?P<path>[A-Za-z_][\w.\[\]]*?)"?\.*$', re.S)


def parse_strictly(contract: Contract, resource: Declared) -> Iterator[Finding]:
    """Parse the request body with Google's client type, unknown fields refused (and each
    part parsed apart with its own type)."""
    yield from _parse(contract, resource, contract.api_type, request_body(contract,
                                                                         resource.props), "")
    for key, api_type in contract.parsed_apart.items():
        part = api_value(resource.props.get(key))
        if isinstance(part, Mapping):
            yield from _parse(contract, resource, api_type, part, key)


def _parse(contract: Contract, resource: Declared, api_type: ApiType,
           body: Mapping[str, Any], prefix: str) -> Iterator[Finding]:
    from google.protobuf import json_format  # type: ignore[import-untyped]

    try:
        json_format.ParseDict(body, api_type.message_class()(), ignore_unknown_fields=False)
    except json_format.ParseError as error:
        detail = str(error).splitlines()[0]
        path = _error_property(detail)
        rule = Rule(f"{api_type.full_name} refuses it: {detail}", contract.source)
        shown = ".".join(part for part in (prefix, path) if part)
        yield Finding(resource.type, resource.name, shown or "(request)",
                      _lookup(body, path), rule)


def _error_property(detail: str) -> str:
    """The property path a ParseError names, without the message type's own name."""
    match = _PARSE_ERROR_PATH.search(detail.split(" Available Fields")[0].strip())
    if match is None:  # e.g. "Failed to parse labels field: expected string ..."
        return ".".join(re.findall(r"Failed to parse (\w+) field", detail))
    parts = match.group("path").split(".")[1:]
    if match.group("field"):
        parts.append(match.group("field"))
    return ".".join(parts)


_PATH_STEP: Final = re.compile(r"([^.\[\]]+)|\[(\d+)\]")


def _lookup(body: Mapping[str, Any], path: str) -> Any:
    """The value at a path like "indexConfig.indexes[0].fields[0].mode" (None if absent)."""
    current: Any = body
    for key, index in _PATH_STEP.findall(path):
        if key and isinstance(current, Mapping) and key in current:
            current = current[key]
        elif index and isinstance(current, list) and int(index) < len(current):
            current = current[int(index)]
        else:
            return None
    return current
