"""The offline check end to end: the kit's stacks pass, broken stacks and programs fail.

Config validation (infra/config/) rejects some mistakes before any resource exists;
the offline check reports those as "not checkable" (exit 2). Mistakes config cannot see
are made in the program: either the dev stack's declared resources with one property
changed (as if the program had been edited), or an alternative program run under the
same mocks that declares one extra bad resource.
"""

from __future__ import annotations

import dataclasses
import io
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pulumi
import pytest
import yaml

from infra import gcp
from infra.program import build
from operator_tools import stack_files
from operator_tools.offline import DeclaredResource, load_stack_config, run_offline
from policies import offline_check
from policies.evaluate import Violation, mandatory
from policies.model import Enforcement
from tests.policies.fixtures import APPSPOT_SA, COMPUTE_SA, DELETE, U, patch
from tests.stacks import FIXTURE_STACKS_DIR, fixture_stack_file

ROOT = Path(__file__).resolve().parents[2]
DEV = fixture_stack_file("dev")
PROD = fixture_stack_file("prod")
RETAIL = fixture_stack_file("retail")

JOB = "gcp:cloudscheduler/job:Job"
FUNCTION = "gcp:cloudfunctionsv2/function:Function"
FIELD = "gcp:firestore/field:Field"
BUCKET = "gcp:storage/bucket:Bucket"
INVOKER = "gcp:cloudrunv2/serviceIamMember:ServiceIamMember"
ENV = "serviceConfig.environmentVariables"


@pytest.fixture(scope="module")
def dev_declared() -> list[DeclaredResource]:
    return list(run_offline(load_stack_config(DEV), stack="dev").resources)


@pytest.fixture(scope="module")
def prod_declared() -> list[DeclaredResource]:
    """prod has a job that starts a workflow through the idempotent proxy."""
    return list(run_offline(load_stack_config(PROD), stack="prod").resources)


def run_main(*args: str) -> tuple[int, str]:
    out = io.StringIO()
    code = offline_check.main(list(args), out=out)
    return code, out.getvalue()


# --- the kit's own stacks ----------------------------------------------------------------


def test_stack_files_are_found() -> None:
    found = offline_check.stack_files(FIXTURE_STACKS_DIR)
    assert [p.name for p in found] == ["Pulumi.dev.yaml", "Pulumi.prod.yaml",
                                       "Pulumi.retail.yaml"]


def test_kit_stacks_pass_with_no_mandatory_violation() -> None:
    code, output = run_main("--stack-file", str(DEV), "--stack-file", str(PROD),
                            "--stack-file", str(RETAIL))
    assert code == 0, output
    assert "stack dev (examples/stacks/Pulumi.dev.yaml): " in output
    assert "stack prod (examples/stacks/Pulumi.prod.yaml): " in output
    assert "0 mandatory violation(s), 0 stack(s) not checkable" in output


def test_the_retail_stack_passes_the_whole_pack_with_its_runtimes() -> None:
    """The issue's example (three jobs, two runtimes with a secret, a bucket grant and VPC
    egress, a watchdog that delivers to a runtime): no violation at all (its jobs that meet
    a DST change chose dstRepeated and dstSkipped: no advisory); the pack sees both runtimes."""
    report = offline_check.check_stack_file(RETAIL)
    assert report.violations == [], report
    functions = [r for r in offline_check.declare(RETAIL)[0]
                 if r.type == "gcp:cloudfunctionsv2/function:Function"]
    assert sorted(f.props.get("labels", {}).get("kit-runtime", "") for f in functions) == [
        "", "", "", "export", "sync"]


# The one violation the kit's stacks carry: dev's heartbeat is at-most-once by design (no
# retries), so a run whose instance crashed is skipped; the advisory policy says so.
HEARTBEAT_ADVISORY = ("dedup-retries-outlast-lease", Enforcement.ADVISORY, "job-heartbeat-job")
# And dev names no alert e-mail: advisory there, mandatory for a delete-protected stack.
DEV_ALERTING_ADVISORY = ("dedup-alerting-notifies", Enforcement.ADVISORY, "dedup-function")
# And dev's Berlin jobs fire at 02:07 (hourly) and 02:30, inside the DST change windows.
DEV_DST_ADVISORIES = [
    ("scheduler-job-dst-change", Enforcement.ADVISORY, f"job-{name}-job")
    for name in ("hourly-sync", "nightly-report")
]


def findings(violations: list[Violation]) -> list[tuple[str, Enforcement, str]]:
    return [(v.policy, v.enforcement, v.resource.split(" ")[0]) for v in violations]


