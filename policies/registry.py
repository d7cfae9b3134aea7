"""Every policy of the pack: stable name, what to change, enforcement level, function. The
resource policies are listed in policies/resource_registry.py, the stack policies here.

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
    iam,
    identities,
    ingress,
    own_service,
    proxy,
    runtimes,
    secrets,
    stack,
    watchdog,
)
from policies.model import Enforcement, Policy, StackPolicy
from policies.resource_registry import RESOURCE_POLICIES

MANDATORY = Enforcement.MANDATORY
ADVISORY = Enforcement.ADVISORY

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
        "Every Scheduler job of the kit (one that targets the dedup function or its proxy, "
        "or is aimed at a team service the stack declares: an App Engine HTTP target's "
        "appEngineHttpTarget.headers) must send the X-Dedup-Project and X-Dedup-Location "
        "headers with its own project and location.",
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
        "is written only by the accounts of the functions naming it (a team service's, by "
        "the one member of its TeamService component's one roles/datastore.user grant "
        "conditioned to the one database that component declares: never the kit's "
        "databases, nor one declared outside the component): no other member may "
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
        "in a stack with the proxy, runtimes or team services, roles/datastore.viewer on "
        "the proxy's, each runtime's and each team service's database (it reads their "
        "records), each conditioned to that one database; when it delivers runs, "
        "roles/run.invoker only on a function of the kit or a declared team Cloud Run "
        "service.",
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
        "(DEDUP_WATCH_TARGET_URL, DEDUP_WATCH_PROXY_URL, DEDUP_WATCH_RUNTIME_URLS, a team "
        "service job's url in its job table) as it is, "
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
        "the stack's Scheduler jobs that target the kit or a declared team service send "
        "tokens of, and "
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

# Issue 39, "Bring your own service": the jobs aimed at a team's service, the invoker's
# reach and the team service's account.
SERVICE_POLICIES: Final[tuple[StackPolicy, ...]] = (
    StackPolicy(
        "dedup-invoker-reach",
        "The jobs' invoker (the accounts the stack's Scheduler jobs aimed at the kit or a "
        "declared team service send OIDC tokens of) may "
        "hold a role that allows run.routes.invoke, cloudfunctions.functions.invoke or IAM "
        "changes only on one service the kit calls, granted on that service: a function of "
        "the kit (Cloud Run v2 or function IAM; same name, project and location) or a team "
        "Cloud Run service the stack declares under `services` (gcp.cloudrunv2 "
        "ServiceIamMember/Binding/Policy), with a role that allows invoking and nothing "
        "more (roles/run.invoker; not run.developer or run.admin). Any other Cloud Run "
        "service or function, a v1 gcp.cloudrun IAM resource, the project, a folder or the "
        "organization fails, whatever the resource: every function of the kit and every "
        "declared team service accepts the invoker's tokens.",
        MANDATORY,
        own_service.invoker_reach,
    ),
    StackPolicy(
        "dedup-service-job-target",
        "A Scheduler job aimed at a team Cloud Run service the stack declares (the kit's "
        "job depends on the service's records database, grant and invoker binding) sends "
        "an OIDC token whose audience is exactly the service's url (services[].url, the "
        "one audience of all its jobs: Cloud Run checks it), a run.app URL of the service "
        "its component grants the invoker roles/run.invoker on, and its httpTarget.uri lies "
        "under that url (the url plus the job's path). The watchdog delivers a Cloud Run "
        "service's runs under its url, an App Engine service's to one origin, an "
        "appspot.com URL of the app of the job's project. A job that sends the invoker's "
        "token to any other URL, neither a function of the kit nor a declared team "
        "service, fails: declare the service under `services`.",
        MANDATORY,
        own_service.service_job_target,
    ),
    StackPolicy(
        "dedup-service-account-own-database",
        "A team service's account (services[].serviceAccount, the member of its "
        "roles/datastore.user grant) may hold a role that reads or writes Firestore records "
        "only conditioned to its own records database (resource.name == "
        '"projects/P/databases/<databaseName>-<service>"): not unconditioned on the '
        "project, folder or organization, not conditioned to another database. Its code "
        "could otherwise read or rewrite other run records (a run executed twice or never).",
        MANDATORY,
        own_service.service_account_own_database,
    ),
    StackPolicy(
        "dedup-service-account-not-kit",
        "A team service runs as an account of its own, none of the kit's (the jobs' "
        "invoker, the watchdog's, a function's runtime or build account, an account the "
        "stack declares) and not the Compute Engine or App Engine default account: the "
        "service's code could mint that account's tokens, which the "
        "kit's functions accept, or use its grants. Set services[].serviceAccount to the "
        "service's own account.",
        MANDATORY,
        own_service.service_account_not_kit,
    ),
)

ALL_POLICIES: Final[tuple[Policy, ...]] = (
    *RESOURCE_POLICIES, *STACK_POLICIES, *TRUST_POLICIES, *QUEUE_POLICIES, *SERVICE_POLICIES,
)


def by_name(name: str) -> Policy:
    for policy in ALL_POLICIES:
        if policy.name == name:
            return policy
    raise KeyError(name)
