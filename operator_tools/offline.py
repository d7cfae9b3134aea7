"""Run the kit's Pulumi program offline, under Pulumi's mocks, and see what it declares.

No Pulumi CLI, cloud account or network: the program runs in-process against a mock
resource monitor that records every resource registration. Used by the offline plan
(`python -m operator_tools plan dev`), the infra tests and the policy pack's offline check.

Public API::

    from operator_tools.offline import declare_stack, run_offline, load_stack_config

    resources = declare_stack(load_stack_config("dev"))      # list[DeclaredResource]
    run = run_offline(load_stack_config("prod"))             # resources + stack outputs
    jobs = run.of_type("gcp:cloudscheduler/job:Job")

`DeclaredResource` and `OfflineRun` are operator_tools/declared.py's, exported here too.
`props` of a DeclaredResource are the resource's inputs exactly as the engine (and a
CrossGuard policy pack) sees them: camelCase keys, nested objects as dicts, outputs of
other resources resolved to the values the mocks give them. Assets are shown as
`{"__asset": "file", "path": ...}`. The mocks give realistic outputs: service account
e-mails `<accountId>@<project>.iam.gserviceaccount.com`, the function's
`serviceConfig.uri` `https://<name>-<hash>-<region code>.a.run.app` and
`serviceConfig.service` `projects/P/locations/L/services/<name>`, and so on.

Every run happens in a copy of the current `contextvars` context: Pulumi keeps its
settings, root stack and config in context variables, so runs never leak into each
other or into other code in the same process that uses `pulumi.runtime.set_mocks`.
A config error raises `infra.config.ConfigError` before any resource is declared.
"""

from __future__ import annotations

import contextvars
import dataclasses
import hashlib
import json
import threading
import warnings
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Final

import pulumi
from pulumi.runtime import mocks as pulumi_mocks
from pulumi.runtime import rpc
from pulumi.runtime.stack import run_pulumi_func
from pulumi.runtime.sync_await import _ensure_event_loop, _sync_await

from infra.config import GCP_PROJECT_KEY, GCP_REGION_KEY, PROJECT_NAME, load_config
from infra.program import DEFAULT_BUILD_DIR, DEFAULT_SOURCE_DIR, main
from operator_tools.declared import DeclaredResource, OfflineRun
from operator_tools.job_logic import check_job_logic
from operator_tools.offline_host import hosted_run
from operator_tools.stack_files import (
    STACK_FILE_DIR,
    StackFileError,
    load_stack_config,
    stack_file,
    stack_name_of,
    stack_names,
    stack_path,
)

__all__ = [
    "STACK_FILE_DIR",
    "DeclaredResource",
    "OfflineRun",
    "StackFileError",
    "checked_run",
    "declare_stack",
    "engine_config",
    "iter_stacks",
    "load_checked_stack",
    "load_stack_config",
    "run_checked_stack",
    "run_offline",
    "run_stack",
    "stack_file",
    "stack_name_of",
    "stack_names",
    "stack_path",
]

STACK_TYPE: Final = "pulumi:pulumi:Stack"
MOCK_PROJECT_NUMBER: Final = "123456789012"
_GCP_ALIAS_WARNING: Final = r"gcp\.storage\.getTransferProjectServieAccount"


# --------------------------------------------------------------------------- stack files


def load_checked_stack(
    stack_or_path: str | Path,
    directory: Path = STACK_FILE_DIR,
    source_dir: Path = DEFAULT_SOURCE_DIR,
) -> dict[str, Any]:
    """`load_stack_config`, then what `pulumi up` and the deployed function would reject
    (`run_checked_stack`'s checks); the stack's config mapping."""
    values = load_stack_config(stack_or_path, directory)
    checked_run(values, source_dir=source_dir)
    return values


def run_checked_stack(
    stack_or_path: str | Path,
    directory: Path = STACK_FILE_DIR,
    source_dir: Path = DEFAULT_SOURCE_DIR,
) -> OfflineRun:
    """What `make plan` and `make policy-check` read a stack with: its file's config
    checked (`checked_run`) and the program's run under mocks for it."""
    path = stack_path(stack_or_path, directory)
    return checked_run(load_stack_config(path), stack=stack_name_of(path), source_dir=source_dir)