@pytest.mark.parametrize(
    ("path", "expected"),
    [(DEV, [*DEV_DST_ADVISORIES, HEARTBEAT_ADVISORY, DEV_ALERTING_ADVISORY]), (PROD, [])],
    ids=["dev", "prod"],
)
def test_each_stack_has_no_violation_at_all(
    path: Path, expected: list[tuple[str, Enforcement, str]]
) -> None:
    """None but the advisories on dev's Berlin jobs inside the DST change windows, its
    deliberately unretried heartbeat and its alert policies without a notification channel."""
    report = offline_check.check_stack_file(path)
    assert report.error is None
    assert report.resources > 20
    assert findings(report.violations) == expected


def test_dev_heartbeat_advisory_is_printed_and_the_check_passes() -> None:
    code, output = run_main("--stack-file", str(DEV))
    assert code == 0, output
    assert "[advisory] dedup-retries-outlast-lease: job-heartbeat-job " in output
    assert "job 'sched-dedup-dev-heartbeat' is not retried" in output


def test_stack_policies_see_every_job_of_the_stack(dev_declared: list[DeclaredResource]) -> None:
    """Not vacuous: records kept 30 s are flagged once per job (the heartbeat's retry window
    is its 30 s deadline, the watchdog's own job included: it targets the watchdog, which
    carries the same DEDUP_* store settings); a lease of 10 s once per function."""
    broken = mutate(dev_declared, FUNCTION, f"{ENV}.DEDUP_RETENTION_SECONDS", "30")
    found = [
        v
        for v in offline_check.check_declared(broken)
        if v.policy == "dedup-retention-exceeds-retry-window"
    ]
    jobs = [d for d in dev_declared if d.type == JOB]
    assert len(jobs) == 3 + 1  # the stack file's and the watchdog's
    assert len(found) == len(jobs)
    broken = mutate(dev_declared, FUNCTION, f"{ENV}.DEDUP_LEASE_SECONDS", "10")
    found = [
        v
        for v in offline_check.check_declared(broken)
        if v.policy == "dedup-lease-survives-missed-renewals"
    ]
    functions = [d for d in dev_declared if d.type == FUNCTION]
    assert len(found) == len(functions) == 2  # the dedup function and the watchdog
    assert "shorter than 3 x DEDUP_STORE_TIMEOUT_SECONDS (30s)" in found[0].message


def test_resource_policies_get_inputs_and_stack_policies_get_state(
    dev_declared: list[DeclaredResource],
) -> None:
    """The function's URL exists only in the mocked state, as in AnalyzeStack."""
    function = next(d for d in dev_declared if d.type == FUNCTION)
    assert "url" not in function.props
    assert str(function.outputs["serviceConfig"]["uri"]).endswith(".run.app")


# --- broken stacks: table-driven ---------------------------------------------------------


def mutate(
    declared: list[DeclaredResource], resource_type: str, path: str, value: Any
) -> list[DeclaredResource]:
    """The declared resources with `path` changed on every resource of `resource_type`
    (inputs and state alike, as if the program had declared it so)."""
    changed = []
    for d in declared:
        if d.type == resource_type:
            d = dataclasses.replace(
                d, props=patch(d.props, path, value), outputs=patch(d.outputs, path, value)
            )
        changed.append(d)
    return changed


def mutate_named(
    declared: list[DeclaredResource], name: str, path: str, value: Any
) -> list[DeclaredResource]:
    """`mutate`, on the one resource with that Pulumi name."""
    assert any(d.name == name for d in declared), name
    return [
        dataclasses.replace(
            d, props=patch(d.props, path, value), outputs=patch(d.outputs, path, value)
        )
        if d.name == name
        else d
        for d in declared
    ]


def drop(declared: list[DeclaredResource], resource_type: str) -> list[DeclaredResource]:
    return [d for d in declared if d.type != resource_type]


Mutation = Callable[[list[DeclaredResource]], list[DeclaredResource]]


def extra_resource_program(
    declare_extra: Callable[[str], None],
) -> Callable[[Path], tuple[list[Any], dict[str, frozenset[str]]]]:
    """An alternative Pulumi program: the kit's, plus one more resource, under mocks."""

    def declare(path: Path) -> tuple[list[Any], dict[str, frozenset[str]]]:
        config = load_stack_config(path)

        def program() -> Mapping[str, Any]:
            outputs = build(config)
            declare_extra(str(config["gcp:project"]))
            return outputs

        return list(run_offline(config, stack="broken", program=program).resources), {}

    return declare


PROD_PROXY_SA = "scheduler-dedup-proxy@acme-scheduler-prod.iam.gserviceaccount.com"
PROD_PROJECT = "acme-scheduler-prod"
PROD_RUNTIME_SA = f"scheduler-dedup-runtime@{PROD_PROJECT}.iam.gserviceaccount.com"


def _proxy_member(role: str) -> Callable[[str], None]:
    """A project-level grant of `role` to the prod proxy's own account."""

    def declare_extra(project: str) -> None:
        gcp.projects.IAMMember(
            "extra-proxy-grant",
            project=project,
            role=role,
            member=f"serviceAccount:{PROD_PROXY_SA}",
        )

    return declare_extra


