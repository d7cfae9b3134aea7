"""Runtimes (`runtimes`): what a job needs to do real work, apart from every other job.

A runtime is a Cloud Run function of its own that runs the jobs naming it (`jobs[].runtime`),
with its own runtime account and records database, and what the team declares for it:
`resources` (the stack's function keys, each unset one the stack's), `settings` (plain
environment variables; `demoSettings` replace or add some in `make demo`/`make serve` only),
`secrets` (Secret Manager secrets by name, as environment variables or files; never values),
`grants` (IAM roles for its account on the resources the team names) and `network` (VPC
egress). Each model here checks its own fields; the rules across runtimes and jobs (names,
lengths, which job runs where) are StackConfig's.
"""

from __future__ import annotations

import posixpath
import re
from typing import Annotated, Any, ClassVar, Final, Literal

from pydantic import BeforeValidator, Field, field_validator, model_validator

from infra.config.errors import ProblemList, did_you_mean, invalid
from infra.config.fields import Bool, ConfigModel, Hint
from infra.config.names import (
    DATABASE_ID_MAX_LENGTH,
    SERVICE_ACCOUNT_ID_MAX_LENGTH,
    runtime_database_of,
    service_account_id,
)
from infra.config.service import FunctionSettings

RUNTIME_NAME: Final = r"^[a-z][a-z0-9-]{0,20}[a-z0-9]$"
RESERVED_RUNTIME_NAMES: Final = frozenset({"runtime", "build", "invoker", "proxy", "watchdog"})
"""The kit's own roles: their accounts and functions are `<namePrefix>-<role>` too."""
ENV_NAME: Final = r"^[A-Za-z_][A-Za-z0-9_]*$"
KIT_ENV_PREFIX: Final = "DEDUP_"
# Set by Cloud Run and the Functions Framework on every instance (Cloud Run functions'
# "reserved environment variables"); a setting of the same name would be overwritten.
RESERVED_ENV_NAMES: Final = frozenset({
    "PORT", "K_SERVICE", "K_REVISION", "K_CONFIGURATION", "FUNCTION_TARGET",
    "FUNCTION_SIGNATURE_TYPE", "CLOUD_RUN_JOB", "CLOUD_RUN_EXECUTION",
})
SECRET_ID: Final = r"^[A-Za-z0-9_-]{1,255}$"
SECRET_VERSION: Final = r"^(latest|[1-9][0-9]*)$"
# Where a secret file may not be mounted: the mount shadows its whole folder, and these
# hold the function's code (/workspace) or the system's.
# (/layers and /cnb: the buildpacks' Python, packages and launcher; /cloudsql, /pod and
# /var/log: Cloud Run's own mounts.)
FORBIDDEN_MOUNTS: Final = ("/workspace", "/layers", "/cnb", "/dev", "/proc", "/sys", "/etc",
                           "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32",
                           "/tmp", "/var/log", "/cloudsql", "/pod")
GRANT_TARGETS: Final = ("bucket", "dataset", "topic", "secret", "project")
SECRET_ACCESSOR_ROLE: Final = "roles/secretmanager.secretAccessor"
BASIC_ROLES: Final = frozenset({"roles/owner", "roles/editor", "roles/viewer"})
ROLE: Final = (r"^(roles/[A-Za-z0-9_.]+|(projects|organizations)/[A-Za-z0-9_.:-]+/roles/"
               r"[A-Za-z0-9_.]+)$")
EGRESS: Final = {"privateRangesOnly": "PRIVATE_RANGES_ONLY", "allTraffic": "ALL_TRAFFIC"}
"""`network.egress` -> the connector's egress setting."""
CONNECTOR: Final = re.compile(r"^(projects/[a-z][a-z0-9-]+/locations/[a-z0-9-]+/connectors/)?"
                              r"[a-z][a-z0-9-]{0,23}[a-z0-9]$")


def _version_text(version: Any) -> Any:
    """A version number written unquoted (`version: 3`) is that version."""
    return str(version) if isinstance(version, int) and not isinstance(version, bool) else version


def env_name_problem(name: str) -> tuple[str, str] | None:
    """(what, fix) when `name` cannot be one of a runtime's environment variables."""
    if not re.match(ENV_NAME, name):
        return (f"{name!r} is not an environment variable name",
                "use letters, digits and '_', not starting with a digit, e.g. EXPORT_BUCKET")
    if name.upper().startswith(KIT_ENV_PREFIX):
        return (f"{name!r} starts with {KIT_ENV_PREFIX}, which the kit's own settings use",
                "choose a name without the DEDUP_ prefix")
    if name in RESERVED_ENV_NAMES:
        return (f"{name!r} is set by Cloud Run on every instance",
                "choose another name")
    return None