def checked_run(
    values: Mapping[str, Any],
    *,
    stack: str = "dev",
    source_dir: Path = DEFAULT_SOURCE_DIR,
    build_dir: Path = DEFAULT_BUILD_DIR,
) -> OfflineRun:
    """The program's one run under mocks for config mapping `values`, once it passes what
    `pulumi up` and the deployed function would reject: the config validated first
    (`ConfigError` before anything is declared), then every job's `module:function`
    imported and every declared function started from that run's archives, in the
    function's environment (operator_tools/job_logic.py)."""
    config = load_config(values)
    run = run_offline(values, stack=stack, source_dir=source_dir, build_dir=build_dir)
    check_job_logic(values, config, run, source_dir)
    return dataclasses.replace(run, dst_chosen=config.dst_chosen_by_job_id())


def engine_config(stack_config: Mapping[str, Any]) -> dict[str, str]:
    """Config values as the Pulumi engine hands them to a program: all strings."""
    converted: dict[str, str] = {}
    for key, value in stack_config.items():
        if isinstance(value, bool):
            converted[key] = "true" if value else "false"
        elif isinstance(value, str):
            converted[key] = value
        elif isinstance(value, int | float):
            converted[key] = str(value)
        else:
            converted[key] = json.dumps(value)
    return converted


# --------------------------------------------------------------------------- mocks


def _short_hash(*parts: str, length: int = 10) -> str:
    digest = hashlib.sha256("/".join(parts).encode()).hexdigest()
    # run.app hashes are lowercase letters and digits
    return "".join(c if c.isalpha() else chr(ord("a") + int(c)) for c in digest[:length])


def region_code(region: str) -> str:
    """europe-west1 -> "ew" (the short code in run.app hostnames)."""
    words = region.rstrip("0123456789").split("-")
    return "".join(w[0] for w in words if w)


