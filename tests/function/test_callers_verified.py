"""DEDUP_VERIFY_TOKEN_AUDIENCE: the caller check verifies the token itself (Google's
signature, issuer, expiry, audience, email_verified) before believing its `email`; tokens
signed with a local key, Google's certificates from a seam (id_tokens.GoogleCerts) or a
local HTTP server."""

from __future__ import annotations

import base64
import functools
import json
import time
from typing import Any

import pytest

from dedup.entry import id_tokens
from dedup.entry.callers import NOT_VERIFIED, Refusal, check_caller
from dedup.entry.http import CERTS_UNAVAILABLE_OUTCOME, FORBIDDEN_OUTCOME
from dedup.entry.id_tokens import (
    DEFAULT_MAX_AGE_SECONDS,
    CertsUnavailable,
    GoogleCerts,
    fetch_certs,
    max_age_seconds,
)
from dedup.keys import lower_keys
from dedup.settings import Settings, SettingsError
from local_stack.deliveries import (
    INVOKER,
    PROJECT,
    forwarded_token,
    in_process_function,
    oidc_claims,
    scheduler_headers,
)
from tests.function.signed_tokens import (
    AUDIENCE,
    CertsSource,
    FakeClock,
    SigningKey,
    id_token_claims,
    served_certs,
)

ALLOWED = frozenset({INVOKER})
OTHER = f"ci-deployer@{PROJECT}.iam.gserviceaccount.com"
BASE_ENV = {"DEDUP_PROJECT": PROJECT, "DEDUP_LOCATION": "europe-west1"}


@pytest.fixture(scope="module")
def google() -> SigningKey:
    return SigningKey.generate()


