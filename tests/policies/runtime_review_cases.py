"""Pass/fail fixtures for the holes a review of the runtime policies found (issue 35), in the
pattern of runtime_cases.py; test_policy_cases.py runs them with the others.

- A role the pack does not know, granted to an account that runs job code on the project,
  a folder or the organization, reaches every resource of the kit there: refused
  (dedup-runtime-no-kit-resources), unless its condition is not known yet or names one
  Firestore database (then dedup-runtime-own-database-only judges that database). The
  Firestore and Firebase roles it met are in the permission table now, and Firestore's
  bulk delete, clone, delete and update count as reaching a database's records.
- Cloud Scheduler's run/pause/enable/delete/update/create (granted on the project only)
  reach the kit's Scheduler jobs; deleting or redeploying a function reaches the kit's
  functions.
- On a secret a function of the kit declares, no other account of the kit holds a role
  that changes it (versions, settings, IAM policy) or one the pack does not know
  (dedup-secret-readers-declared); a runtime may rotate its own.
"""

from __future__ import annotations

from typing import Any

from policies import gcp
from tests.policies.bypass_cases import custom_role
from tests.policies.cases import Case, stack_case
from tests.policies.fixtures import (
    FOLDER_IAM_MEMBER,
    INVOKER_SA,
    PROJECT,
    RUNTIME_SA,
    TOKEN_SECRET,
    WATCHDOG_SA,
    U,
    database_condition,
    replace_named,
    res,
)
from tests.policies.runtime_cases import (
    PROXIED,
    RT,
    SOURCE_BUCKET,
    TEAM_GROUP,
    datastore_grant,
    on_bucket,
    on_secret,
    on_service,
    project_grant,
)
from tests.policies.runtime_fixtures import EXPORT, SYNC

UNKNOWN_ROLE = "roles/someservice.newRole"
SYNC_FN = SYNC.pulumi_name("function")
EXPORT_FN = EXPORT.pulumi_name("function")
OTHER_PROJECT = "acme-analytics"
SECRETS = "serviceConfig.secretEnvironmentVariables"


def custom_grant(name: str, permissions: list[str] | Any, **grant: Any) -> list[Any]:
    """A custom role with `permissions`, granted to sync's account on the project."""
    return [custom_role(permissions, name.replace("-", "_")),
            project_grant(name, f"projects/{PROJECT}/roles/{name.replace('-', '_')}", **grant)]


def condition(expression: str) -> dict[str, str]:
    return {"title": "t", "expression": expression}


def on_folder(name: str, role: str) -> Any:
    return res(FOLDER_IAM_MEMBER, name, {"folder": "folders/1234", "role": role,
                                         "member": SYNC.member})


def in_its_project() -> list[Any]:
    """RT() with its source bucket's project set, as the program sets it (a bucket whose
    project is not set may be in any project)."""
    return replace_named(RT(), "source-bucket", "project", PROJECT)


def export_reads_sync_secret() -> list[Any]:
    """export declares sync's secret too: it is both runtimes'."""
    return replace_named(RT(), EXPORT_FN, SECRETS, [
        {"key": "API_TOKEN", "projectId": PROJECT, "secret": EXPORT.secret, "version": "1"},
        {"key": "SYNC_TOKEN", "projectId": PROJECT, "secret": SYNC.secret, "version": "1"}])


