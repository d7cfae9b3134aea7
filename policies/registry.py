"""Every policy of the pack: stable name, what to change, enforcement level, function.

Names are stable: teams reference them in --policy-pack-config files. Descriptions say what
to change. Everything is mandatory except what can only be judged in context.
"""

from __future__ import annotations

from typing import Final

from policies import (
    accounts,
    alert_thresholds,
    alerting,
    databases,
    deliveries_queue,
    deployers,
    function,
    iam,
    identities,
    ingress,
    proxy,
    runtimes,
    scheduler,
    secrets,
    stack,
    storage,
    watchdog,
)
from policies.model import Enforcement, Policy, ResourceGraphPolicy, ResourcePolicy, StackPolicy

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
        "(`retry: none`, retryCount 0, skips them by design).",
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
        "account: no other function (either generation), Cloud Run service or job, workflow, "
        "build trigger or Scheduler OIDC token may use it. While its e-mail is unknown (a "
        "first preview) it comes from the Account declared in the proxy's component.",
        MANDATORY,
        accounts.proxy_own_service_account,
    ),
    StackPolicy(
        "dedup-proxy-least-privilege",
        "Anywhere in the stack, the proxy's service account (linked by e-mail, or by the "
        "resource graph while the e-mail is unknown) may hold only roles/datastore.user "
        "conditioned to its own database (its DEDUP_DATABASE), "
        "roles/secretmanager.secretAccessor on one secret, and what its routed targets need: "
        "a custom role with only workflows.executions.create or roles/workflows.invoker in "
        "the workflow's project (workflow), roles/run.jobsExecutorWithOverrides on the routed "
        "job (run_job), roles/pubsub.publisher on the routed trigger's topic (build_trigger; "
        "never project-wide cloudbuild.builds.create). IAM and ACL-style grants (e.g. "
        "BigQuery dataset access) count.",
        MANDATORY,
        proxy.least_privilege,
    ),
    StackPolicy(
        "dedup-proxy-own-database",
        "The idempotent proxy keeps its run records in a Firestore database of its own: its "
        "DEDUP_DATABASE differs from every dedup function's (whose job code could otherwise "
        "write, and so forge, a proxied job's record: IAM conditions name databases, not "
        "collections). Who may write it: dedup-database-writers.",
        MANDATORY,
        stack.proxy_own_database,
    ),
    StackPolicy(
        "dedup-database-writers",
        "Every Firestore database of the kit (the dedup database, the proxy's, any other a "
        "function of the kit names in a DEDUP_*DATABASE setting, any declared in the stack) "
        "is written only by the accounts of the functions naming it: no other member may "
        "hold a role that writes entities (roles/datastore.user, datastore.owner, custom "
        "roles with datastore.entities.*), conditioned to the database or granted on its "
        "project, folder or organization without a one-database condition.",
        MANDATORY,
        databases.database_writers,
    ),
    StackPolicy(
        "dedup-no-firebase-rules",
        "No Firebase rules release (gcp:firebaserules/release:Release, cloud.firestore or "
        "cloud.firestore/<database>) may apply to a database of the kit: the kit reaches it "
        "through IAM only, and rules can only open it to Firebase clients.",
        MANDATORY,
        databases.no_firebase_rules_on_kit_databases,
    ),
    StackPolicy(
        "iam-no-role-admin-or-build-create",
        "No grant, on any resource at any level, of a role carrying iam.roles.create, "
        "iam.roles.update (roles/iam.roleAdmin, roles/iam.organizationRoleAdmin, custom "
        "roles) or cloudbuild.builds.create (roles/cloudbuild.builds.editor, custom "
        "roles): their holders rewrite a role into anything or run any build as the "
        "project's build account. Only the deployer's service accounts, listed in this "
        "policy's `deployers` setting, may hold them.",
        MANDATORY,
        iam.no_role_admin_or_build_create,
        settings=(deployers.SETTING,),
    ),
    StackPolicy(
        "dedup-accounts-act-as",
        "No member may hold iam.serviceAccounts.actAs (roles/iam.serviceAccountUser, custom "
        "roles) on an account of the kit (the jobs' invoker, a function's runtime or build "
        "account, the watchdog's task account, any account the stack declares), "
        "except a watchdog that delivers runs on its own account and the deployer's service "
        "accounts listed in this policy's `deployers` setting: whoever holds it attaches "
        "the account to a job or service of their own and gets its tokens.",
        MANDATORY,
        accounts.act_as_only_own_accounts,
        settings=(deployers.SETTING,),
    ),
    StackPolicy(
        "dedup-runtime-account-not-a-caller",
        "The runtime account of a function that runs job code (the dedup function, each "
        "runtime's) is no caller of the kit: not a Scheduler job's OIDC identity, not in any "
        "function's DEDUP_ALLOWED_CALLERS, not an invoker of a function of the kit.",
        MANDATORY,
        accounts.runtime_account_not_a_caller,
    ),
    StackPolicy(
        "dedup-token-secret-readers",
        "Only the proxy's account and the declared tokenSecretReaders may read the proxy's "
        "token secret: no other member may hold a role carrying "
        "secretmanager.versions.access on it, or on its project, folder or organization.",
        MANDATORY,
        secrets.token_secret_readers,
    ),
    StackPolicy(
        "dedup-function-invokers",
        "On the Cloud Run service of a function of the kit (dedup function, proxy, "
        "watchdog), roles that allow run.routes.invoke / cloudfunctions.functions.invoke "
        "or changing its IAM policy (roles/run.invoker, run.developer, run.admin, custom "
        "roles...) go only to the accounts the stack's Scheduler jobs send OIDC tokens of.",
        MANDATORY,
        accounts.function_invokers,
    ),
    StackPolicy(
        "dedup-accounts-not-impersonable",
        "No grant on an account of the kit (one a function, service or job of the stack "
        "runs as, whose OIDC tokens a Scheduler job or the watchdog's tasks send, a "
        "function builds with, or the stack declares) may allow minting its tokens or keys "
        "(getOpenIdToken, getAccessToken, signJwt, signBlob, implicitDelegation, "
        "serviceAccountKeys.create, setIamPolicy): its holders could call the functions as "
        "the jobs do.",
        MANDATORY,
        accounts.accounts_not_impersonable,
    ),
    StackPolicy(
        "dedup-runtime-own-database-only",
        "The account of a function that runs job code (each runtime's, labelled kit-runtime, "
        "and the stack's default function) may read, write, export, import, bulk-delete or "
        "clone Firestore entities, or delete or update a database (roles/datastore.user, "
        "datastore.viewer, datastore.owner, datastore.admin, datastore.importExportAdmin, "
        "datastore.bulkAdmin, firebaserules.system, firebase.admin, custom roles with "
        "datastore.entities.* or datastore.databases.*) of no database of the kit but its own "
        "(its DEDUP_DATABASE): not another runtime's, the dedup database, the proxy's or the "
        "watchdog's, and not on the project, a folder or the organization without a "
        "condition naming its own database; nor a role the pack does not know conditioned "
        "to another database of the kit. Else its job code could make another runtime's run "
        "execute twice or never.",
        MANDATORY,
        runtimes.own_database_only,
    ),
    StackPolicy(
        "dedup-runtime-no-kit-resources",
        "The account of a function that runs job code holds nothing on the kit's own "
        "resources, on them or on their project, folder or organization, judged by what the "
        "role allows: no secretmanager.versions.access or secret admin permission on the "
        "proxy's token secret; no cloudtasks.* permission on the watchdog's deliveries "
        "queue; no iam.serviceAccounts.actAs, token minting, key creation or setIamPolicy "
        "on any account of the kit (invoker, watchdog, proxy, build, runtime accounts); no "
        "run.routes.invoke, cloudfunctions.functions.invoke, setIamPolicy, delete or update "
        "(run.services.*, cloudfunctions.functions.*) on any function of the kit; no "
        "storage object write or bucket admin on the kit's buckets (the functions' source); "
        "no cloudscheduler.jobs.run, pause, enable, delete, update or create where the "
        "kit's Scheduler jobs are (Scheduler grants roles on the project only). A role the "
        "pack does not know, granted on one of those resources or on the project, folder or "
        "organization holding them, fails too.",
        MANDATORY,
        runtimes.reaches_no_kit_resource,
    ),
    StackPolicy(
        "dedup-secret-readers-declared",
        "An account of the kit may read a secret (secretmanager.versions.access: "
        "roles/secretmanager.secretAccessor, secretmanager.admin, custom roles) only if "
        "every function of the kit running as it declares the secret "
        "(serviceConfig.secretEnvironmentVariables or secretVolumes: a runtime's "
        "`secrets`), and never on a whole project, folder or organization; the proxy's "
        "accounts read its token secret. An accessor grant on a secret another runtime "
        "declared, or to the invoker, watchdog or build account, fails. On a secret a "
        "function of the kit declares (not the proxy's token secret), no other account of "
        "the kit may hold a role that changes it (versions add, enable, disable, destroy; "
        "update, delete, setIamPolicy: secretVersionAdder, secretVersionManager, "
        "iam.securityAdmin, custom roles) or one the pack does not know; a runtime may "
        "rotate its own.",
        MANDATORY,
        secrets.secret_readers_declared,
    ),
    StackPolicy(
        "dedup-accounts-no-basic-roles",
        "No account of the kit (one its functions run as or build with, its Scheduler jobs "
        "send tokens of, or the stack declares) may hold a basic role (roles/owner, "
        "roles/editor, roles/viewer) on anything: grant the predefined role it needs on the "
        "one resource. Judged apart from iam-no-primitive-roles, so the kit's accounts stay "
        "covered when a stack relaxes that one.",
        MANDATORY,
        accounts.no_basic_roles,
    ),
    StackPolicy(
        "dedup-runtime-no-project-grants",
        "A role granted to the account of a function that runs job code on its project, a "
        "folder or the organization (a runtime's `grants` entry with `project: true`) "
        "reaches every resource there, present and future, other runtimes' and the team's "
        "among them (what it allows on the kit's resources is refused by the mandatory "
        "runtime policies): grant it on the bucket, dataset, topic or secret instead. A Firestore "
        "role conditioned to one database (how the kit grants a runtime its own; Firestore "
        "roles are granted on the project) is not flagged.",
        ADVISORY,
        runtimes.no_project_grants,
    ),
    StackPolicy(
        "iam-custom-roles-resolved",
        "A custom role granted on the project, folder or organization must be declared in "
        "the stack (else what it allows is unknown), and must not hold run.routes.invoke, "
        "cloudfunctions.functions.invoke, service account impersonation or IAM-admin "
        "permissions.",
        MANDATORY,
        iam.custom_roles_resolved,
    ),
    StackPolicy(
        "dedup-watchdog-own-service-account",
        "The run watchdog (entry point watch_scheduled_runs) must run as its own service "
        "account: no other function, service, job or Scheduler OIDC token may use it.",
        MANDATORY,
        accounts.watchdog_own_service_account,
    ),
    StackPolicy(
        "dedup-watchdog-least-privilege",
        "The run watchdog's service account may hold only roles/datastore.user on the dedup "
        "database (it reads the records and writes its cursors and re-run queue there) and, "
        "in a stack with the proxy or runtimes, roles/datastore.viewer on the proxy's and "
        "each runtime's database (it reads their records), each conditioned to that one "
        "database.",
        MANDATORY,
        watchdog.least_privilege,
    ),
    StackPolicy(
        "cloud-run-internal-callers",
        "A Cloud Run function or service that calls an internal-only one (its URL in its "
        "environment) must take a path Cloud Run admits: hand the calls to a Cloud Tasks "
        "queue of the stack, or route all its egress through a VPC. A direct call from "
        "Cloud Run without a VPC is refused as external.",
        MANDATORY,
        ingress.internal_callers_take_an_admitted_path,
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
    StackPolicy(
        "dedup-alert-thresholds-page-production",
        "On a production-like stack (delete protection on) every job's alert thresholds must "
        "page someone: failureThreshold x the job's period at most a day, recoveryThreshold x "
        "its period at most a week, and the incident-opened alert policy with a notification "
        "channel (stack config alerts.emails, alerts.failureThreshold, jobs[].alerts).",
        MANDATORY,
        alert_thresholds.thresholds_page,
    ),
)