@pytest.fixture
def source(google: SigningKey) -> CertsSource:
    return CertsSource({google.key_id: google.certificate_pem})


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def certs(source: CertsSource, clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> GoogleCerts:
    """The process's certificates, replaced by ones from `source` on `clock`."""
    replaced = GoogleCerts(source, clock)
    monkeypatch.setattr(id_tokens, "GOOGLE_CERTS", replaced)
    return replaced


def check(token: str, header: str = "Authorization") -> Refusal | None:
    return check_caller(lower_keys({header: f"Bearer {token}"}), ALLOWED, AUDIENCE)


# --- the token ----------------------------------------------------------------------------


@pytest.mark.usefixtures("certs")
def test_a_google_signed_token_of_an_allowed_account_is_served(google: SigningKey) -> None:
    assert check(google.sign(id_token_claims(INVOKER))) is None
    # Google's two issuer spellings, the e-mail in any case
    assert check(google.sign(id_token_claims(INVOKER.upper(), iss="accounts.google.com"))) is None


@pytest.mark.parametrize(
    ("claims", "why"),
    [
        (id_token_claims(INVOKER, audience="https://elsewhere-xyz-ew.a.run.app"),
         "audience 'https://elsewhere-xyz-ew.a.run.app' is not"),
        (id_token_claims(INVOKER, audience=AUDIENCE + "/tasks/export"), "audience"),
        (id_token_claims(INVOKER, iat=int(time.time()) - 7200, exp=int(time.time()) - 3600),
         "expired"),
        (id_token_claims(INVOKER, iat=int(time.time()) + 600, exp=int(time.time()) + 4200),
         "not valid yet"),
        (id_token_claims(INVOKER, exp=None), "lacks its iat or exp"),
        (id_token_claims(INVOKER, iss="https://evil.example.com"), "issuer"),
        (id_token_claims(INVOKER, iss=None), "issuer"),
        (id_token_claims(INVOKER, email_verified=False), "not verified"),
        (id_token_claims(INVOKER, email_verified="true"), "not verified"),
        (id_token_claims(INVOKER, email_verified=None), "not verified"),
    ],
    ids=["wrong-audience", "audience-with-path", "expired", "issued-in-the-future", "no-exp",
         "wrong-issuer", "no-issuer", "email-unverified", "email-verified-a-string",
         "no-email-verified"],
)
@pytest.mark.usefixtures("certs")
def test_a_signed_token_that_is_not_for_this_service_is_refused(
    google: SigningKey, claims: dict[str, Any], why: str,
) -> None:
    refusal = check(google.sign(claims))
    assert refusal is not None and refusal.caller == NOT_VERIFIED
    assert why in refusal.reason and "not verified" in refusal.reason


def unsigned(alg: str) -> str:
    """A token of the invoker naming algorithm `alg`, with a signature of no key."""
    def part(value: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()
    return f"{part({'alg': alg, 'kid': 'test-key-1'})}.{part(id_token_claims(INVOKER))}.AAAA"


@pytest.mark.usefixtures("certs")
def test_a_forged_signature_is_refused(google: SigningKey) -> None:
    forger = SigningKey.generate()  # a key of the forger's, naming Google's key ID
    claims = id_token_claims(INVOKER)
    other = google.sign(id_token_claims(OTHER)).split(".")
    payload_swapped = ".".join([other[0], google.sign(claims).split(".")[1], other[2]])
    for token in [
        forger.sign(claims),  # signed by another key under Google's key ID
        forger.sign(claims, key_id="unknown-key"),  # a key ID Google does not publish
        payload_swapped,  # Google's signature of another account's token
        forwarded_token(oidc_claims(INVOKER, AUDIENCE)).replace(  # no signature at all
            "SIGNATURE_REMOVED_BY_GOOGLE", ""),
        unsigned("none"), unsigned("HS256"), unsigned("ES256"),  # algorithms not Google's
    ]:
        refusal = check(token)
        assert refusal is not None and refusal.caller == NOT_VERIFIED, token
        assert "signature" in refusal.reason


@pytest.mark.usefixtures("certs")
def test_a_token_whose_signature_cloud_run_removed_is_refused_naming_the_fix() -> None:
    # Anyone can write SIGNATURE_REMOVED_BY_GOOGLE; on a service that requires
    # authentication (where Cloud Run strips signatures) the setting is not needed.
    refusal = check(forwarded_token(oidc_claims(INVOKER, AUDIENCE)))
    assert refusal is not None and refusal.caller == NOT_VERIFIED
    assert "signature was removed" in refusal.reason
    assert "unset DEDUP_VERIFY_TOKEN_AUDIENCE" in refusal.reason


@pytest.mark.usefixtures("certs")
def test_a_verified_token_of_another_account_is_refused_as_before(google: SigningKey) -> None:
    refusal = check(google.sign(id_token_claims(OTHER)))
    assert refusal is not None and refusal.caller == OTHER
    assert "DEDUP_ALLOWED_CALLERS" in refusal.reason
    refusal = check(google.sign(id_token_claims(None)))  # verified, but no e-mail
    assert refusal is not None and "not verified" in refusal.reason


@pytest.mark.usefixtures("certs")
def test_the_token_read_is_still_x_serverless_authorization_first(google: SigningKey) -> None:
    good, forged = google.sign(id_token_claims(INVOKER)), SigningKey.generate().sign(
        id_token_claims(INVOKER))
    both = {"X-Serverless-Authorization": f"Bearer {forged}", "Authorization": f"Bearer {good}"}
    refusal = check_caller(lower_keys(both), ALLOWED, AUDIENCE)
    assert refusal is not None and "X-Serverless-Authorization" in refusal.reason
    swapped = {"X-Serverless-Authorization": f"Bearer {good}", "Authorization": f"Bearer {forged}"}
    assert check_caller(lower_keys(swapped), ALLOWED, AUDIENCE) is None


def test_without_the_setting_nothing_is_verified_or_fetched(source: CertsSource,
                                                           certs: GoogleCerts) -> None:
    forwarded = forwarded_token(oidc_claims(INVOKER))
    assert check_caller(lower_keys({"Authorization": f"Bearer {forwarded}"}), ALLOWED) is None
    assert source.fetches == 0


# --- Google's certificates ----------------------------------------------------------------


def test_the_certificates_are_fetched_once_per_max_age(
    google: SigningKey, source: CertsSource, clock: FakeClock, certs: GoogleCerts,
) -> None:
    token = google.sign(id_token_claims(INVOKER))
    for _ in range(50):
        assert check(token) is None
    assert source.fetches == 1
    clock.now += source.max_age_seconds - 1
    assert check(token) is None and source.fetches == 1
    clock.now += 1  # their max-age is over: fetched again, once
    for _ in range(10):
        assert check(token) is None
    assert source.fetches == 2


def test_a_failed_fetch_raises_and_is_not_remembered(
    google: SigningKey, source: CertsSource, clock: FakeClock, certs: GoogleCerts,
) -> None:
    token = google.sign(id_token_claims(INVOKER))
    source.failing = True
    with pytest.raises(CertsUnavailable):
        check(token)
    source.failing = False
    assert check(token) is None and source.fetches == 2
    clock.now += source.max_age_seconds  # expired, and the refetch fails: no stale keys
    source.failing = True
    with pytest.raises(CertsUnavailable):
        check(token)


@pytest.mark.parametrize(
    ("cache_control", "seconds"),
    [("public, max-age=19765, must-revalidate, no-transform", 19765.0),
     ("max-age=60", 60.0), ("MAX-AGE = 7", 7.0), ("no-cache", DEFAULT_MAX_AGE_SECONDS),
     ("s-maxage=10", DEFAULT_MAX_AGE_SECONDS), (None, DEFAULT_MAX_AGE_SECONDS)],
)
def test_max_age_is_read_from_cache_control(cache_control: str | None, seconds: float) -> None:
    assert max_age_seconds(cache_control) == seconds


def test_the_certificates_are_fetched_from_a_served_endpoint(google: SigningKey) -> None:
    with served_certs({google.key_id: google.certificate_pem}) as (url, endpoint):
        fetched = fetch_certs(url)
        assert fetched.certs == {google.key_id: google.certificate_pem}
        assert fetched.max_age_seconds == 19765.0
        clock = FakeClock()
        shared = GoogleCerts(functools.partial(fetch_certs, url), clock)
        token = google.sign(id_token_claims(INVOKER))
        for _ in range(5):
            id_tokens.verified_claims(token, {}, AUDIENCE, shared)
        assert endpoint.requests == 2  # fetch_certs above, then one for the five
        endpoint.status, endpoint.body = 500, b"{}"
        with pytest.raises(CertsUnavailable, match="500"):
            fetch_certs(url)
        endpoint.status, endpoint.body = 200, b"<html>"
        with pytest.raises(CertsUnavailable, match="JSON"):
            fetch_certs(url)
        endpoint.body = b"[]"
        with pytest.raises(CertsUnavailable, match="key id"):
            fetch_certs(url)
    with pytest.raises(CertsUnavailable, match="failed"):  # nothing listens there any more
        fetch_certs(url, timeout=2)


# --- the handler's answers ----------------------------------------------------------------


@pytest.mark.usefixtures("firestore_emulator")
def test_the_handler_answers_403_for_a_refused_token_and_500_without_certificates(
    collection_name: str, google: SigningKey, source: CertsSource, clock: FakeClock,
    certs: GoogleCerts,
) -> None:
    function = in_process_function(collection_name, allowed_callers=ALLOWED,
                                   verify_token_audience=AUDIENCE)
    forged = SigningKey.generate().sign(id_token_claims(INVOKER))
    status, body = function.deliver(scheduler_headers(authorization=f"Bearer {forged}"))
    assert status == 403 and "signature" in body["error"]
    line = function.logs[-1]
    assert (line["severity"], line["outcome"], line["caller"]) == (
        "WARNING", FORBIDDEN_OUTCOME, NOT_VERIFIED)
    assert forged not in str(line) and forged.split(".")[2] not in str(function.logs)

    clock.now += source.max_age_seconds  # the certificates expire, and the refetch fails
    source.failing = True
    good = google.sign(id_token_claims(INVOKER))
    status, body = function.deliver(scheduler_headers(authorization=f"Bearer {good}"))
    assert status == 500 and body == {"error": CERTS_UNAVAILABLE_OUTCOME}
    line = function.logs[-1]
    assert (line["severity"], line["outcome"], line["status"]) == (
        "ERROR", CERTS_UNAVAILABLE_OUTCOME, 500)
    assert "certificates are unavailable" in line["message"] and good not in str(line)
    assert function.rpcs.total == 0  # refused before the store: nothing read or written


# --- the setting --------------------------------------------------------------------------


def settings(**env: str) -> Settings:
    return Settings.from_env({**BASE_ENV, **env})


def test_the_setting_is_read_with_the_allowed_callers() -> None:
    read = settings(DEDUP_VERIFY_TOKEN_AUDIENCE=f" {AUDIENCE} ", DEDUP_ALLOWED_CALLERS=INVOKER)
    assert read.verify_token_audience == AUDIENCE
    assert settings(DEDUP_VERIFY_TOKEN_AUDIENCE="https://svc.example.com:8443",
                    DEDUP_ALLOWED_CALLERS=INVOKER).verify_token_audience == (
        "https://svc.example.com:8443")
    assert settings(DEDUP_VERIFY_TOKEN_AUDIENCE="  ").verify_token_audience is None
    assert settings().verify_token_audience is None


@pytest.mark.parametrize("raw", [
    "http://reports-abc123xyz-ew.a.run.app", AUDIENCE + "/", AUDIENCE + "/tasks/export",
    AUDIENCE + "?x=1", AUDIENCE + "#x", "https://Reports-ABC.a.run.app", "reports.a.run.app",
    "https://user@reports.a.run.app", "https://reports", "https://reports.a.run.app:port",
    "https://-bad.a.run.app", f"{AUDIENCE},{AUDIENCE}",
])
def test_a_malformed_audience_stops_the_start_up_naming_the_fix(raw: str) -> None:
    with pytest.raises(SettingsError, match="DEDUP_VERIFY_TOKEN_AUDIENCE") as error:
        settings(DEDUP_VERIFY_TOKEN_AUDIENCE=raw, DEDUP_ALLOWED_CALLERS=INVOKER)
    assert "no path" in str(error.value) and "service's own URL" in str(error.value)


def test_the_audience_without_allowed_callers_stops_the_start_up() -> None:
    with pytest.raises(SettingsError, match="DEDUP_ALLOWED_CALLERS is not") as error:
        settings(DEDUP_VERIFY_TOKEN_AUDIENCE=AUDIENCE)
    assert "no boundary" in str(error.value) and "set DEDUP_ALLOWED_CALLERS" in str(error.value)


def test_the_verifier_is_not_imported_without_the_setting() -> None:
    """The kit's own functions never set it: their cold start imports no more than before."""
    import subprocess
    import sys

    code = ("import sys; import dedup.entry.http, dedup.adapters.guard; "
            "print('dedup.entry.id_tokens' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, cwd="function")
    assert done.stdout.strip() == "False"


