"""A team service's config beyond its own fields: its Cloud Run URL must be one of that
service's run.app URLs (`run_app_url_names_service`), in the stack's region; its account
is its own (none of the kit's, no other service's, not a Google default account); and no
two services share an account, a Cloud Run service or a URL."""

from __future__ import annotations

from collections.abc import Callable

import pytest

import policies.gcp
from infra import shared_facts
from infra.config import load_config
from infra.config.services import run_app_url_names_service
from infra.shared_facts import run_app_url_problem
from infra.team_service import COMPONENT_TYPE
from operator_tools.own_services import checklist
from tests.infra.team_service_config import (
    EXPORTS_ACCOUNT,
    EXPORTS_URL,
    PROJECT,
    SERVICES,
    Config,
    job,
    problems,
    retail_config,
    service,
)

DETERMINISTIC = "https://exports-api-123456789012.us-west1.run.app"


@pytest.mark.parametrize("url", [
    EXPORTS_URL, f"{EXPORTS_URL}/", DETERMINISTIC, f"{DETERMINISTIC}/",
])
def test_the_two_run_app_forms_of_the_service_name_it(url: str) -> None:
    assert run_app_url_names_service(url, "exports-api")
    assert run_app_url_names_service(url, "exports-api", "us-west1")


@pytest.mark.parametrize("url", [
    "http://exports-api-4k2xq7wbqa-uw.a.run.app",             # not https
    "https://Exports-API-4k2xq7wbqa-uw.a.run.app",            # upper case
    "https://exports-api-4k2xq7wbqa-uw.a.run.app:443",        # a port
    "https://exports-api-4k2xq7wbqa-uw.a.run.app/tasks",      # a path
    "https://exports-api-4k2xq7wbqa-uw.a.run.app//",
    "https://exports-api-4k2xq7wbqa-uw.a.run.app?x=1",
    "https://exports-api-4k2xq7wbqa-uw.a.run.app#x",
    "https://user@exports-api-4k2xq7wbqa-uw.a.run.app",       # user info
    "https://@exports-api-4k2xq7wbqa-uw.a.run.app",
    "https://exports-api-4k2xq7wbqa-uw.a.run.app.",           # trailing dot
    "https://billing-api-4k2xq7wbqa-uw.a.run.app",            # another service
    "https://exports-4k2xq7wbqa-uw.a.run.app",                # a prefix of the name
    "https://exports-api-v2-4k2xq7wbqa-uw.a.run.app",         # a longer name
    "https://exports-api-4k2xq7wbqa-uw.a.run.app.evil.example",
    "https://a.run.app",
    "https://exports-api.a.run.app",
    "https://exports-api-4k2xq7wbqa.a.run.app",               # no region code
    "https://exports-api-4k2xq7wbqa-uw.run.app",
    "https://canary---exports-api-123456789012.us-west1.run.app",  # a traffic tag's URL
    "https://exports-api-acme.us-west1.run.app",              # a project ID, not its number
    "https://exports-api-123456789012.us-west1.a.run.app",
    "https://exports-api-123456789012.run.app",
    "https://exports-api-123456789012.us-west1.evil.example",
    "https://exports-api-" + "1" * 60 + ".us-west1.run.app",  # a label over 63 characters
])
def test_anything_else_names_no_service(url: str) -> None:
    assert not run_app_url_names_service(url, "exports-api")


def test_the_deterministic_forms_region_must_be_the_given_one() -> None:
    assert not run_app_url_names_service(DETERMINISTIC, "exports-api", "europe-west1")
    assert "names region 'us-west1', not the service's region 'europe-west1'" in str(
        run_app_url_problem(DETERMINISTIC, "exports-api", "europe-west1"))
    # The hash form's region code is not documented against region names: not checked.
    assert run_app_url_names_service(EXPORTS_URL, "exports-api", "europe-west1")


