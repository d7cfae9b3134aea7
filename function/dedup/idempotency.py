"""Downstream idempotency: perform a state-changing step at most once per token.

The proxy passes each scheduled run's dedup key to the downstream execution as a token.
Dedup upstream narrows the window but cannot close it: when the downstream API's reply
to the proxy is lost, the proxy releases its claim and the retry starts a second
execution carrying the same token. The downstream service closes the window by checking
the token here, atomically in Firestore, before its state-changing step.

It is the kit's own protocol (protocol.Deduplicator) over the same store and record
format: a token is one more run, whose document ID is derived from (step, token), so it
never collides with the scheduled run's own record and the same TTL policy removes it.

    guard = IdempotencyGuard.from_env(step="send-invoices")   # DEDUP_* settings
    outcome = guard.run_once(token, lambda ctx: send_invoices(...))
    outcome.ran      # True only for the call that performed the step
    outcome.result   # its return value (replayed from the record to later calls)

    @guard.once(token_param="token")
    def send_invoices(token: str, batch: str) -> dict[str, int]: ...

Tokens are checked as genuine first: from_env reads DEDUP_TOKEN_SECRET (the proxy's token
secret, required) and run_once raises ForgedToken, before anything is read or written, for a
token the proxy did not mint (tokens.py), so whoever can start the downstream cannot
pre-claim a future run's token. A guard built without a secret (token_secret=None: tokens
of your own, not the proxy's) checks only their shape.

A call made while another holds the token raises StepInProgress (or waits up to
`wait_seconds` for it to finish). If the step raises, the token is released and the
exception propagates, so a retry performs the step. StoreUnavailable: nothing ran.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import json
import logging
import os
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, ParamSpec, TypeVar

from google.cloud import firestore

from dedup.entry.app import build_deduplicator
from dedup.keys import RunKey
from dedup.outcomes import Outcome
from dedup.protocol import Deduplicator
from dedup.proxy.tokens import ForgedToken, token_secret_setting, verify_token
from dedup.run_context import RunContext
from dedup.settings import Settings
from dedup.store import StoreUnavailable

__all__ = ["ForgedToken", "IdempotencyGuard", "StepInProgress", "StepOutcome", "validate_token"]

log = logging.getLogger(__name__)

P = ParamSpec("P")
T = TypeVar("T")

# Tokens are the proxy's run IDs (64 hex digits); accept any short printable ASCII text.
_TOKEN = re.compile(r"[\x21-\x7e]{1,500}")
_STEP = re.compile(r"[A-Za-z0-9_.:-]{1,200}")


class StepInProgress(RuntimeError):
    """Another call holds this token's claim (a live lease): retry later."""

    def __init__(self, token: str, step: str) -> None:
        super().__init__(f"step {step!r} for token {token[:80]!r} is in progress elsewhere")
        self.token = token
        self.step = step


