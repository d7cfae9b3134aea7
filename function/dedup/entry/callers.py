"""Who is calling: the `email` claim of the OIDC token Cloud Run has already verified.

DEDUP_ALLOWED_CALLERS (settings.py) lists the service accounts a function serves: the
accounts whose OIDC tokens the kit's Scheduler jobs send. Cloud Run's IAM check decides
who may reach the service at all, and it lets through every principal holding
`roles/run.invoker` or a broader role on the service or the project (`roles/run.admin`,
Editor, Owner, custom roles). Any of them could forge a delivery's `X-CloudScheduler-*`
headers: run a job early, and so have the real run of that time answered "duplicate".
`check_caller` narrows "may reach the service" to "is one of the jobs' accounts".

Why decoding the token without verifying it is sound, and only where it is:

- The function requires authentication (the kit grants `roles/run.invoker` to the
  invoker account only, and the policy pack forbids public invokers), so Cloud Run
  verified the token before the request reached the container: Google's signature, that
  it has not expired, and that its audience is this service's URL. A request whose
  token fails any of that gets Cloud Run's own 401/403 and never runs this code.
- Cloud Run then forwards the token it checked with the signature replaced by
  `SIGNATURE_REMOVED_BY_GOOGLE`, so the signature cannot be checked here and the third
  segment is not required to be one. Nor is one needed: the claims are the ones Cloud Run
  verified. Fetching Google's certificates would add a network call to every cold start
  and re-check what Cloud Run already checked.
- Cloud Run checks `X-Serverless-Authorization` instead of `Authorization` when a request
  carries both, and passes `Authorization` through untouched. So the token read here is
  the one Cloud Run checked: `X-Serverless-Authorization` when present, else
  `Authorization`. Reading `Authorization` regardless would let an invoker who
  authenticates with the other header claim any e-mail.
- Anywhere the token is not verified first (a public service, `--allow-unauthenticated`,
  a local run, another platform in front), anyone can write any `email` claim, and this
  check alone proves nothing. There DEDUP_VERIFY_TOKEN_AUDIENCE (the service's URL) makes
  it verify the token itself before believing its `email` (id_tokens.py: Google's
  signature, issuer, expiry, that audience, `email_verified`).

Stdlib only (base64 + json): nothing to import or fetch at cold start. id_tokens.py (and
google-auth's jwt) is imported on the first request that needs it, only with
DEDUP_VERIFY_TOKEN_AUDIENCE set.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

AUTHORIZATION_HEADER: Final = "authorization"
SERVERLESS_AUTHORIZATION_HEADER: Final = "x-serverless-authorization"
SIGNATURE_REMOVED: Final = "SIGNATURE_REMOVED_BY_GOOGLE"
"""What Cloud Run puts in place of the signature of the token it forwards."""

# What a refused caller is logged as when there is no e-mail to log.
NO_TOKEN: Final = "no token"
NOT_A_JWT: Final = "not a JWT"
NO_EMAIL: Final = "no email claim"
NOT_VERIFIED: Final = "unverified token"

_MAX_TOKEN_CHARS: Final = 16_384  # Google ID tokens are about 1 KB; bound the decoding work
_MAX_SHOWN_EMAIL: Final = 254  # the longest e-mail address SMTP allows
_SEGMENT: Final = re.compile(r"[A-Za-z0-9_-]*")


class NotAJwt(ValueError):
    """The value is not a compact JWS whose payload is a JSON object."""


@dataclass(frozen=True)
class Refusal:
    """Why a caller is refused (the 403's one-line reason) and who it is, for the log."""

    reason: str
    caller: str
    """The token's `email` claim, or NO_TOKEN / NOT_A_JWT / NO_EMAIL."""


def _b64url_decode(segment: str) -> bytes:
    """base64url without padding (RFC 7515), strictly: no other characters."""
    if not _SEGMENT.fullmatch(segment) or len(segment) % 4 == 1:
        raise NotAJwt("a segment is not base64url")
    try:
        return base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4))
    except (binascii.Error, ValueError):
        raise NotAJwt("a segment is not base64url") from None


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [key for key, _ in pairs]
    if len(keys) != len(set(keys)):
        raise NotAJwt("the payload repeats a claim")
    return dict(pairs)


