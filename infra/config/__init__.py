"""The stack configuration, declared once as typed pydantic models and validated before any
resource: this package's face, re-exporting what the program, the operator tools and the
tests use. The names and IDs live in `names`, the error machinery in `errors` (and `explain`,
which reads pydantic's errors as problems with a key and a fix), Cloud Scheduler's and
Firestore's value rules in `hints`, field declaration and introspection in `fields`, the
models in `jobs`, `service`, `runtimes` and `services` (a team's own services), the whole
`StackConfig` with its cross-model rules, deploy rules and `DEFAULTS` in `stack`, and
`load_config` / `config_from_pulumi` in `load`. From the models follow, through `make
schema` (operator_tools/schema.py), the `config:` block of
`Pulumi.yaml`, docs/configuration.md's reference and `schema/stack.schema.json`.
"""

from infra.config.errors import ConfigError, Problem
from infra.config.fields import bounds, choices, hint, model_fields, model_in
from infra.config.jobs import (
    AT_MOST_ONCE,
    PROXY_RESERVED_TOKEN_NAMES,
    PROXY_TARGET_BUILD_TRIGGER,
    PROXY_TARGET_RUN_JOB,
    PROXY_TARGET_WORKFLOW,
    RETRY_COUNT_DEFAULT,
    JobSettings,
    ProxyTarget,
)
from infra.config.load import config_from_pulumi, load_config
from infra.config.names import (
    GCP_PROJECT_KEY,
    GCP_REGION_KEY,
    PROJECT_NAME,
    PROVIDER_NAMESPACES,
    WATCHDOG_JOB_NAME,
    kit_key,
    proxy_database_of,
    scheduler_job_id,
    service_account_id,
)
from infra.config.runtimes import GrantSettings, RuntimeSettings, SecretSettings
from infra.config.service import DedupSettings, FunctionSettings, WatchdogSettings
from infra.config.services import AppEngineTarget, TeamServiceSettings
from infra.config.stack import (
    DEFAULTS,
    DEPLOY_RULES,
    GROUPS,
    KIT_KEYS,
    StackConfig,
    stack_fields,
    with_stack_defaults,
)

__all__ = [
    "AT_MOST_ONCE",
    "DEFAULTS",
    "DEPLOY_RULES",
    "GCP_PROJECT_KEY",
    "GCP_REGION_KEY",
    "GROUPS",
    "KIT_KEYS",
    "PROJECT_NAME",
    "PROVIDER_NAMESPACES",
    "PROXY_RESERVED_TOKEN_NAMES",
    "PROXY_TARGET_BUILD_TRIGGER",
    "PROXY_TARGET_RUN_JOB",
    "PROXY_TARGET_WORKFLOW",
    "RETRY_COUNT_DEFAULT",
    "WATCHDOG_JOB_NAME",
    "AppEngineTarget",
    "ConfigError",
    "DedupSettings",
    "FunctionSettings",
    "GrantSettings",
    "JobSettings",
    "Problem",
    "ProxyTarget",
    "RuntimeSettings",
    "SecretSettings",
    "StackConfig",
    "TeamServiceSettings",
    "WatchdogSettings",
    "bounds",
    "choices",
    "config_from_pulumi",
    "hint",
    "kit_key",
    "load_config",
    "model_fields",
    "model_in",
    "proxy_database_of",
    "scheduler_job_id",
    "service_account_id",
    "stack_fields",
    "with_stack_defaults",
]
