"""Pass/fail fixtures for the policy-pack items of issue 25 ("Security, round two"), in the
pattern of cases.py and bypass_cases.py: every failing case here is an attack the pack
before the fix let through (the policy judging it did not exist or did not see it), and
each policy judged here has passing cases next to it (the kit's own stacks among them).
test_policy_cases.py runs them with the others.

Items: 1 audience bound to the job's URI; 3 Firebase rules releases; 4 escalation judged by
permission (custom roles, Cloud Build); 5 one writer check for every database; 6 actAs on
the kit's accounts; 7 the dedup runtime account is no caller; 8 the token secret's readers.
For 4 and 6, "for anyone but the deployer's service accounts": the `deployers` setting of
the two policies (policies/deployers.py) lets a listed service account hold them, nobody
else, and refuses a group or a principal set as a setting error.
"""

from __future__ import annotations

from policies import gcp
from policies.model import Resource
from tests.policies.bypass_cases import custom_role, document, in_proxy, v1_function
from tests.policies.cases import (
    JOB,
    Case,
    delivering_watchdog,
    member,
    one,
    stack_case,
)
from tests.policies.fixtures import (
    BUILD_SA,
    DATABASE,
    DATASTORE_CONDITION,
    DELETE,
    FIRESTORE_DATABASE,
    FUNCTION_URL,
    INVOKER_SA,
    PROJECT,
    PROJECT_IAM_BINDING,
    PROJECT_IAM_MEMBER,
    PROJECT_IAM_POLICY,
    PROXY_DATABASE,
    REGION,
    RUN_SERVICE_IAM_MEMBER,
    RUNTIME_SA,
    SA_IAM_MEMBER,
    SECRET_IAM_MEMBER,
    TOKEN_SECRET,
    WATCHDOG_SA,
    U,
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
    replace_named,
    res,
    watchdog_stack,
)

GROUP = "group:ops@example.com"
FOREIGN = "https://collector.example.net/hook"
FUNCTION_HOST = FUNCTION_URL.removeprefix("https://")
AUDIENCE = "httpTarget.oidcToken.audience"
URI = "httpTarget.uri"
RELEASE = "gcp:firebaserules/release:Release"
ORG_IAM_MEMBER = "gcp:organizations/iAMMember:IAMMember"
BUCKET_IAM_MEMBER = "gcp:storage/bucketIAMMember:BucketIAMMember"
RUN2 = gcp.CLOUD_RUN_V2_SERVICE
DOWNSTREAM_SA = f"report-service@{PROJECT}.iam.gserviceaccount.com"
WATCHDOG_DATABASE = f"{DATABASE}-watchdog"
ALLOWED_CALLERS = "serviceConfig.environmentVariables.DEDUP_ALLOWED_CALLERS"
DEPLOYER_SA = f"pulumi-deployer@{PROJECT}.iam.gserviceaccount.com"
DEPLOYER = f"serviceAccount:{DEPLOYER_SA}"
OTHER_DEPLOYER = f"serviceAccount:other-deployer@{PROJECT}.iam.gserviceaccount.com"
PRINCIPAL_SET = (
    "principalSet://iam.googleapis.com/projects/123456789012/locations/global/"
    "workloadIdentityPools/github/attribute.repository/acme/scheduler-dedup"
)


def deployers(*members: str) -> dict[str, object]:
    """The policy's entry of the policy config: {"deployers": [...]}."""
    return {"deployers": list(members)}


def _job(uri: object, audience: object) -> dict[str, object]:
    return patch(patch(job_props(), URI, uri), AUDIENCE, audience)


def _release(name: object, project: object = PROJECT) -> Resource:
    return res(RELEASE, "open-rules", {
        "name": name, "project": project,
        "rulesetName": f"projects/{PROJECT}/rulesets/0a1b2c3d"})


def _on_account(email: str, role: str, who: str, name: str = "act-as") -> Resource:
    return res(SA_IAM_MEMBER, name, {
        "serviceAccountId": f"projects/{PROJECT}/serviceAccounts/{email}", "role": role,
        "member": who})


def _watchdog_acts_as_itself() -> Resource:
    """What infra/watchdog.py declares for a watchdog that delivers through Cloud Tasks."""
    return _on_account(WATCHDOG_SA, "roles/iam.serviceAccountUser",
                       f"serviceAccount:{WATCHDOG_SA}", "watchdog-acts-as-itself")


