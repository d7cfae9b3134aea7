"""Pass/fail fixtures per policy, in the style of checkov's: each case is a small set of
resources and a verdict. tests/policies/test_policy_cases.py asserts that exactly the
failing cases violate each policy, and that every policy has both kinds.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from infra.source import WATCH_JOBS_TABLE
from policies import gcp
from policies.job_tables import BUCKET_OBJECT
from policies.model import Resource
from tests.policies.fixtures import (
    APPSPOT_SA,
    BUCKET_IAM_BINDING,
    BUCKET_IAM_MEMBER,
    BUILD_SA,
    CHANNEL_ID,
    CLOUDBUILD_SA,
    CLOUDRUN_V1_IAM_MEMBER,
    COMPUTE_SA,
    DATABASE,
    DATASTORE_CONDITION,
    DELETE,
    FOLDER_IAM_MEMBER,
    FUNCTION_IAM_MEMBER,
    FUNCTION_URL,
    INVOKER_SA,
    ORG_IAM_BINDING,
    PROJECT,
    PROJECT_IAM_BINDING,
    PROJECT_IAM_MEMBER,
    PROJECT_IAM_POLICY,
    PROXY_DATABASE,
    PROXY_DATASTORE_CONDITION,
    PROXY_ROUTES,
    PROXY_SA,
    PROXY_SOURCE,
    REGION,
    RUN_JOB,
    RUN_JOB_IAM_BINDING,
    RUN_SERVICE_IAM_BINDING,
    RUN_SERVICE_IAM_MEMBER,
    RUNTIME_SA,
    SA_IAM_MEMBER,
    WATCHDOG_SA,
    WORKFLOW,
    U,
    alert_policy_props,
    bucket_props,
    database_condition,
    database_props,
    function_props,
    job_props,
    kit_stack,
    patch,
    preview_proxy_stack,
    preview_proxy_watchdog_stack,
    preview_stack,
    preview_watchdog_stack,
    proxy_stack,
    proxy_watchdog_stack,
    replace,
    replace_named,
    res,
    routes_asset,
    table_asset,
    watchdog_stack,
    without_named,
    without_type,
)


@dataclass(frozen=True)
class Case:
    name: str
    resources: list[Resource]
    fails: bool
    config: dict[str, Any] = field(default_factory=dict)
    """The policy's properties in the --policy-pack-config document (e.g. `deployers`)."""


def one(name: str, resource_type: str, props: dict[str, object], fails: bool) -> Case:
    return Case(name, [res(resource_type, name, props)], fails)


JOB = gcp.SCHEDULER_JOB
FN = gcp.FUNCTION_V2
RUN2 = gcp.CLOUD_RUN_V2_SERVICE
RUN1 = gcp.CLOUD_RUN_V1_SERVICE
BUCKET = gcp.STORAGE_BUCKET
SA = f"serviceAccount:{RUNTIME_SA}"
PROXY = f"serviceAccount:{PROXY_SA}"
PROXY_FN = "proxy-function"
PROXY_ENV = "serviceConfig.environmentVariables"


def member(role: str, who: str = SA, **extra: object) -> dict[str, object]:
    return {"project": PROJECT, "role": role, "member": who, **extra}


def policy_data(*bindings: dict[str, object]) -> str:
    return json.dumps({"bindings": list(bindings)})


