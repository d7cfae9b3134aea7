"""The pack's resource policies (each judges one resource's properties): stable name, what
to change, enforcement level, function. policies/registry.py lists them with the stack
policies (ALL_POLICIES); names are stable (teams reference them in --policy-pack-config
files), descriptions say what to change.
"""

from __future__ import annotations

from typing import Final

from policies import function, iam, proxy, scheduler, secrets, storage
from policies.model import Enforcement, ResourceGraphPolicy, ResourcePolicy

MANDATORY = Enforcement.MANDATORY
ADVISORY = Enforcement.ADVISORY

RESOURCE_POLICIES: Final[tuple[ResourcePolicy | ResourceGraphPolicy, ...]] = (
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
        scheduler.DST_POLICY,
        "A Cloud Scheduler job in a zone with daylight saving time should not fire at a "
        "local time that a DST change within the next year skips or repeats (what Scheduler "
        "does then is not documented): use timeZone Etc/UTC or a time outside the change "
        "window.",
        ADVISORY,
        scheduler.dst_changes,
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
        "run.app URL, and it must be the origin (scheme, host, port) of the job's own uri: a "
        "token is only ever sent where it is valid.",
        MANDATORY,
        scheduler.oidc_audience,
    ),
    ResourcePolicy(
        "scheduler-job-attempt-deadline",
        "Cloud Scheduler jobs' attemptDeadline must be within the range Google's Job "
        "reference gives their target: 15s..1800s for an HTTP target, 15s..86400s (24 h) "
        "for an App Engine HTTP target; a Pub/Sub target ignores it.",
        MANDATORY,
        scheduler.attempt_deadline,
    ),
    ResourcePolicy(
        "scheduler-job-app-engine-target",
        "A Cloud Scheduler job with an App Engine HTTP target (appEngineHttpTarget, which "
        "carries no OIDC token) must send its run as a POST to a relativeUri that begins "
        "with '/' (the service's route, e.g. /tasks/export). App Engine retries a 503 "
        "regardless of retryConfig and without counting it against retryCount, so the "
        "protocol answers 409, never 503, while another attempt holds the claim; the "
        "X-Dedup-* headers: dedup-job-headers.",
        MANDATORY,
        scheduler.app_engine_http_target,
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
        "Cloud Run functions (both generations) and services must not accept traffic from "
        "the internet: ingressSettings ALLOW_INTERNAL_ONLY or ALLOW_INTERNAL_AND_GCLB "
        "(functions), ingress INGRESS_TRAFFIC_INTERNAL_ONLY or "
        "INGRESS_TRAFFIC_INTERNAL_LOAD_BALANCER (Cloud Run). An allow-list: unset, empty or "
        "any other value fails.",
        MANDATORY,
        function.ingress_not_public,
    ),
    ResourcePolicy(
        "run-invoker-iam-check-enabled",
        "Cloud Run services must keep the invoker IAM check: no invokerIamDisabled: true, no "
        "run.googleapis.com/invoker-iam-disabled annotation.",
        MANDATORY,
        function.invoker_iam_check_enabled,
    ),
    ResourcePolicy(
        "iam-no-public-members",
        "No IAM member, binding or policy, and no ACL-style grant (Cloud Storage access "
        "controls and ACLs, BigQuery dataset access) may grant to allUsers or "
        "allAuthenticatedUsers. An IAM policy document is read as the provider reads it "
        "(keys in any case); one the pack cannot read fails.",
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
        "No role that allows run.routes.invoke or cloudfunctions.functions.invoke "
        "(roles/run.invoker, run.developer, run.admin, cloudfunctions.invoker, ...) may be "
        "granted on the project, folder or organization: grant roles/run.invoker on the one "
        "Cloud Run service.",
        MANDATORY,
        iam.no_hierarchy_invoker,
    ),
    ResourcePolicy(
        "iam-no-project-level-service-account-impersonation",
        "No role that lets a principal act as or mint tokens for service accounts, create "
        "their keys, or change IAM policies (roles/iam.serviceAccountUser, "
        "serviceAccountTokenCreator, serviceAccountOpenIdTokenCreator, workloadIdentityUser, "
        "serviceAccountKeyAdmin, resourcemanager.projectIamAdmin, ...) may be granted on the "
        "project, folder or organization: grant it on the one service account.",
        MANDATORY,
        iam.no_hierarchy_impersonation,
    ),
    ResourcePolicy(
        "iam-datastore-user-single-database",
        "Roles that write Firestore entities (roles/datastore.user and broader) should carry "
        'exactly the condition resource.name == "projects/P/databases/D" (optionally '
        "&&-joined with resource.type/resource.service equalities; no ||).",
        ADVISORY,
        iam.datastore_user_single_database,
    ),
    ResourcePolicy(
        "iam-known-roles-at-hierarchy-level",
        "A predefined role granted on the project, folder or organization should be one the "
        "pack's permission table (policies/permissions.py) lists, so it is judged by what it "
        "allows. Granted to an account that runs job code it fails "
        "(dedup-runtime-no-kit-resources), and granted to anyone where the watchdog's "
        "deliveries queue is (dedup-deliveries-queue-task-creators).",
        ADVISORY,
        iam.known_roles_at_hierarchy_level,
    ),
    ResourcePolicy(
        "iam-grant-types-readable",
        "Resources that grant access must be ones the pack reads: an IAM member/binding "
        "without a readable role and member(s), or a type that looks like an ACL or access "
        "entry the pack does not know, is flagged.",
        ADVISORY,
        iam.unknown_grant_types,
    ),
    ResourceGraphPolicy(
        "dedup-proxy-component-grants",
        "Grants declared in the idempotent proxy's component (linked by its URN, so judged "
        "before anything is applied, even while the proxy's account is unknown) may only be "
        "what its targets need: roles/datastore.user, roles/secretmanager.secretAccessor on "
        "one secret, a custom role (its permissions: dedup-proxy-least-privilege) or "
        "roles/workflows.invoker on the project, roles/run.jobsExecutorWithOverrides on one "
        "job with its location, roles/pubsub.publisher on one topic, and the invoker's "
        "roles/run.invoker on the proxy's own service; nothing at folder or organization "
        "level, no project-wide cloudbuild.builds.create.",
        MANDATORY,
        proxy.component_grants,
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
    ResourcePolicy(
        "dedup-token-secret-not-plain",
        "DEDUP_TOKEN_SECRET (the proxy's token secret) must never be a plain environment "
        "variable of a function or Cloud Run service or job: only a secret environment "
        "variable from Secret Manager.",
        MANDATORY,
        secrets.token_secret_not_plain,
    ),
)