def _proxy_executor_on_other_job(project: str) -> None:
    gcp.cloudrunv2.JobIamMember(
        "extra-proxy-job-grant",
        project=project,
        location="europe-west1",
        name="drop-all-tables",
        role="roles/run.jobsExecutorWithOverrides",
        member=f"serviceAccount:{PROD_PROXY_SA}",
    )


def _project_member(role: str) -> Callable[[str], None]:
    def declare_extra(project: str) -> None:
        account = gcp.serviceaccount.Account("extra-sa", project=project, account_id="extra-sa")
        gcp.projects.IAMMember("extra-grant", project=project, role=role, member=account.member)

    return declare_extra


def _public_function_invoker(project: str) -> None:
    gcp.cloudfunctionsv2.FunctionIamMember(
        "public-invoker",
        project=project,
        location="europe-west1",
        cloud_function="sched-dedup-dev",
        role="roles/cloudfunctions.invoker",
        member="allUsers",
    )


def _public_service_binding(project: str) -> None:
    gcp.cloudrunv2.ServiceIamBinding(
        "public-binding",
        project=project,
        location="europe-west1",
        name="sched-dedup-dev",
        role="roles/run.invoker",
        members=pulumi.Output.from_input(["allAuthenticatedUsers"]),
    )


@dataclasses.dataclass(frozen=True)
class Broken:
    name: str
    policy: str | None  # the mandatory policy expected to fire; None: config rejects it
    mutation: Mutation | None = None
    program: Callable[[str], None] | None = None
    config: Callable[[dict[str, Any]], None] | None = None
    also: frozenset[str] = frozenset()  # further policies the same mistake breaks
    stack: Path = DEV  # prod has the proxy


def _job0(config: dict[str, Any]) -> dict[str, Any]:
    job: dict[str, Any] = config["config"]["scheduler-dedup:jobs"][0]
    return job