RESOURCE_CASES: dict[str, list[Case]] = {
    "scheduler-job-unix-cron-schedule": [
        one("cron-daily", JOB, job_props(), False),
        one("cron-every-5-min", JOB, patch(job_props(), "schedule", "*/5 * * * *"), False),
        one("cron-unknown", JOB, patch(job_props(), "schedule", U), False),
        one("not-a-job", BUCKET, {"schedule": "every 5 minutes"}, False),
        one("groc-every-5-minutes", JOB, patch(job_props(), "schedule", "every 5 minutes"), True),
        one("six-fields", JOB, patch(job_props(), "schedule", "0 0 3 * * *"), True),
        one("bad-minute", JOB, patch(job_props(), "schedule", "61 3 * * *"), True),
        one("no-schedule", JOB, patch(job_props(), "schedule", DELETE), True),
        one("empty-schedule", JOB, patch(job_props(), "schedule", " "), True),
    ],
    "scheduler-job-time-zone": [
        one("tz-berlin", JOB, job_props(), False),
        one("tz-default", JOB, patch(job_props(), "timeZone", DELETE), False),
        one("tz-unknown", JOB, patch(job_props(), "timeZone", U), False),
        one("tz-abbreviation", JOB, patch(job_props(), "timeZone", "CEST"), True),
        one("tz-typo", JOB, patch(job_props(), "timeZone", "Europe/Berln"), True),
    ],
    "scheduler-job-oidc-auth": [
        one("oidc-dedicated", JOB, job_props(), False),
        one(
            "oidc-email-unknown",
            JOB,
            patch(job_props(), "httpTarget.oidcToken.serviceAccountEmail", U),
            False,
        ),
        one("oidc-token-unknown", JOB, patch(job_props(), "httpTarget.oidcToken", U), False),
        one("http-target-unknown", JOB, patch(job_props(), "httpTarget", U), False),
        one("pubsub-job", JOB, patch(job_props(), "httpTarget", DELETE), False),
        one("oauth-block-unknown", JOB, patch(job_props(), "httpTarget.oauthToken", U), False),
        one(
            "oauth-email-unknown",
            JOB,
            patch(job_props(), "httpTarget.oauthToken", {"serviceAccountEmail": U}),
            True,
        ),
        one("no-token", JOB, patch(job_props(), "httpTarget.oidcToken", DELETE), True),
        one(
            "oauth-token",
            JOB,
            patch(
                patch(job_props(), "httpTarget.oidcToken", DELETE),
                "httpTarget.oauthToken",
                {"serviceAccountEmail": INVOKER_SA},
            ),
            True,
        ),
        one(
            "oauth-and-oidc",
            JOB,
            patch(job_props(), "httpTarget.oauthToken", {"serviceAccountEmail": INVOKER_SA}),
            True,
        ),
        one(
            "oidc-no-email",
            JOB,
            patch(job_props(), "httpTarget.oidcToken.serviceAccountEmail", DELETE),
            True,
        ),
        one(
            "oidc-compute-sa",
            JOB,
            patch(job_props(), "httpTarget.oidcToken.serviceAccountEmail", COMPUTE_SA),
            True,
        ),
        one(
            "oidc-appspot-sa",
            JOB,
            patch(job_props(), "httpTarget.oidcToken.serviceAccountEmail", APPSPOT_SA),
            True,
        ),
    ],
    "scheduler-job-oidc-audience": [
        one("audience-url", JOB, job_props(), False),
        one("audience-unknown", JOB, patch(job_props(), "httpTarget.oidcToken.audience", U), False),
        one("audience-no-token", JOB, patch(job_props(), "httpTarget.oidcToken", DELETE), False),
        one(
            "audience-missing",
            JOB,
            patch(job_props(), "httpTarget.oidcToken.audience", DELETE),
            True,
        ),
        one("audience-empty", JOB, patch(job_props(), "httpTarget.oidcToken.audience", ""), True),
        one(
            "audience-missing-email-unknown",
            JOB,
            patch(
                patch(job_props(), "httpTarget.oidcToken.audience", DELETE),
                "httpTarget.oidcToken.serviceAccountEmail",
                U,
            ),
            True,
        ),
    ],
    "scheduler-job-attempt-deadline": [
        one("deadline-300s", JOB, job_props(), False),
        one("deadline-15s", JOB, patch(job_props(), "attemptDeadline", "15s"), False),
        one("deadline-1800s", JOB, patch(job_props(), "attemptDeadline", "1800s"), False),
        one("deadline-default", JOB, patch(job_props(), "attemptDeadline", DELETE), False),
        one("deadline-unknown", JOB, patch(job_props(), "attemptDeadline", U), False),
        one(
            "deadline-pubsub-job",
            JOB,
            patch(patch(job_props(), "httpTarget", DELETE), "attemptDeadline", "3600s"),
            False,
        ),
        one("deadline-14s", JOB, patch(job_props(), "attemptDeadline", "14s"), True),
        one("deadline-1801s", JOB, patch(job_props(), "attemptDeadline", "1801s"), True),
        one("deadline-minutes", JOB, patch(job_props(), "attemptDeadline", "5m"), True),
    ],
    "function-dedicated-runtime-service-account": [
        one("fn-dedicated", FN, function_props(), False),
        one(
            "fn-sa-unknown",
            FN,
            patch(function_props(), "serviceConfig.serviceAccountEmail", U),
            False,
        ),
        one("fn-service-config-unknown", FN, patch(function_props(), "serviceConfig", U), False),
        one(
            "run2-dedicated",
            RUN2,
            {
                "ingress": "INGRESS_TRAFFIC_INTERNAL_ONLY",
                "template": {"serviceAccount": RUNTIME_SA},
            },
            False,
        ),
        one(
            "run1-dedicated",
            RUN1,
            {"template": {"spec": {"serviceAccountName": RUNTIME_SA}}},
            False,
        ),
        one(
            "fn-no-sa",
            FN,
            patch(function_props(), "serviceConfig.serviceAccountEmail", DELETE),
            True,
        ),
        one("fn-no-service-config", FN, patch(function_props(), "serviceConfig", DELETE), True),
        one(
            "fn-compute-sa",
            FN,
            patch(function_props(), "serviceConfig.serviceAccountEmail", COMPUTE_SA),
            True,
        ),
        one(
            "fn-appspot-sa",
            FN,
            patch(function_props(), "serviceConfig.serviceAccountEmail", APPSPOT_SA),
            True,
        ),
        one("run2-no-sa", RUN2, {"template": {"containers": [{"image": "x"}]}}, True),
        one("run2-compute-sa", RUN2, {"template": {"serviceAccount": COMPUTE_SA}}, True),
        one(
            "run1-compute-sa",
            RUN1,
            {"template": {"spec": {"serviceAccountName": COMPUTE_SA}}},
            True,
        ),
    ],
    "function-dedicated-build-service-account": [
        one("build-dedicated", FN, function_props(), False),
        one(
            "build-sa-email-form",
            FN,
            patch(function_props(), "buildConfig.serviceAccount", BUILD_SA),
            False,
        ),
        one("build-unknown", FN, patch(function_props(), "buildConfig.serviceAccount", U), False),
        one("build-not-a-function", RUN2, {"template": {}}, False),
        one("build-no-sa", FN, patch(function_props(), "buildConfig.serviceAccount", DELETE), True),
        one(
            "build-compute-sa",
            FN,
            patch(
                function_props(),
                "buildConfig.serviceAccount",
                f"projects/{PROJECT}/serviceAccounts/{COMPUTE_SA}",
            ),
            True,
        ),
        one(
            "build-legacy-cloudbuild-sa",
            FN,
            patch(
                function_props(),
                "buildConfig.serviceAccount",
                f"projects/{PROJECT}/serviceAccounts/{CLOUDBUILD_SA}",
            ),
            True,
        ),
    ],
    "function-ingress-not-public": [
        one("fn-internal-only", FN, function_props(), False),
        one(
            "fn-internal-gclb",
            FN,
            patch(function_props(), "serviceConfig.ingressSettings", "ALLOW_INTERNAL_AND_GCLB"),
            False,
        ),
        one(
            "fn-ingress-unknown",
            FN,
            patch(function_props(), "serviceConfig.ingressSettings", U),
            False,
        ),
        one("run2-internal", RUN2, {"ingress": "INGRESS_TRAFFIC_INTERNAL_ONLY"}, False),
        one(
            "run1-internal",
            RUN1,
            {"metadata": {"annotations": {"run.googleapis.com/ingress": "internal"}}},
            False,
        ),
        one(
            "fn-allow-all",
            FN,
            patch(function_props(), "serviceConfig.ingressSettings", "ALLOW_ALL"),
            True,
        ),
        one(
            "fn-ingress-default",
            FN,
            patch(function_props(), "serviceConfig.ingressSettings", DELETE),
            True,
        ),
        one("run2-all", RUN2, {"ingress": "INGRESS_TRAFFIC_ALL"}, True),
        one("run2-default", RUN2, {"template": {}}, True),
        one(
            "run1-all",
            RUN1,
            {"metadata": {"annotations": {"run.googleapis.com/ingress": "all"}}},
            True,
        ),
    ],
    "iam-no-public-members": [
        one(
            "invoker-sa",
            RUN_SERVICE_IAM_MEMBER,
            member("roles/run.invoker", f"serviceAccount:{INVOKER_SA}"),
            False,
        ),
        one("member-unknown", RUN_SERVICE_IAM_MEMBER, member("roles/run.invoker", U), False),
        one(
            "members-unknown",
            RUN_SERVICE_IAM_BINDING,
            {"role": "roles/run.invoker", "members": U},
            False,
        ),
        one("policy-unknown", PROJECT_IAM_POLICY, {"project": PROJECT, "policyData": U}, False),
        one(
            "public-run-invoker",
            RUN_SERVICE_IAM_MEMBER,
            member("roles/run.invoker", "allUsers"),
            True,
        ),
        one(
            "public-function-invoker",
            FUNCTION_IAM_MEMBER,
            member("roles/cloudfunctions.invoker", "allAuthenticatedUsers"),
            True,
        ),
        one("public-run-v1", CLOUDRUN_V1_IAM_MEMBER, member("roles/run.invoker", "allUsers"), True),
        one(
            "public-bucket-reader",
            BUCKET_IAM_MEMBER,
            {"bucket": "b", "role": "roles/storage.objectViewer", "member": "allUsers"},
            True,
        ),
        one(
            "public-in-binding-with-unknown",
            BUCKET_IAM_BINDING,
            {"bucket": "b", "role": "roles/storage.objectViewer", "members": [U, "allUsers"]},
            True,
        ),
        one(
            "public-project-policy",
            PROJECT_IAM_POLICY,
            {
                "project": PROJECT,
                "policyData": policy_data(
                    {"role": "roles/run.invoker", "members": ["allAuthenticatedUsers"]}
                ),
            },
            True,
        ),
        one(
            "policy-not-json",
            PROJECT_IAM_POLICY,
            {"project": PROJECT, "policyData": "{bindings"},
            True,
        ),
    ],
    "iam-no-primitive-roles": [
        one(
            "predefined-role",
            PROJECT_IAM_MEMBER,
            member("roles/datastore.user", condition=DATASTORE_CONDITION),
            False,
        ),
        one("role-unknown", PROJECT_IAM_MEMBER, member(U), False),
        one("owner", PROJECT_IAM_MEMBER, member("roles/owner"), True),
        one(
            "editor-binding",
            PROJECT_IAM_BINDING,
            {"project": PROJECT, "role": "roles/editor", "members": [SA]},
            True,
        ),
        one(
            "viewer-on-bucket",
            BUCKET_IAM_MEMBER,
            {"bucket": "b", "role": "roles/viewer", "member": SA},
            True,
        ),
        one(
            "editor-in-policy",
            PROJECT_IAM_POLICY,
            {
                "project": PROJECT,
                "policyData": policy_data({"role": "roles/editor", "members": [SA]}),
            },
            True,
        ),
    ],
    "iam-no-project-level-invoker": [
        one(
            "invoker-on-service",
            RUN_SERVICE_IAM_MEMBER,
            member("roles/run.invoker", f"serviceAccount:{INVOKER_SA}"),
            False,
        ),
        one(
            "invoker-on-function",
            FUNCTION_IAM_MEMBER,
            member("roles/cloudfunctions.invoker"),
            False,
        ),
        one("project-other-role", PROJECT_IAM_MEMBER, member("roles/logging.logWriter"), False),
        one("project-role-unknown", PROJECT_IAM_MEMBER, member(U), False),
        # The proxy's workflows.invoker can only be granted on the project: not an invoker
        # of Cloud Run services, so this policy leaves it to dedup-proxy-least-privilege.
        one(
            "project-workflows-invoker",
            PROJECT_IAM_MEMBER,
            member("roles/workflows.invoker", PROXY),
            False,
        ),
        one("project-invoker", PROJECT_IAM_MEMBER, member("roles/run.invoker"), True),
        one(
            "project-invoker-binding",
            PROJECT_IAM_BINDING,
            {"project": PROJECT, "role": "roles/run.invoker", "members": [SA]},
            True,
        ),
        one(
            "project-invoker-policy",
            PROJECT_IAM_POLICY,
            {
                "project": PROJECT,
                "policyData": policy_data({"role": "roles/run.invoker", "members": [SA]}),
            },
            True,
        ),
        one(
            "folder-functions-invoker",
            FOLDER_IAM_MEMBER,
            {"folder": "folders/1", "role": "roles/cloudfunctions.invoker", "member": SA},
            True,
        ),
    ],
    "iam-no-project-level-service-account-impersonation": [
        one(
            "actas-on-account",
            SA_IAM_MEMBER,
            {"serviceAccountId": "x", "role": "roles/iam.serviceAccountUser", "member": SA},
            False,
        ),
        one(
            "token-creator-on-account",
            SA_IAM_MEMBER,
            {"serviceAccountId": "x", "role": "roles/iam.serviceAccountTokenCreator", "member": SA},
            False,
        ),
        one("project-log-writer", PROJECT_IAM_MEMBER, member("roles/logging.logWriter"), False),
        one("project-sa-user", PROJECT_IAM_MEMBER, member("roles/iam.serviceAccountUser"), True),
        one(
            "project-token-creator",
            PROJECT_IAM_MEMBER,
            member("roles/iam.serviceAccountTokenCreator"),
            True,
        ),
        one(
            "org-sa-user-binding",
            ORG_IAM_BINDING,
            {"orgId": "1", "role": "roles/iam.serviceAccountUser", "members": [SA]},
            True,
        ),
    ],
    "iam-datastore-user-single-database": [
        one(
            "datastore-conditioned",
            PROJECT_IAM_MEMBER,
            member("roles/datastore.user", condition=DATASTORE_CONDITION),
            False,
        ),
        one(
            "datastore-condition-unknown",
            PROJECT_IAM_MEMBER,
            member("roles/datastore.user", condition=U),
            False,
        ),
        one(
            "datastore-expression-unknown",
            PROJECT_IAM_MEMBER,
            member("roles/datastore.user", condition={"title": "t", "expression": U}),
            False,
        ),
        one(
            "other-role-unconditioned", PROJECT_IAM_MEMBER, member("roles/logging.logWriter"), False
        ),
        # A read-only role is the watchdog policy's to condition, not this advisory's.
        one("viewer-unconditioned", PROJECT_IAM_MEMBER, member("roles/datastore.viewer"), False),
        one("datastore-unconditioned", PROJECT_IAM_MEMBER, member("roles/datastore.user"), True),
        one(
            "datastore-two-databases",
            PROJECT_IAM_MEMBER,
            member(
                "roles/datastore.user",
                condition={
                    "title": "t",
                    "expression": f'resource.name == "projects/{PROJECT}/databases/{DATABASE}" || '
                    f'resource.name == "projects/{PROJECT}/databases/(default)"',
                },
            ),
            True,
        ),
        one(
            "datastore-prefix-only",
            PROJECT_IAM_MEMBER,
            member(
                "roles/datastore.user",
                condition={
                    "title": "t",
                    "expression": f'resource.name.startsWith("projects/{PROJECT}/")',
                },
            ),
            True,
        ),
        one(
            "datastore-in-policy-unconditioned",
            PROJECT_IAM_POLICY,
            {
                "project": PROJECT,
                "policyData": policy_data({"role": "roles/datastore.user", "members": [SA]}),
            },
            True,
        ),
    ],
    "storage-bucket-uniform-access": [
        one("bucket-private", BUCKET, bucket_props(), False),
        one(
            "bucket-ubla-unknown",
            BUCKET,
            patch(bucket_props(), "uniformBucketLevelAccess", U),
            False,
        ),
        one("bucket-acls", BUCKET, patch(bucket_props(), "uniformBucketLevelAccess", False), True),
        one(
            "bucket-ubla-default",
            BUCKET,
            patch(bucket_props(), "uniformBucketLevelAccess", DELETE),
            True,
        ),
    ],
    "storage-bucket-public-access-prevention": [
        one("bucket-enforced", BUCKET, bucket_props(), False),
        one(
            "bucket-pap-unknown", BUCKET, patch(bucket_props(), "publicAccessPrevention", U), False
        ),
        one(
            "bucket-inherited",
            BUCKET,
            patch(bucket_props(), "publicAccessPrevention", "inherited"),
            True,
        ),
        one(
            "bucket-pap-default",
            BUCKET,
            patch(bucket_props(), "publicAccessPrevention", DELETE),
            True,
        ),
    ],
}