@pytest.mark.parametrize(("url", "says"), [
    ("https://billing-api-4k2xq7wbqa-uw.a.run.app",
     "does not start with https://exports-api-"),
    ("https://Exports-API-4k2xq7wbqa-uw.a.run.app", "no upper case"),
    ("https://exports-api-4k2xq7wbqa-uw.a.run.app:8443", "port"),
    ("https://canary---exports-api-123456789012.us-west1.run.app",
     "does not start with https://exports-api-"),
    ("https://exports-api-123456789012.europe-west1.run.app",
     "names region 'europe-west1', not the service's region 'us-west1'"),
])
def test_the_config_refuses_a_url_not_of_its_service_and_names_the_fix(
    url: str, says: str
) -> None:
    found = problems(lambda raw: service(raw, "exports-api").update(url=url))
    assert list(found) == ["services[0].url"], found
    assert says in found["services[0].url"]
    fix = found["services[0].url"].split("Fix: ")[1]
    assert "gcloud run services describe exports-api" in fix
    assert ("URL in us-west1" if "region" in says else "starts with https://exports-api-") in fix


# --------------------------------------------------------------------------- accounts


@pytest.mark.parametrize(("account_id", "what"), [
    ("retail-invoker", "the jobs' invoker account"),
    ("retail-watchdog", "the watchdog's account"),
    ("retail-runtime", "the dedup function's runtime account"),
    ("retail-proxy", "the proxy's account"),
    ("retail-build", "the functions' build account"),
    ("retail-sync", "the account of runtime 'sync'"),
    ("retail-export", "the account of runtime 'export'"),
])
def test_no_service_runs_as_one_of_the_kits_accounts(account_id: str, what: str) -> None:
    email = f"{account_id}@{PROJECT}.iam.gserviceaccount.com"
    found = problems(lambda raw: service(raw, "exports-api").update(serviceAccount=email))
    assert list(found) == ["services[0].serviceAccount"], found
    assert f"{email!r} is {what}, one of the kit's own accounts" in found[
        "services[0].serviceAccount"]
    assert "Fix: run the service as an account of its own" in found["services[0].serviceAccount"]


@pytest.mark.parametrize(("account", "which"), [
    ("123456789012-compute@developer.gserviceaccount.com", "Compute Engine"),
    (f"{PROJECT}@appspot.gserviceaccount.com", "App Engine"),
])
def test_google_default_accounts_are_refused_with_the_fix(account: str, which: str) -> None:
    def run_as_default(name: str) -> Callable[[Config], None]:
        return lambda raw: service(raw, name).update(serviceAccount=account)

    for name in ("exports-api", "storefront"):
        found = problems(run_as_default(name))
        [key] = found
        assert key.endswith(".serviceAccount"), found
        assert f"the project's {which} default account" in found[key]
        assert "datastore.user on every database" in found[key]
        assert "Fix: run the service as a dedicated account" in found[key]


def test_the_config_and_the_pack_share_one_declaration_of_these_facts() -> None:
    assert policies.gcp.is_default_runtime_account is shared_facts.is_default_runtime_account
    assert policies.gcp.TEAM_SERVICE_COMPONENT == COMPONENT_TYPE == (
        shared_facts.TEAM_SERVICE_COMPONENT_TYPE)
    for member in ("serviceAccount:123-compute@developer.gserviceaccount.com",
                   f"projects/{PROJECT}/serviceAccounts/{PROJECT}@appspot.gserviceaccount.com",
                   "my-project-compute@developer.gserviceaccount.com"):
        assert policies.gcp.is_default_runtime_account(member)
        assert policies.gcp.is_default_build_account(member)
    assert policies.gcp.is_default_build_account("123@cloudbuild.gserviceaccount.com")
    assert not policies.gcp.is_default_runtime_account("123@cloudbuild.gserviceaccount.com")
    assert not policies.gcp.is_default_runtime_account(EXPORTS_ACCOUNT)


def test_the_plan_checklist_asks_for_a_dedicated_account() -> None:
    lines = checklist(load_config(retail_config()))
    runs_as = [line for line in lines if "[ ] it runs as" in line]
    assert len(runs_as) == 2, lines
    assert all("not the Compute Engine or App Engine default one" in line for line in runs_as)


# --------------------------------------------------------------------------- unique


def _second_cloud_run_service(raw: Config, **change: str) -> None:
    raw[SERVICES].append({"name": "exports-b", "cloudRun": "exports-b",
                          "url": "https://exports-b-4k2xq7wbqa-uw.a.run.app",
                          "serviceAccount": f"exports-b@{PROJECT}.iam.gserviceaccount.com",
                          **change})
    raw["scheduler-dedup:jobs"].append({**job(raw, "partner-export"), "name": "export-b",
                                        "service": "exports-b"})


