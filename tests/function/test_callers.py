"""DEDUP_ALLOWED_CALLERS: the setting's parsing, the token decoder, and the handler's 403
(in this process: the refusal comes before any Firestore call)."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from dedup.entry.callers import (
    NO_EMAIL,
    NO_TOKEN,
    NOT_A_JWT,
    NotAJwt,
    Refusal,
    bearer_token,
    check_caller,
    jwt_claims,
)
from dedup.keys import lower_keys
from dedup.settings import Settings, SettingsError, parse_allowed_callers
from local_stack.deliveries import (
    INVOKER,
    PROJECT,
    bearer,
    forwarded_token,
    in_process_function,
    oidc_claims,
    scheduler_headers,
)
from local_stack.steered_job import read_ledger

OTHER = f"ci-deployer@{PROJECT}.iam.gserviceaccount.com"
SECOND = f"watchdog-invoker@{PROJECT}.iam.gserviceaccount.com"
BASE_ENV = {"DEDUP_PROJECT": PROJECT, "DEDUP_LOCATION": "europe-west1"}


def segment(value: Any) -> str:
    raw = value if isinstance(value, bytes) else json.dumps(value).encode()
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


HEADER = segment({"alg": "RS256", "typ": "JWT"})


# --- the setting --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("", frozenset()),
        ("   ", frozenset()),
        (INVOKER, frozenset({INVOKER})),
        (f"  {INVOKER}  ", frozenset({INVOKER})),
        (f"{INVOKER},{SECOND}", frozenset({INVOKER, SECOND})),
        (f" {INVOKER} ,\t{SECOND}\n", frozenset({INVOKER, SECOND})),
        (f"{INVOKER},{INVOKER.upper()}", frozenset({INVOKER})),  # e-mails are case-blind
        ("jobs@example.com", frozenset({"jobs@example.com"})),
    ],
)
def test_allowed_callers_are_parsed(raw: str, expected: frozenset[str]) -> None:
    assert parse_allowed_callers(raw) == expected
    env = {**BASE_ENV, "DEDUP_ALLOWED_CALLERS": raw}
    assert Settings.from_env(env).allowed_callers == expected


def test_allowed_callers_default_to_none() -> None:
    assert Settings.from_env(BASE_ENV).allowed_callers == frozenset()


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (f"{INVOKER},", "has an empty entry (#2)"),
        (f",{INVOKER}", "has an empty entry (#1)"),
        (f"{INVOKER},,{SECOND}", "has an empty entry (#2)"),
        (f"{INVOKER}, ,{SECOND}", "has an empty entry (#2)"),
        (",", "has an empty entry (#1)"),
        ("invoker", "entry #1 'invoker' is not an e-mail address"),
        (f"{INVOKER};{SECOND}", "is not an e-mail address"),
        (f"{INVOKER} {SECOND}", "is not an e-mail address"),
        (f"serviceAccount:{INVOKER}", "is not an e-mail address"),
        ("@example.com", "is not an e-mail address"),
        ("jobs@", "is not an e-mail address"),
        ("jobs@localhost", "is not an e-mail address"),
        ("jobs@@example.com", "is not an e-mail address"),
        ("*", "is not an e-mail address"),
        (f"{INVOKER},*@{PROJECT}.iam.gserviceaccount.com", "entry #2"),
    ],
)
def test_a_bad_allowed_caller_stops_the_start_up(raw: str, message: str) -> None:
    with pytest.raises(SettingsError, match="DEDUP_ALLOWED_CALLERS") as error:
        Settings.from_env({**BASE_ENV, "DEDUP_ALLOWED_CALLERS": raw})
    assert message in str(error.value)
    assert "\n" not in str(error.value)


# --- the decoder --------------------------------------------------------------------------


@pytest.mark.parametrize("signature", ["SIGNATURE_REMOVED_BY_GOOGLE", "", "c2ln", "sig!*"])
def test_claims_are_read_whatever_the_third_segment(signature: str) -> None:
    """Cloud Run verified the signature and forwards SIGNATURE_REMOVED_BY_GOOGLE instead."""
    claims = oidc_claims(INVOKER)
    assert jwt_claims(f"{HEADER}.{segment(claims)}.{signature}") == claims


@pytest.mark.parametrize("email", ["a@b.co", "ab@b.co", "abc@b.co", "abcd@b.co"])
def test_every_unpadded_length_decodes(email: str) -> None:
    assert jwt_claims(f"{HEADER}.{segment({'email': email})}.x") == {"email": email}


def test_a_forwarded_token_is_what_cloud_run_sends() -> None:
    token = forwarded_token(oidc_claims(INVOKER))
    assert token.count(".") == 2 and token.endswith(".SIGNATURE_REMOVED_BY_GOOGLE")
    assert jwt_claims(token)["email"] == INVOKER


NOT_UTF8 = segment(b'{"email": "\xff"}')
REPEATED = segment(b'{"email":"a@b.co","email":"c@d.co"}')
NOT_JWTS: dict[str, str] = {
    "opaque token": "test-token",
    "two segments": f"{HEADER}.{segment({'email': INVOKER})}",
    "four segments": f"{HEADER}.{segment({'email': INVOKER})}.x.y",
    "empty payload": f"{HEADER}..x",
    "empty header": f".{segment({'email': INVOKER})}.x",
    "padded payload": f"{HEADER}.{segment({'email': 'a@b.co'})}==.x",
    "standard base64 alphabet": f"{HEADER}.{segment({'email': INVOKER})}+/.x",
    "impossible length": f"{HEADER}.AAAAA.x",
    "payload not JSON": f"{HEADER}.{segment(b'email=' + INVOKER.encode())}.x",
    "payload not UTF-8": f"{HEADER}.{NOT_UTF8}.x",
    "payload a JSON array": f"{HEADER}.{segment([{'email': INVOKER}])}.x",
    "payload a JSON string": f"{HEADER}.{segment(INVOKER)}.x",
    "header not JSON": f"{segment(b'RS256')}.{segment({'email': INVOKER})}.x",
    "repeated claim": f"{HEADER}.{REPEATED}.x",
    "deeply nested": f"{HEADER}.{segment(b'[' * 5000)}.x",
    "too long": f"{HEADER}.{segment({'email': INVOKER, 'pad': 'x' * 20_000})}.x",
}


@pytest.mark.parametrize("name", sorted(NOT_JWTS))
def test_what_is_not_a_jwt(name: str) -> None:
    with pytest.raises(NotAJwt):
        jwt_claims(NOT_JWTS[name])


@pytest.mark.parametrize(
    ("value", "token"),
    [
        ("Bearer abc.def.ghi", "abc.def.ghi"),
        ("bearer abc.def.ghi", "abc.def.ghi"),
        ("BEARER   abc.def.ghi  ", "abc.def.ghi"),
        ("Basic dXNlcjpwYXNz", None),
        ("Bearer", None),
        ("Bearer ", None),
        ("abc.def.ghi", None),
        ("Bearer abc def", None),
    ],
)
def test_bearer_token(value: str, token: str | None) -> None:
    assert bearer_token(value) == token


# --- who is allowed -----------------------------------------------------------------------

ALLOWED = frozenset({INVOKER, SECOND})


def check(headers: dict[str, str]) -> Refusal | None:
    return check_caller(lower_keys(headers), ALLOWED)


def test_each_listed_account_is_served() -> None:
    assert check({"Authorization": bearer(INVOKER)}) is None
    assert check({"Authorization": bearer(SECOND)}) is None
    assert check({"authorization": bearer(INVOKER.upper())}) is None
    assert check({"AUTHORIZATION": bearer(INVOKER)}) is None


@pytest.mark.parametrize(
    ("headers", "caller", "reason"),
    [
        ({}, NO_TOKEN, "no OIDC token"),
        ({"Authorization": "  "}, NO_TOKEN, "no OIDC token"),
        ({"Authorization": "Basic dXNlcjpwYXNz"}, NOT_A_JWT, "is not a Bearer token"),
        ({"Authorization": "Bearer test-token"}, NOT_A_JWT, "bearer token is not a JWT"),
        ({"Authorization": bearer(None)}, NO_EMAIL, "token has no email claim"),
        (
            {"Authorization": f"Bearer {forwarded_token({'email': [INVOKER]})}"},
            NO_EMAIL,
            "no email claim",
        ),
        ({"Authorization": bearer(OTHER)}, OTHER, f"caller '{OTHER}' is not one of"),
        (
            # Cloud Run checked X-Serverless-Authorization and passed Authorization through
            # untouched: the identity is the one it checked, not the one written beside it.
            {"X-Serverless-Authorization": bearer(OTHER), "Authorization": bearer(INVOKER)},
            OTHER,
            f"caller '{OTHER}' is not one of",
        ),
        (
            {"X-Serverless-Authorization": "Bearer opaque", "Authorization": bearer(INVOKER)},
            NOT_A_JWT,
            "the X-Serverless-Authorization bearer token is not a JWT",
        ),
    ],
)
def test_who_is_refused(headers: dict[str, str], caller: str, reason: str) -> None:
    refusal = check(headers)
    assert refusal is not None
    assert refusal.caller == caller
    assert reason in refusal.reason
    assert "\n" not in refusal.reason


def test_the_checked_header_is_x_serverless_authorization_when_present() -> None:
    assert check({"X-Serverless-Authorization": bearer(SECOND), "Authorization": "Basic x"}) is None


def test_a_long_or_odd_email_is_shown_on_one_line_and_cut() -> None:
    email = "evil\n" + "x" * 400 + "@example.com"
    refusal = check({"Authorization": bearer(email)})
    assert refusal is not None
    assert "\n" not in refusal.reason
    assert len(refusal.caller) < 300


# --- the handler --------------------------------------------------------------------------


@pytest.mark.usefixtures("firestore_emulator")
def test_a_refused_caller_gets_403_before_anything_is_read_and_one_warning_line(
    collection_name: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TEST_LEDGER", str(tmp_path / "ledger.jsonl"))
    function = in_process_function(collection_name, allowed_callers=ALLOWED)
    function.rpcs.reset()
    secret_body = b'{"result": "secret-body"}'
    # Not even a job name: the caller is judged first, so this is a 403, not a 400.
    status, body = function.deliver({"Authorization": bearer(OTHER)}, secret_body)
    assert status == 403
    assert body == {
        "error": f"caller '{OTHER}' is not one of the accounts this function serves "
        "(DEDUP_ALLOWED_CALLERS)"
    }
    headers = scheduler_headers(authorization=bearer(OTHER))
    status, _ = function.deliver(headers, secret_body)
    assert status == 403
    assert function.rpcs.total == 0
    assert read_ledger(str(tmp_path / "ledger.jsonl")) == []
    assert len(function.logs) == 2
    for line in function.logs:
        assert set(line) == {"severity", "message", "outcome", "status", "caller", "latency_ms"}
        assert (line["severity"], line["outcome"], line["status"], line["caller"]) == (
            "WARNING", "forbidden", 403, OTHER,
        )
        text = json.dumps(line)
        assert "secret-body" not in text and "nightly-export" not in text
        assert "SIGNATURE_REMOVED" not in text and "eyJ" not in text

    function.logs.clear()
    status, _ = function.deliver(scheduler_headers(authorization=None))
    assert status == 403
    [line] = function.logs
    assert line["caller"] == "no token"
    assert line["message"].startswith("forbidden caller: no OIDC token")


@pytest.mark.usefixtures("firestore_emulator")
def test_without_the_setting_any_caller_is_served_as_before(
    collection_name: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TEST_LEDGER", str(tmp_path / "ledger.jsonl"))
    function = in_process_function(collection_name)
    status, body = function.deliver(scheduler_headers(authorization=None), b'{"result": 1}')
    assert (status, body["outcome"]) == (200, "completed")
    assert function.deliver({})[0] == 400  # the headers are judged, not the caller