@dataclass(frozen=True)
class TokenKey(RunKey):
    """A RunKey whose run_id is derived from (step, token) instead of the schedule."""

    token: str = ""

    @property
    def run_id(self) -> str:
        canonical = json.dumps(["dedup-token", self.job_id, self.token], separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()


@dataclass(frozen=True)
class StepOutcome:
    ran: bool  # this call performed the step
    result: Any  # the step's value; for a call that did not run it, the recorded JSON
    # COMPLETED or DUPLICATE; ran but not recorded: COMPLETED_UNRECORDED or CLAIM_LOST
    outcome: Outcome
    record_id: str  # the Firestore document ID of the token's record


def validate_token(token: object) -> str:
    if not isinstance(token, str) or not _TOKEN.fullmatch(token):
        raise ValueError(
            f"idempotency token {str(token)[:80]!r} must be 1-500 printable ASCII characters "
            "without spaces"
        )
    return token


class IdempotencyGuard:
    """Runs steps at most once per (step, token), across threads, processes and instances."""

    def __init__(
        self,
        deduplicator: Deduplicator,
        *,
        project: str,
        location: str,
        step: str,
        token_secret: bytes | None,
        poll_seconds: float = 0.5,
    ) -> None:
        self._dedup = deduplicator
        self._project = project
        self._location = location
        self._step = self._valid_step(step)
        self._secret = token_secret
        self._poll = poll_seconds

    @classmethod
    def from_settings(
        cls,
        settings: Settings,
        *,
        step: str,
        token_secret: bytes | None,
        client: firestore.Client | None = None,
    ) -> IdempotencyGuard:
        return cls(
            build_deduplicator(settings, client),
            project=settings.project,
            location=settings.location,
            step=step,
            token_secret=token_secret,
        )

    @classmethod
    def from_env(
        cls,
        *,
        step: str,
        environ: Mapping[str, str] | None = None,
        client: firestore.Client | None = None,
    ) -> IdempotencyGuard:
        """DEDUP_PROJECT, DEDUP_LOCATION, DEDUP_DATABASE, DEDUP_COLLECTION, DEDUP_LEASE_SECONDS,
        ... exactly as the kit's function reads them (Settings.from_env), and
        DEDUP_TOKEN_SECRET (required: the proxy's tokens are checked as genuine)."""
        env = os.environ if environ is None else environ
        return cls.from_settings(
            Settings.from_env(env), step=step, client=client,
            token_secret=token_secret_setting(env, "the idempotency guard"),
        )

    @staticmethod
    def _valid_step(step: str) -> str:
        if not _STEP.fullmatch(step):
            raise ValueError(
                f"step {step[:80]!r} must be 1-200 letters, digits or . _ : - characters"
            )
        return step

    def record_id(self, token: str, step: str | None = None) -> str:
        return self._key(self.check_token(token), step).run_id

    def check_token(self, token: object) -> str:
        """The token if well-formed and (with a secret) minted by the proxy; else ValueError,
        or its subclass ForgedToken for a well-formed token the proxy did not mint."""
        valid = validate_token(token)
        if self._secret is not None:
            verify_token(self._secret, valid)
        return valid

    def _key(self, token: str, step: str | None) -> TokenKey:
        name = self._valid_step(step) if step else self._step
        return TokenKey(self._project, self._location, name, datetime.now(UTC), token=token)

    def run_once(
        self,
        token: str,
        step_fn: Callable[[RunContext], T],
        *,
        step: str | None = None,
        wait_seconds: float = 0.0,
    ) -> StepOutcome:
        """Perform `step_fn` unless this (step, token) already completed.

        Raises ForgedToken (nothing read or written) for a token the proxy did not mint,
        StepInProgress if another call holds the token after `wait_seconds`,
        StoreUnavailable if Firestore did not answer (nothing ran), or whatever
        `step_fn` raised (the token is released first, so a retry runs the step).
        """
        key = self._key(self.check_token(token), step)
        values: list[T] = []
        failures: list[Exception] = []

        def job(context: RunContext) -> T:
            try:
                value = step_fn(context)
            except Exception as exc:
                failures.append(exc)
                raise
            values.append(value)
            return value

        deadline = time.monotonic() + wait_seconds
        while True:
            delivery = self._dedup.run(key, job, b"", {})
            if delivery.outcome is not Outcome.IN_PROGRESS or time.monotonic() >= deadline:
                break
            time.sleep(min(self._poll, max(0.0, deadline - time.monotonic())))

        outcome = delivery.outcome
        if outcome is Outcome.DUPLICATE:
            replay = None if delivery.result_json is None else json.loads(delivery.result_json)
            return StepOutcome(False, replay, outcome, key.run_id)
        if outcome in (Outcome.COMPLETED, Outcome.COMPLETED_UNRECORDED, Outcome.CLAIM_LOST):
            if outcome is not Outcome.COMPLETED:
                log.warning("step %s ran for token %s but: %s", key.job_id, token, delivery.detail)
            return StepOutcome(True, values[0] if values else None, outcome, key.run_id)
        if outcome is Outcome.IN_PROGRESS:
            raise StepInProgress(token, key.job_id)
        if outcome is Outcome.FAILED and failures:
            raise failures[0]
        raise StoreUnavailable(delivery.detail or f"{outcome.value} for token {token!r}")

    def once(
        self,
        token_param: str = "token",
        *,
        step: str | None = None,
        wait_seconds: float = 0.0,
    ) -> Callable[[Callable[P, T]], Callable[P, StepOutcome]]:
        """Decorator: the function runs at most once per value of its `token_param`."""

        def decorate(func: Callable[P, T]) -> Callable[P, StepOutcome]:
            signature = inspect.signature(func)
            if token_param not in signature.parameters:
                raise TypeError(f"{func.__qualname__} has no parameter {token_param!r}")

            @functools.wraps(func)
            def wrapper(*args: P.args, **kwargs: P.kwargs) -> StepOutcome:
                token = signature.bind(*args, **kwargs).arguments[token_param]
                return self.run_once(
                    token,
                    lambda _context: func(*args, **kwargs),
                    step=step,
                    wait_seconds=wait_seconds,
                )

            return wrapper

        return decorate