@pytest.mark.parametrize(("change", "key", "says"), [
    ({"serviceAccount": EXPORTS_ACCOUNT}, "serviceAccount",
     "either could claim runs in both records databases"),
    ({"cloudRun": "exports-api", "url": EXPORTS_URL}, "cloudRun",
     "two records databases for one service"),
])
def test_two_services_share_no_account_or_cloud_run_service(
    change: dict[str, str], key: str, says: str
) -> None:
    found = problems(lambda raw: _second_cloud_run_service(raw, **change))
    assert list(found) == [f"services[2].{key}"], found  # the same URL too, said once
    text = found[f"services[2].{key}"]
    assert "of services[0] ('exports-api')" in text and "'exports-b'" in text, text
    assert says in text


def test_two_app_engine_services_share_no_url() -> None:
    def second_app(raw: Config) -> None:
        raw[SERVICES].append({**service(raw, "storefront"), "name": "worker",
                              "appEngine": {"service": "worker"},
                              "serviceAccount": f"worker@{PROJECT}.iam.gserviceaccount.com"})
        raw["scheduler-dedup:jobs"].append({**job(raw, "sitemap-rebuild"), "name": "w",
                                            "service": "worker"})
    found = problems(second_app)
    assert list(found) == ["services[2].url"], found
    assert "is also the URL of services[1] ('storefront')" in found["services[2].url"]


@pytest.mark.parametrize("url", [
    f"https://{PROJECT}.uw.r.appspot.com",
    f"https://{PROJECT}.appspot.com",                        # an app from before 2020
    f"https://default-dot-{PROJECT}.uw.r.appspot.com",
    f"https://v2-dot-worker-dot-{PROJECT}.uw.r.appspot.com/",
])
def test_an_app_engine_url_of_the_stacks_app_is_taken(url: str) -> None:
    raw = retail_config()
    service(raw, "storefront")["url"] = url
    load_config(raw)


@pytest.mark.parametrize("url", [
    "https://attacker.example.com",                          # not App Engine
    EXPORTS_URL,                                             # a Cloud Run service's
    "https://other-project.uw.r.appspot.com",                # another project's app
    f"https://x{PROJECT}.uw.r.appspot.com",
    f"https://{PROJECT}.uw.r.appspot.com.evil.example",
])
def test_an_app_engine_url_of_anything_but_the_stacks_app_is_refused(url: str) -> None:
    """The watchdog sends its queue's OIDC token and a run's headers to this URL."""
    found = problems(lambda raw: service(raw, "storefront").update(url=url))
    assert list(found) == ["services[1].url"], found
    assert f"https://{PROJECT}.REGION_ID.r.appspot.com" in found["services[1].url"]
    assert shared_facts.appspot_url_problem(url, PROJECT) is not None


@pytest.mark.parametrize("url", [
    f"http://{PROJECT}.uw.r.appspot.com", f"https://{PROJECT}.uw.r.appspot.com/tasks",
    f"https://{PROJECT}.uw.r.appspot.com:8443", f"https://user@{PROJECT}.uw.r.appspot.com",
])
def test_an_app_engine_url_is_an_https_origin(url: str) -> None:
    assert list(problems(lambda raw: service(raw, "storefront").update(url=url))) == [
        "services[1].url"]
    assert shared_facts.appspot_url_problem(url, PROJECT) is not None


@pytest.mark.parametrize(("path", "why"), [
    ("//evil.example/x", "begins with '//'"),
    ("/tasks/../admin", "has a '..' segment"),
    ("/..", "has a '..' segment"),
])
def test_a_path_naming_another_route_than_it_reads_is_refused(path: str, why: str) -> None:
    found = problems(lambda raw: job(raw, "partner-export").update(path=path))
    (key,) = found
    assert key.endswith(".path") and why in found[key], found


def test_a_path_with_dots_in_a_name_or_its_query_is_a_route() -> None:
    raw = retail_config()
    job(raw, "partner-export")["path"] = "/tasks/v1.2/export?since=../x"
    load_config(raw)
