"""Pass/fail fixtures for the walk-arounds of issue #15 ("The policy pack can be walked
around", items 1-4, and the security hardening's last gap: the proxy's records in the dedup
function's database), in the pattern of cases.py: every failing case here was a bypass the
pack before the fix let through (no violation at all), and each policy judged here has a
passing case next to it. test_policy_cases.py runs them with cases.py's.
"""

from __future__ import annotations

import json
from dataclasses import replace

from policies import gcp
from policies.model import Resource
from tests.policies.cases import (
    PROXY,
    PROXY_DB_ENV,
    SA,
    Case,
    member,
    on_proxy_database,
    one,
    stack_case,
)
from tests.policies.fixtures import (
    DATABASE,
    DATASTORE_CONDITION,
    INVOKER_SA,
    PROJECT,
    PROJECT_IAM_BINDING,
    PROJECT_IAM_MEMBER,
    PROJECT_IAM_POLICY,
    PROXY_DATABASE,
    PROXY_DATASTORE_CONDITION,
    PROXY_SA,
    REGION,
    RUN_JOB_IAM_MEMBER,
    RUN_SERVICE_IAM_MEMBER,
    RUNTIME_SA,
    SA_IAM_MEMBER,
    TRIGGER_TOPIC,
    U,
    database_condition,
    function_props,
    kit_stack,
    patch,
    preview_proxy_stack,
    preview_proxy_watchdog_stack,
    proxy_child,
    proxy_stack,
    proxy_watchdog_stack,
    replace_named,
    res,
)

RUN_SERVICE_IAM_POLICY = "gcp:cloudrunv2/serviceIamPolicy:ServiceIamPolicy"
BUCKET_ACCESS_CONTROL = "gcp:storage/bucketAccessControl:BucketAccessControl"
DEFAULT_OBJECT_ACCESS_CONTROL = "gcp:storage/defaultObjectAccessControl:DefaultObjectAccessControl"
OBJECT_ACCESS_CONTROL = "gcp:storage/objectAccessControl:ObjectAccessControl"
BUCKET_ACL = "gcp:storage/bucketACL:BucketACL"
DATASET_ACCESS = "gcp:bigquery/datasetAccess:DatasetAccess"
DATASET = "gcp:bigquery/dataset:Dataset"
TOPIC_IAM_MEMBER = "gcp:pubsub/topicIAMMember:TopicIAMMember"
FN1 = gcp.FUNCTION_V1
RUN2 = gcp.CLOUD_RUN_V2_SERVICE
RUN1 = gcp.CLOUD_RUN_V1_SERVICE
INTERNAL_V1 = {"run.googleapis.com/ingress": "internal"}
CUSTOM_ROLE = f"projects/{PROJECT}/roles/ops_helper"
# Cloud Run services otherwise compliant: a dedicated account, internal ingress.
RUN2_DEDICATED = {"ingress": "INGRESS_TRAFFIC_INTERNAL_ONLY",
                  "template": {"serviceAccount": f"svc@{PROJECT}.iam.gserviceaccount.com"}}
RUN1_DEDICATED = {"template": {"spec": {
    "serviceAccountName": f"svc@{PROJECT}.iam.gserviceaccount.com"}}}


def document(value: object) -> dict[str, object]:
    """A project IAMPolicy whose policyData is `value` (JSON-encoded unless a string)."""
    data = value if isinstance(value, str) else json.dumps(value)
    return {"project": PROJECT, "policyData": data}


def service_policy(value: object) -> dict[str, object]:
    return {"project": PROJECT, "location": REGION, "name": "scheduler-dedup",
            **{"policyData": json.dumps(value)}}


def v1_function(**extra: object) -> dict[str, object]:
    """A 1st-gen function on a dedicated account, internal ingress unless `extra` says."""
    return {"name": "legacy", "runtime": "python311", "entryPoint": "main",
            "serviceAccountEmail": f"legacy@{PROJECT}.iam.gserviceaccount.com",
            "ingressSettings": "ALLOW_INTERNAL_ONLY", **extra}


def custom_role(permissions: list[str], role_id: str = "ops_helper") -> Resource:
    return res(gcp.PROJECT_CUSTOM_ROLE, f"role-{role_id}", {
        "project": PROJECT, "roleId": role_id, "title": "t", "permissions": permissions})


