"""Every policy of the pack: stable name, what to change, enforcement level, function.

Names are stable: teams reference them in --policy-pack-config files. Descriptions say what
to change. Everything is mandatory except what can only be judged in context.
"""

from __future__ import annotations

from typing import Final

from policies import alerting, function, iam, proxy, scheduler, stack, storage, watchdog
from policies.model import Enforcement, Policy, ResourcePolicy, StackPolicy

MANDATORY = Enforcement.MANDATORY
ADVISORY = Enforcement.ADVISORY

RESOURCE_POLICIES: Final[tuple[ResourcePolicy, ...]] = (
    ResourcePolicy(
        "scheduler-job-unix-cron-schedule",
        "Cloud Scheduler jobs need a 5-field unix-cron schedule (e.g. '0 3 * * *'), not the "
        "legacy 'every 5 minutes' form: only then is X-CloudScheduler-ScheduleTime reliable.",
        MANDATORY,
        scheduler.unix_cron_schedule,
    ),
    ResourcePolicy(
        "scheduler-job-time-zone",
        "Cloud Scheduler jobs' timeZone must be an IANA name such as 'Etc/UTC' or 'Europe/Berlin'.",
        MANDATORY,
        scheduler.time_zone,
    ),
    ResourcePolicy(
        "scheduler-job-oidc-auth",
        "Cloud Scheduler HTTP jobs must authenticate with httpTarget.oidcToken (not oauthToken, "
        "not none) of a dedicated service account, not the Compute or App Engine default one.",
        MANDATORY,
        scheduler.oidc_authentication,
    ),
    ResourcePolicy(
        "scheduler-job-oidc-audience",
        "Cloud Scheduler HTTP jobs must set httpTarget.oidcToken.audience to the function's "
        "run.app URL.",
        MANDATORY,
        scheduler.oidc_audience,
    ),
    ResourcePolicy(
        "scheduler-job-attempt-deadline",
        "Cloud Scheduler HTTP jobs' attemptDeadline must be within 15s..1800s.",
        MANDATORY,
        scheduler.attempt_deadline,
    ),
    ResourcePolicy(
        "function-dedicated-runtime-service-account",
        "Cloud Run functions and services must run as a dedicated service account "
        "(serviceConfig.serviceAccountEmail / template.serviceAccount), not the Compute or "
        "App Engine default account.",
        MANDATORY,
        function.dedicated_runtime_account,
    ),
    ResourcePolicy(
        "function-dedicated-build-service-account",
        "Cloud Run functions must build with a dedicated service account "
        "(buildConfig.serviceAccount), not a default Compute, App Engine or Cloud Build account.",
        MANDATORY,
        function.dedicated_build_account,
    ),
    ResourcePolicy(
        "function-ingress-not-public",
        "Cloud Run functions and services must not accept traffic from the internet: set "
        "ingressSettings ALLOW_INTERNAL_ONLY (functions) or ingress "
        "INGRESS_TRAFFIC_INTERNAL_ONLY (Cloud Run), not ALLOW_ALL / INGRESS_TRAFFIC_ALL.",
        MANDATORY,
        function.ingress_not_public,
    ),
    ResourcePolicy(
        "iam-no-public-members",
        "No IAM member, binding or policy may grant a role to allUsers or "
        "allAuthenticatedUsers (functions, Cloud Run services, buckets, the project, anything).",
        MANDATORY,
        iam.no_public_members,
    ),
    ResourcePolicy(
        "iam-no-primitive-roles",
        "No IAM grant may use a primitive role (roles/owner, roles/editor, roles/viewer): "
        "grant the predefined roles the principal needs.",
        MANDATORY,
        iam.no_primitive_roles,
    ),
    ResourcePolicy(
        "iam-no-project-level-invoker",
        "roles/run.invoker (and roles/cloudfunctions.invoker) must be granted on the one "
        "Cloud Run service, never on the project, folder or organization.",
        MANDATORY,
        iam.no_hierarchy_invoker,
    ),
    ResourcePolicy(
        "iam-no-project-level-service-account-impersonation",
        "roles/iam.serviceAccountUser and roles/iam.serviceAccountTokenCreator must be granted "
        "on one service account, never on the project, folder or organization.",
        MANDATORY,
        iam.no_hierarchy_impersonation,
    ),
    ResourcePolicy(
        "iam-datastore-user-single-database",
        "roles/datastore.user should carry a condition resource.name == "
        '"projects/P/databases/D" naming the one dedup database.',
        ADVISORY,
        iam.datastore_user_single_database,
    ),
    ResourcePolicy(
        "storage-bucket-uniform-access",
        "Cloud Storage buckets must set uniformBucketLevelAccess: true.",
        MANDATORY,
        storage.uniform_bucket_level_access,
    ),
    ResourcePolicy(
        "storage-bucket-public-access-prevention",
        'Cloud Storage buckets must set publicAccessPrevention: "enforced".',
        MANDATORY,
        storage.public_access_prevention,
    ),
)

