"""The OIDC token a Scheduler job's request carries, as the target's container sees it.

Cloud Scheduler signs an ID token for the job's service account (audience: the target URL);
Cloud Run verifies it and forwards it to the container with its signature replaced by
SIGNATURE_REMOVED_BY_GOOGLE. Nothing local verifies a signature; the function reads the
`email` claim (DEDUP_ALLOWED_CALLERS). The one builder of such tokens, for the emulator,
the demo and the tests (local_stack.deliveries re-exports it).
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Mapping
from typing import Any

SIGNATURE_REMOVED = "SIGNATURE_REMOVED_BY_GOOGLE"
ISSUER = "https://accounts.google.com"


def _b64url_json(value: object) -> str:
    raw = json.dumps(value, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def oidc_claims(
    email: str | None, audience: str = "https://dedup.example.run.app"
) -> dict[str, Any]:
    """The claims of a Google-signed OIDC token of service account `email` (no `email`
    claim when None), as Cloud Scheduler's tokens carry them."""
    now = int(time.time())
    claims: dict[str, Any] = {
        "aud": audience,
        "azp": "100000000000000000001",
        "exp": now + 3600,
        "iat": now,
        "iss": ISSUER,
        "sub": "100000000000000000001",
    }
    if email is not None:
        claims["email"] = email
        claims["email_verified"] = True
    return claims


def forwarded_token(claims: Mapping[str, Any]) -> str:
    """A token as Cloud Run forwards it to the container once it has verified it:
    `header.payload.SIGNATURE_REMOVED_BY_GOOGLE`, header alg RS256."""
    header = {"alg": "RS256", "kid": "0123456789abcdef", "typ": "JWT"}
    return f"{_b64url_json(header)}.{_b64url_json(dict(claims))}.{SIGNATURE_REMOVED}"


def scheduler_token(audience: str, email: str) -> str:
    """The forwarded OIDC token of a Scheduler job's invoker account `email`."""
    return forwarded_token(oidc_claims(email, audience))