# The watchdog's deliveries queue (issue 36): judged like a Scheduler job, enqueued by the
# watchdog alone.
QUEUE_POLICIES: Final[tuple[StackPolicy, ...]] = (
    StackPolicy(
        "dedup-deliveries-queue-target",
        "The watchdog's deliveries queue (its DEDUP_WATCH_QUEUE) sets no httpTarget "
        "override that changes a delivery: a uriOverride must leave every delivery URL "
        "(DEDUP_WATCH_TARGET_URL, DEDUP_WATCH_PROXY_URL, DEDUP_WATCH_RUNTIME_URLS) as it is, "
        "by normalised origin, path and query; an oidcToken override must name the "
        "watchdog's own DEDUP_WATCH_TASK_ACCOUNT (and an audience, if set, every delivery "
        "URL); no oauthToken, no headerOverrides, no httpMethod but POST. The kit sets none.",
        MANDATORY,
        deliveries_queue.queue_target,
    ),
    StackPolicy(
        "dedup-deliveries-queue-task-creators",
        "Nobody but the watchdog (its runtime or task account) may create tasks on its "
        "deliveries queue: no member may hold cloudtasks.tasks.create (roles/cloudtasks."
        "enqueuer, editor, admin, roles/editor, custom roles...) on the queue or on its "
        "project, folder or organization, and a role the pack does not know granted there "
        "fails too. Whoever can create tasks there names a run's task first (the watchdog "
        "takes it as queued) or delivers runs with the watchdog's token.",
        MANDATORY,
        deliveries_queue.task_creators,
    ),
)