def _on_service(service: str, role: str, who: str, name: str = "extra-invoker") -> Resource:
    return res(RUN_SERVICE_IAM_MEMBER, name, {
        "project": PROJECT, "location": REGION, "name": service, "role": role, "member": who})


def _on_secret(role: str, who: str, secret: str = TOKEN_SECRET,
               name: str = "secret-reader") -> Resource:
    return res(SECRET_IAM_MEMBER, name, {
        "project": PROJECT, "secretId": secret, "role": role, "member": who})


def _forged_job(resources: list[Resource]) -> list[Resource]:
    """`resources` plus a second job that sends the dedup runtime account's OIDC tokens to
    the function (with it, the earlier policies took that account for a job's invoker)."""
    props = patch(job_props("forged"), "httpTarget.oidcToken.serviceAccountEmail", RUNTIME_SA)
    return [*resources, res(JOB, "job-forged", props)]


def _runtime_as_caller() -> list[Resource]:
    """The dedup runtime account made a caller everywhere at once: a job's OIDC identity,
    an allowed caller of the function and an invoker of it. Each of the earlier policies
    accepts this (the job's account is the one the function serves)."""
    stack = replace_named(_forged_job(kit_stack()), "dedup-function", ALLOWED_CALLERS,
                          f"{INVOKER_SA},{RUNTIME_SA}")
    return [*stack, _on_service("scheduler-dedup", "roles/run.invoker",
                                f"serviceAccount:{RUNTIME_SA}", "runtime-invoker")]


def _on_default_database() -> list[Resource]:
    """kit_stack with its records in the (default) database (DEDUP_DATABASE unset)."""
    stack = replace_named(kit_stack(), "dedup-function",
                          "serviceConfig.environmentVariables.DEDUP_DATABASE", DELETE)
    for field in ("runs-expire-at", "runs-schedule-time"):
        stack = replace_named(stack, field, "database", "(default)")
    return stack


def _watchdog_own_database(*, writes_the_dedup_database: bool = False) -> list[Resource]:
    """A watchdog keeping its cursors and re-run queue in a database of its own, named in
    a DEDUP_*DATABASE setting, its roles/datastore.user conditioned to it; it reads the
    dedup database's records (roles/datastore.viewer), unless it still `writes` it."""
    stack = replace_named(watchdog_stack(), "watchdog-function",
                          "serviceConfig.environmentVariables.DEDUP_WATCH_DATABASE",
                          WATCHDOG_DATABASE)
    if not writes_the_dedup_database:
        stack = replace_named(stack, "watchdog-datastore-user", "role", "roles/datastore.viewer")
    return [
        *stack,
        res(FIRESTORE_DATABASE, "watchdog-database", database_props(False, WATCHDOG_DATABASE)),
        res(PROJECT_IAM_MEMBER, "watchdog-own-database", member(
            "roles/datastore.user", f"serviceAccount:{WATCHDOG_SA}",
            condition=database_condition(WATCHDOG_DATABASE))),
    ]