def stack_case(
    name: str, resources: list[Resource], fails: bool, config: dict[str, Any] | None = None
) -> Case:
    return Case(name, resources, fails, config or {})


def _job(props: dict[str, object], name: str = "job-2") -> Resource:
    return res(JOB, name, props)


LEASE = "DEDUP_LEASE_SECONDS"
STORE_TIMEOUT = "DEDUP_STORE_TIMEOUT_SECONDS"


def _env(resources: list[Resource], name: str, value: object) -> list[Resource]:
    """The stack with the dedup function's (not the proxy's) environment variable `name`
    set to `value` (DELETE removes it: the function's default applies)."""
    return replace_named(resources, "dedup-function", f"{PROXY_ENV}.{name}", value)


def _retries(
    name: str, fails: bool, resources: list[Resource] | None = None, **config: object
) -> Case:
    """The kit stack (or `resources`) with these retryConfig fields of its jobs set."""
    stack = kit_stack() if resources is None else resources
    for key, value in config.items():
        stack = replace(stack, JOB, f"retryConfig.{key}", value)
    return Case(name, stack, fails)


STACK_CASES: dict[str, list[Case]] = {
    "dedup-lease-survives-missed-renewals": [
        # The kit's lease: 60 s against a 10 s store timeout (at least 30 s).
        stack_case("kit", kit_stack(), False),
        stack_case("preview", preview_stack(), False),
        stack_case("proxy-kit", proxy_stack(), False),
        stack_case("proxy-preview", preview_proxy_stack(), False),
        stack_case("lease-equals-three-store-timeouts", _env(kit_stack(), LEASE, "30"), False),
        stack_case(
            # A liveness window, not a bound on the job: deadlines and the function's
            # timeout far beyond the lease are fine.
            "lease-below-deadline-and-timeout",
            replace(
                replace(kit_stack(), JOB, "attemptDeadline", "1800s"),
                FN,
                "serviceConfig.timeoutSeconds",
                3600,
            ),
            False,
        ),
        stack_case("lease-unknown", _env(kit_stack(), LEASE, U), False),
        stack_case("store-timeout-unknown", _env(kit_stack(), STORE_TIMEOUT, U), False),
        stack_case("env-unknown", replace(kit_stack(), FN, PROXY_ENV, U), False),
        # The function's defaults: a 60 s lease, a 10 s store timeout.
        stack_case("lease-default", _env(kit_stack(), LEASE, DELETE), False),
        stack_case(
            "store-timeout-default",
            _env(_env(kit_stack(), STORE_TIMEOUT, DELETE), LEASE, "30"),
            False,
        ),
        stack_case(
            "fractional-store-timeout",
            _env(_env(kit_stack(), STORE_TIMEOUT, "2.5"), LEASE, "8"),
            False,
        ),
        stack_case("no-function", without_type(kit_stack(), FN), False),
        stack_case("lease-below-three-store-timeouts", _env(kit_stack(), LEASE, "29"), True),
        stack_case("store-timeout-outgrows-lease", _env(kit_stack(), STORE_TIMEOUT, "30"), True),
        stack_case(
            "store-timeout-default-above-lease",
            _env(_env(kit_stack(), STORE_TIMEOUT, DELETE), LEASE, "20"),
            True,
        ),
        stack_case(
            "lease-default-below-store-timeouts",
            _env(_env(kit_stack(), LEASE, DELETE), STORE_TIMEOUT, "25"),
            True,
        ),
        stack_case(
            "fractional-store-timeout-above-lease",
            _env(_env(kit_stack(), STORE_TIMEOUT, "2.5"), LEASE, "7"),
            True,
        ),
        stack_case("preview-lease-short", _env(preview_stack(), LEASE, "20"), True),
        stack_case(
            # The proxy's own settings are judged, not only the function's.
            "proxy-lease-short",
            replace_named(proxy_stack(), PROXY_FN, f"{PROXY_ENV}.{LEASE}", "20"),
            True,
        ),
        stack_case(
            "proxy-store-timeout-outgrows-lease",
            replace_named(proxy_stack(), PROXY_FN, f"{PROXY_ENV}.{STORE_TIMEOUT}", "30"),
            True,
        ),
        # Malformed values fail closed.
        stack_case("lease-not-a-number", _env(kit_stack(), LEASE, "10m"), True),
        stack_case("store-timeout-not-a-number", _env(kit_stack(), STORE_TIMEOUT, "ten"), True),
        stack_case("store-timeout-zero", _env(kit_stack(), STORE_TIMEOUT, "0"), True),
        stack_case("store-timeout-negative", _env(kit_stack(), STORE_TIMEOUT, "-10"), True),
    ],
    "dedup-retention-exceeds-retry-window": [
        stack_case("kit", kit_stack(), False),
        stack_case("preview", preview_stack(), False),
        stack_case(
            "retention-unknown",
            replace(
                kit_stack(), FN, "serviceConfig.environmentVariables.DEDUP_RETENTION_SECONDS", U
            ),
            False,
        ),
        stack_case("retry-unknown", replace(kit_stack(), JOB, "retryConfig", U), False),
        stack_case(
            "retention-short",
            replace(
                kit_stack(), FN, "serviceConfig.environmentVariables.DEDUP_RETENTION_SECONDS", "600"
            ),
            True,
        ),
        stack_case(
            "long-max-retry-duration",
            replace(kit_stack(), JOB, "retryConfig.maxRetryDuration", "864000s"),
            True,
        ),
        stack_case("proxy-kit", proxy_stack(), False),
        stack_case(
            "proxy-retention-short",
            replace_named(
                proxy_stack(), PROXY_FN, f"{PROXY_ENV}.DEDUP_RETENTION_SECONDS", "1200"
            ),
            True,
        ),
        stack_case(
            "retention-equals-window",
            # 4 attempts x 300s + backoff 10+20+40 = 1270s
            replace(
                kit_stack(),
                FN,
                "serviceConfig.environmentVariables.DEDUP_RETENTION_SECONDS",
                "1270",
            ),
            True,
        ),
    ],
    "dedup-retries-outlast-lease": [
        stack_case("kit", kit_stack(), False),
        stack_case("preview", preview_stack(), False),
        stack_case("proxy-kit", proxy_stack(), False),
        stack_case("proxy-preview", preview_proxy_stack(), False),
        # 20+40 = 60s of backoff alone reach the 60s lease.
        _retries(
            "backoffs-outlast-lease",
            False,
            retryCount=2,
            maxRetryDuration="0s",
            minBackoffDuration="20s",
            maxDoublings=3,
        ),
        # retryCount 0 with a maxRetryDuration: Scheduler retries for that duration.
        _retries("duration-without-retry-count", False, retryCount=0),
        _retries("retry-count-unknown", False, maxRetryDuration="0s", retryCount=U),
        stack_case("retry-unknown", replace(kit_stack(), JOB, "retryConfig", U), False),
        stack_case(
            "lease-unknown", replace(kit_stack(), FN, f"{PROXY_ENV}.DEDUP_LEASE_SECONDS", U), False
        ),
        stack_case(
            # Malformed: dedup-lease-survives-missed-renewals reports it.
            "lease-not-a-number",
            replace(kit_stack(), FN, f"{PROXY_ENV}.DEDUP_LEASE_SECONDS", "10m"),
            False,
        ),
        stack_case(
            "job-elsewhere-without-retries",
            [
                *kit_stack(),
                _job(
                    patch(
                        patch(job_props(), "httpTarget.uri", "https://example.com/hook"),
                        "retryConfig",
                        DELETE,
                    )
                ),
            ],
            False,
        ),
        stack_case(
            "no-function", without_type(replace(kit_stack(), JOB, "retryConfig", DELETE), FN), False
        ),
        # 10+20 = 30s of retries against a 60s lease.
        _retries("retries-end-before-lease", True, retryCount=2, maxRetryDuration="0s"),
        _retries(
            "max-retry-duration-below-lease", True, retryCount=2, maxRetryDuration="59s"
        ),
        # At-most-once: reported (advisory) so that it is a choice, not an accident.
        _retries("no-retries", True, retryCount=0, maxRetryDuration="0s"),
        stack_case("no-retry-config", replace(kit_stack(), JOB, "retryConfig", DELETE), True),
        # The function's default lease is 60 s.
        _retries(
            "lease-default-covered-by-retries",
            False,
            replace(kit_stack(), FN, f"{PROXY_ENV}.DEDUP_LEASE_SECONDS", DELETE),
            retryCount=2,
            maxRetryDuration="60s",
        ),
        _retries(
            "lease-default-outlasts-retries",
            True,
            replace(kit_stack(), FN, f"{PROXY_ENV}.DEDUP_LEASE_SECONDS", DELETE),
            retryCount=2,
            maxRetryDuration="59s",
        ),
        _retries(
            "preview-retries-end-before-lease",
            True,
            preview_stack(),
            retryCount=2,
            maxRetryDuration="0s",
        ),
        stack_case(
            "proxied-job-retries-end-before-lease",
            replace_named(
                replace_named(
                    proxy_stack(), "job-daily-report", "retryConfig.maxRetryDuration", "0s"
                ),
                "job-daily-report",
                "retryConfig.retryCount",
                2,
            ),
            True,
        ),
        stack_case(
            # Only the proxy serves this job: its lease is judged, not the function's.
            "proxy-lease-outlasts-proxied-retries",
            replace_named(proxy_stack(), PROXY_FN, f"{PROXY_ENV}.DEDUP_LEASE_SECONDS", "1200"),
            True,
        ),
    ],
    "dedup-ttl-policy": [
        stack_case("kit", kit_stack(), False),
        stack_case("preview", preview_stack(), False),
        stack_case("ttl-unknown", replace(kit_stack(), gcp.FIRESTORE_FIELD, "ttlConfig", U), False),
        stack_case(
            "index-unknown", replace(kit_stack(), gcp.FIRESTORE_FIELD, "indexConfig", U), False
        ),
        stack_case(
            "index-explicitly-empty",
            replace(kit_stack(), gcp.FIRESTORE_FIELD, "indexConfig", {"indexes": []}),
            False,
        ),
        stack_case("proxy-kit", proxy_stack(), False),
        stack_case("proxy-preview", preview_proxy_stack(), False),
        stack_case(
            "proxy-ttl-field-by-full-database-name",
            replace_named(
                proxy_stack(), "proxy-ttl-field", "database",
                f"projects/{PROJECT}/databases/{PROXY_DATABASE}",
            ),
            False,
        ),
        stack_case(
            # The schedule_time exemption is not the TTL policy's business.
            "schedule-time-indexed",
            replace_named(kit_stack(), "runs-schedule-time", "indexConfig", DELETE),
            False,
        ),
        stack_case(
            # Its field name is not known yet: it may be expire_at, but the TTL field is.
            "schedule-time-field-name-unknown",
            replace_named(kit_stack(), "runs-schedule-time", "field", U),
            False,
        ),
        stack_case("no-field", without_type(kit_stack(), gcp.FIRESTORE_FIELD), True),
        stack_case(
            # Another Field of the collection, without TTL, does not stand in for it.
            "only-the-schedule-time-field",
            without_named(kit_stack(), "runs-expire-at"),
            True,
        ),
        stack_case(
            "only-the-schedule-time-field-preview",
            without_named(preview_stack(), "runs-expire-at"),
            True,
        ),
        stack_case(
            "ttl-on-schedule-time-instead",
            replace_named(
                without_named(kit_stack(), "runs-expire-at"),
                "runs-schedule-time",
                "ttlConfig",
                {},
            ),
            True,
        ),
        stack_case(
            # The proxy's own database needs a TTL field of its own.
            "proxy-database-without-ttl-field",
            without_named(proxy_stack(), "proxy-ttl-field"),
            True,
        ),
        stack_case(
            "proxy-ttl-field-in-the-dedup-database",
            replace_named(proxy_stack(), "proxy-ttl-field", "database", DATABASE),
            True,
        ),
        stack_case(
            # The proxy's records in a collection without a TTL policy: never deleted.
            "proxy-other-collection",
            replace_named(proxy_stack(), PROXY_FN, f"{PROXY_ENV}.DEDUP_COLLECTION", "proxy_runs"),
            True,
        ),
        stack_case(
            "no-ttl-config", replace(kit_stack(), gcp.FIRESTORE_FIELD, "ttlConfig", DELETE), True
        ),
        stack_case(
            "indexed", replace(kit_stack(), gcp.FIRESTORE_FIELD, "indexConfig", DELETE), True
        ),
        stack_case(
            "index-kept",
            replace(
                kit_stack(),
                gcp.FIRESTORE_FIELD,
                "indexConfig",
                {"indexes": [{"order": "ASCENDING", "queryScope": "COLLECTION"}]},
            ),
            True,
        ),
        stack_case(
            "wrong-collection",
            replace(kit_stack(), gcp.FIRESTORE_FIELD, "collection", "runs"),
            True,
        ),
        stack_case(
            "wrong-field", replace(kit_stack(), gcp.FIRESTORE_FIELD, "field", "expireAt"), True
        ),
        stack_case(
            "wrong-database",
            replace(kit_stack(), gcp.FIRESTORE_FIELD, "database", "(default)"),
            True,
        ),
    ],
    "dedup-job-headers": [
        stack_case("kit", kit_stack(), False),
        stack_case("preview", preview_stack(), False),
        stack_case("headers-unknown", replace(kit_stack(), JOB, "httpTarget.headers", U), False),
        stack_case(
            "header-value-unknown",
            replace(kit_stack(), JOB, "httpTarget.headers.X-Dedup-Project", U),
            False,
        ),
        stack_case(
            "lowercase-header-names",
            replace(
                kit_stack(),
                JOB,
                "httpTarget.headers",
                {"x-dedup-project": PROJECT, "x-dedup-location": "europe-west1"},
            ),
            False,
        ),
        stack_case(
            "job-elsewhere-without-headers",
            [
                *kit_stack(),
                _job(
                    patch(
                        patch(job_props(), "httpTarget.uri", "https://example.com/x"),
                        "httpTarget.headers",
                        DELETE,
                    )
                ),
            ],
            False,
        ),
        stack_case("proxy-kit", proxy_stack(), False),
        stack_case("proxy-preview", preview_proxy_stack(), False),
        stack_case("no-headers", replace(kit_stack(), JOB, "httpTarget.headers", DELETE), True),
        stack_case(
            "proxied-job-without-headers",
            replace_named(proxy_stack(), "job-daily-report", "httpTarget.headers", DELETE),
            True,
        ),
        stack_case(
            "no-location",
            replace(kit_stack(), JOB, "httpTarget.headers.X-Dedup-Location", DELETE),
            True,
        ),
        stack_case(
            "no-project-preview",
            replace(preview_stack(), JOB, "httpTarget.headers.X-Dedup-Project", DELETE),
            True,
        ),
        stack_case(
            "empty-project",
            replace(kit_stack(), JOB, "httpTarget.headers.X-Dedup-Project", ""),
            True,
        ),
        stack_case(
            "wrong-location",
            replace(kit_stack(), JOB, "httpTarget.headers.X-Dedup-Location", "us-central1"),
            True,
        ),
    ],
}