class KitMocks(pulumi_mocks.Mocks):
    """Realistic outputs for the resource types the kit declares."""

    def __init__(self, project: str, region: str) -> None:
        self.project = project
        self.region = region

    def call(
        self, args: pulumi_mocks.MockCallArgs
    ) -> tuple[dict[str, Any], list[tuple[str, str]] | None]:
        if args.token == "gcp:organizations/getProject:getProject":
            project = args.args.get("projectId") or self.project
            return (
                {
                    "projectId": project,
                    "number": MOCK_PROJECT_NUMBER,
                    "name": project,
                    "id": f"projects/{project}",
                },
                [],
            )
        if args.token == "gcp:projects/getProjectService:getProjectService":
            # The preflight's lookup: the service exists (enabled), as the provider reads it.
            project = args.args.get("project") or self.project
            service = args.args.get("service")
            return (
                {
                    "project": project,
                    "service": service,
                    "id": f"{project}/{service}",
                    "disableOnDestroy": True,
                    "disableDependentServices": False,
                },
                [],
            )
        return {}, []

    def new_resource(
        self, args: pulumi_mocks.MockResourceArgs
    ) -> tuple[str | None, dict[str, Any]]:
        inputs: dict[str, Any] = dict(args.inputs)
        project = str(inputs.get("project") or self.project)
        kind = args.typ
        if kind == "gcp:serviceaccount/account:Account":
            email = f"{inputs['accountId']}@{project}.iam.gserviceaccount.com"
            name = f"projects/{project}/serviceAccounts/{email}"
            state = {
                **inputs,
                "email": email,
                "member": f"serviceAccount:{email}",
                "name": name,
                "uniqueId": str(int(_short_hash(email, length=8), 36)),
            }
            return name, state
        if kind == "gcp:cloudfunctionsv2/function:Function":
            name = str(inputs["name"])
            location = str(inputs.get("location") or self.region)
            service_config = dict(inputs.get("serviceConfig") or {})
            service_config["uri"] = (
                f"https://{name}-{_short_hash(project, location, name)}-"
                f"{region_code(location)}.a.run.app"
            )
            service_config["service"] = f"projects/{project}/locations/{location}/services/{name}"
            function_id = f"projects/{project}/locations/{location}/functions/{name}"
            state = {
                **inputs,
                "serviceConfig": service_config,
                "url": f"https://{location}-{project}.cloudfunctions.net/{name}",
                "state": "ACTIVE",
                "environment": "GEN_2",
            }
            return function_id, state
        if kind == "gcp:firestore/database:Database":
            name = str(inputs["name"])
            return f"projects/{project}/databases/{name}", {**inputs, "uid": _short_hash(name)}
        if kind == "gcp:storage/bucket:Bucket":
            name = str(inputs["name"])
            return name, {
                **inputs,
                "url": f"gs://{name}",
                "selfLink": f"https://www.googleapis.com/storage/v1/b/{name}",
            }
        if kind == "gcp:storage/bucketObject:BucketObject":
            return f"{inputs['bucket']}-{inputs['name']}", {
                **inputs,
                "generation": 1,
                "mediaLink": f"https://storage.googleapis.com/{inputs['bucket']}/{inputs['name']}",
            }
        if kind == "gcp:artifactregistry/repository:Repository":
            location = str(inputs.get("location") or self.region)
            repo_id = str(inputs["repositoryId"])
            full = f"projects/{project}/locations/{location}/repositories/{repo_id}"
            return full, {**inputs, "name": repo_id}
        if kind == "gcp:cloudscheduler/job:Job":
            region = str(inputs.get("region") or self.region)
            job_id = f"projects/{project}/locations/{region}/jobs/{inputs['name']}"
            return job_id, {**inputs, "state": "ENABLED"}
        if kind == "gcp:projects/service:Service":
            return f"{project}/{inputs['service']}", inputs
        if kind == "gcp:projects/iAMCustomRole:IAMCustomRole":
            name = f"projects/{project}/roles/{inputs['roleId']}"
            return name, {**inputs, "name": name, "deleted": False}
        if not args.custom:
            return "", inputs  # component resources
        return f"{args.name}-id", {**inputs, "etag": "BwXmock"}


class _RecordingMonitor(pulumi_mocks.MockMonitor):
    """The mock monitor, also recording each registration with its parent and deps."""

    def __init__(self, mocks: pulumi_mocks.Mocks, sink: list[DeclaredResource]) -> None:
        super().__init__(mocks)
        self._sink = sink
        self._lock = threading.Lock()

    def RegisterResource(self, request: Any) -> Any:
        response = super().RegisterResource(request)  # type: ignore[no-untyped-call]
        if request.type == STACK_TYPE:
            return response
        _ensure_event_loop()  # type: ignore[no-untyped-call]
        inputs = rpc.deserialize_properties(request.object)
        registered = self.resources.get(response.urn)
        declared = DeclaredResource(
            type=request.type,
            name=request.name,
            urn=response.urn,
            props=_plain(inputs),
            parent=request.parent or None,
            custom=bool(request.custom),
            dependencies=tuple(sorted(request.dependencies)),
            protect=bool(getattr(request, "protect", False)),
            outputs=_plain(registered.state) if registered is not None else {},
            aliases=tuple(_alias(a) for a in getattr(request, "aliases", ())),
        )
        with self._lock:
            self._sink.append(declared)
        return response


def _alias(alias: Any) -> dict[str, Any]:
    """An alias of a RegisterResource request as plain data."""
    if alias.WhichOneof("alias") == "urn":
        return {"urn": alias.urn}
    spec = alias.spec  # only the fields set: "" and False are "the resource's own"
    fields = ("name", "type", "stack", "project", "parentUrn", "noParent")
    return {f: getattr(spec, f) for f in fields if getattr(spec, f)}


def _plain(value: Any) -> Any:
    """Inputs as plain data: dicts, lists, scalars; assets as small descriptors."""
    if isinstance(value, pulumi.FileAsset):
        return {"__asset": "file", "path": str(value.path)}
    if isinstance(value, pulumi.StringAsset):
        return {"__asset": "string", "text": value.text}
    if isinstance(value, pulumi.Asset | pulumi.Archive):
        return {"__asset": type(value).__name__}
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