def on_account(email: str, role: str, name: str = "sa-grant") -> Resource:
    """`role` for the CI deployer on the service account `email`."""
    return res(SA_IAM_MEMBER, name, {
        "serviceAccountId": f"projects/{PROJECT}/serviceAccounts/{email}", "role": role,
        "member": f"serviceAccount:ci@{PROJECT}.iam.gserviceaccount.com"})


def on_dedup_service(role: str, who: str, name: str = "extra-invoker") -> Resource:
    """`role` for `who` on the dedup function's Cloud Run service."""
    return res(RUN_SERVICE_IAM_MEMBER, name, {
        "project": PROJECT, "location": REGION, "name": "scheduler-dedup", "role": role,
        "member": who})


def in_proxy(resource: Resource) -> Resource:
    """`resource` declared inside the proxy's component."""
    return proxy_child(resource.type, resource.name, resource.props)


def shared_database() -> list[Resource]:
    """The layout before the fix: the proxy keeps its records in the dedup database, its
    roles/datastore.user conditioned to it (and no database of its own)."""
    stack = replace_named(proxy_stack(), "proxy-function", PROXY_DB_ENV, DATABASE)
    stack = replace_named(stack, "proxy-datastore-user", "condition", DATASTORE_CONDITION)
    return [r for r in stack if r.name not in {"proxy-database", "proxy-ttl-field",
                                               "proxy-schedule-time-field"}]


def depends_on_proxy_account(resource: Resource) -> Resource:
    """`resource` whose inputs come from the proxy's Account resource (its `member`)."""
    (account,) = [r for r in proxy_stack() if r.name == "proxy-sa"]
    return replace(resource, dependencies=(account.urn,))