def _proxy_routes(**routes: dict[str, str]) -> str:
    return json.dumps(routes)


def _proxy_grant(
    name: str, role: str, resource_type: str = PROJECT_IAM_MEMBER, **props: object
) -> Resource:
    return res(resource_type, name, {"project": PROJECT, "role": role, "member": PROXY, **props})


STACK_CASES["dedup-proxy-own-service-account"] = [
    stack_case("proxy-kit", proxy_stack(), False),
    stack_case("proxy-preview", preview_proxy_stack(), False),
    stack_case("no-proxy", kit_stack(), False),
    stack_case(
        "proxy-account-unknown",
        replace_named(proxy_stack(), PROXY_FN, "serviceConfig.serviceAccountEmail", U),
        False,
    ),
    stack_case(
        "proxy-as-runtime-account",
        replace_named(proxy_stack(), PROXY_FN, "serviceConfig.serviceAccountEmail", RUNTIME_SA),
        True,
    ),
    stack_case(
        "function-as-proxy-account",
        replace_named(
            proxy_stack(), "dedup-function", "serviceConfig.serviceAccountEmail", PROXY_SA
        ),
        True,
    ),
    stack_case(
        "proxy-account-in-upper-case",
        replace_named(
            proxy_stack(), "dedup-function", "serviceConfig.serviceAccountEmail", PROXY_SA.upper()
        ),
        True,
    ),
    stack_case(
        "cloud-run-service-as-proxy-account",
        [*proxy_stack(), res(RUN2, "other-service", {"template": {"serviceAccount": PROXY_SA}})],
        True,
    ),
    stack_case(
        "job-oidc-as-proxy-account",
        replace_named(
            proxy_stack(), "job-daily-report", "httpTarget.oidcToken.serviceAccountEmail", PROXY_SA
        ),
        True,
    ),
    stack_case(
        # A proxy recognised by its settings alone (no entry point given).
        "proxy-by-settings-as-runtime-account",
        replace_named(
            replace_named(proxy_stack(), PROXY_FN, "buildConfig.entryPoint", DELETE),
            PROXY_FN,
            "serviceConfig.serviceAccountEmail",
            RUNTIME_SA,
        ),
        True,
    ),
]

