"""Google-style ID tokens signed with a locally generated RSA key, and the certificates
endpoint that publishes its certificate: what DEDUP_VERIFY_TOKEN_AUDIENCE verifies
(dedup/entry/id_tokens.py), without Google."""

from __future__ import annotations

import datetime
import json
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID
from google.auth import crypt, jwt

from dedup.entry.id_tokens import CertsUnavailable, FetchedCerts

AUDIENCE = "https://reports-abc123xyz-ew.a.run.app"
KEY_ID = "test-key-1"


@dataclass(frozen=True)
class SigningKey:
    """An RSA key and its self-signed certificate (PEM), as Google publishes its keys'."""

    private_pem: str
    certificate_pem: str
    key_id: str = KEY_ID

    @classmethod
    def generate(cls, key_id: str = KEY_ID) -> SigningKey:
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test-signer")])
        now = datetime.datetime.now(datetime.UTC)
        certificate = (
            x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .sign(key, hashes.SHA256())
        )
        private_pem = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption()).decode()
        return cls(private_pem, certificate.public_bytes(serialization.Encoding.PEM).decode(),
                   key_id)

    def sign(self, claims: Mapping[str, Any], key_id: str | None = None) -> str:
        signer = crypt.RSASigner.from_string(  # type: ignore[no-untyped-call]
            self.private_pem, key_id=key_id or self.key_id)
        token: bytes = jwt.encode(signer, dict(claims))  # type: ignore[no-untyped-call]
        return token.decode()


def id_token_claims(email: str | None, audience: str = AUDIENCE, **changes: Any
                    ) -> dict[str, Any]:
    """The claims of a Scheduler job's ID token for `audience`; `changes` override or (value
    None) drop claims."""
    now = int(time.time())
    claims: dict[str, Any] = {
        "aud": audience, "azp": "100000000000000000001", "exp": now + 3600, "iat": now,
        "iss": "https://accounts.google.com", "sub": "100000000000000000001",
    }
    if email is not None:
        claims |= {"email": email, "email_verified": True}
    claims |= changes
    return {key: value for key, value in claims.items() if value is not None}


@dataclass
class CertsSource:
    """A certificates fetcher for id_tokens.GoogleCerts: counts its fetches, fails on
    demand."""

    certs: dict[str, str]
    max_age_seconds: float = 3600.0
    fetches: int = 0
    failing: bool = False

    def __call__(self) -> FetchedCerts:
        self.fetches += 1
        if self.failing:
            raise CertsUnavailable("fetching the certificates failed: connection refused")
        return FetchedCerts(dict(self.certs), self.max_age_seconds)


@dataclass
class FakeClock:
    now: float = 1000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class CertsEndpoint:
    """What the served certificates endpoint answers (a test may change it) and how often
    it was asked."""

    body: bytes
    status: int = 200
    cache_control: str = "public, max-age=19765, must-revalidate, no-transform"
    requests: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


@contextmanager
def served_certs(certs: Mapping[str, str]) -> Iterator[tuple[str, CertsEndpoint]]:
    """A local HTTP server answering GET with `certs` as Google's endpoint does (JSON and
    Cache-Control): (its URL, what it answers)."""
    endpoint = CertsEndpoint(json.dumps(dict(certs)).encode())

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            with endpoint.lock:
                endpoint.requests += 1
            self.send_response(endpoint.status)
            self.send_header("Content-Type", "application/json; charset=UTF-8")
            self.send_header("Cache-Control", endpoint.cache_control)
            self.send_header("Content-Length", str(len(endpoint.body)))
            self.end_headers()
            self.wfile.write(endpoint.body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/oauth2/v1/certs", endpoint
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