def _env_names(values: dict[str, str]) -> dict[str, str]:
    problems = ProblemList()
    for name in values:
        if (wrong := env_name_problem(name)) is not None:
            problems.add(name, *wrong)
    problems.raise_any()
    return values


class SecretSettings(ConfigModel):
    """One Secret Manager secret of gcp:project, as an environment variable or a file."""

    setting_of: ClassVar[str] = "a secret setting"
    secret: str = Field(
        pattern=SECRET_ID, description="The secret's ID in gcp:project (its name, never its "
        "value)", json_schema_extra=Hint("a Secret Manager secret ID", "use the secret's ID "
                                         "(letters, digits, '-' or '_'), e.g. api-token"))
    env: str | None = Field(default=None, description="The environment variable it is "
                            "exposed as (read at instance start); not with path")
    path: str | None = Field(
        default=None, pattern=r"^/[A-Za-z0-9._/-]+$", description="The file it is mounted "
        "as, e.g. /secrets/api/token (read at each access: `latest` follows new versions); "
        "its folder holds no other file; not with env",
        json_schema_extra=Hint("an absolute file path", "use a path like "
                               "/secrets/<name>/<file>"))
    version: Annotated[str, BeforeValidator(_version_text)] = Field(
        default="latest", pattern=SECRET_VERSION, description="`latest` or "
                         "a version number (e.g. 3) to pin",
                         json_schema_extra=Hint("a secret version", "use 'latest' or a "
                                                "version number such as '3'"))

    @field_validator("env")
    @classmethod
    def _an_env_name(cls, env: str | None) -> str | None:
        if env is not None and (wrong := env_name_problem(env)) is not None:
            raise invalid(*wrong)
        return env

    @field_validator("path")
    @classmethod
    def _a_mountable_path(cls, path: str | None) -> str | None:
        if path is None:
            return None
        if path.endswith("/"):
            raise invalid(f"{path!r} names a folder, not a file", "give the file's path, e.g. "
                          "/secrets/api/token")
        folder = posixpath.dirname(posixpath.normpath(path))
        if folder == "/" or ".." in path.split("/"):
            raise invalid(f"{path!r} would mount the secret's folder at {folder!r}",
                          "put the file in a folder of its own, e.g. /secrets/api/token")
        hit = next((f for f in FORBIDDEN_MOUNTS if folder == f or folder.startswith(f"{f}/")),
                   None)
        if hit is not None:
            raise invalid(f"{path!r} would mount over {hit}, which the function needs (the "
                          "mount hides the whole folder)", "use a folder of its own such as "
                          "/secrets/<name>/")
        return path

    @model_validator(mode="after")
    def _env_or_path(self) -> SecretSettings:
        if (self.env is None) == (self.path is None):
            raise invalid("gives both env and path" if self.env else "gives neither env nor "
                          "path", "give exactly one: env (an environment variable) or path "
                          "(a file)", "env")
        return self

    @property
    def mount_folder(self) -> str:
        """The folder a file secret is mounted at (the volume's mountPath)."""
        return posixpath.dirname(posixpath.normpath(self.path or ""))

    @property
    def file_name(self) -> str:
        return posixpath.basename(self.path or "")