STACK_CASES["dedup-proxy-least-privilege"] = [
    stack_case("proxy-kit", proxy_stack(), False),
    stack_case("proxy-preview", preview_proxy_stack(), False),
    stack_case("no-proxy", kit_stack(), False),
    stack_case(
        "workflows-invoker-instead-of-the-custom-role",
        replace_named(proxy_stack(), "proxy-workflow-starter", "role", "roles/workflows.invoker"),
        False,
    ),
    stack_case(
        "routes-unknown",
        replace_named(proxy_stack(), PROXY_SOURCE, "source", U),  # the asset not known yet
        False,
    ),
    stack_case(
        "custom-role-permissions-unknown",
        replace_named(proxy_stack(), "proxy-workflow-starter-role", "permissions", U),
        False,
    ),
    stack_case(
        "editor-to-someone-else",
        [*proxy_stack(), res(PROJECT_IAM_MEMBER, "x", member("roles/storage.admin"))],
        False,
    ),
    stack_case(
        "editor-to-an-unknown-member",
        [*proxy_stack(), res(PROJECT_IAM_MEMBER, "x", member("roles/editor", U))],
        False,
    ),
    stack_case(
        "default-target-setting",
        replace_named(
            replace_named(
                without_named(
                    without_named(
                        without_named(proxy_stack(), "proxy-run-job"),
                        "proxy-build-publisher-release",
                    ),
                    "job-daily-report",
                ),
                PROXY_SOURCE,
                "source",
                routes_asset(None),  # an archive without the proxy's job table
            ),
            PROXY_FN,
            PROXY_ENV,
            {
                **function_props()["serviceConfig"]["environmentVariables"],
                "DEDUP_DATABASE": PROXY_DATABASE,
                "DEDUP_PROXY_TARGET": "workflow",
                "DEDUP_PROXY_RESOURCE": WORKFLOW,
            },
        ),
        False,
    ),
    stack_case(
        "proxy-editor",
        [*proxy_stack(), _proxy_grant("proxy-editor", "roles/editor")],
        True,
    ),
    stack_case(
        "proxy-run-invoker-on-the-project",
        [*proxy_stack(), _proxy_grant("proxy-run-invoker", "roles/run.invoker")],
        True,
    ),
    stack_case(
        "proxy-executor-on-the-project",
        [*proxy_stack(), _proxy_grant("proxy-executor", "roles/run.jobsExecutorWithOverrides")],
        True,
    ),
    stack_case(
        "proxy-executor-on-another-job",
        replace_named(proxy_stack(), "proxy-run-job", "name", "drop-tables"),
        True,
    ),
    stack_case(
        "proxy-executor-on-another-job-by-full-name",
        replace_named(
            proxy_stack(),
            "proxy-run-job",
            "name",
            f"projects/{PROJECT}/locations/us-central1/jobs/reindex",
        ),
        True,
    ),
    stack_case(
        "proxy-executor-binding-on-another-job",
        [
            *proxy_stack(),
            res(
                RUN_JOB_IAM_BINDING,
                "proxy-other-job",
                {
                    "project": PROJECT,
                    "location": "europe-west1",
                    "name": "other",
                    "role": "roles/run.jobsExecutorWithOverrides",
                    "members": [PROXY],
                },
            ),
        ],
        True,
    ),
    stack_case(
        "workflows-invoker-without-a-workflow",
        replace_named(
            proxy_stack(),
            PROXY_SOURCE,
            "source",
            routes_asset(_proxy_routes(reindex={"target": "run_job", "resource": RUN_JOB})),
        ),
        True,
    ),
    stack_case(
        "workflows-invoker-in-another-project",
        replace_named(proxy_stack(), "proxy-workflow-starter", "project", "acme-other"),
        True,
    ),
    stack_case(
        "workflow-role-with-more-permissions",
        replace_named(
            proxy_stack(),
            "proxy-workflow-starter-role",
            "permissions",
            ["workflows.executions.create", "workflows.workflows.update"],
        ),
        True,
    ),
    stack_case(
        # Project-wide builds.create: arbitrary builds as the project's build account.
        "custom-role-with-builds-create",
        replace_named(
            proxy_stack(), "proxy-workflow-starter-role", "permissions",
            ["cloudbuild.builds.create"],
        ),
        True,
    ),
    stack_case(
        "builds-editor-for-the-trigger",
        [*proxy_stack(), _proxy_grant("proxy-builds-editor", "roles/cloudbuild.builds.editor")],
        True,
    ),
    stack_case(
        "workflow-role-not-declared",
        without_named(proxy_stack(), "proxy-workflow-starter-role"),
        True,
    ),
    stack_case(
        "publisher-without-a-trigger",
        replace_named(
            proxy_stack(),
            PROXY_SOURCE,
            "source",
            routes_asset(
                _proxy_routes(**{k: v for k, v in PROXY_ROUTES.items() if k != "release"})),
        ),
        True,
    ),
    stack_case(
        "publisher-on-another-topic",
        replace_named(proxy_stack(), "proxy-build-publisher-release", "topic", "audit-log"),
        True,
    ),
    stack_case(
        "secret-accessor-on-the-project",
        [*proxy_stack(), _proxy_grant("proxy-secrets", "roles/secretmanager.secretAccessor")],
        True,
    ),
    stack_case(
        "proxy-datastore-user-on-a-folder",
        [
            *proxy_stack(),
            res(
                FOLDER_IAM_MEMBER,
                "proxy-folder",
                {"folder": "folders/1", "role": "roles/datastore.user", "member": PROXY},
            ),
        ],
        True,
    ),
    stack_case(
        "proxy-in-a-binding",
        [
            *proxy_stack(),
            res(
                PROJECT_IAM_BINDING,
                "storage-admins",
                {"project": PROJECT, "role": "roles/storage.admin", "members": [SA, PROXY]},
            ),
        ],
        True,
    ),
    stack_case(
        "proxy-in-a-project-policy",
        [
            *proxy_stack(),
            res(
                PROJECT_IAM_POLICY,
                "project-policy",
                {
                    "project": PROJECT,
                    "policyData": policy_data(
                        {"role": "roles/secretmanager.secretAccessor", "members": [PROXY]}
                    ),
                },
            ),
        ],
        True,
    ),
]