# Issue 36, "Trust by construction": the kit's caller identities used by the kit alone.
TRUST_POLICIES: Final[tuple[StackPolicy, ...]] = (
    StackPolicy(
        "dedup-kit-identities-kit-only",
        "The accounts whose OIDC tokens the kit's functions accept, the jobs' invoker (what "
        "the stack's Scheduler jobs that target the kit send tokens of, and "
        "DEDUP_ALLOWED_CALLERS names) and the run watchdog's, are used by the kit alone: "
        "the invoker only as its Scheduler jobs' httpTarget.oidcToken, the watchdog's only "
        "as its function's account, its tasks' (DEDUP_WATCH_TASK_ACCOUNT) and its deliveries "
        "queue's OIDC identity. Any other resource, of any type (a Pub/Sub push "
        "subscription, a Cloud Run service, a workflow, one the pack has never seen), that "
        "names either in any property fails; grants to or on the account are judged by the "
        "grant policies.",
        MANDATORY,
        identities.kit_identities_kit_only,
    ),
)

ALL_POLICIES: Final[tuple[Policy, ...]] = (
    *RESOURCE_POLICIES, *STACK_POLICIES, *TRUST_POLICIES, *QUEUE_POLICIES,
)


def by_name(name: str) -> Policy:
    for policy in ALL_POLICIES:
        if policy.name == name:
            return policy
    raise KeyError(name)