def _set(key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def change(config: dict[str, Any]) -> None:
        config["config"][key] = value

    return change


def _groc_config(config: dict[str, Any]) -> None:
    _job0(config)["schedule"] = "every 5 minutes"


def _proxied_job(config: dict[str, Any]) -> dict[str, Any]:
    jobs = config["config"]["scheduler-dedup:jobs"]
    job: dict[str, Any] = next(j for j in jobs if "proxy" in j)
    return job


def _proxy_with_job_logic(config: dict[str, Any]) -> None:
    _proxied_job(config)["jobLogic"] = "example_jobs.example:run"


def _proxy_target_elsewhere(config: dict[str, Any]) -> None:
    _proxied_job(config)["proxy"]["resource"] = (
        "projects/acme-other/locations/europe-west1/workflows/daily-report"
    )


BROKEN: list[Broken] = [
    # Programs (resources declared differently from the kit's program).
    Broken(
        # No job sends a token, so nothing shows the function's one allowed caller is theirs.
        "job without OIDC",
        "scheduler-job-oidc-auth",
        lambda d: mutate(d, JOB, "httpTarget.oidcToken", DELETE),
        also=frozenset({"dedup-allowed-callers"}),
    ),
    Broken(
        "function serves every caller (program)",
        "dedup-allowed-callers",
        lambda d: mutate(d, FUNCTION, f"{ENV}.DEDUP_ALLOWED_CALLERS", DELETE),
        # Dev's watchdog delivers runs (catchUp): its invoker grant on the function is
        # then for a caller the function does not name.
        also=frozenset({"dedup-function-invokers"}),
    ),
    Broken(
        "function also serves an account no job uses (program)",
        "dedup-allowed-callers",
        lambda d: mutate(
            d,
            FUNCTION,
            f"{ENV}.DEDUP_ALLOWED_CALLERS",
            "sched-dedup-dev-invoker@acme-scheduler-dev.iam.gserviceaccount.com,"
            "ci-deployer@acme-scheduler-dev.iam.gserviceaccount.com",
        ),
        # The list no longer names dev's watchdog, which delivers runs (catchUp): its
        # invoker grant on the function is then for a caller the function does not name.
        also=frozenset({"dedup-function-invokers"}),
    ),
    Broken(
        "job with an OAuth token",
        "scheduler-job-oidc-auth",
        lambda d: mutate(
            mutate(d, JOB, "httpTarget.oidcToken", DELETE),
            JOB,
            "httpTarget.oauthToken",
            {"serviceAccountEmail": "x@y.iam.gserviceaccount.com"},
        ),
        # Its jobs' tokens no longer carry the one account the function serves.
        also=frozenset({"dedup-allowed-callers"}),
    ),
    Broken(
        "job OIDC as the compute default account",
        "scheduler-job-oidc-auth",
        lambda d: mutate(d, JOB, "httpTarget.oidcToken.serviceAccountEmail", COMPUTE_SA),
        also=frozenset({"dedup-allowed-callers"}),
    ),
    Broken(
        "job without audience",
        "scheduler-job-oidc-audience",
        lambda d: mutate(d, JOB, "httpTarget.oidcToken.audience", DELETE),
    ),
    Broken(
        "groc schedule in the program",
        "scheduler-job-unix-cron-schedule",
        lambda d: mutate(d, JOB, "schedule", "every 5 minutes"),
    ),
    Broken(
        "attempt deadline of an hour",
        "scheduler-job-attempt-deadline",
        lambda d: mutate(d, JOB, "attemptDeadline", "3600s"),
    ),
    Broken(
        "public invoker on the service",
        "iam-no-public-members",
        lambda d: mutate(d, INVOKER, "member", "allUsers"),
    ),
    Broken(
        "public function invoker (program)",
        "iam-no-public-members",
        program=_public_function_invoker,
    ),
    Broken(
        "public binding with a not-yet-known list",
        "iam-no-public-members",
        program=_public_service_binding,
    ),
    Broken(
        "project-level invoker role (program)",
        "iam-no-project-level-invoker",
        program=_project_member("roles/run.invoker"),
    ),
    Broken(
        "primitive role (program)",
        "iam-no-primitive-roles",
        program=_project_member("roles/editor"),
        # An account the stack declares; editor on the project creates tasks on the
        # watchdog's deliveries queue.
        also=frozenset({"dedup-accounts-no-basic-roles", "dedup-deliveries-queue-task-creators"}),
    ),
    Broken(
        "project-level serviceAccountUser (program)",
        "iam-no-project-level-service-account-impersonation",
        program=_project_member("roles/iam.serviceAccountUser"),
    ),
    Broken("no TTL field", "dedup-ttl-policy", lambda d: drop(d, FIELD)),
    Broken(
        "schedule_time exemption kept, TTL field dropped",
        "dedup-ttl-policy",
        lambda d: [x for x in d if x.name != "dedup-ttl-field"],
    ),
    Broken(
        "TTL field without index exemption",
        "dedup-ttl-policy",
        lambda d: mutate(d, FIELD, "indexConfig", DELETE),
    ),
    Broken(
        "TTL on another collection",
        "dedup-ttl-policy",
        lambda d: mutate(d, FIELD, "collection", "runs"),
    ),
    Broken(
        "lease shorter than 3 store timeouts (program)",
        "dedup-lease-survives-missed-renewals",
        lambda d: mutate(d, FUNCTION, f"{ENV}.DEDUP_LEASE_SECONDS", "20"),
    ),
    Broken(
        "store timeout outgrows the lease (program)",
        "dedup-lease-survives-missed-renewals",
        lambda d: mutate(d, FUNCTION, f"{ENV}.DEDUP_STORE_TIMEOUT_SECONDS", "30"),
    ),
    Broken(
        "retention shorter than the retry window (program)",
        "dedup-retention-exceeds-retry-window",
        lambda d: mutate(d, FUNCTION, f"{ENV}.DEDUP_RETENTION_SECONDS", "3600"),
    ),
    Broken(
        "default runtime service account",
        "function-dedicated-runtime-service-account",
        lambda d: mutate(d, FUNCTION, "serviceConfig.serviceAccountEmail", COMPUTE_SA),
        # The watchdog then shares that account with the dedup function; and the function
        # names dev's watchdog account (it delivers runs: catchUp), which nothing runs as;
        # and the runtime account's datastore role is for an account the function no
        # longer runs as (a writer of the dedup database that need not write it); and the
        # dedup function runs as the watchdog's account, whose tokens the functions accept;
        # and the watchdog's account reads its task key, while no function runs as it any more.
        also=frozenset({"dedup-watchdog-own-service-account", "dedup-allowed-callers",
                        "dedup-database-writers", "dedup-kit-identities-kit-only",
                        "dedup-secret-readers-declared"}),
    ),
    Broken(
        "no runtime service account",
        "function-dedicated-runtime-service-account",
        lambda d: mutate(d, FUNCTION, "serviceConfig.serviceAccountEmail", DELETE),
        # The function names dev's watchdog account (it delivers runs: catchUp), which
        # nothing runs as any more, and which reads the watchdog's task key.
        also=frozenset({"dedup-allowed-callers", "dedup-secret-readers-declared"}),
    ),
    Broken(
        "App Engine default build account",
        "function-dedicated-build-service-account",
        lambda d: mutate(
            d, FUNCTION, "buildConfig.serviceAccount", f"projects/p/serviceAccounts/{APPSPOT_SA}"
        ),
    ),
    Broken(
        "ALLOW_ALL ingress",
        "function-ingress-not-public",
        lambda d: mutate(d, FUNCTION, "serviceConfig.ingressSettings", "ALLOW_ALL"),
    ),
    Broken(
        "bucket without public access prevention",
        "storage-bucket-public-access-prevention",
        lambda d: mutate(d, BUCKET, "publicAccessPrevention", "inherited"),
    ),
    Broken(
        "bucket with object ACLs",
        "storage-bucket-uniform-access",
        lambda d: mutate(d, BUCKET, "uniformBucketLevelAccess", False),
    ),
    Broken(
        "job without dedup headers",
        "dedup-job-headers",
        lambda d: mutate(d, JOB, "httpTarget.headers", {"Content-Type": "application/json"}),
    ),
    Broken(
        "job sends another location",
        "dedup-job-headers",
        lambda d: mutate(d, JOB, "httpTarget.headers.X-Dedup-Location", "us-central1"),
    ),
    # The idempotent proxy (prod): its account, ingress, IAM and the jobs that call it.
    Broken(
        "proxy account with roles/editor (program)",
        "iam-no-primitive-roles",
        program=_proxy_member("roles/editor"),
        also=frozenset({"dedup-proxy-least-privilege", "dedup-accounts-no-basic-roles"}),
        stack=PROD,
    ),
    Broken(
        "proxy account with run.invoker on the project (program)",
        "iam-no-project-level-invoker",
        program=_proxy_member("roles/run.invoker"),
        also=frozenset({"dedup-proxy-least-privilege"}),
        stack=PROD,
    ),
    Broken(
        "proxy account may run every Cloud Run job (program)",
        "dedup-proxy-least-privilege",
        program=_proxy_member("roles/run.jobsExecutorWithOverrides"),
        stack=PROD,
    ),
    Broken(
        "proxy account may run a job it does not start (program)",
        "dedup-proxy-least-privilege",
        program=_proxy_executor_on_other_job,
        stack=PROD,
    ),
    Broken(
        "proxy account with a role no target needs (program)",
        "dedup-proxy-least-privilege",
        program=_proxy_member("roles/secretmanager.secretAccessor"),
        # it reads every secret of the project, runtimes' among them
        also=frozenset({"dedup-secret-readers-declared"}),
        stack=PROD,
    ),
    Broken(
        "proxy function with ALLOW_ALL ingress",
        "function-ingress-not-public",
        lambda d: mutate_named(d, "proxy-function", "serviceConfig.ingressSettings", "ALLOW_ALL"),
        stack=PROD,
    ),
    Broken(
        "proxy runs as the dedup function's runtime account",
        "dedup-proxy-own-service-account",
        lambda d: mutate_named(
            d, "proxy-function", "serviceConfig.serviceAccountEmail", PROD_RUNTIME_SA
        ),
        # The proxy's account then holds roles/datastore.user on the dedup database.
        also=frozenset({"dedup-proxy-least-privilege"}),
        stack=PROD,
    ),
    # The proxy's records in a database of its own (only the proxy's account writes it).
    Broken(
        "proxy keeps its records in the dedup database",
        "dedup-proxy-own-database",
        lambda d: mutate_named(d, "proxy-function", f"{ENV}.DEDUP_DATABASE", "scheduler-dedup"),
        # Its roles/datastore.user then names another database than its own (the declared
        # proxy database, which no function names any more: nobody must write it), and the
        # watchdog's read-only role a database that is no proxy's.
        also=frozenset({"dedup-proxy-least-privilege", "dedup-watchdog-least-privilege",
                        "dedup-database-writers"}),
        stack=PROD,
    ),
    Broken(
        "dedup function's account writes the proxy's database",
        "dedup-database-writers",
        lambda d: mutate_named(
            d, "dedup-runtime-datastore-user", "condition.expression",
            f'resource.name == "projects/{PROD_PROJECT}/databases/scheduler-dedup-proxy"',
        ),
        # and job code reads or writes no records but its own function's
        also=frozenset({"dedup-runtime-own-database-only"}),
        stack=PROD,
    ),
    Broken(
        "watchdog writes the proxy's database",
        "dedup-database-writers",
        lambda d: mutate_named(d, "watchdog-reads-proxy-database", "role", "roles/datastore.user"),
        # and it writes no database but its own (its cursors, the re-run queue)
        also=frozenset({"dedup-watchdog-least-privilege"}),
        stack=PROD,
    ),
    Broken(
        "proxy on the default compute account",
        "function-dedicated-runtime-service-account",
        lambda d: mutate_named(
            d, "proxy-function", "serviceConfig.serviceAccountEmail", COMPUTE_SA
        ),
        stack=PROD,
    ),
    Broken(
        "public invoker on the proxy's service",
        "iam-no-public-members",
        lambda d: mutate_named(d, "proxy-invoker", "member", "allUsers"),
        stack=PROD,
    ),
    Broken(
        "proxy lease shorter than 3 store timeouts",
        "dedup-lease-survives-missed-renewals",
        lambda d: mutate_named(d, "proxy-function", f"{ENV}.DEDUP_LEASE_SECONDS", "20"),
        stack=PROD,
    ),
    Broken(
        "proxy records in a collection without TTL",
        "dedup-ttl-policy",
        lambda d: mutate_named(d, "proxy-function", f"{ENV}.DEDUP_COLLECTION", "proxy_runs"),
        stack=PROD,
    ),
    Broken(
        "proxied job without dedup headers",
        "dedup-job-headers",
        lambda d: mutate_named(
            d, "job-daily-report-job", "httpTarget.headers", {"Content-Type": "application/json"}
        ),
        stack=PROD,
    ),
    Broken(
        "proxy serves every caller (program)",
        "dedup-allowed-callers",
        lambda d: mutate_named(d, "proxy-function", f"{ENV}.DEDUP_ALLOWED_CALLERS", ""),
        stack=PROD,
    ),
    Broken(
        "proxied job without OIDC",
        "scheduler-job-oidc-auth",
        lambda d: mutate_named(d, "job-daily-report-job", "httpTarget.oidcToken", DELETE),
        stack=PROD,
    ),
    Broken("proxied job with jobLogic (config)", None, config=_proxy_with_job_logic, stack=PROD),
    Broken(
        "proxy target in another project (config)",
        None,
        config=_proxy_target_elsewhere,
        stack=PROD,
    ),
    # Stack configurations that config validation rejects before declaring anything.
    Broken("groc schedule in the stack config", None, config=_groc_config),
    Broken(
        "lease shorter than 3 store timeouts (config)",
        None,
        config=_set("scheduler-dedup:leaseSeconds", 20),
    ),
    Broken(
        "store timeout outgrows the lease (config)",
        None,
        config=_set("scheduler-dedup:storeTimeoutSeconds", 30),
        stack=PROD,
    ),
    Broken(
        "retention shorter than the retry window (config)",
        None,
        config=_set("scheduler-dedup:retentionSeconds", 400),
    ),
]


def test_the_table_is_large_enough() -> None:
    assert len(BROKEN) >= 10
    assert len({b.name for b in BROKEN}) == len(BROKEN)
    assert len([b for b in BROKEN if b.stack == PROD]) >= 2, "broken proxy stacks"


@pytest.mark.parametrize("broken", BROKEN, ids=lambda b: b.name)
def test_broken_stack_is_caught(
    broken: Broken,
    dev_declared: list[DeclaredResource],
    prod_declared: list[DeclaredResource],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    stack_file = tmp_path / "Pulumi.broken.yaml"
    document = yaml.safe_load(broken.stack.read_text(encoding="utf-8"))
    if broken.config is not None:
        broken.config(document)
    stack_file.write_text(yaml.safe_dump(document), encoding="utf-8")
    declared = prod_declared if broken.stack == PROD else dev_declared
    if broken.mutation is not None:
        mutation = broken.mutation
        monkeypatch.setattr(offline_check, "declare", lambda _path: (mutation(list(declared)), {}))
    elif broken.program is not None:
        monkeypatch.setattr(offline_check, "declare", extra_resource_program(broken.program))

    code, output = run_main("--stack-file", str(stack_file))

    assert code != 0, output
    if broken.policy is None:
        assert code == offline_check.EXIT_ERROR
        assert "invalid stack config" in output
        return
    assert code == offline_check.EXIT_VIOLATIONS
    report = offline_check.check_stack_file(stack_file)
    fired = {v.policy for v in mandatory(report.violations)}
    assert fired == {broken.policy, *broken.also}, output
    assert f"[mandatory] {broken.policy}: " in output


# --- enforcement levels and errors --------------------------------------------------------


def test_advisory_violation_is_printed_but_does_not_fail(
    dev_declared: list[DeclaredResource], monkeypatch: pytest.MonkeyPatch
) -> None:
    unconditioned = [
        dataclasses.replace(
            d,
            props=patch(d.props, "condition", DELETE),
            outputs=patch(d.outputs, "condition", DELETE),
        )
        if d.name.endswith("runtime-datastore-user")
        else d
        for d in dev_declared
    ]
    # The kit's dev stack has advisory violations only (DST changes, a job not retried).
    code, output = run_main("--stack-file", str(DEV))
    assert code == 0, output
    assert "[advisory] " in output and "[mandatory]" not in output
    monkeypatch.setattr(offline_check, "declare", lambda _path: (unconditioned, {}))
    code, output = run_main("--stack-file", str(DEV))
    assert "[advisory] iam-datastore-user-single-database: " in output
    # Unconditioned on the project, the runtime account (job code) writes the watchdog's
    # own database too (its cursors, the re-run queue): that is mandatory (issue 25), and
    # it reaches records beyond its own function's (issue 35).
    mandatory = [line for line in output.splitlines() if "[mandatory]" in line]
    assert code == offline_check.EXIT_VIOLATIONS and mandatory == [
        "  [mandatory] dedup-database-writers: dedup-runtime-datastore-user "
        "(gcp:projects/iAMMember:IAMMember)",
        "  [mandatory] dedup-runtime-own-database-only: dedup-runtime-datastore-user "
        "(gcp:projects/iAMMember:IAMMember)"], output


def test_proxy_database_role_without_condition_writes_the_dedup_database(
    prod_declared: list[DeclaredResource], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Unconditioned on the project, the proxy's roles/datastore.user also writes the dedup
    database, which only the dedup function and the watchdog must write (issue 25)."""
    broken = mutate_named(prod_declared, "proxy-datastore-user", "condition", DELETE)
    monkeypatch.setattr(offline_check, "declare", lambda _path: (broken, {}))
    code, output = run_main("--stack-file", str(PROD))
    assert code == offline_check.EXIT_VIOLATIONS, output
    assert "[advisory] iam-datastore-user-single-database: proxy-datastore-user " in output
    assert "[mandatory] dedup-database-writers: proxy-datastore-user " in output
    assert "'projects/acme-scheduler-prod/databases/scheduler-dedup' (granted on its project" in (
        output.replace("\n", " ").replace("      ", ""))


def test_retries_shorter_than_the_lease_are_advisory(
    prod_declared: list[DeclaredResource], monkeypatch: pytest.MonkeyPatch
) -> None:
    # invoice-sync with one retry (30 s after the failed attempt) against prod's 60 s lease.
    broken = mutate_named(prod_declared, "job-invoice-sync-job", "retryConfig.retryCount", 1)
    monkeypatch.setattr(offline_check, "declare", lambda _path: (broken, {}))
    code, output = run_main("--stack-file", str(PROD))
    assert code == 0, output
    assert "[advisory] dedup-retries-outlast-lease: job-invoice-sync-job " in output
    assert "job 'scheduler-dedup-invoice-sync' stops retrying 30s after its first attempt" in output
    assert "set retryConfig.maxRetryDuration >= 60s" in output
    # The second retry would come 90 s after a crash at the 600 s deadline.
    assert "690s makes sure a retry comes after it" in output


def test_example_policy_config_downgrades_and_disables(
    dev_declared: list[DeclaredResource], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A bucket that only inherits public access prevention, and an unconditioned grant.
    broken = mutate(dev_declared, BUCKET, "publicAccessPrevention", "inherited")
    broken = [
        dataclasses.replace(d, props=patch(d.props, "condition", DELETE))
        if d.name.endswith("runtime-datastore-user")
        else d
        for d in broken
    ]
    monkeypatch.setattr(offline_check, "declare", lambda _path: (broken, {}))
    code, output = run_main("--stack-file", str(DEV))
    assert code == 1
    config = ROOT / "policies" / "policy-config.example.json"
    code, output = run_main("--stack-file", str(DEV), "--policy-config", str(config))
    assert code == 0, output
    assert "[advisory] storage-bucket-public-access-prevention: " in output
    assert "iam-datastore-user-single-database" not in output


def test_each_stack_gets_its_own_policy_config_as_cis_pulumi_up_does(
    dev_declared: list[DeclaredResource], monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
) -> None:
    """policies/policy-config.<stack>.json, when it exists, is what CI passes to that stack's
    `pulumi up --policy-pack-config`: make policy-check (and make test) apply it too."""
    broken = mutate(dev_declared, BUCKET, "publicAccessPrevention", "inherited")
    monkeypatch.setattr(offline_check, "declare", lambda _path: (broken, {}))
    monkeypatch.setattr(stack_files.stack_policy_config, "__defaults__", (tmp_path,))
    code, output = run_main("--stack-file", str(DEV))
    assert code == 1 and "policy config" not in output, output

    own = tmp_path / "policy-config.dev.json"
    own.write_text((ROOT / "policies" / "policy-config.example.json").read_text())
    (tmp_path / "policy-config.prod.json").write_text('{"all": "disabled"}')  # another stack's
    code, output = run_main("--stack-file", str(DEV))
    assert code == 0, output
    assert f"Pulumi.dev.yaml, policy config {own}): " in output
    assert "[advisory] storage-bucket-public-access-prevention: " in output

    # --policy-config names one file for every stack, instead of each stack's own.
    everything = tmp_path / "strict.json"
    everything.write_text('{"all": "mandatory"}')
    code, output = run_main("--stack-file", str(DEV), "--policy-config", str(everything))
    assert code == 1 and f"policy config {everything}" in output, output

    own.write_text('{"no-such-policy": "advisory"}')
    code, output = run_main("--stack-file", str(DEV))
    assert code == offline_check.EXIT_ERROR
    assert "Pulumi.dev.yaml): ERROR policy config: " in output
    assert "unknown policy 'no-such-policy'" in output


def test_unknowns_from_a_preview_do_not_fail_the_check(
    dev_declared: list[DeclaredResource],
) -> None:
    preview = mutate(dev_declared, JOB, "httpTarget.uri", U)
    preview = mutate(
        preview, JOB, "httpTarget.oidcToken", {"serviceAccountEmail": U, "audience": U}
    )
    preview = mutate(preview, FUNCTION, "serviceConfig.serviceAccountEmail", U)
    preview = mutate(preview, FUNCTION, f"{ENV}.DEDUP_ALLOWED_CALLERS", U)
    preview = mutate(preview, FIELD, "database", U)
    found = offline_check.check_declared(preview)
    assert found == offline_check.check_declared(dev_declared)
    assert findings(found) == [*DEV_DST_ADVISORIES, HEARTBEAT_ADVISORY, DEV_ALERTING_ADVISORY]


def test_missing_stack_file_is_an_error(tmp_path: Path) -> None:
    code, output = run_main("--stack-file", str(tmp_path / "Pulumi.nope.yaml"))
    assert code == offline_check.EXIT_ERROR
    assert "ERROR" in output


def test_bad_policy_config_is_an_error(tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    config.write_text('{"no-such-policy": "advisory"}', encoding="utf-8")
    code, output = run_main("--stack-file", str(DEV), "--policy-config", str(config))
    assert code == offline_check.EXIT_ERROR
    assert "unknown policy 'no-such-policy'" in output


def test_levels_are_only_the_known_ones() -> None:
    assert {e.value for e in Enforcement} == {"mandatory", "advisory", "disabled"}


# --- runtimes, as the program declares them (the retail example) -------------------------

RETAIL_PROJECT = "acme-retail-prod"
RETAIL_DB = 'resource.name == "projects/acme-retail-prod/databases/{}"'
EXPORT_MEMBER = f"serviceAccount:retail-export@{RETAIL_PROJECT}.iam.gserviceaccount.com"


@pytest.fixture(scope="module")
def retail_declared() -> list[DeclaredResource]:
    """retail has two runtimes: sync (a secret, VPC egress) and export (a bucket grant)."""
    return list(run_offline(load_stack_config(RETAIL), stack="retail").resources)


@pytest.mark.parametrize(
    ("mutation", "fired"),
    [
        pytest.param(
            lambda d: mutate_named(d, "runtime-sync-datastore-user", "condition.expression",
                                   RETAIL_DB.format("retail")),
            {"dedup-runtime-own-database-only", "dedup-database-writers"},
            id="sync-writes-the-dedup-database"),
        pytest.param(
            lambda d: mutate_named(d, "runtime-sync-datastore-user", "condition.expression",
                                   RETAIL_DB.format("retail-export")),
            {"dedup-runtime-own-database-only", "dedup-database-writers"},
            id="sync-writes-exports-database"),
        pytest.param(
            lambda d: mutate_named(d, "runtime-sync-reads-inventory-api-token", "member",
                                   EXPORT_MEMBER),
            {"dedup-secret-readers-declared"},
            id="export-reads-the-secret-sync-declared"),
        pytest.param(
            lambda d: mutate_named(d, "runtime-export-grant-0", "bucket",
                                   f"{RETAIL_PROJECT}-retail-source"),
            {"dedup-runtime-no-kit-resources"},
            id="export-writes-the-source-bucket"),
        pytest.param(
            lambda d: mutate_named(d, "runtime-export-grant-0", "role", "roles/editor"),
            {"dedup-accounts-no-basic-roles", "iam-no-primitive-roles"},
            id="export-holds-a-basic-role"),
        pytest.param(
            lambda d: mutate_named(mutate_named(
                d, "runtime-sync-datastore-user", "role", "roles/someservice.newRole"),
                "runtime-sync-datastore-user", "condition", DELETE),
            # Unknown on the project: it may create tasks on the deliveries queue too.
            {"dedup-runtime-no-kit-resources", "dedup-deliveries-queue-task-creators"},
            id="sync-holds-a-role-the-pack-does-not-know-on-the-project"),
        pytest.param(
            lambda d: mutate_named(mutate_named(
                d, "runtime-sync-datastore-user", "role", "roles/cloudscheduler.jobRunner"),
                "runtime-sync-datastore-user", "condition", DELETE),
            {"dedup-runtime-no-kit-resources"},
            id="sync-runs-the-kits-scheduler-jobs"),
        pytest.param(
            lambda d: mutate_named(mutate_named(
                d, "runtime-sync-reads-inventory-api-token", "member", EXPORT_MEMBER),
                "runtime-sync-reads-inventory-api-token", "role",
                "roles/secretmanager.secretVersionAdder"),
            {"dedup-secret-readers-declared"},
            id="export-adds-versions-to-the-secret-sync-declared"),
    ],
)
def test_a_runtime_reaching_beyond_its_own_is_caught(
    mutation: Mutation, fired: set[str], retail_declared: list[DeclaredResource],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The runtime policies read the program's own resources (labels, accounts, databases,
    secrets, grants), not only the fixtures'."""
    mutated = mutation(list(retail_declared))
    monkeypatch.setattr(offline_check, "declare", lambda _path: (mutated, {}))
    report = offline_check.check_stack_file(RETAIL)
    assert {v.policy for v in mandatory(report.violations)} == fired, report