BYPASS_CASES: dict[str, list[Case]] = {
    # --- item 1: policyData read case-insensitively, fail closed ----------------------------
    "iam-no-primitive-roles": [
        one("policy-capitalised-compliant", PROJECT_IAM_POLICY,
            document({"Bindings": [{"Role": "roles/logging.logWriter", "Members": [SA]}]}),
            False),
        one("policy-capitalised-owner", PROJECT_IAM_POLICY,
            document({"Bindings": [{"Role": "roles/owner", "Members": [SA]}]}), True),
    ],
    "iam-no-public-members": [
        one("policy-upper-case-private", RUN_SERVICE_IAM_POLICY,
            service_policy({"BINDINGS": [{"ROLE": "roles/run.invoker",
                                          "MEMBERS": [f"serviceAccount:{INVOKER_SA}"]}]}),
            False),
        one("policy-upper-case-public-invoker", RUN_SERVICE_IAM_POLICY,
            service_policy({"BINDINGS": [{"ROLE": "roles/run.invoker", "MEMBERS": ["allUsers"]}]}),
            True),
        one("policy-unknown-top-level-key", PROJECT_IAM_POLICY,
            document({"bindings": [], "bindingz": [{"role": "roles/owner", "members": [SA]}]}),
            True),
        one("policy-bindings-not-a-list", PROJECT_IAM_POLICY,
            document({"bindings": {"role": "roles/run.invoker", "members": ["allUsers"]}}), True),
        one("policy-binding-unknown-key", RUN_SERVICE_IAM_POLICY,
            service_policy({"bindings": [{"role": "roles/run.invoker", "members": [SA],
                                          "member": "allUsers"}]}), True),
        one("policy-members-not-strings", RUN_SERVICE_IAM_POLICY,
            service_policy({"bindings": [{"role": "roles/run.invoker",
                                          "members": [["allUsers"]]}]}), True),
        one("policy-key-twice-in-two-cases", PROJECT_IAM_POLICY,
            document('{"bindings": [], "Bindings": [{"role": "roles/owner", '
                     '"members": ["allUsers"]}]}'),
            True),
        # --- item 3: ACL-style grants ---------------------------------------------------
        one("bucket-acl-entry-private", BUCKET_ACCESS_CONTROL,
            {"bucket": "b", "entity": f"user-{INVOKER_SA}", "role": "READER"}, False),
        one("dataset-access-private", DATASET_ACCESS,
            {"datasetId": "d", "role": "READER", "userByEmail": INVOKER_SA}, False),
        one("bucket-acl-entry-all-users", BUCKET_ACCESS_CONTROL,
            {"bucket": "b", "entity": "allUsers", "role": "READER"}, True),
        one("default-object-acl-entry-public", DEFAULT_OBJECT_ACCESS_CONTROL,
            {"bucket": "b", "entity": "allAuthenticatedUsers", "role": "READER"}, True),
        one("object-acl-entry-public", OBJECT_ACCESS_CONTROL,
            {"bucket": "b", "object": "o", "entity": "allUsers", "role": "READER"}, True),
        one("bucket-acl-role-entities-public", BUCKET_ACL,
            {"bucket": "b", "roleEntities": ["READER:allUsers"]}, True),
        one("object-acl-canned-public-read", "gcp:storage/objectACL:ObjectACL",
            {"bucket": "b", "object": "o", "predefinedAcl": "publicRead"}, True),
        one("dataset-access-special-group", DATASET_ACCESS,
            {"datasetId": "d", "role": "READER", "specialGroup": "allAuthenticatedUsers"}, True),
        one("dataset-accesses-public", DATASET,
            {"datasetId": "d", "accesses": [{"role": "READER", "iamMember": "allUsers"}]}, True),
    ],
    # --- item 2: effective permissions ------------------------------------------------------
    "iam-no-project-level-invoker": [
        one("project-run-viewer", PROJECT_IAM_MEMBER, member("roles/run.viewer"), False),
        one("project-run-admin", PROJECT_IAM_MEMBER, member("roles/run.admin"), True),
        one("project-run-developer", PROJECT_IAM_MEMBER, member("roles/run.developer"), True),
    ],
    "iam-no-project-level-service-account-impersonation": [
        one("openid-token-creator-on-account", SA_IAM_MEMBER,
            {"serviceAccountId": "x", "role": "roles/iam.serviceAccountOpenIdTokenCreator",
             "member": SA}, False),
        one("project-openid-token-creator", PROJECT_IAM_MEMBER,
            member("roles/iam.serviceAccountOpenIdTokenCreator"), True),
        one("project-workload-identity-user", PROJECT_IAM_MEMBER,
            member("roles/iam.workloadIdentityUser"), True),
        one("project-key-admin", PROJECT_IAM_MEMBER,
            member("roles/iam.serviceAccountKeyAdmin"), True),
        one("project-iam-admin", PROJECT_IAM_MEMBER,
            member("roles/resourcemanager.projectIamAdmin"), True),
    ],
    "iam-custom-roles-resolved": [
        stack_case("kit", kit_stack(), False),
        stack_case("proxy-kit", proxy_stack(), False),
        stack_case("proxy-preview", preview_proxy_stack(), False),
        stack_case("declared-custom-role-harmless", [
            *kit_stack(), custom_role(["logging.logEntries.create"]),
            res(PROJECT_IAM_MEMBER, "ops", member(CUSTOM_ROLE))], False),
        stack_case("custom-role-with-invoke-on-project", [
            *kit_stack(), custom_role(["run.routes.invoke"]),
            res(PROJECT_IAM_MEMBER, "ops", member(CUSTOM_ROLE))], True),
        stack_case("custom-role-minting-tokens-in-a-policy", [
            *kit_stack(), custom_role(["iam.serviceAccounts.getOpenIdToken"]),
            res(PROJECT_IAM_POLICY, "project-policy",
                document({"bindings": [{"role": CUSTOM_ROLE, "members": [SA]}]}))], True),
        stack_case("undeclared-custom-role-on-project", [
            *kit_stack(), res(PROJECT_IAM_MEMBER, "ops", member(CUSTOM_ROLE))], True),
        stack_case("undeclared-org-custom-role-on-folder", [
            *kit_stack(), res("gcp:folder/iAMMember:IAMMember", "ops", {
                "folder": "folders/1", "role": "organizations/1/roles/x", "member": SA})], True),
    ],
    "dedup-function-invokers": [
        stack_case("kit", kit_stack(), False),
        stack_case("proxy-kit", proxy_stack(), False),
        stack_case("viewer-on-the-service", [
            *kit_stack(), on_dedup_service("roles/run.viewer", "user:alice@example.com")], False),
        stack_case("invoker-on-another-service", [*kit_stack(), res(
            RUN_SERVICE_IAM_MEMBER, "other", {"project": PROJECT, "location": REGION,
                                              "name": "reports", "role": "roles/run.invoker",
                                              "member": "user:alice@example.com"})], False),
        stack_case("run-admin-on-the-service-for-a-user", [
            *kit_stack(), on_dedup_service("roles/run.admin", "user:alice@example.com")], True),
        stack_case("run-developer-on-the-service-for-another-account", [
            *kit_stack(), on_dedup_service("roles/run.developer", SA)], True),
        stack_case("custom-invoke-role-on-the-service", [
            *kit_stack(), custom_role(["run.routes.invoke"]),
            on_dedup_service(CUSTOM_ROLE, "group:ops@example.com")], True),
    ],
    "dedup-accounts-not-impersonable": [
        stack_case("kit", kit_stack(), False),
        stack_case("deployer-acts-as-the-invoker", [
            *kit_stack(), on_account(INVOKER_SA, "roles/iam.serviceAccountUser")], False),
        stack_case("token-creator-on-another-account", [
            *kit_stack(), on_account(f"other@{PROJECT}.iam.gserviceaccount.com",
                                     "roles/iam.serviceAccountTokenCreator")], False),
        stack_case("openid-token-creator-on-the-invoker", [
            *kit_stack(), on_account(INVOKER_SA, "roles/iam.serviceAccountOpenIdTokenCreator")],
            True),
        stack_case("workload-identity-user-on-the-runtime-account", [
            *kit_stack(), on_account(RUNTIME_SA, "roles/iam.workloadIdentityUser")], True),
        stack_case("custom-role-minting-for-the-invoker", [
            *kit_stack(), custom_role(["iam.serviceAccounts.signJwt"]),
            on_account(INVOKER_SA, CUSTOM_ROLE)], True),
    ],
    "iam-known-roles-at-hierarchy-level": [
        one("project-known-role", PROJECT_IAM_MEMBER, member("roles/logging.logWriter"), False),
        one("bucket-unlisted-role", "gcp:storage/bucketIAMMember:BucketIAMMember",
            {"bucket": "b", "role": "roles/storage.legacyBucketReader", "member": SA}, False),
        one("project-unlisted-role", PROJECT_IAM_MEMBER, member("roles/composer.admin"), True),
    ],
    # --- item 3: types and settings the pack did not know -----------------------------------
    "run-invoker-iam-check-enabled": [
        one("run2-invoker-check-on", RUN2,
            {"ingress": "INGRESS_TRAFFIC_INTERNAL_ONLY", "invokerIamDisabled": False}, False),
        one("run2-invoker-check-unknown", RUN2,
            {"ingress": "INGRESS_TRAFFIC_INTERNAL_ONLY", "invokerIamDisabled": U}, False),
        one("run1-annotation-false", RUN1, {"metadata": {"annotations": {
            **INTERNAL_V1, "run.googleapis.com/invoker-iam-disabled": "false"}}}, False),
        one("run2-invoker-iam-disabled", RUN2, {**RUN2_DEDICATED, "invokerIamDisabled": True},
            True),
        one("run1-invoker-iam-disabled-annotation", RUN1, {**RUN1_DEDICATED, "metadata": {
            "annotations": {**INTERNAL_V1, "run.googleapis.com/invoker-iam-disabled": "true"}}},
            True),
    ],
    "function-ingress-not-public": [
        one("fn1-internal", FN1, v1_function(), False),
        one("fn1-allow-all", FN1, v1_function(ingressSettings="ALLOW_ALL"), True),
        one("fn1-ingress-default", FN1,
            {k: v for k, v in v1_function().items() if k != "ingressSettings"}, True),
        one("fn-ingress-empty", gcp.FUNCTION_V2,
            patch(function_props(), "serviceConfig.ingressSettings", ""), True),
        one("run2-ingress-unlisted", RUN2,
            {**RUN2_DEDICATED, "ingress": "INGRESS_TRAFFIC_ALL_REGIONS"}, True),
    ],
    "iam-datastore-user-single-database": [
        one("datastore-and-service-clause", PROJECT_IAM_MEMBER, member(
            "roles/datastore.user", condition={
                "title": "t", "expression": f'{DATASTORE_CONDITION["expression"]} && '
                'resource.service == "firestore.googleapis.com"'}), False),
        one("datastore-or-true", PROJECT_IAM_MEMBER, member("roles/datastore.user", condition={
            "title": "t", "expression": f'resource.name == "projects/{PROJECT}/databases/'
            f'{DATABASE}" || true'}), True),
        one("datastore-owner-unconditioned", PROJECT_IAM_MEMBER,
            member("roles/datastore.owner"), True),
    ],
    "iam-grant-types-readable": [
        one("bucket-acl-known", BUCKET_ACCESS_CONTROL,
            {"bucket": "b", "entity": "allUsers", "role": "READER"}, False),
        one("project-member-readable", PROJECT_IAM_MEMBER, member("roles/logging.logWriter"),
            False),
        one("unknown-acl-type",
            "gcp:healthcare/consentStoreAccessControl:ConsentStoreAccessControl",
            {"entity": "allUsers", "role": "READER"}, True),
        one("unknown-type-with-accesses", "gcp:bigquery/reservationGrant:ReservationGrant",
            {"accesses": [{"role": "READER", "iamMember": "allUsers"}]}, True),
    ],
    # --- item 4: the proxy, linked by the resource graph ------------------------------------
    "dedup-proxy-component-grants": [
        *[Case(f"proxy-kit-{r.name}", [r], False) for r in proxy_stack()],
        *[Case(f"proxy-preview-{r.name}", [r], False) for r in preview_proxy_stack()],
        Case("outside-the-component", [
            res(PROJECT_IAM_MEMBER, "x", member("roles/storage.admin", PROXY))], False),
        Case("preview-storage-admin-in-component", [in_proxy(
            res(PROJECT_IAM_MEMBER, "proxy-storage", member("roles/storage.admin", U)))], True),
        Case("preview-run-developer-on-project-in-component", [in_proxy(
            res(PROJECT_IAM_MEMBER, "proxy-developer", member("roles/run.developer", U)))], True),
        Case("preview-executor-without-location-in-component", [in_proxy(res(
            RUN_JOB_IAM_MEMBER, "proxy-job", {"project": PROJECT, "name": "drop-tables",
                                              "role": "roles/run.jobsExecutorWithOverrides",
                                              "member": U}))], True),
        Case("publisher-on-the-project-in-component", [in_proxy(
            res(PROJECT_IAM_MEMBER, "proxy-pub", member("roles/pubsub.publisher", U)))], True),
    ],
    "dedup-proxy-least-privilege": [
        stack_case("publisher-on-the-topic-by-full-name", [*proxy_stack(), res(
            TOPIC_IAM_MEMBER, "proxy-publisher", {"project": PROJECT, "topic": TRIGGER_TOPIC,
                                                  "role": "roles/pubsub.publisher",
                                                  "member": PROXY})], False),
        stack_case("executor-without-location", [*proxy_stack(), res(
            RUN_JOB_IAM_MEMBER, "proxy-job", {"project": PROJECT, "name": "drop-tables",
                                              "role": "roles/run.jobsExecutorWithOverrides",
                                              "member": PROXY})], True),
        stack_case("proxy-dataset-access", [*proxy_stack(), res(
            DATASET_ACCESS, "proxy-dataset", {"datasetId": "d", "role": "roles/bigquery.dataOwner",
                                              "userByEmail": PROXY_SA})], True),
        stack_case("proxy-in-dataset-accesses", [*proxy_stack(), res(
            DATASET, "dataset", {"datasetId": "d", "accesses": [
                {"role": "WRITER", "userByEmail": PROXY_SA}]})], True),
        stack_case("preview-grant-linked-by-dependency", [
            *preview_proxy_stack(), depends_on_proxy_account(
                res(PROJECT_IAM_MEMBER, "proxy-storage", member("roles/storage.admin", U)))],
            True),
        stack_case("preview-known-grant-linked-by-component-account", [
            *preview_proxy_stack(),
            res(PROJECT_IAM_MEMBER, "proxy-storage", member("roles/storage.admin", PROXY))],
            True),
        # The proxy's records in a database of its own: its roles/datastore.user names it.
        stack_case("proxy-datastore-user-own-database-unknown", replace_named(
            replace_named(proxy_stack(), "proxy-function", PROXY_DB_ENV, U),
            "proxy-datastore-user", "condition", DATASTORE_CONDITION), False),
        stack_case("proxy-datastore-user-condition-unknown", replace_named(
            proxy_stack(), "proxy-datastore-user", "condition", U), False),
        stack_case("proxy-datastore-user-on-the-dedup-database", replace_named(
            proxy_stack(), "proxy-datastore-user", "condition", DATASTORE_CONDITION), True),
        stack_case("proxy-datastore-user-in-a-policy-on-the-dedup-database", [
            *proxy_stack(), res(PROJECT_IAM_POLICY, "project-policy", document({"bindings": [{
                "role": "roles/datastore.user", "members": [PROXY],
                "condition": database_condition(DATABASE)}]}))], True),
    ],
    "dedup-proxy-own-service-account": [
        stack_case("other-workflow-account", [*proxy_stack(), res(
            gcp.WORKFLOWS_WORKFLOW, "wf", {"serviceAccount": SA})], False),
        stack_case("workflow-as-proxy-account", [*proxy_stack(), res(
            gcp.WORKFLOWS_WORKFLOW, "wf", {"serviceAccount": PROXY_SA})], True),
        stack_case("v1-function-as-proxy-account", [*proxy_stack(), res(
            FN1, "legacy", v1_function(serviceAccountEmail=PROXY_SA))], True),
        stack_case("preview-function-as-proxy-account", [*preview_proxy_stack(), res(
            FN1, "legacy", v1_function(serviceAccountEmail=PROXY_SA))], True),
    ],
    # --- the proxy's records in a database of its own -------------------------------------
    "dedup-proxy-own-database": [
        stack_case("proxy-kit", proxy_stack(), False),
        stack_case("proxy-preview", preview_proxy_stack(), False),
        stack_case("no-proxy", kit_stack(), False),
        stack_case("proxy-and-watchdog", proxy_watchdog_stack(), False),
        stack_case("proxy-and-watchdog-preview", preview_proxy_watchdog_stack(), False),
        stack_case("proxy-database-unknown",
                   replace_named(proxy_stack(), "proxy-function", PROXY_DB_ENV, U), False),
        stack_case("proxy-shares-the-dedup-database", shared_database(), True),
        stack_case("proxy-database-by-full-name-is-the-dedup-database", replace_named(
            proxy_stack(), "proxy-function", PROXY_DB_ENV,
            f"projects/{PROJECT}/databases/{DATABASE}"), True),
    ],
    # Who writes the proxy's database: since issue 25, dedup-database-writers' (below, and
    # every database of the kit).
    "dedup-database-writers": [
        stack_case("proxy-kit", proxy_stack(), False),
        stack_case("proxy-preview", preview_proxy_stack(), False),
        stack_case("proxy-and-watchdog", proxy_watchdog_stack(), False),
        stack_case("proxy-and-watchdog-preview", preview_proxy_watchdog_stack(), False),
        stack_case("grant-member-unknown", [
            *proxy_stack(), on_proxy_database("other-writer", "roles/datastore.user", U)], False),
        stack_case("grant-condition-unknown", [*proxy_stack(), res(
            PROJECT_IAM_MEMBER, "runtime-writer", member("roles/datastore.user",
                                                         condition=U))], False),
        stack_case("unconditioned-writer-in-another-project", [*proxy_stack(), res(
            PROJECT_IAM_MEMBER, "elsewhere", {**member("roles/datastore.user"),
                                              "project": "acme-other"})], False),
        stack_case("writer-of-the-same-database-id-in-another-project", [*proxy_stack(), res(
            PROJECT_IAM_MEMBER, "elsewhere", member("roles/datastore.user", condition={
                "title": "t", "expression":
                f'resource.name == "projects/acme-other/databases/{PROXY_DATABASE}"'}))],
            False),
        stack_case("runtime-datastore-user-on-the-proxy-database", replace_named(
            proxy_stack(), "runtime-datastore-user", "condition", PROXY_DATASTORE_CONDITION),
            True),
        stack_case("datastore-owner-for-a-group-on-the-proxy-database", [
            *proxy_stack(), res(PROJECT_IAM_BINDING, "owners", {
                "project": PROJECT, "role": "roles/datastore.owner",
                "members": ["group:dbas@example.com"],
                "condition": PROXY_DATASTORE_CONDITION})], True),
        stack_case("custom-role-writing-entities-unconditioned", [
            *proxy_stack(), custom_role(["datastore.entities.update"]),
            res(PROJECT_IAM_MEMBER, "runtime-custom", member(CUSTOM_ROLE))], True),
    ],
}
