"""Pass/fail fixtures for issue 36 ("Trust by construction"), in the pattern of cases.py:
the watchdog's deliveries queue judged like a Scheduler job (its httpTarget overrides) and
enqueued by the watchdog alone, every account the kit creates protected from
impersonation (the build account and the watchdog's task account among them), and URLs
compared by normalised origin and path. test_policy_cases.py runs them with the others.
Each failing fixture passed every mandatory policy before issue 36.
"""

from __future__ import annotations

from typing import Any

from policies import gcp
from policies.model import Resource
from tests.policies.bypass_cases import custom_role
from tests.policies.cases import (
    CLOUDFUNCTIONS_URL,
    DELIVERY_QUEUE,
    WATCHDOG_FN,
    Case,
    delivering_watchdog,
    stack_case,
)
from tests.policies.fixtures import (
    BUILD_SA,
    DELETE,
    FOLDER_IAM_MEMBER,
    FUNCTION_URL,
    INVOKER_SA,
    PROJECT,
    PROJECT_IAM_MEMBER,
    REGION,
    SA_IAM_MEMBER,
    WATCHDOG_SA,
    U,
    job_props,
    kit_stack,
    patch,
    replace,
    replace_named,
    res,
)
from tests.policies.runtime_fixtures import RUNTIMES, runtime_delivering_stack

QUEUE_IAM_MEMBER = "gcp:cloudtasks/queueIamMember:QueueIamMember"
QUEUE_IAM_BINDING = "gcp:cloudtasks/queueIamBinding:QueueIamBinding"
QUEUE = "watchdog-deliveries"  # the deliveries queue's Pulumi name in the fixtures
ENV = "serviceConfig.environmentVariables"
GROUP = "group:ops@acme.example"
TEAM_SA = f"inventory-sync@{PROJECT}.iam.gserviceaccount.com"
TASK_SA = f"dedup-tasks@{PROJECT}.iam.gserviceaccount.com"
FUNCTION_HOST = FUNCTION_URL.removeprefix("https://")
OTHER_URL = "https://collector.attacker.example"
FUNCTIONS_ORIGIN = CLOUDFUNCTIONS_URL.removesuffix("/scheduler-dedup")

CASES: dict[str, list[Case]] = {}


def enqueuer(name: str, who: str, *, role: str = "roles/cloudtasks.enqueuer",
             queue: str = "dedup-deliveries", resource_type: str = QUEUE_IAM_MEMBER) -> Resource:
    props: dict[str, Any] = {"project": PROJECT, "location": REGION, "name": queue, "role": role}
    if resource_type == QUEUE_IAM_BINDING:
        props["members"] = [who]
    else:
        props["member"] = who
    return res(resource_type, name, props)


def kit_queue(task_account: str = WATCHDOG_SA) -> list[Resource]:
    """A watchdog delivering through its deliveries queue as infra/watchdog.py declares it:
    DEDUP_WATCH_QUEUE and DEDUP_WATCH_TASK_ACCOUNT, its enqueuer grant on the queue."""
    stack = replace_named(delivering_watchdog(), WATCHDOG_FN,
                          f"{ENV}.DEDUP_WATCH_TASK_ACCOUNT", task_account)
    return [*stack, enqueuer("watchdog-enqueues-deliveries", f"serviceAccount:{WATCHDOG_SA}")]


def runtimes_queue() -> list[Resource]:
    """The watchdog delivering the runtimes' runs (two URLs) through its queue."""
    return replace_named(runtime_delivering_stack(), WATCHDOG_FN,
                         f"{ENV}.DEDUP_WATCH_TASK_ACCOUNT", WATCHDOG_SA)


def with_target(target: Any, stack: list[Resource] | None = None) -> list[Resource]:
    """The deliveries queue with `target` as its httpTarget."""
    return replace_named(kit_queue() if stack is None else stack, QUEUE, "httpTarget", target)


def uri_override(**parts: Any) -> dict[str, Any]:
    return {"uriOverride": {"uriOverrideEnforceMode": "ALWAYS", **parts}}


def header(key: str, value: str) -> dict[str, Any]:
    return {"headerOverrides": [{"header": {"key": key, "value": value}}]}