PROXY_DB_ENV = f"{PROXY_ENV}.DEDUP_DATABASE"


def on_proxy_database(name: str, role: str, who: str) -> Resource:
    """`role` for `who`, conditioned to the proxy's database."""
    return res(PROJECT_IAM_MEMBER, name, member(role, who, condition=PROXY_DATASTORE_CONDITION))


# The proxy's records in a database of its own. Grants the previous pack already flagged
# (an advisory iam-datastore-user-single-database, or a watchdog role it did not allow);
# the walk-arounds it let through are in bypass_cases.py.
STACK_CASES["dedup-proxy-own-database"] = [
    stack_case(
        "proxy-and-function-on-the-default-database",
        replace_named(
            replace_named(proxy_stack(), PROXY_FN, PROXY_DB_ENV, DELETE),
            "dedup-function", PROXY_DB_ENV, DELETE,
        ),
        True,
    ),
]

# Who writes the proxy's database: since issue 25, dedup-database-writers' (every database).
STACK_CASES["dedup-database-writers"] = [
    stack_case(
        "runtime-datastore-user-unconditioned",
        replace_named(proxy_stack(), "runtime-datastore-user", "condition", DELETE),
        True,
    ),
    stack_case(
        "runtime-datastore-user-two-databases",
        replace_named(proxy_stack(), "runtime-datastore-user", "condition", {
            "title": "t", "expression": f'{DATASTORE_CONDITION["expression"]} || '
            f'{PROXY_DATASTORE_CONDITION["expression"]}'}),
        True,
    ),
    stack_case(
        "runtime-datastore-user-on-a-folder",
        [*proxy_stack(), res(FOLDER_IAM_MEMBER, "folder-writer", {
            "folder": "folders/1", "role": "roles/datastore.user", "member": SA})],
        True,
    ),
]

CALLERS = f"{PROXY_ENV}.DEDUP_ALLOWED_CALLERS"
OTHER_SA = f"ci-deployer@{PROJECT}.iam.gserviceaccount.com"

STACK_CASES["dedup-allowed-callers"] = [
    stack_case("kit", kit_stack(), False),
    # The invoker account is created in the same update: its e-mail is not known yet.
    stack_case("preview", preview_stack(), False),
    stack_case("proxy-kit", proxy_stack(), False),
    stack_case("proxy-preview", preview_proxy_stack(), False),
    stack_case("env-unknown", replace(kit_stack(), FN, PROXY_ENV, U), False),
    stack_case(
        "spaces-and-case",
        _env(kit_stack(), "DEDUP_ALLOWED_CALLERS", f" {INVOKER_SA.upper()} "),
        False,
    ),
    stack_case(
        # A second account is fine when a job of the stack sends its tokens.
        "two-job-accounts",
        [
            *_env(kit_stack(), "DEDUP_ALLOWED_CALLERS", f"{INVOKER_SA}, {OTHER_SA}"),
            _job(patch(job_props("audit"), "httpTarget.oidcToken.serviceAccountEmail", OTHER_SA)),
        ],
        False,
    ),
    stack_case(
        # Another job's account is not known yet: it may be the one named.
        "other-account-while-a-job-account-is-unknown",
        [
            *_env(kit_stack(), "DEDUP_ALLOWED_CALLERS", f"{INVOKER_SA},{OTHER_SA}"),
            _job(patch(job_props("audit"), "httpTarget.oidcToken.serviceAccountEmail", U)),
        ],
        False,
    ),
    stack_case(
        # A job that calls something else is not the function's business.
        "no-function",
        without_type(kit_stack(), FN),
        False,
    ),
    stack_case("not-set", _env(kit_stack(), "DEDUP_ALLOWED_CALLERS", DELETE), True),
    stack_case("empty", _env(kit_stack(), "DEDUP_ALLOWED_CALLERS", " "), True),
    stack_case("not-set-preview", _env(preview_stack(), "DEDUP_ALLOWED_CALLERS", DELETE), True),
    stack_case(
        "proxy-not-set",
        replace_named(proxy_stack(), PROXY_FN, CALLERS, DELETE),
        True,
    ),
    stack_case(
        # Recognised by its DEDUP_* settings alone, as the other dedup policies do.
        "function-by-settings-not-set",
        replace_named(
            _env(kit_stack(), "DEDUP_ALLOWED_CALLERS", DELETE),
            "dedup-function",
            "buildConfig.entryPoint",
            "main",
        ),
        True,
    ),
    stack_case(
        "an-account-no-job-uses",
        _env(kit_stack(), "DEDUP_ALLOWED_CALLERS", f"{INVOKER_SA},{OTHER_SA}"),
        True,
    ),
    stack_case(
        "proxy-allows-its-own-account",
        replace_named(proxy_stack(), PROXY_FN, CALLERS, f"{INVOKER_SA},{PROXY_SA}"),
        True,
    ),
    stack_case(
        "the-runtime-account-instead",
        _env(kit_stack(), "DEDUP_ALLOWED_CALLERS", RUNTIME_SA),
        True,
    ),
    # Fail closed on what the function would refuse or the pack does not understand.
    stack_case(
        "member-form", _env(kit_stack(), "DEDUP_ALLOWED_CALLERS", f"serviceAccount:{INVOKER_SA}"),
        True,
    ),
    stack_case(
        "empty-entry", _env(kit_stack(), "DEDUP_ALLOWED_CALLERS", f"{INVOKER_SA},,"), True
    ),
    stack_case("wildcard", _env(kit_stack(), "DEDUP_ALLOWED_CALLERS", "*"), True),
    stack_case(
        "not-a-string", _env(kit_stack(), "DEDUP_ALLOWED_CALLERS", [INVOKER_SA]), True
    ),
]


# --- the run watchdog ---------------------------------------------------------------------

WATCHDOG_FN = "watchdog-function"
WATCHDOG = f"serviceAccount:{WATCHDOG_SA}"
VIEWER = "watchdog-proxy-datastore-viewer"


def _watchdog_grant(name: str, role: str, **extra: object) -> Resource:
    return res(PROJECT_IAM_MEMBER, name, {"project": PROJECT, "role": role, "member": WATCHDOG,
                                          **extra})


STACK_CASES["dedup-watchdog-own-service-account"] = [
    stack_case("watchdog-kit", watchdog_stack(), False),
    stack_case("watchdog-preview", preview_watchdog_stack(), False),
    stack_case("no-watchdog", kit_stack(), False),
    stack_case(
        "watchdog-as-runtime-account",
        replace_named(watchdog_stack(), WATCHDOG_FN, "serviceConfig.serviceAccountEmail",
                      RUNTIME_SA),
        True,
    ),
    stack_case(
        "function-as-watchdog-account",
        replace_named(
            watchdog_stack(), "dedup-function", "serviceConfig.serviceAccountEmail", WATCHDOG_SA
        ),
        True,
    ),
    stack_case(
        "watchdog-job-oidc-as-watchdog-account",
        replace_named(
            watchdog_stack(), "watchdog-job", "httpTarget.oidcToken.serviceAccountEmail",
            WATCHDOG_SA,
        ),
        True,
    ),
    stack_case(
        # Recognised by its settings alone (no entry point given).
        "watchdog-by-settings-as-runtime-account",
        replace_named(
            replace_named(watchdog_stack(), WATCHDOG_FN, "buildConfig.entryPoint", DELETE),
            WATCHDOG_FN,
            "serviceConfig.serviceAccountEmail",
            RUNTIME_SA,
        ),
        True,
    ),
]