# --------------------------------------------------------------------------- running


ProgramFn = Callable[[], Mapping[str, Any]]


def run_offline(
    stack_config: Mapping[str, Any],
    *,
    stack: str = "dev",
    source_dir: Path = DEFAULT_SOURCE_DIR,
    build_dir: Path = DEFAULT_BUILD_DIR,
    sink: list[DeclaredResource] | None = None,
    program: ProgramFn | None = None,
) -> OfflineRun:
    """Run the program under mocks with `stack_config`; return what it declared.

    `stack_config` is a stack file's `config:` mapping (native values, full keys).
    `sink`, if given, receives each resource as it is registered, also when the program
    fails (tests use it to show that a config error declares nothing). `program`
    replaces the kit's program (for tests of this module).
    """
    records: list[DeclaredResource] = sink if sink is not None else []
    project = str(stack_config.get(GCP_PROJECT_KEY) or "offline-project")
    region = str(stack_config.get(GCP_REGION_KEY) or "europe-west1")

    def body() -> dict[str, Any]:
        monitor = _RecordingMonitor(KitMocks(project, region), records)
        pulumi_mocks.set_mocks(
            KitMocks(project, region),
            project=PROJECT_NAME,
            stack=stack,
            preview=False,
            monitor=monitor,
        )
        pulumi.runtime.set_all_config(engine_config(stack_config))
        result: dict[str, Any] = {}

        async def run() -> None:
            if program is not None:
                outputs = program()
            else:
                outputs = main(source_dir=source_dir, build_dir=build_dir)
            resolved = await pulumi.Output.from_input(dict(outputs)).future()
            result.update(resolved or {})

        _sync_await(run_pulumi_func(run))
        return result

    with hosted_run(), warnings.catch_warnings():
        # pulumi_gcp warns about its own misspelt alias module when the SDK loads it.
        warnings.filterwarnings("ignore", message=_GCP_ALIAS_WARNING, category=DeprecationWarning)
        # A fresh context: set_mocks, the root stack and the config stay inside it. Held by
        # nothing once the run is over, so that the run's garbage, which it reaches, is
        # collected on the way out (hosted_run).
        outputs = contextvars.copy_context().run(body)
    return OfflineRun(stack=stack, resources=tree_order(records), outputs=outputs)


def tree_order(resources: Iterable[DeclaredResource]) -> tuple[DeclaredResource, ...]:
    """Each resource followed by its children; siblings by (type, name). Deterministic."""
    items = list(resources)
    urns = {r.urn for r in items}
    children: dict[str | None, list[DeclaredResource]] = {}
    for resource in items:
        parent = resource.parent if resource.parent in urns else None
        children.setdefault(parent, []).append(resource)
    ordered: list[DeclaredResource] = []

    def visit(parent: str | None) -> None:
        for resource in sorted(children.get(parent, []), key=lambda r: (r.type, r.name)):
            ordered.append(resource)
            visit(resource.urn)

    visit(None)
    return tuple(ordered)


def declare_stack(
    stack_config: Mapping[str, Any],
    *,
    stack: str = "dev",
    source_dir: Path = DEFAULT_SOURCE_DIR,
    build_dir: Path = DEFAULT_BUILD_DIR,
) -> list[DeclaredResource]:
    """The resources the program declares for `stack_config` (see `run_offline`)."""
    run = run_offline(stack_config, stack=stack, source_dir=source_dir, build_dir=build_dir)
    return list(run.resources)


def run_stack(stack: str, **kwargs: Any) -> OfflineRun:
    """`run_offline` with the config of `Pulumi.<stack>.yaml`."""
    return run_offline(load_stack_config(stack), stack=stack, **kwargs)


def iter_stacks(directory: Path = STACK_FILE_DIR) -> Iterable[tuple[str, OfflineRun]]:
    """(stack, run) for every stack file, in name order."""
    for name in stack_names(directory):
        yield name, run_offline(load_stack_config(name, directory), stack=name)
