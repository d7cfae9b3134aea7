"""Idempotency tokens the downstream can check as genuine: `<run_id>.<HMAC>`.

The proxy hands each downstream execution a token for its run. A bare run ID
(sha256 of project, region, job and schedule time, all public in the stack file) could be
computed by anyone who can start the downstream, who could then pre-claim a future run's
token and silently suppress that run. So the token carries an HMAC-SHA256 of the run ID
under a secret only the proxy and the downstream guards hold (DEDUP_TOKEN_SECRET, from a
Secret Manager secret the Pulumi program declares and Cloud Run mounts as an environment
variable): only the proxy can mint one, and IdempotencyGuard refuses any other.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Mapping

from dedup.settings import SettingsError

TOKEN_SECRET_ENV = "DEDUP_TOKEN_SECRET"
# 32 characters: at least 128 bits even for a hex secret (the program makes 64 random
# alphanumerics, about 380 bits).
MIN_SECRET_CHARS = 32
# Domain separation: the same secret must never authenticate anything but these tokens.
_CONTEXT = b"scheduler-dedup token v1:"
_GENUINE_SHAPE = re.compile(r"([0-9a-f]{64})\.([0-9a-f]{64})")


class ForgedToken(ValueError):
    """A token the proxy did not mint (no valid HMAC under DEDUP_TOKEN_SECRET)."""


def token_secret_setting(env: Mapping[str, str], reader: str) -> bytes:
    """DEDUP_TOKEN_SECRET, required: without it `reader` could not mint or check tokens."""
    raw = env.get(TOKEN_SECRET_ENV, "")
    if not raw:
        raise SettingsError(
            f"{TOKEN_SECRET_ENV} is not set: {reader} needs the proxy's token secret (the "
            "stack's `<namePrefix>-token-secret` in Secret Manager, mounted as this "
            "environment variable)"
        )
    if len(raw.strip()) < MIN_SECRET_CHARS:
        raise SettingsError(
            f"{TOKEN_SECRET_ENV} has {len(raw.strip())} characters; use at least "
            f"{MIN_SECRET_CHARS} random ones (the stack's token secret has 64)"
        )
    return raw.strip().encode()


def _mac(secret: bytes, run_id: str) -> str:
    return hmac.new(secret, _CONTEXT + run_id.encode(), hashlib.sha256).hexdigest()


def mint_token(secret: bytes, run_id: str) -> str:
    """The token for one run: the same for every attempt, so retries carry the same one."""
    return f"{run_id}.{_mac(secret, run_id)}"


def verify_token(secret: bytes, token: str) -> str:
    """The run ID inside a genuine token; ForgedToken for anything the proxy did not mint."""
    match = _GENUINE_SHAPE.fullmatch(token)
    if match is None:
        raise ForgedToken(
            f"token {token[:80]!r} is not a proxy token (<64 hex run ID>.<64 hex HMAC>): "
            "only the kit's proxy mints tokens this guard accepts"
        )
    run_id, mac = match.groups()
    if not hmac.compare_digest(mac, _mac(secret, run_id)):
        raise ForgedToken(
            f"token for run {run_id[:16]}... has an HMAC that {TOKEN_SECRET_ENV} did not "
            "make: forged, or minted under another stack's secret"
        )
    return run_id