def jwt_claims(token: str) -> dict[str, Any]:
    """The payload of a compact JWT (`header.payload.signature`), decoded, not verified.

    The header must be a base64url JSON object and the payload one as well; the third
    segment is not read (Cloud Run forwards `SIGNATURE_REMOVED_BY_GOOGLE` there).
    """
    if len(token) > _MAX_TOKEN_CHARS:
        raise NotAJwt("the token is too long")
    parts = token.split(".")
    if len(parts) != 3 or not parts[0] or not parts[1]:
        raise NotAJwt("a JWT has three dot-separated segments")
    decoded = []
    for segment in parts[:2]:
        try:
            value = json.loads(_b64url_decode(segment), object_pairs_hook=_no_duplicate_keys)
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
            raise NotAJwt("a segment is not JSON") from None
        if not isinstance(value, dict):
            raise NotAJwt("a segment is not a JSON object")
        decoded.append(value)
    return decoded[1]


def bearer_token(value: str) -> str | None:
    """The token of an `Authorization: Bearer <token>` value (scheme case-insensitive)."""
    scheme, _, token = value.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token or any(c.isspace() for c in token):
        return None
    return token


def token_header(headers: Mapping[str, str]) -> tuple[str, str | None]:
    """The header Cloud Run checked (lower-cased names) and its value, None if absent."""
    serverless = headers.get(SERVERLESS_AUTHORIZATION_HEADER, "")
    if serverless.strip():
        return "X-Serverless-Authorization", serverless
    value = headers.get(AUTHORIZATION_HEADER, "")
    return "Authorization", value if value.strip() else None


def check_caller(
    headers: Mapping[str, str], allowed: frozenset[str], verify_audience: str | None = None
) -> Refusal | None:
    """None if the caller's `email` claim is in `allowed` (lower-case e-mails), else why not.

    With `verify_audience` (DEDUP_VERIFY_TOKEN_AUDIENCE) the token must first pass
    id_tokens.verified_claims for that audience; Google's certificates unavailable raises
    id_tokens.CertsUnavailable (the caller answers a retryable 500).
    `headers` are lower-cased (keys.lower_keys). Nothing of the request but the token's
    `email` claim ends up in a Refusal.
    """
    name, value = token_header(headers)
    if value is None:
        return Refusal(
            "no OIDC token (Authorization: Bearer): this function serves only its "
            "Scheduler jobs' service accounts",
            NO_TOKEN,
        )
    token = bearer_token(value)
    if token is None:
        return Refusal(f"the {name} header is not a Bearer token", NOT_A_JWT)
    try:
        claims = jwt_claims(token)
    except NotAJwt as exc:
        return Refusal(f"the {name} bearer token is not a JWT: {exc}", NOT_A_JWT)
    if verify_audience is not None:
        if token.rsplit(".", 1)[-1] == SIGNATURE_REMOVED:
            # Unverifiable, and on a public service anyone can write it (id_tokens.py).
            return Refusal(
                f"the {name} token's signature was removed: Cloud Run does that on a "
                "service that requires authentication, which verified the token already; "
                "unset DEDUP_VERIFY_TOKEN_AUDIENCE there (it is for services that allow "
                "unauthenticated invocations, which receive tokens whole)", NOT_VERIFIED)
        from dedup.entry.id_tokens import TokenRejected, verified_claims  # only when set

        try:
            claims = dict(verified_claims(token, claims, verify_audience))
        except TokenRejected as exc:
            return Refusal(f"the {name} token is not verified: {exc}", NOT_VERIFIED)
    email = claims.get("email")
    if not isinstance(email, str) or not email.strip():
        return Refusal(f"the {name} token has no email claim", NO_EMAIL)
    if email.lower() in allowed:
        return None
    shown = email if len(email) <= _MAX_SHOWN_EMAIL else email[:_MAX_SHOWN_EMAIL] + "..."
    return Refusal(
        f"caller {shown!r} is not one of the accounts this function serves "
        "(DEDUP_ALLOWED_CALLERS)",
        shown,
    )
