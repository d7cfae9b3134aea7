"""Verifying a caller's Google ID token here, for a service nobody verified it for.

Used only when DEDUP_VERIFY_TOKEN_AUDIENCE is set (settings.py): a team's own service that
allows unauthenticated invocations (a public Cloud Run service), where anyone can send
Scheduler's headers and a JWT with any `email` claim. callers.py imports this module on
the first such request only, so the kit's own functions (which never set it: Cloud Run
verifies their tokens) load nothing more at cold start.

What a token must be to be believed (`verified_claims`):
- signed by one of Google's current keys (https://www.googleapis.com/oauth2/v1/certs, the
  endpoint google-auth's `id_token.verify_oauth2_token` uses), checked by google-auth's
  `jwt.decode(token, certs=..., audience=..., clock_skew_in_seconds=...)`
  (https://google-auth.readthedocs.io/en/latest/reference/google.auth.jwt.html), which
  also checks `iat`/`exp` and the audience;
- issued by `accounts.google.com` or `https://accounts.google.com`;
- `email_verified` true (callers.py then matches `email` with DEDUP_ALLOWED_CALLERS).

A token whose signature is `SIGNATURE_REMOVED_BY_GOOGLE` is refused before it gets here
(callers.py): Cloud Run forwards tokens that way on a service that requires
authentication, where this setting is not needed (unset it there); on a public service
anyone can write those 27 characters, and a token without its signature cannot be
verified by anyone.

Google's certificates are fetched once, then again only after their Cache-Control
max-age (about six hours), one fetch at a time per process; an unknown key ID does not
trigger a fetch (a stranger could make every request fetch). A fetch that fails raises
CertsUnavailable: the caller answers 500, before anything is claimed.
"""

from __future__ import annotations

import json
import re
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from google.auth import exceptions as auth_exceptions
from google.auth import jwt

GOOGLE_CERTS_URL: Final = "https://www.googleapis.com/oauth2/v1/certs"
GOOGLE_ISSUERS: Final = frozenset({"accounts.google.com", "https://accounts.google.com"})
# Scheduler mints the token on Google's clock; an instance's clock may differ a little.
CLOCK_SKEW_SECONDS: Final = 10
CERTS_FETCH_TIMEOUT_SECONDS: Final = 5.0
# When the answer names no max-age: refetch soon rather than keep keys Google may rotate.
DEFAULT_MAX_AGE_SECONDS: Final = 300.0
_MAX_AGE: Final = re.compile(r"(?:^|,)\s*max-age\s*=\s*(\d+)\s*(?:,|$)", re.IGNORECASE)
_MAX_SHOWN: Final = 120


class TokenRejected(ValueError):
    """The token is not a valid Google ID token for this service (its message says why)."""


class CertsUnavailable(RuntimeError):
    """Google's certificates could not be fetched: nothing can be verified now."""


@dataclass(frozen=True)
class FetchedCerts:
    certs: Mapping[str, str]
    """Key ID -> PEM certificate, as Google's endpoint serves them."""
    max_age_seconds: float
    """How long they may be kept (the answer's Cache-Control max-age)."""


def max_age_seconds(cache_control: str | None) -> float:
    """The max-age of a Cache-Control value; DEFAULT_MAX_AGE_SECONDS without one."""
    found = _MAX_AGE.search(cache_control or "")
    return float(found.group(1)) if found else DEFAULT_MAX_AGE_SECONDS


def fetch_certs(url: str = GOOGLE_CERTS_URL,
                timeout: float = CERTS_FETCH_TIMEOUT_SECONDS) -> FetchedCerts:
    """One GET of a Google-style certificates endpoint ({"key id": "PEM"})."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as answer:
            body = answer.read(1 << 20)
            cache_control = answer.headers.get("Cache-Control")
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise CertsUnavailable(f"fetching {url} failed: {exc}") from None
    try:
        certs = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise CertsUnavailable(f"{url} did not answer JSON") from None
    if not isinstance(certs, dict) or not certs or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in certs.items()
    ):
        raise CertsUnavailable(f'{url} did not answer {{"key id": "certificate"}}')
    return FetchedCerts(certs, max_age_seconds(cache_control))


class GoogleCerts:
    """Google's certificates, kept for their max-age: one fetch serves every request until
    then (and concurrent requests wait for that one fetch rather than start their own)."""

    def __init__(
        self,
        fetch: Callable[[], FetchedCerts] = fetch_certs,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._fetch = fetch
        self._clock = clock
        self._lock = threading.Lock()
        self._certs: Mapping[str, str] | None = None
        self._expires = 0.0

    def current(self) -> Mapping[str, str]:
        """The certificates, fetched if none are held or theirs expired; CertsUnavailable
        when that fetch fails (nothing stale is used: a rotated-out key stays out)."""
        with self._lock:
            if self._certs is None or self._clock() >= self._expires:
                self._certs = None
                fetched = self._fetch()
                self._certs = fetched.certs
                self._expires = self._clock() + fetched.max_age_seconds
            return self._certs


GOOGLE_CERTS = GoogleCerts()
"""The process's certificates: every verified request of the process shares one cache."""


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= _MAX_SHOWN else text[:_MAX_SHOWN] + "..."


def _why_not(exc: Exception, claims: Mapping[str, Any], audience: str) -> str:
    """What jwt.decode refused, in words of our own: its messages can quote the token."""
    text = str(exc).lower()
    if "expired" in text:
        return "the token has expired"
    if "too early" in text:
        return "the token is not valid yet (its iat is in the future)"
    if "required claim" in text:
        return "the token lacks its iat or exp claim"
    if "audience" in text:
        return (f"the token's audience {_shown(claims.get('aud'))} is not {audience!r} "
                "(DEDUP_VERIFY_TOKEN_AUDIENCE)")
    return "the token's signature is not one of Google's current keys'"


def verified_claims(
    token: str, claims: Mapping[str, Any], audience: str, certs: GoogleCerts | None = None
) -> Mapping[str, Any]:
    """The claims of `token` once Google's signature, expiry, `audience`, the issuer and
    `email_verified` all hold; TokenRejected (why) or CertsUnavailable otherwise.

    `claims` are the token's payload as callers.jwt_claims decoded it (unverified): used
    only to word a refusal.
    """
    keys = (certs or GOOGLE_CERTS).current()
    try:
        verified: Mapping[str, Any] = jwt.decode(  # type: ignore[no-untyped-call]
            token, certs=keys, audience=audience, clock_skew_in_seconds=CLOCK_SKEW_SECONDS)
    # google-auth raises these for a token it refuses (it wraps a key-type mismatch too);
    # anything else is a fault here, not the caller's, and must not read as a refusal.
    except (auth_exceptions.GoogleAuthError, ValueError) as exc:
        raise TokenRejected(_why_not(exc, claims, audience)) from None
    if verified.get("iss") not in GOOGLE_ISSUERS:
        raise TokenRejected(f"the token's issuer {_shown(verified.get('iss'))} is not Google's")
    if verified.get("email_verified") is not True:
        raise TokenRejected("the token's email is not verified (email_verified is not true)")
    return verified