class GrantSettings(ConfigModel):
    """One IAM role for the runtime's account, on exactly one resource the team names."""

    setting_of: ClassVar[str] = "a grant setting"
    role: str = Field(pattern=ROLE, description="A predefined (`roles/...`) or custom role; "
                      "never a basic role (owner, editor, viewer)",
                      json_schema_extra=Hint("a role", "use a role name like "
                                             "roles/storage.objectCreator"))
    bucket: str | None = Field(default=None, pattern=r"^[a-z0-9][a-z0-9._-]{1,221}[a-z0-9]$",
                               description="A Cloud Storage bucket's name")
    dataset: str | None = Field(
        default=None, pattern=r"^([a-z][a-z0-9-]{4,28}[a-z0-9][.:])?[A-Za-z0-9_]{1,1024}$",
        description="A BigQuery dataset: its ID in gcp:project, or `<project>.<dataset>`")
    topic: str | None = Field(
        default=None, pattern=r"^(projects/[a-z][a-z0-9-]{4,28}[a-z0-9]/topics/)?"
        r"[A-Za-z][A-Za-z0-9._~%+-]{2,254}$",
        description="A Pub/Sub topic: its ID in gcp:project, or `projects/<p>/topics/<t>`")
    secret: str | None = Field(default=None, pattern=SECRET_ID, description="A Secret "
                               "Manager secret's ID in gcp:project (to read one, declare it "
                               "under secrets instead)")
    project: Bool = Field(default=False, description="`true`: on gcp:project itself, the last "
                          "resort (advised against by the policy pack)")

    @field_validator("role")
    @classmethod
    def _not_basic(cls, role: str) -> str:
        if role in BASIC_ROLES:
            raise invalid(f"{role!r} is a basic role, which reaches nearly every resource of "
                          "the project, the kit's own included", "grant a predefined role on "
                          "the one resource the job uses, e.g. roles/storage.objectCreator "
                          "on its bucket")
        return role

    @model_validator(mode="after")
    def _one_resource(self) -> GrantSettings:
        named = [key for key in GRANT_TARGETS if getattr(self, key)]
        if len(named) != 1:
            raise invalid(f"names {' and '.join(named) if named else 'no resource'}",
                          "give exactly one of " + ", ".join(GRANT_TARGETS[:-1])
                          + " or project: true", "role")
        if self.secret and self.role == SECRET_ACCESSOR_ROLE:
            raise invalid(f"reads secret {self.secret!r} through a grant, which gives the "
                          "runtime its value with no variable or file to find it in (and "
                          "policy dedup-secret-readers-declared refuses a reader that does "
                          "not declare the secret)", f"declare it under secrets instead: "
                          f"{{secret: {self.secret}, env: <NAME>}}", "role")
        return self

    @property
    def target(self) -> tuple[str, str]:
        """(kind, name): `bucket`, `dataset`, `topic`, `secret`, or ("project", "")."""
        kind = next(key for key in GRANT_TARGETS if getattr(self, key))
        return kind, "" if kind == "project" else str(getattr(self, kind))


DIRECT_VPC_KEY: Final = "directVpc"
DIRECT_VPC_REFUSED: Final = (
    "Direct VPC egress is not offered: Google authorises it by roles/run.invoker for the "
    "function's own account (https://cloud.google.com/functions/docs/running/direct-vpc), and "
    "an account that runs job code and may invoke a function of the kit is what the policy "
    "pack refuses (dedup-runtime-account-not-a-caller): job code could mint its tokens",
    "use vpcConnector, a Serverless VPC Access connector, which needs no such grant")


class NetworkSettings(ConfigModel):
    """VPC egress of the runtime's function, through a Serverless VPC Access connector."""

    setting_of: ClassVar[str] = "a network setting"
    vpc_connector: str = Field(
        description="A Serverless VPC Access connector: its name (the one of that name in "
        "gcp:project and gcp:region) or `projects/<p>/locations/<r>/connectors/<c>`",
        json_schema_extra=Hint("a connector", "use a connector name or its full name "
                               "projects/<p>/locations/<r>/connectors/<c>"))
    egress: Literal["privateRangesOnly", "allTraffic"] = Field(
        default="privateRangesOnly", description="Which traffic goes through the connector: "
        "`privateRangesOnly` (internal addresses) or `allTraffic`",
        json_schema_extra=Hint("an egress setting", "use 'privateRangesOnly' or 'allTraffic'"))

    @model_validator(mode="before")
    @classmethod
    def _no_direct_vpc(cls, raw: Any) -> Any:
        if isinstance(raw, dict) and DIRECT_VPC_KEY in raw:
            raise invalid(*DIRECT_VPC_REFUSED, DIRECT_VPC_KEY)
        return raw

    @field_validator("vpc_connector")
    @classmethod
    def _a_connector(cls, connector: str) -> str:
        if not CONNECTOR.match(connector):
            raise invalid(f"{connector!r} is not a connector", "use a connector name (2-25 "
                          "lowercase letters, digits or '-') or "
                          "projects/<p>/locations/<r>/connectors/<c>")
        return connector


