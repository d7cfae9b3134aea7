"""A team service's config beyond its own fields: its Cloud Run URL must be one of that
service's run.app URLs (`run_app_url_names_service`), in the stack's region."""

from __future__ import annotations

import pytest

from infra.config.services import run_app_url_names_service, run_app_url_problem
from tests.infra.team_service_config import EXPORTS_URL, problems, service

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