ROUND_TWO_CASES: dict[str, list[Case]] = {
    # --- 1: a token is only ever sent where it is valid ------------------------------------
    "scheduler-job-oidc-audience": [
        one("audience-origin-of-a-path-uri", JOB, _job(f"{FUNCTION_URL}/hook", FUNCTION_URL),
            False),
        one("audience-url-with-default-port-and-case", JOB,
            _job(FUNCTION_URL, f"https://{FUNCTION_HOST.upper()}:443"), False),
        one("audience-uri-unknown", JOB, _job(U, "https://collector.example.net"), False),
        one("audience-foreign-uri-and-its-origin", JOB,
            _job(FOREIGN, "https://collector.example.net"), False),
        one("token-for-the-function-sent-to-a-foreign-url", JOB, _job(FOREIGN, FUNCTION_URL),
            True),
        one("audience-over-plain-http", JOB, _job(FUNCTION_URL, f"http://{FUNCTION_HOST}"),
            True),
        one("uri-with-the-function-as-user-info", JOB,
            _job(f"https://{FUNCTION_HOST}@collector.example.net/hook", FUNCTION_URL), True),
        one("uri-host-look-alike", JOB,
            _job(f"https://{FUNCTION_HOST}.collector.example.net/", FUNCTION_URL), True),
        one("audience-on-another-port", JOB, _job(FUNCTION_URL, f"{FUNCTION_URL}:8443"), True),
    ],
    # --- 3: Firebase rules releases --------------------------------------------------------
    "dedup-no-firebase-rules": [
        stack_case("kit", kit_stack(), False),
        stack_case("rules-for-storage", [*kit_stack(), _release("firebase.storage/b")], False),
        stack_case("rules-for-another-database",
                   [*kit_stack(), _release("cloud.firestore/mobile-app")], False),
        stack_case("rules-name-unknown", [*kit_stack(), _release(U)], False),
        stack_case("rules-for-the-dedup-database",
                   [*kit_stack(), _release(f"cloud.firestore/{DATABASE}")], True),
        stack_case("rules-for-the-proxy-database",
                   [*proxy_stack(), _release(f"cloud.firestore/{PROXY_DATABASE}")], True),
        stack_case("rules-by-full-name-project-unknown", [*kit_stack(), _release(
            f"projects/{PROJECT}/releases/cloud.firestore/{DATABASE}", U)], True),
        stack_case("rules-for-the-default-database-the-function-uses", [
            *_on_default_database(), _release("cloud.firestore")], True),
    ],
    # --- 4: escalation judged by permission -----------------------------------------------
    "iam-no-role-admin-or-build-create": [
        stack_case("kit", kit_stack(), False),
        stack_case("proxy-kit", proxy_stack(), False),
        stack_case("proxy-and-watchdog", proxy_watchdog_stack(), False),
        stack_case("role-viewer-on-project", [
            *kit_stack(), res(PROJECT_IAM_MEMBER, "ops", member("roles/iam.roleViewer", GROUP))],
            False),
        stack_case("custom-role-harmless", [
            *kit_stack(), custom_role(["logging.logEntries.create"]),
            res(PROJECT_IAM_MEMBER, "ops", member(f"projects/{PROJECT}/roles/ops_helper",
                                                  GROUP))], False),
        stack_case("custom-role-rewriting-roles-on-project", [
            *kit_stack(), custom_role(["iam.roles.update", "iam.roles.get"]),
            res(PROJECT_IAM_MEMBER, "ops", member(f"projects/{PROJECT}/roles/ops_helper",
                                                  GROUP))], True),
        stack_case("role-admin-on-project", [
            *kit_stack(), res(PROJECT_IAM_MEMBER, "ops", member("roles/iam.roleAdmin", GROUP))],
            True),
        stack_case("organization-role-admin", [*kit_stack(), res(ORG_IAM_MEMBER, "ops", {
            "orgId": "1", "role": "roles/iam.organizationRoleAdmin", "member": GROUP})], True),
        stack_case("build-editor-on-project", [*kit_stack(), res(
            PROJECT_IAM_MEMBER, "ci", member("roles/cloudbuild.builds.editor", GROUP))], True),
        stack_case("custom-role-creating-builds-on-a-bucket", [
            *kit_stack(), custom_role(["cloudbuild.builds.create"]),
            res(BUCKET_IAM_MEMBER, "ci", {"bucket": "b", "member": GROUP,
                                          "role": f"projects/{PROJECT}/roles/ops_helper"})],
            True),
        # "for anyone but the deployer's service accounts": the deployers setting
        stack_case("listed-deployer-holds-role-admin-and-build-editor", [
            *kit_stack(), res(PROJECT_IAM_MEMBER, "deployer-roles", member(
                "roles/iam.roleAdmin", DEPLOYER)),
            res(PROJECT_IAM_MEMBER, "deployer-builds", member(
                "roles/cloudbuild.builds.editor", f"serviceAccount:{DEPLOYER_SA.upper()}"))],
            False, deployers(DEPLOYER, OTHER_DEPLOYER)),
        stack_case("listed-deployer-in-a-binding", [*kit_stack(), res(
            PROJECT_IAM_BINDING, "deployers", {"project": PROJECT, "role": "roles/iam.roleAdmin",
                                               "members": [DEPLOYER, OTHER_DEPLOYER]})],
            False, deployers(DEPLOYER, OTHER_DEPLOYER)),
        stack_case("deployer-not-listed", [*kit_stack(), res(
            PROJECT_IAM_MEMBER, "deployer-roles", member("roles/iam.roleAdmin", DEPLOYER))],
            True),
        stack_case("another-deployer-listed", [*kit_stack(), res(
            PROJECT_IAM_MEMBER, "deployer-roles", member("roles/iam.roleAdmin", DEPLOYER))],
            True, deployers(OTHER_DEPLOYER)),
        stack_case("group-while-a-deployer-is-listed", [*kit_stack(), res(
            PROJECT_IAM_MEMBER, "ci", member("roles/cloudbuild.builds.editor", GROUP))],
            True, deployers(DEPLOYER)),
        stack_case("binding-of-a-listed-deployer-and-a-group", [*kit_stack(), res(
            PROJECT_IAM_BINDING, "deployers", {"project": PROJECT, "role": "roles/iam.roleAdmin",
                                               "members": [DEPLOYER, GROUP]})],
            True, deployers(DEPLOYER)),
        stack_case("kit-runtime-account-listed-as-deployer", [*kit_stack(), res(
            PROJECT_IAM_MEMBER, "runtime-roles", member(
                "roles/iam.roleAdmin", f"serviceAccount:{RUNTIME_SA}"))],
            True, deployers(f"serviceAccount:{RUNTIME_SA}")),
        stack_case("group-listed-as-deployer", [*kit_stack(), res(
            PROJECT_IAM_MEMBER, "ops", member("roles/iam.roleAdmin", GROUP))],
            True, deployers(GROUP)),
        stack_case("principal-set-listed-as-deployer", [*kit_stack(), res(
            PROJECT_IAM_MEMBER, "ci", member("roles/cloudbuild.builds.editor", PRINCIPAL_SET))],
            True, deployers(DEPLOYER, PRINCIPAL_SET)),
    ],
    # --- 5: one writer check for every database ------------------------------------------
    "dedup-database-writers": [
        stack_case("kit", kit_stack(), False),
        stack_case("kit-preview", preview_stack(), False),
        stack_case("watchdog", watchdog_stack(), False),
        stack_case("watchdog-preview", preview_watchdog_stack(), False),
        stack_case("watchdog-own-database", _watchdog_own_database(), False),
        # With a database of its own it writes only that one: job code writes the dedup
        # database, where its cursors and queue would be reachable again.
        stack_case("watchdog-own-database-still-writing-the-dedup-database",
                   _watchdog_own_database(writes_the_dedup_database=True), True),
        stack_case("viewer-for-a-group-on-the-dedup-database", [*kit_stack(), res(
            PROJECT_IAM_MEMBER, "readers", member("roles/datastore.viewer", GROUP,
                                                  condition=DATASTORE_CONDITION))], False),
        stack_case("group-datastore-user-on-the-project", [*kit_stack(), res(
            PROJECT_IAM_MEMBER, "ops", member("roles/datastore.user", GROUP))], True),
        stack_case("datastore-owner-conditioned-to-the-dedup-database", [*kit_stack(), res(
            PROJECT_IAM_MEMBER, "dbas", member("roles/datastore.owner", GROUP,
                                               condition=DATASTORE_CONDITION))], True),
        stack_case("custom-role-creating-entities-in-the-dedup-database", [
            *kit_stack(), custom_role(["datastore.entities.create"]),
            res(PROJECT_IAM_MEMBER, "ops", member(f"projects/{PROJECT}/roles/ops_helper",
                                                  "user:alice@example.com",
                                                  condition=DATASTORE_CONDITION))], True),
        stack_case("policy-document-writer-of-the-dedup-database", [
            *kit_stack(), res(PROJECT_IAM_POLICY, "project-policy", document({"bindings": [{
                "role": "roles/datastore.user", "members": [GROUP],
                "condition": DATASTORE_CONDITION}]}))], True),
        stack_case("build-account-writes-the-dedup-database", [*kit_stack(), res(
            PROJECT_IAM_MEMBER, "build-extra", member("roles/datastore.user",
                                                      f"serviceAccount:{BUILD_SA}"))], True),
        stack_case("runtime-writes-the-watchdog-database", [
            *_watchdog_own_database(), res(PROJECT_IAM_MEMBER, "runtime-extra", member(
                "roles/datastore.user", f"serviceAccount:{RUNTIME_SA}",
                condition=database_condition(WATCHDOG_DATABASE)))], True),
    ],
    # --- 6: actAs on the kit's accounts ---------------------------------------------------
    "dedup-accounts-act-as": [
        stack_case("kit", kit_stack(), False),
        stack_case("proxy-and-watchdog", proxy_watchdog_stack(), False),
        stack_case("preview", preview_proxy_watchdog_stack(), False),
        stack_case("watchdog-acts-as-itself-to-deliver",
                   [*delivering_watchdog(), _watchdog_acts_as_itself()], False),
        stack_case("sa-user-on-another-account", [*kit_stack(), _on_account(
            f"other@{PROJECT}.iam.gserviceaccount.com", "roles/iam.serviceAccountUser", GROUP)],
            False),
        stack_case("sa-user-on-the-invoker-for-a-group", [*kit_stack(), _on_account(
            INVOKER_SA, "roles/iam.serviceAccountUser", GROUP)], True),
        stack_case("custom-act-as-role-on-the-runtime-account", [
            *kit_stack(), custom_role(["iam.serviceAccounts.actAs"]),
            _on_account(RUNTIME_SA, f"projects/{PROJECT}/roles/ops_helper",
                        "user:alice@example.com")], True),
        stack_case("runtime-acts-as-the-invoker", [*kit_stack(), _on_account(
            INVOKER_SA, "roles/iam.serviceAccountUser", f"serviceAccount:{RUNTIME_SA}")], True),
        stack_case("user-acts-as-the-watchdog", [*delivering_watchdog(), _on_account(
            WATCHDOG_SA, "roles/iam.serviceAccountUser", "user:alice@example.com")], True),
        # "for anyone but the deployer's service accounts": the deployers setting
        stack_case("listed-deployer-acts-as-the-invoker-and-the-runtime-account", [
            *kit_stack(),
            _on_account(INVOKER_SA, "roles/iam.serviceAccountUser", DEPLOYER, "deployer-invoker"),
            _on_account(RUNTIME_SA, "roles/iam.serviceAccountUser", DEPLOYER, "deployer-runtime")],
            False, deployers(DEPLOYER)),
        stack_case("listed-deployer-acts-as-the-watchdog", [*delivering_watchdog(), _on_account(
            WATCHDOG_SA, "roles/iam.serviceAccountUser", DEPLOYER)], False, deployers(DEPLOYER)),
        stack_case("deployer-not-listed", [*kit_stack(), _on_account(
            INVOKER_SA, "roles/iam.serviceAccountUser", DEPLOYER)], True),
        stack_case("another-deployer-listed", [*kit_stack(), _on_account(
            INVOKER_SA, "roles/iam.serviceAccountUser", DEPLOYER)], True,
            deployers(OTHER_DEPLOYER)),
        stack_case("group-while-a-deployer-is-listed", [*kit_stack(), _on_account(
            INVOKER_SA, "roles/iam.serviceAccountUser", GROUP)], True, deployers(DEPLOYER)),
        stack_case("kit-watchdog-account-listed-as-deployer", [*delivering_watchdog(),
            _on_account(INVOKER_SA, "roles/iam.serviceAccountUser",
                        f"serviceAccount:{WATCHDOG_SA}")],
            True, deployers(f"serviceAccount:{WATCHDOG_SA}")),
        stack_case("group-listed-as-deployer", [*kit_stack(), _on_account(
            INVOKER_SA, "roles/iam.serviceAccountUser", GROUP)], True, deployers(GROUP)),
        stack_case("principal-set-listed-as-deployer", [*kit_stack(), _on_account(
            RUNTIME_SA, "roles/iam.serviceAccountUser", PRINCIPAL_SET)],
            True, deployers(PRINCIPAL_SET)),
    ],
    # --- 7: the dedup runtime account is no caller ----------------------------------------
    "dedup-runtime-account-not-a-caller": [
        stack_case("kit", kit_stack(), False),
        stack_case("proxy-kit", proxy_stack(), False),
        stack_case("proxy-preview", preview_proxy_stack(), False),
        stack_case("watchdog-delivering", delivering_watchdog(), False),
        stack_case("runtime-made-a-caller-everywhere", _runtime_as_caller(), True),
        stack_case("job-sends-the-runtime-account-tokens", _forged_job(kit_stack()), True),
        stack_case("runtime-allowed-caller-of-the-proxy", replace_named(
            _forged_job(proxy_stack()), "proxy-function", ALLOWED_CALLERS,
            f"{INVOKER_SA},{RUNTIME_SA}"), True),
        stack_case("runtime-invoker-of-the-proxy", [*_forged_job(proxy_stack()), _on_service(
            "scheduler-dedup-proxy", "roles/run.invoker", f"serviceAccount:{RUNTIME_SA}")], True),
        stack_case("runtime-custom-invoke-role-on-the-function", [
            *_forged_job(kit_stack()), custom_role(["run.routes.invoke"]),
            _on_service("scheduler-dedup", f"projects/{PROJECT}/roles/ops_helper",
                        f"serviceAccount:{RUNTIME_SA}")], True),
    ],
    # --- 8: the token secret's readers ----------------------------------------------------
    "dedup-token-secret-readers": [
        stack_case("kit", kit_stack(), False),
        stack_case("proxy-kit", proxy_stack(), False),
        stack_case("proxy-preview", preview_proxy_stack(), False),
        stack_case("declared-reader-in-the-component", [*proxy_stack(), in_proxy(_on_secret(
            "roles/secretmanager.secretAccessor", f"serviceAccount:{DOWNSTREAM_SA}",
            name="proxy-token-secret-reader"))], False),
        stack_case("accessor-on-another-secret", [*proxy_stack(), _on_secret(
            "roles/secretmanager.secretAccessor", GROUP, secret="reports-api-key")], False),
        stack_case("project-accessor-conditioned-to-another-secret", [*proxy_stack(), res(
            PROJECT_IAM_MEMBER, "ops", member("roles/secretmanager.secretAccessor", GROUP,
                                              condition={"title": "t", "expression":
                                                         f'resource.name == "projects/'
                                                         f'{PROJECT}/secrets/other"'}))],
            False),
        stack_case("accessor-for-a-group-on-the-token-secret", [*proxy_stack(), _on_secret(
            "roles/secretmanager.secretAccessor", GROUP)], True),
        stack_case("project-secret-accessor-for-a-group", [*proxy_stack(), res(
            PROJECT_IAM_MEMBER, "ops", member("roles/secretmanager.secretAccessor", GROUP))],
            True),
        stack_case("secret-admin-on-the-token-secret-by-full-name", [*proxy_stack(), _on_secret(
            "roles/secretmanager.admin", "user:alice@example.com",
            secret=f"projects/{PROJECT}/secrets/{TOKEN_SECRET}")], True),
        stack_case("custom-role-accessing-versions-on-the-project", [
            *proxy_stack(), custom_role(["secretmanager.versions.access"]),
            res(PROJECT_IAM_MEMBER, "ops", member(f"projects/{PROJECT}/roles/ops_helper",
                                                  f"serviceAccount:{RUNTIME_SA}"))], True),
        stack_case("reader-outside-the-component", [*proxy_stack(), _on_secret(
            "roles/secretmanager.secretAccessor", f"serviceAccount:{DOWNSTREAM_SA}")], True),
    ],
    "dedup-token-secret-not-plain": [
        *[Case(f"proxy-kit-{r.name}", [r], False) for r in proxy_stack()
          if r.type == gcp.FUNCTION_V2],
        one("run-service-secret-reference", RUN2, {"template": {"containers": [{"envs": [
            {"name": "DEDUP_TOKEN_SECRET", "valueSource": {"secretKeyRef": {
                "secret": TOKEN_SECRET, "version": "1"}}}]}]}}, False),
        one("plain-token-secret", gcp.FUNCTION_V2, patch(
            function_props(), "serviceConfig.environmentVariables.DEDUP_TOKEN_SECRET", "x" * 64),
            True),
        one("plain-token-secret-in-the-build", gcp.FUNCTION_V2, patch(
            function_props(), "buildConfig.environmentVariables",
            {"dedup_token_secret": "x" * 64}), True),
        one("run-service-plain-token-secret", RUN2, {
            "ingress": "INGRESS_TRAFFIC_INTERNAL_ONLY",
            "template": {"serviceAccount": DOWNSTREAM_SA, "containers": [{"envs": [
                {"name": "DEDUP_TOKEN_SECRET", "value": "x" * 64}]}]}}, True),
        one("v1-function-plain-token-secret", gcp.FUNCTION_V1,
            v1_function(environmentVariables={"DEDUP_TOKEN_SECRET": U}), True),
    ],
}