class RuntimeSettings(ConfigModel):
    """One runtime: its own function, account and records, and what its jobs need."""

    setting_of: ClassVar[str] = "a runtime setting"
    name: str = Field(
        pattern=RUNTIME_NAME, description="Unique in the stack; its function and account are "
        "`<namePrefix>-<name>` (at most 30 characters), its records database "
        "`<databaseName>-<name>`; not runtime, build, invoker, proxy or watchdog",
        json_schema_extra=Hint("a runtime name", "use 2-22 lowercase letters, digits or '-', "
                               "starting with a letter, e.g. sync"))
    resources: FunctionSettings | None = Field(
        default=None, description="The function's resources, with the stack's keys "
        "(functionTimeoutSeconds, functionMemory, minInstances, maxInstances, "
        "maxRequestConcurrency); unset keys are the stack's")
    settings: dict[str, str] = Field(default={}, description="Plain environment variables "
                                     "of its jobs (no secrets: they are stored in the stack "
                                     "file and the function's configuration)")
    demo_settings: dict[str, str] = Field(default={}, description="Settings that replace or "
                                          "add to `settings` in `make demo` and `make serve` "
                                          "only, e.g. a local URL for an internal API")
    secrets: tuple[SecretSettings, ...] = Field(default=(), description="Secret Manager "
                                                "secrets its jobs read; only this runtime's "
                                                "account may read them")
    grants: tuple[GrantSettings, ...] = Field(default=(), description="IAM roles for its "
                                              "account, each on one resource")
    network: NetworkSettings | None = Field(default=None, description="VPC egress")

    @field_validator("name")
    @classmethod
    def _not_reserved(cls, name: str) -> str:
        if name in RESERVED_RUNTIME_NAMES:
            raise invalid(f"{name!r} is the name of one of the kit's own accounts or "
                          "functions", "choose another name, e.g. sync or exports")
        return name

    @field_validator("settings")
    @classmethod
    def _settings_are_env(cls, settings: dict[str, str]) -> dict[str, str]:
        return _env_names(settings)

    @field_validator("demo_settings")
    @classmethod
    def _demo_settings_are_env(cls, settings: dict[str, str]) -> dict[str, str]:
        return _env_names(settings)

    @model_validator(mode="after")
    def _names_apart(self) -> RuntimeSettings:
        problems = ProblemList()
        seen_env: dict[str, int] = {}
        folders: dict[str, int] = {}
        for index, secret in enumerate(self.secrets):
            if secret.env is not None:
                if secret.env in self.settings:
                    problems.add(("secrets", index, "env"), f"{secret.env!r} is also a plain "
                                 "setting", "remove it from settings or use another name")
                if secret.env in seen_env:
                    problems.add(("secrets", index, "env"), f"{secret.env!r} is already "
                                 f"secrets[{seen_env[secret.env]}]", "use another name")
                seen_env.setdefault(secret.env, index)
            else:
                folder = secret.mount_folder
                # A mount hides its whole folder, and the folders below it.
                other = next((f for f in folders if folder == f or folder.startswith(f"{f}/")
                              or f.startswith(f"{folder}/")), None)
                if other is not None:
                    problems.add(("secrets", index, "path"), f"is in {folder!r}, which overlaps"
                                 f" {other!r}, the folder of secrets[{folders[other]}]: a mount "
                                 "takes its whole folder", "give each file secret a folder of "
                                 "its own, neither inside the other")
                folders.setdefault(folder, index)
        for name in self.demo_settings:
            if name in seen_env:
                problems.add(("demoSettings", name), f"is also secrets[{seen_env[name]}]'s "
                             "variable, which the demo gives from the local secrets file",
                             "remove it from demoSettings (put the local value in the local "
                             "secrets file) or use another name")
        problems.raise_any()
        return self

    @property
    def function(self) -> FunctionSettings:
        """Its function's resources: in a validated stack, its own keys over the stack's."""
        return self.resources or FunctionSettings()

    def environment(self, *, demo: bool = False) -> dict[str, str]:
        """Its plain settings; with `demo`, as `make demo` and `make serve` give them."""
        return {**self.settings, **self.demo_settings} if demo else dict(self.settings)

    @property
    def secret_ids(self) -> tuple[str, ...]:
        """The secrets it reads, each once, in order."""
        return tuple(dict.fromkeys(secret.secret for secret in self.secrets))


# --------------------------------------------------------------------------- across a stack