REVIEW_CASES: dict[str, list[Case]] = {
    "dedup-runtime-no-kit-resources": [
        # A role the pack does not know, where it reaches the kit.
        stack_case("runtime-unknown-role-at-folder-level", [*RT(), on_folder(
            "unknown-folder", UNKNOWN_ROLE)], True),
        stack_case("runtime-undeclared-custom-role-on-the-project", [*RT(), project_grant(
            "mystery", f"projects/{PROJECT}/roles/mystery")], True),
        stack_case("default-function-unknown-role-on-the-project", [*RT(), project_grant(
            "default-unknown", UNKNOWN_ROLE, f"serviceAccount:{RUNTIME_SA}")], True),
        stack_case("runtime-unknown-role-with-a-time-condition", [*RT(), project_grant(
            "unknown-until", UNKNOWN_ROLE,
            condition=condition('request.time < timestamp("2030-01-01T00:00:00Z")'))], True),
        stack_case("runtime-unknown-role-condition-unknown", [*RT(), project_grant(
            "unknown-condition", UNKNOWN_ROLE, condition=U)], False),
        stack_case("runtime-unknown-role-on-another-project", [*in_its_project(), project_grant(
            "elsewhere", UNKNOWN_ROLE, project=OTHER_PROJECT)], False),
        stack_case("runtime-unknown-role-where-a-bucket-of-the-kit-may-be", [*RT(), project_grant(
            "maybe-elsewhere", UNKNOWN_ROLE, project=OTHER_PROJECT)], True),
        stack_case("runtime-unknown-role-conditioned-to-its-own-database", [
            *RT(), datastore_grant("own-db-unknown", UNKNOWN_ROLE, SYNC.database)], False),
        stack_case("runtime-custom-role-permissions-not-known-yet", [
            *RT(), *custom_grant("later", U)], False),
        stack_case("runtime-custom-role-beside-an-unnamed-one", [
            *RT(), res(gcp.PROJECT_CUSTOM_ROLE, "role-unnamed", {
                "project": PROJECT, "roleId": U, "title": "t", "permissions": ["a.b.c"]}),
            project_grant("maybe-it", f"projects/{PROJECT}/roles/unnamed")], False),
        # Cloud Scheduler: project-wide only, so it reaches every job of the kit.
        stack_case("runtime-runs-scheduler-jobs", [*RT(), project_grant(
            "job-runner", "roles/cloudscheduler.jobRunner")], True),
        stack_case("runtime-scheduler-admin-at-folder-level", [*RT(), on_folder(
            "scheduler-admin", "roles/cloudscheduler.admin")], True),
        stack_case("runtime-custom-role-pauses-scheduler-jobs", [
            *RT(), *custom_grant("pauser", ["cloudscheduler.jobs.pause"])], True),
        stack_case("runtime-custom-role-deletes-scheduler-jobs", [
            *RT(), *custom_grant("job-deleter", ["cloudscheduler.jobs.delete"])], True),
        stack_case("runtime-views-scheduler-jobs", [*RT(), project_grant(
            "scheduler-viewer", "roles/cloudscheduler.viewer")], False),
        stack_case("runtime-runs-scheduler-jobs-of-another-project", [*RT(), project_grant(
            "runner-elsewhere", "roles/cloudscheduler.jobRunner", project=OTHER_PROJECT)],
            False),
        # Deleting or redeploying a function of the kit.
        stack_case("runtime-custom-role-deletes-services", [
            *RT(), *custom_grant("service-deleter", ["run.services.delete"])], True),
        stack_case("runtime-custom-role-updates-functions", [
            *RT(), *custom_grant("function-updater", ["cloudfunctions.functions.update"])],
            True),
        stack_case("runtime-redeploys-another-runtime", [
            *RT(), custom_role(["run.services.update"], "redeploy"),
            on_service("redeploys-export", EXPORT.function,
                       f"projects/{PROJECT}/roles/redeploy")], True),
        stack_case("runtime-firebase-admin-on-the-project", [*RT(), project_grant(
            "firebase-admin", "roles/firebase.admin")], True),
        stack_case("runtime-security-admin-on-the-source-bucket", [*RT(), on_bucket(
            "source-iam", SOURCE_BUCKET, "roles/iam.securityAdmin")], True),
        stack_case("runtime-reads-team-objects-project-wide", [*RT(), project_grant(
            "objects", "roles/storage.objectViewer")], False),
    ],
    "dedup-runtime-own-database-only": [
        stack_case("runtime-datastore-admin-on-the-project", [*RT(), project_grant(
            "datastore-admin", "roles/datastore.admin")], True),
        stack_case("runtime-bulk-admin-on-the-project", [*RT(), project_grant(
            "bulk-admin", "roles/datastore.bulkAdmin")], True),
        stack_case("runtime-custom-role-bulk-deletes", [
            *RT(), *custom_grant("bulk-delete", ["datastore.databases.bulkDelete"])], True),
        stack_case("runtime-custom-role-deletes-databases", [
            *RT(), *custom_grant("db-delete", ["datastore.databases.delete"])], True),
        stack_case("runtime-custom-role-clones-databases", [
            *RT(), *custom_grant("db-clone", ["datastore.databases.clone"])], True),
        stack_case("runtime-firebase-rules-system-on-the-project", [*RT(), project_grant(
            "rules-system", "roles/firebaserules.system")], True),
        stack_case("runtime-firebase-develop-admin-on-the-project", [*RT(), project_grant(
            "develop-admin", "roles/firebase.developAdmin")], True),
        stack_case("runtime-unknown-role-conditioned-to-another-runtimes-database", [
            *RT(), datastore_grant("export-db-unknown", UNKNOWN_ROLE, EXPORT.database)], True),
        stack_case("runtime-unknown-role-conditioned-to-its-own-database", [
            *RT(), datastore_grant("own-db-unknown", UNKNOWN_ROLE, SYNC.database)], False),
        stack_case("runtime-unknown-role-unconditioned-is-no-kit-resources-own", [
            *RT(), project_grant("unknown", UNKNOWN_ROLE)], False),
        stack_case("runtime-bulk-deletes-its-own-database", [
            *RT(), *custom_grant("own-bulk-delete", ["datastore.databases.bulkDelete"],
                                 condition=database_condition(SYNC.database))], False),
    ],
    "dedup-secret-readers-declared": [
        stack_case("runtime-security-admin-on-another-runtimes-secret", [*RT(), on_secret(
            "export-iam", EXPORT.secret, role="roles/iam.securityAdmin")], True),
        stack_case("runtime-custom-role-sets-iam-on-another-runtimes-secret", [
            *RT(), custom_role(["secretmanager.secrets.setIamPolicy"], "secret_iam"),
            on_secret("export-set-iam", EXPORT.secret,
                      role=f"projects/{PROJECT}/roles/secret_iam")], True),
        stack_case("runtime-undeclared-custom-role-on-another-runtimes-secret", [
            *RT(), on_secret("export-mystery", EXPORT.secret,
                             role=f"projects/{PROJECT}/roles/x")], True),
        stack_case("runtime-unknown-role-on-another-runtimes-secret", [*RT(), on_secret(
            "export-unknown", EXPORT.secret, role="roles/secretmanager.newRole")], True),
        stack_case("runtime-version-manager-on-another-runtimes-secret", [*RT(), on_secret(
            "export-versions", EXPORT.secret,
            role="roles/secretmanager.secretVersionManager")], True),
        stack_case("runtime-version-adder-on-another-runtimes-secret", [*RT(), on_secret(
            "export-adds", EXPORT.secret, role="roles/secretmanager.secretVersionAdder")],
            True),
        stack_case("runtime-version-adder-on-another-runtimes-volume-secret", [
            *RT(), on_secret("export-volume-adds", EXPORT.volume_secret or "",
                             role="roles/secretmanager.secretVersionAdder")], True),
        stack_case("runtime-version-manager-project-wide", [*RT(), project_grant(
            "all-versions", "roles/secretmanager.secretVersionManager")], True),
        stack_case("runtime-version-adder-conditioned-to-another-runtimes-secret", [
            *RT(), project_grant(
                "adds-by-condition", "roles/secretmanager.secretVersionAdder",
                condition=condition(
                    f'resource.name == "projects/{PROJECT}/secrets/{EXPORT.secret}"'))], True),
        stack_case("watchdog-adds-versions-to-a-runtime-secret", [*PROXIED(), on_secret(
            "watchdog-adds", SYNC.secret, f"serviceAccount:{WATCHDOG_SA}",
            "roles/secretmanager.secretVersionAdder")], True),
        stack_case("invoker-manages-a-runtime-secret", [*RT(), on_secret(
            "invoker-manages", SYNC.secret, f"serviceAccount:{INVOKER_SA}",
            "roles/secretmanager.secretVersionManager")], True),
        stack_case("runtime-rotates-its-own-secret", [*RT(), on_secret(
            "own-adds", SYNC.secret, role="roles/secretmanager.secretVersionAdder")], False),
        stack_case("runtime-security-admin-on-its-own-secret", [*RT(), on_secret(
            "own-iam", SYNC.secret, role="roles/iam.securityAdmin")], False),
        stack_case("runtime-unknown-role-on-its-own-secret", [*RT(), on_secret(
            "own-unknown", SYNC.secret, role="roles/secretmanager.newRole")], False),
        stack_case("runtime-rotates-a-secret-no-function-declares", [*RT(), on_secret(
            "partner-adds", "partner-api-token",
            role="roles/secretmanager.secretVersionAdder")], False),
        stack_case("runtimes-sharing-a-secret-both-rotate-it", [
            *export_reads_sync_secret(), on_secret(
                "export-adds-shared", SYNC.secret, EXPORT.member,
                "roles/secretmanager.secretVersionAdder")], False),
        stack_case("a-team-group-manages-a-runtime-secret", [*RT(), on_secret(
            "team-manages", SYNC.secret, TEAM_GROUP,
            "roles/secretmanager.secretVersionManager")], False),
        stack_case("runtime-views-another-runtimes-secret", [*RT(), on_secret(
            "export-viewer", EXPORT.secret, role="roles/secretmanager.viewer")], False),
        stack_case("runtime-adds-token-secret-versions-is-judged-elsewhere", [
            *PROXIED(), on_secret("adds-token", TOKEN_SECRET,
                                  role="roles/secretmanager.secretVersionAdder")], False),
        stack_case("declaring-function-secrets-not-known-yet", replace_named(
            [*RT(), on_secret("export-adds", EXPORT.secret,
                              role="roles/secretmanager.secretVersionAdder")],
            SYNC_FN, SECRETS, U), False),
        stack_case("declaring-function-account-not-known-yet", replace_named(
            [*RT(), on_secret("sync-adds", EXPORT.secret,
                              role="roles/secretmanager.secretVersionAdder")],
            EXPORT_FN, "serviceConfig.serviceAccountEmail", U), False),
    ],
}