STACK_CASES["dedup-watchdog-least-privilege"] = [
    stack_case("watchdog-kit", watchdog_stack(), False),
    stack_case("watchdog-preview", preview_watchdog_stack(), False),
    stack_case("no-watchdog", kit_stack(), False),
    stack_case(
        "watchdog-account-unknown",
        [*replace_named(watchdog_stack(), WATCHDOG_FN, "serviceConfig.serviceAccountEmail", U),
         _watchdog_grant("watchdog-owner", "roles/datastore.owner")],
        False,
    ),
    stack_case(
        "watchdog-holds-datastore-owner",
        [*watchdog_stack(), _watchdog_grant("watchdog-owner", "roles/datastore.owner")],
        True,
    ),
    stack_case(
        "watchdog-holds-log-writer",
        [*watchdog_stack(), _watchdog_grant("watchdog-logs", "roles/logging.logWriter")],
        True,
    ),
    stack_case(
        "watchdog-holds-run-invoker",
        [*watchdog_stack(), res(RUN_SERVICE_IAM_MEMBER, "watchdog-self-invoker", {
            "project": PROJECT, "location": REGION, "name": "scheduler-dedup",
            "role": "roles/run.invoker", "member": WATCHDOG})],
        True,
    ),
    stack_case(
        "watchdog-datastore-user-unconditioned",
        replace_named(watchdog_stack(), "watchdog-datastore-user", "condition", DELETE),
        True,
    ),
    stack_case(
        "watchdog-datastore-user-in-a-binding",
        [*without_named(watchdog_stack(), "watchdog-datastore-user"),
         res(PROJECT_IAM_BINDING, "watchdog-datastore-binding", {
             "project": PROJECT, "role": "roles/datastore.user", "members": [WATCHDOG]})],
        True,
    ),
    # With the proxy: roles/datastore.viewer on the proxy's own database, read-only.
    stack_case("watchdog-and-proxy", proxy_watchdog_stack(), False),
    stack_case("watchdog-and-proxy-preview", preview_proxy_watchdog_stack(), False),
    stack_case(
        "watchdog-viewer-condition-unknown",
        replace_named(proxy_watchdog_stack(), VIEWER, "condition", U),
        False,
    ),
    stack_case(
        "watchdog-viewer-proxy-database-unknown",
        replace_named(
            replace_named(proxy_watchdog_stack(), VIEWER, "condition", DATASTORE_CONDITION),
            PROXY_FN, f"{PROXY_ENV}.DEDUP_DATABASE", U,
        ),
        False,
    ),
    stack_case(
        "watchdog-viewer-unconditioned",
        replace_named(proxy_watchdog_stack(), VIEWER, "condition", DELETE),
        True,
    ),
    stack_case(
        "watchdog-viewer-on-two-databases",
        replace_named(proxy_watchdog_stack(), VIEWER, "condition", {
            "title": "t", "expression": f'{PROXY_DATASTORE_CONDITION["expression"]} || true'}),
        True,
    ),
    stack_case(
        "watchdog-viewer-on-another-database",
        replace_named(
            proxy_watchdog_stack(), VIEWER, "condition", database_condition("(default)")
        ),
        True,
    ),
    stack_case(
        "watchdog-viewer-without-a-proxy",
        [*watchdog_stack(), _watchdog_grant(VIEWER, "roles/datastore.viewer",
                                            condition=PROXY_DATASTORE_CONDITION)],
        True,
    ),
    stack_case(
        "watchdog-viewer-on-a-folder",
        [*without_named(proxy_watchdog_stack(), VIEWER), res(FOLDER_IAM_MEMBER, VIEWER, {
            "folder": "folders/1", "role": "roles/datastore.viewer", "member": WATCHDOG,
            "condition": PROXY_DATASTORE_CONDITION})],
        True,
    ),
]


STACK_CASES["dedup-database-writers"].append(
    stack_case(
        # The watchdog only reads the proxy's records: roles/datastore.viewer.
        "watchdog-datastore-user-on-the-proxy-database",
        [*proxy_watchdog_stack(),
         on_proxy_database("watchdog-proxy-writer", "roles/datastore.user", WATCHDOG)],
        True,
    )
)


# --- alerting -----------------------------------------------------------------------------


def _with_database(resources: list[Resource], protected: bool) -> list[Resource]:
    return [*resources, res(gcp.FIRESTORE_DATABASE, "dedup-database", database_props(protected))]


PROTECTED = _with_database(kit_stack(), True)
UNPROTECTED = _with_database(kit_stack(), False)

STACK_CASES["dedup-alerting-notifies-production"] = [
    stack_case("protected-with-channel", PROTECTED, False),
    stack_case("protected-preview", _with_database(preview_stack(), True), False),
    stack_case("unprotected-without-alerts",
               without_type(UNPROTECTED, gcp.ALERT_POLICY), False),
    stack_case("not-a-kit-stack", [res(gcp.FIRESTORE_DATABASE, "db", database_props(True))],
               False),
    stack_case("protected-without-alert-policy", without_type(PROTECTED, gcp.ALERT_POLICY),
               True),
    stack_case(
        "protected-policy-without-channel",
        replace(PROTECTED, gcp.ALERT_POLICY, "notificationChannels", []),
        True,
    ),
    stack_case(
        "protected-policy-channels-unset",
        replace(PROTECTED, gcp.ALERT_POLICY, "notificationChannels", DELETE),
        True,
    ),
]

STACK_CASES["dedup-alerting-notifies"] = [
    stack_case("unprotected-with-channel", UNPROTECTED, False),
    stack_case("no-database-with-channel", kit_stack(), False),
    stack_case(
        "two-policies-one-notifies",
        [*replace(UNPROTECTED, gcp.ALERT_POLICY, "notificationChannels", []),
         res(gcp.ALERT_POLICY, "alert-other", alert_policy_props())],
        False,
    ),
    # Mandatory there (dedup-alerting-notifies-production), not advised twice.
    stack_case("protected-without-alerts", without_type(PROTECTED, gcp.ALERT_POLICY), False),
    stack_case("unprotected-without-alert-policy", without_type(UNPROTECTED, gcp.ALERT_POLICY),
               True),
    stack_case(
        "unprotected-policy-without-channel",
        replace(UNPROTECTED, gcp.ALERT_POLICY, "notificationChannels", []),
        True,
    ),
]


# --- alert thresholds (policies/alert_thresholds.py) ----------------------------------------

WATCHDOG_SOURCE_OBJECT = "function-watchdog-5e6f.zip"
INCIDENTS_FILTER = ('metric.type="logging.googleapis.com/user/dedup-watchdog-incidents" AND '
                    'resource.type="cloud_run_revision" AND '
                    'metric.label.event="incident_opened"')


def watched(schedule: str = "0 3 * * *", **alerts: object) -> dict[str, object]:
    """One entry of the watchdog's job table (what infra.watchdog.watch_jobs writes)."""
    return {"name": "dedup-nightly-export", "schedule": schedule, "timeZone": "Europe/Berlin",
            "attemptDeadlineSeconds": 180, "retryWindowSeconds": 690, "paused": False,
            **alerts}


def thresholds_stack(
    *entries: object, protected: bool = True, channels: bool = True, table: bool = True,
) -> list[Resource]:
    """A stack with the watchdog built from its own source object, whose job table lists
    `entries`, and the incident-opened alert policy (with or without its channel)."""
    opened = patch(alert_policy_props(*([CHANNEL_ID] if channels else [])), "conditions",
                   [{"displayName": "an incident opened", "conditionThreshold": {
                       "filter": INCIDENTS_FILTER, "comparison": "COMPARISON_GT",
                       "thresholdValue": 0, "duration": "60s"}}])
    if not channels:
        opened["notificationChannels"] = []
    resources = [
        *replace_named(watchdog_stack(), "watchdog-function",
                       "buildConfig.source.storageSource.object", WATCHDOG_SOURCE_OBJECT),
        res(gcp.ALERT_POLICY, "alert-incident-opened", opened),
    ]
    if table:
        resources.append(res(BUCKET_OBJECT, "watchdog-source", {
            "bucket": "src-bucket", "name": WATCHDOG_SOURCE_OBJECT,
            "source": table_asset(WATCH_JOBS_TABLE, list(entries)),
            "contentType": "application/zip"}))
    return _with_database(resources, protected)