def runtimes_in_stack(
    runtimes: tuple[RuntimeSettings, ...],
    *,
    stack_function: FunctionSettings,
    job_runtimes: list[str | None],
    name_prefix: str,
    database: str,
    store_timeout_seconds: int,
    project: str,
    region: str,
    problems: ProblemList,
) -> tuple[RuntimeSettings, ...]:
    """The rules across the stack's runtimes and jobs (`job_runtimes`: each job's runtime, by
    index), added to `problems`; and the runtimes with their resources filled in (each unset
    key the stack's), which the stack keeps."""
    known = [runtime.name for runtime in runtimes]
    declared = {secret: runtime.name for runtime in runtimes for secret in runtime.secret_ids}
    token_secret = f"{name_prefix}-token-secret"  # the proxy's (infra/dedup_proxy.py)
    first: dict[str, int] = {}
    filled: list[RuntimeSettings] = []
    for index, runtime in enumerate(runtimes):
        at = ("runtimes", index)
        if runtime.name in first:
            problems.add((*at, "name"), f"{runtime.name!r} is already the name of "
                         f"runtimes[{first[runtime.name]}]", "give every runtime a unique name")
        first.setdefault(runtime.name, index)
        if len(account := service_account_id(name_prefix, runtime.name)) > \
                SERVICE_ACCOUNT_ID_MAX_LENGTH:
            problems.add((*at, "name"), f"makes its service account ID {account!r} "
                         f"{len(account)} characters long (at most "
                         f"{SERVICE_ACCOUNT_ID_MAX_LENGTH})", "shorten the runtime's name to "
                         f"at most {SERVICE_ACCOUNT_ID_MAX_LENGTH - len(name_prefix) - 1} "
                         "characters (or namePrefix)")
        if len(own := runtime_database_of(database, runtime.name)) > DATABASE_ID_MAX_LENGTH:
            problems.add((*at, "name"), f"makes its records database ID {own!r} {len(own)} "
                         f"characters long (at most {DATABASE_ID_MAX_LENGTH})", "shorten the "
                         "runtime's name or databaseName")
        if runtime.name not in job_runtimes:
            problems.add((*at, "name"), f"no job runs in runtime {runtime.name!r}, which would "
                         "deploy a function, an account and a database for nothing",
                         f"set `runtime: {runtime.name}` on its jobs, or remove the runtime")
        for number, grant in enumerate(runtime.grants):
            kind, target = grant.target
            owner = declared.get(target) if kind == "secret" else None
            if owner is not None and target not in runtime.secret_ids:
                problems.add((*at, "grants", number, "secret"), f"{target!r} is runtime "
                             f"{owner!r}'s secret: a role on it would let this runtime's job "
                             "code change, replace or read what that runtime reads",
                             f"leave it to runtime {owner!r}; declare it under this "
                             "runtime's secrets if both must read it")
            elif kind == "secret" and target == token_secret:
                problems.add((*at, "grants", number, "secret"), f"{target!r} is the proxy's "
                             "token secret, which signs the downstream guard's tokens",
                             "remove the grant (tokenSecretReaders names the downstream "
                             "services that check tokens)")
        connector = runtime.network.vpc_connector if runtime.network else ""
        if connector.startswith("projects/") and not connector.startswith(
                f"projects/{project}/locations/{region}/"):
            problems.add((*at, "network", "vpcConnector"), f"{connector!r} is not in gcp:project "
                         f"{project!r} and gcp:region {region!r}: a function reaches a "
                         "connector of its own region", "name a connector of the stack's "
                         "project and region (or its name alone)")
        own_keys = runtime.resources.model_dump(by_alias=True, exclude_unset=True) \
            if runtime.resources is not None else {}
        try:
            resources = FunctionSettings.model_validate(
                {**stack_function.model_dump(by_alias=True), **own_keys})
        except ValueError as error:  # the stack's keys with its own break a rule across them
            problems.add((*at, "resources"), f"with the stack's function settings: {error}",
                         "set the runtime's minInstances and maxInstances together")
            resources = stack_function
        if resources.timeout_seconds <= store_timeout_seconds:
            problems.add((*at, "resources", "functionTimeoutSeconds"),
                         f"{resources.timeout_seconds} s leaves no time for the job within "
                         f"storeTimeoutSeconds ({store_timeout_seconds} s)", "raise it above "
                         "storeTimeoutSeconds")
        filled.append(runtime.model_copy(update={"resources": resources}))
    for index, name in enumerate(job_runtimes):
        if name is not None and name not in first:
            problems.add(("jobs", index, "runtime"), f"{name!r} is not a runtime of this "
                         f"stack; {did_you_mean('runtime', name, known)}".rstrip("; "),
                         "declare it under runtimes, or use one of: " + (
                             ", ".join(known) if known else "(none declared) remove runtime"))
    return tuple(filled)