CASES["dedup-deliveries-queue-target"] = [
    stack_case("queue-kit", kit_queue(), False),
    stack_case("queue-runtimes", runtimes_queue(), False),
    stack_case("queue-target-unknown", with_target(U), False),
    stack_case("queue-delivery-url-not-known-yet",
               replace_named(with_target(uri_override(host="collector.attacker.example")),
                             WATCHDOG_FN, f"{ENV}.DEDUP_WATCH_TARGET_URL", U), False),
    stack_case("queue-not-known-yet",
               replace_named(with_target(header("X-Dedup-Project", "x")), WATCHDOG_FN,
                             f"{ENV}.DEDUP_WATCH_QUEUE", U), True),
    stack_case("queue-override-host-unknown", with_target(uri_override(host=U)), False),
    stack_case("queue-override-that-changes-nothing",
               with_target({**uri_override(scheme="HTTPS", host=FUNCTION_HOST.upper(),
                                           port="443", pathOverride={"path": "/./"}),
                            "httpMethod": "POST"}), False),
    stack_case("queue-oidc-override-own-task-account",
               with_target({"oidcToken": {"serviceAccountEmail": WATCHDOG_SA,
                                          "audience": f"{FUNCTION_URL}:443/"}}), False),
    stack_case("queue-overrides-on-another-queue",
               [*kit_queue(), res(gcp.TASKS_QUEUE, "team-queue", {
                   "project": PROJECT, "location": REGION, "name": "team-queue",
                   "httpTarget": {**uri_override(host="collector.attacker.example"),
                                  **header("X-Dedup-Project", "x")}})], False),
    # The attacks: every task, with a token the dedup function accepts, goes elsewhere.
    stack_case("queue-uri-override-another-host",
               with_target(uri_override(host="collector.attacker.example")), True),
    stack_case("queue-uri-override-another-port", with_target(uri_override(port="8443")), True),
    stack_case("queue-uri-override-plain-http", with_target(uri_override(scheme="HTTP")), True),
    stack_case("queue-uri-override-path",
               with_target(uri_override(pathOverride={"path": "/other-job"})), True),
    stack_case("queue-uri-override-query",
               with_target(uri_override(queryOverride={"queryParams": "job=other"})), True),
    stack_case("queue-uri-override-if-not-exists",
               with_target({"uriOverride": {"uriOverrideEnforceMode": "IF_NOT_EXISTS",
                                            "host": "collector.attacker.example"}}), True),
    stack_case("queue-uri-override-one-runtimes-host",
               with_target(uri_override(host=RUNTIMES[0].url.removeprefix("https://")),
                           runtimes_queue()), True),
    stack_case("queue-oidc-override-task-account-not-known-yet",
               replace_named(with_target({"oidcToken": {"serviceAccountEmail": INVOKER_SA}}),
                             WATCHDOG_FN, f"{ENV}.DEDUP_WATCH_TASK_ACCOUNT", U), False),
    stack_case("queue-oauth-override-not-known-yet", with_target({"oauthToken": U}), False),
    stack_case("queue-oidc-override-no-task-account",
               replace_named(with_target({"oidcToken": {"serviceAccountEmail": WATCHDOG_SA}}),
                             WATCHDOG_FN, f"{ENV}.DEDUP_WATCH_TASK_ACCOUNT", DELETE), True),
    stack_case("queue-oidc-override-another-account",
               with_target({"oidcToken": {"serviceAccountEmail": INVOKER_SA}}), True),
    stack_case("queue-oidc-override-another-audience",
               with_target({"oidcToken": {"serviceAccountEmail": WATCHDOG_SA,
                                          "audience": OTHER_URL}}), True),
    stack_case("queue-oauth-override",
               with_target({"oauthToken": {"serviceAccountEmail": WATCHDOG_SA}}), True),
    stack_case("queue-header-override-job-name",
               with_target(header("X-CloudScheduler-JobName", "other-job")), True),
    stack_case("queue-header-override-dedup",
               with_target(header("X-Dedup-Generation", "7")), True),
    stack_case("queue-method-override-get", with_target({"httpMethod": "GET"}), True),
]