STACK_CASES["dedup-alert-thresholds-page-production"] = [
    stack_case("defaults-page-at-once",
               thresholds_stack(watched(failureThreshold=1, recoveryThreshold=1)), False),
    stack_case("table-before-thresholds", thresholds_stack(watched()), False),
    stack_case("hourly-pages-within-a-day",
               thresholds_stack(watched("0 * * * *", failureThreshold=24)), False),
    stack_case("daily-recovers-within-a-week",
               thresholds_stack(watched(recoveryThreshold=7, failureThreshold=1)), False),
    stack_case("paused-job-not-judged",
               thresholds_stack({**watched(failureThreshold=30), "paused": True}), False),
    stack_case("unprotected-not-judged",
               thresholds_stack(watched(failureThreshold=30), protected=False), False),
    stack_case("no-watchdog", PROTECTED, False),
    stack_case("daily-pages-after-two-days",
               thresholds_stack(watched(failureThreshold=2)), True),
    stack_case("hourly-never-recovers-in-a-week",
               thresholds_stack(watched("0 * * * *", recoveryThreshold=200)), True),
    stack_case("opened-policy-without-channel",
               thresholds_stack(watched(), channels=False), True),
    # No channel on any policy: dedup-alerting-notifies-production says so, not this one.
    stack_case("no-channel-anywhere",
               replace(thresholds_stack(watched()), gcp.ALERT_POLICY, "notificationChannels",
                       []), False),
    stack_case("no-opened-policy",
               without_named(thresholds_stack(watched()), "alert-incident-opened"), True),
    stack_case("table-unreadable", thresholds_stack(watched(), table=False), True),
    stack_case("threshold-not-a-number",
               thresholds_stack(watched(failureThreshold="three")), True),
    stack_case("job-without-schedule",
               thresholds_stack({**watched(), "schedule": None}), True),
]


def scheduled(schedule: object, time_zone: object = "Europe/Berlin") -> dict[str, object]:
    """A job's props with this schedule and timeZone (DELETE: Scheduler's default)."""
    return patch(patch(job_props(), "schedule", schedule), "timeZone", time_zone)


# Whatever the date the tests run: Europe/Berlin and America/New_York change on Sundays,
# between 02:00 and 03:00 local time, every year.
RESOURCE_CASES["scheduler-job-dst-change"] = [
    one("dst-daily-0300-berlin", JOB, job_props(), False),  # 03:00 exists once every day
    one("dst-noon-berlin", JOB, scheduled("0 12 * * *"), False),
    one("dst-every-minute-utc", JOB, scheduled("* * * * *", "Etc/UTC"), False),
    one("dst-default-zone-is-utc", JOB, scheduled("30 2 * * *", DELETE), False),
    one("dst-weekdays-0230-berlin", JOB, scheduled("30 2 * * 1-5"), False),
    one("dst-schedule-unknown", JOB, scheduled(U), False),
    one("dst-zone-unknown", JOB, scheduled("30 2 * * *", U), False),
    # The time-zone policy's violation, not advised twice.
    one("dst-zone-invalid", JOB, scheduled("30 2 * * *", "CEST"), False),
    one("dst-not-a-job", BUCKET, {"schedule": "30 2 * * *", "timeZone": "Europe/Berlin"},
        False),
    one("dst-daily-0230-berlin", JOB, scheduled("30 2 * * *"), True),  # gap and repeat
    one("dst-hourly-berlin", JOB, scheduled("7 * * * *"), True),
    one("dst-sunday-0200-new-york", JOB, scheduled("0 2 * * 0", "America/New_York"), True),
]


# -- cloud-run-internal-callers (policies/ingress.py) -----------------------------------------
TASKS_QUEUE = "gcp:cloudtasks/queue:Queue"
DELIVERY_QUEUE = f"projects/{PROJECT}/locations/{REGION}/queues/dedup-deliveries"
OTHER_QUEUE = f"projects/someone-else/locations/{REGION}/queues/dedup-deliveries"
CLOUDFUNCTIONS_URL = f"https://{REGION}-{PROJECT}.cloudfunctions.net/scheduler-dedup"


def delivering_watchdog(*, queue: bool = True, target_url: object = FUNCTION_URL,
                         depends: bool = False) -> list[Resource]:
    """watchdog_stack whose watchdog delivers runs to the dedup function (its URL in its
    environment), through the stack's deliveries queue (or, queue=False, by itself)."""
    stack = replace_named(watchdog_stack(), WATCHDOG_FN,
                          "serviceConfig.environmentVariables.DEDUP_WATCH_TARGET_URL", target_url)
    if queue:
        stack = replace_named(stack, WATCHDOG_FN,
                              "serviceConfig.environmentVariables.DEDUP_WATCH_QUEUE",
                              DELIVERY_QUEUE)
        stack.append(res(TASKS_QUEUE, "watchdog-deliveries", {
            "project": PROJECT, "location": REGION, "name": "dedup-deliveries"}))
    if depends:  # the engine's view: the watchdog's env takes the function's URL output
        function = next(r for r in stack if r.name == "dedup-function")
        stack = [
            Resource(r.type, r.name, r.urn, r.props, r.parent, (*r.dependencies, function.urn))
            if r.name == WATCHDOG_FN else r
            for r in stack
        ]
    return stack


STACK_CASES["cloud-run-internal-callers"] = [
    stack_case("callers-kit", kit_stack(), False),
    stack_case("callers-watchdog-not-delivering", watchdog_stack(), False),
    stack_case("callers-watchdog-through-the-queue", delivering_watchdog(), False),
    stack_case(
        "callers-watchdog-through-a-vpc-connector",
        replace_named(
            replace_named(delivering_watchdog(queue=False), WATCHDOG_FN,
                          "serviceConfig.vpcConnector", "projects/p/locations/r/connectors/c"),
            WATCHDOG_FN, "serviceConfig.vpcConnectorEgressSettings", "ALL_TRAFFIC",
        ),
        False,
    ),
    stack_case(
        "callers-public-target-is-not-judged",
        replace_named(delivering_watchdog(queue=False), "dedup-function",
                      "serviceConfig.ingressSettings", "ALLOW_ALL"),
        False,
    ),
    stack_case("callers-watchdog-posts-itself", delivering_watchdog(queue=False), True),
    stack_case(
        "callers-queue-named-but-not-declared",
        [r for r in delivering_watchdog() if r.type != TASKS_QUEUE],
        True,
    ),
    stack_case(
        "callers-connector-for-private-ranges-only",
        replace_named(
            replace_named(delivering_watchdog(queue=False), WATCHDOG_FN,
                          "serviceConfig.vpcConnector", "projects/p/locations/r/connectors/c"),
            WATCHDOG_FN, "serviceConfig.vpcConnectorEgressSettings", "PRIVATE_RANGES_ONLY",
        ),
        True,
    ),
    stack_case(  # a first preview: the URL is not known yet, the dependency is
        "callers-url-unknown-in-preview",
        delivering_watchdog(queue=False, target_url=U, depends=True),
        True,
    ),
    stack_case(
        "callers-url-unknown-through-the-queue",
        delivering_watchdog(target_url=U, depends=True),
        False,
    ),
    stack_case(
        "callers-through-direct-vpc-egress",
        replace_named(
            replace_named(delivering_watchdog(queue=False), WATCHDOG_FN,
                          "serviceConfig.directVpcNetworkInterfaces",
                          [{"network": "default", "subnetwork": "default"}]),
            WATCHDOG_FN, "serviceConfig.directVpcEgress", "VPC_EGRESS_ALL_TRAFFIC",
        ),
        False,
    ),
    stack_case(
        "callers-direct-vpc-egress-private-ranges-only",
        replace_named(
            replace_named(delivering_watchdog(queue=False), WATCHDOG_FN,
                          "serviceConfig.directVpcNetworkInterfaces",
                          [{"network": "default", "subnetwork": "default"}]),
            WATCHDOG_FN, "serviceConfig.directVpcEgress", "VPC_EGRESS_PRIVATE_RANGES_ONLY",
        ),
        True,
    ),
    stack_case(  # the host alone, in upper case, inside a longer value
        "callers-host-in-another-form",
        delivering_watchdog(queue=False, target_url=json.dumps(
            {"to": FUNCTION_URL.removeprefix("https://").upper()})),
        True,
    ),
    stack_case(  # the function's cloudfunctions.net URL reaches the same service
        "callers-cloudfunctions-net-url",
        replace_named(
            delivering_watchdog(queue=False, target_url=CLOUDFUNCTIONS_URL), "dedup-function",
            "url", CLOUDFUNCTIONS_URL),
        True,
    ),
    stack_case(  # a task is internal from the target's own project only
        "callers-queue-in-another-project",
        [*replace_named([r for r in delivering_watchdog() if r.type != TASKS_QUEUE],
                        WATCHDOG_FN, "serviceConfig.environmentVariables.DEDUP_WATCH_QUEUE",
                        OTHER_QUEUE),
         res(TASKS_QUEUE, "other-deliveries", {
             "project": "someone-else", "location": REGION, "name": "dedup-deliveries"})],
        True,
    ),
]