STACK_POLICIES: Final[tuple[StackPolicy, ...]] = (
    StackPolicy(
        "dedup-lease-survives-missed-renewals",
        "The dedup function's lease (DEDUP_LEASE_SECONDS, config leaseSeconds) must be at least "
        "3 x its store timeout (DEDUP_STORE_TIMEOUT_SECONDS, default 10; config "
        "storeTimeoutSeconds): the heartbeat renews the lease every lease/3 and a renewal may "
        "take up to the store timeout, so one stalled renewal ends before the next is due and "
        "a claim survives two failed renewals. The lease is a liveness window, not a bound on "
        "the job: it need not cover attemptDeadline or the function's timeout.",
        MANDATORY,
        stack.lease_survives_missed_renewals,
    ),
    StackPolicy(
        "dedup-retention-exceeds-retry-window",
        "Dedup records (DEDUP_RETENTION_SECONDS, config retentionSeconds) must outlive every "
        "targeting job's retry window (retryCount, backoff and maxRetryDuration).",
        MANDATORY,
        stack.retention_exceeds_retry_window,
    ),
    StackPolicy(
        "dedup-retries-outlast-lease",
        "A Scheduler job that targets the dedup function (or its proxy) should keep retrying, "
        "when every attempt fails at once, for at least the lease (DEDUP_LEASE_SECONDS, config "
        "leaseSeconds): max(sum of its retries' backoffs, maxRetryDuration) >= lease. Else a "
        "run whose instance crashed mid-job is skipped (its claim answers 409 until the lease "
        "lapses): raise maxRetryDuration to at least the lease, or accept skipped crashed runs "
        "(retryCount 0 skips them by design).",
        ADVISORY,
        stack.retries_outlast_lease,
    ),
    StackPolicy(
        "dedup-ttl-policy",
        "A gcp:firestore/field:Field must set a TTL policy (ttlConfig) on expire_at of the dedup "
        "collection (DEDUP_COLLECTION in DEDUP_DATABASE) with an empty indexConfig exemption.",
        MANDATORY,
        stack.ttl_policy_on_expire_at,
    ),
    StackPolicy(
        "dedup-job-headers",
        "Every Scheduler job that targets the dedup function (or its proxy) must send the "
        "X-Dedup-Project and X-Dedup-Location headers with its own project and location.",
        MANDATORY,
        stack.dedup_headers,
    ),
    StackPolicy(
        "dedup-allowed-callers",
        "Every function of the kit (the dedup function and its proxy) must set "
        "DEDUP_ALLOWED_CALLERS, naming only the service accounts the stack's Scheduler jobs "
        "send OIDC tokens of: Cloud Run lets through anyone with roles/run.invoker or a "
        "broader role, and the function serves only the callers it names.",
        MANDATORY,
        stack.allowed_callers,
    ),
    StackPolicy(
        "dedup-proxy-own-service-account",
        "The idempotent proxy (entry point proxy_scheduled_job) must run as its own service "
        "account: no other function, service, job or Scheduler OIDC token may use it.",
        MANDATORY,
        proxy.own_service_account,
    ),
    StackPolicy(
        "dedup-proxy-least-privilege",
        "The proxy's service account may hold only roles/datastore.user and what its targets "
        "need: roles/workflows.invoker (workflow), roles/run.jobsExecutorWithOverrides on "
        "the job (run_job), a custom role with only cloudbuild.builds.create or "
        "roles/cloudbuild.builds.editor (build_trigger).",
        MANDATORY,
        proxy.least_privilege,
    ),
    StackPolicy(
        "dedup-watchdog-own-service-account",
        "The run watchdog (entry point watch_scheduled_runs) must run as its own service "
        "account: no other function, service, job or Scheduler OIDC token may use it.",
        MANDATORY,
        watchdog.own_service_account,
    ),
    StackPolicy(
        "dedup-watchdog-least-privilege",
        "The run watchdog's service account may hold only roles/datastore.user, conditioned "
        "to the one dedup database (it reads the records and writes its own cursors there).",
        MANDATORY,
        watchdog.least_privilege,
    ),
    StackPolicy(
        "dedup-alerting-notifies-production",
        "A production-like stack of the kit (a Firestore database with delete protection on) "
        "must have alert policies with at least one notification channel: set the stack "
        "config alerts.emails.",
        MANDATORY,
        alerting.production_alerting,
    ),
    StackPolicy(
        "dedup-alerting-notifies",
        "A stack of the kit without delete protection should still have alert policies "
        "with at least one notification channel (stack config alerts.emails).",
        ADVISORY,
        alerting.alerting,
    ),
)

ALL_POLICIES: Final[tuple[Policy, ...]] = (*RESOURCE_POLICIES, *STACK_POLICIES)


def by_name(name: str) -> Policy:
    for policy in ALL_POLICIES:
        if policy.name == name:
            return policy
    raise KeyError(name)