NOT_YET_KNOWN_ROLE = custom_role([U], role_id="not_known_yet")
TASKS_CREATOR_ROLE = custom_role(["cloudtasks.tasks.create"], role_id="task_maker")

CASES["dedup-deliveries-queue-task-creators"] = [
    stack_case("creators-kit", kit_queue(), False),
    stack_case("creators-runtimes", runtimes_queue(), False),
    stack_case("creators-task-account",
               [*kit_queue(TASK_SA), enqueuer("tasks-enqueue", f"serviceAccount:{TASK_SA}")],
               False),
    stack_case("creators-viewer-on-queue",
               [*kit_queue(), enqueuer("ops-view", GROUP, role="roles/cloudtasks.viewer")], False),
    stack_case("creators-another-queue",
               [*kit_queue(), enqueuer("ops-enqueue", GROUP, queue="team-queue")], False),
    stack_case("creators-another-project",
               [*kit_queue(), res(PROJECT_IAM_MEMBER, "ops-enqueue", {
                   "project": "someone-else", "role": "roles/cloudtasks.enqueuer",
                   "member": GROUP})], False),
    stack_case("creators-role-not-known-yet",
               [*kit_queue(), NOT_YET_KNOWN_ROLE,
                enqueuer("ops-enqueue", GROUP, role=f"projects/{PROJECT}/roles/not_known_yet")],
               False),
    stack_case("creators-member-unknown", [*kit_queue(), enqueuer("ops-enqueue", U)], False),
    stack_case("creators-queue-not-known-yet",
               [*replace_named(kit_queue(), WATCHDOG_FN, f"{ENV}.DEDUP_WATCH_QUEUE", U),
                enqueuer("ops-enqueue", GROUP)], False),
    stack_case("creators-queue-setting-malformed",
               [*replace_named(kit_queue(), WATCHDOG_FN, f"{ENV}.DEDUP_WATCH_QUEUE",
                               "dedup-deliveries"), enqueuer("ops-enqueue", GROUP)], False),
    # Squatting: whoever may create tasks there names a run's task first.
    stack_case("creators-enqueuer-group-on-queue",
               [*kit_queue(), enqueuer("ops-enqueue", GROUP)], True),
    stack_case("creators-enqueuer-invoker-on-queue",
               [*kit_queue(), enqueuer("inv-enqueue", f"serviceAccount:{INVOKER_SA}")], True),
    stack_case("creators-binding-full-queue-name",
               [*kit_queue(), enqueuer("ops-enqueue", GROUP, queue=DELIVERY_QUEUE,
                                       resource_type=QUEUE_IAM_BINDING)], True),
    stack_case("creators-enqueuer-on-project",
               [*kit_queue(), res(PROJECT_IAM_MEMBER, "job-enqueue", {
                   "project": PROJECT, "role": "roles/cloudtasks.enqueuer",
                   "member": f"serviceAccount:{TEAM_SA}"})], True),
    stack_case("creators-admin-on-folder",
               [*kit_queue(), res(FOLDER_IAM_MEMBER, "ops-admin", {
                   "folder": "folders/123", "role": "roles/cloudtasks.admin",
                   "member": GROUP})], True),
    stack_case("creators-custom-role-on-queue",
               [*kit_queue(), TASKS_CREATOR_ROLE,
                enqueuer("ops-enqueue", GROUP, role=f"projects/{PROJECT}/roles/task_maker")],
               True),
    stack_case("creators-unknown-role-on-queue",
               [*kit_queue(), enqueuer("ops-enqueue", GROUP,
                                       role="roles/cloudtasks.serviceAgent")], True),
    stack_case("creators-unknown-role-on-project",
               [*kit_queue(), res(PROJECT_IAM_MEMBER, "ops-unknown", {
                   "project": PROJECT, "role": "roles/cloudtasks.queueCreator",
                   "member": GROUP})], True),
]


def on_account(name: str, email: str, role: str, who: str = GROUP) -> Resource:
    return res(SA_IAM_MEMBER, name, {
        "serviceAccountId": f"projects/{PROJECT}/serviceAccounts/{email}", "role": role,
        "member": who})


TOKEN_CREATOR = "roles/iam.serviceAccountTokenCreator"

CASES["dedup-accounts-not-impersonable"] = [
    stack_case("impersonate-team-account",
               [*kit_stack(), on_account("team-token", TEAM_SA, TOKEN_CREATOR)], False),
    stack_case("impersonate-build-account",
               [*kit_stack(), on_account("build-token", BUILD_SA, TOKEN_CREATOR)], True),
    stack_case("impersonate-build-account-keys",
               [*kit_stack(), on_account("build-keys", BUILD_SA,
                                         "roles/iam.serviceAccountKeyAdmin")], True),
    stack_case("impersonate-task-account",
               [*kit_queue(TASK_SA), on_account("task-oidc", TASK_SA,
                                                "roles/iam.serviceAccountOpenIdTokenCreator")],
               True),
]

CASES["dedup-accounts-act-as"] = [
    stack_case("act-as-build-account-deployer",
               [*kit_stack(), on_account("deploy-build", BUILD_SA, "roles/iam.serviceAccountUser",
                                         f"serviceAccount:deployer@{PROJECT}.iam."
                                         "gserviceaccount.com")], False,
               {"deployers": [f"serviceAccount:deployer@{PROJECT}.iam.gserviceaccount.com"]}),
    stack_case("act-as-build-account",
               [*kit_stack(), on_account("ops-build", BUILD_SA, "roles/iam.serviceAccountUser")],
               True),
]

# The kit's job naming the function in other spellings, without its X-Dedup-* headers:
# matched to the function by normalised origin and path, dedup-job-headers judges it.
JOB = gcp.SCHEDULER_JOB
HEADERLESS = {"Content-Type": "application/json"}


def job_at(uri: str) -> list[Resource]:
    """The kit's job at `uri`, without its X-Dedup-* headers; the function has its
    cloudfunctions.net URL too (a URL with a path: dot segments matter there)."""
    stack = replace_named(kit_stack(), "dedup-function", "url", CLOUDFUNCTIONS_URL)
    stack = replace(stack, JOB, "httpTarget.uri", uri)
    return replace(stack, JOB, "httpTarget.headers", HEADERLESS)


SPELLINGS = {
    "default-port": f"{FUNCTION_URL}:443/",
    "upper-case-host": f"https://{FUNCTION_HOST.upper()}/",
    "upper-case-scheme": f"HTTPS://{FUNCTION_HOST}",
    "trailing-dot-host": f"https://{FUNCTION_HOST}./",
    "dot-segment": f"{FUNCTIONS_ORIGIN}/./scheduler-dedup",
    "dot-dot-segment": f"{FUNCTIONS_ORIGIN}/scheduler-dedup-proxy/../scheduler-dedup/",
    "encoded-dot-segments": f"{FUNCTIONS_ORIGIN}/other/%2E%2e/scheduler-dedup",
    "encoded-unreserved": f"{FUNCTIONS_ORIGIN}/scheduler%2Ddedup",
    "fragment": f"{FUNCTION_URL}#run",
    "user-info": f"https://ops@{FUNCTION_HOST}/",  # no plain URL: it may be any (fail closed)
}

CASES["dedup-job-headers"] = [
    stack_case("spelling-another-host-default-port", job_at(f"{OTHER_URL}:443/"), False),
    stack_case("spelling-another-port", job_at(f"{FUNCTION_URL}:8443/"), False),
    stack_case("spelling-another-function-by-dot-segments",
               job_at(f"{CLOUDFUNCTIONS_URL}/../scheduler-dedup-other"), False),
    stack_case("spelling-a-longer-name", job_at(f"{CLOUDFUNCTIONS_URL}-other"), False),
    *(stack_case(f"spelling-{name}", job_at(uri), True) for name, uri in SPELLINGS.items()),
]

CASES["scheduler-job-oidc-audience"] = [
    Case("audience-default-port-and-trailing-dot", [res(JOB, "job-dot", patch(
        job_props(), "httpTarget.uri", f"https://{FUNCTION_HOST}.:443/"))], False),
]

