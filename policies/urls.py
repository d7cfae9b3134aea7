"""URLs as the pack compares them: by normalised origin and path, never as text.

Every place the pack compares URLs (a Scheduler job's URI with a function's URL, a job's
audience with its URI, a deliveries queue's URI override with the watchdog's delivery
URLs, an internal function's host) goes through `normal_url`, so two spellings of one
address (`HTTPS://X.run.app:443/./`, `https://x.run.app`) are one URL, and a spelling two
URL parsers could read as different hosts is no URL at all.

The normal form:
- scheme and host lower-case, a host's one trailing dot dropped (`x.run.app.` is the
  same name in DNS);
- the port explicit (443 for https, 80 for http: a default port written out is the same
  origin);
- the path with percent-encoded unreserved characters decoded, other escapes' hex upper
  case, `.` and `..` segments removed (RFC 3986 6.2.2), empty -> `/`;
- the query kept verbatim: its meaning is the receiver's, so two queries are the same only
  as the same text;
- the fragment dropped: a client never sends it (RFC 9110 4.2.4), so it names nothing the
  receiver sees.
Refused (None): anything but http(s), user info, backslashes, percent-encoding or
non-ASCII in the host, whitespace or control characters anywhere.

A shared helper: it imports no policy module.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final
from urllib.parse import urlsplit

DEFAULT_PORTS: Final = {"https": 443, "http": 80}
# A plain host name or IPv4 address, optionally with a port: no user info, no backslash,
# no percent-encoding, nothing two URL parsers could read as different hosts.
_PLAIN_NETLOC: Final = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9.])?(?::[0-9]{1,5})?")
_ESCAPE: Final = re.compile(r"%([0-9A-Fa-f]{2})")
_UNRESERVED: Final = frozenset(
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~"
)

Origin = tuple[str, str, int]
"""(scheme, host, port), lower-case, the port explicit."""


@dataclass(frozen=True)
class NormalUrl:
    scheme: str
    host: str
    port: int
    path: str
    """Starts with "/"."""
    query: str

    @property
    def origin(self) -> Origin:
        return self.scheme, self.host, self.port

    def within(self, base: NormalUrl) -> bool:
        """Same origin, and the path is `base`'s or below it (by whole segments: a
        function at `/a` is not targeted by `/ab`); the query is not compared (a function
        receives every query)."""
        if self.origin != base.origin:
            return False
        root = base.path.rstrip("/")
        return self.path.rstrip("/") == root or self.path.startswith(f"{root}/")

    def same_target(self, other: NormalUrl) -> bool:
        """The same origin, path (a trailing slash aside) and query."""
        return (self.origin == other.origin and self.query == other.query
                and self.path.rstrip("/") == other.path.rstrip("/"))

    def __str__(self) -> str:
        port = "" if DEFAULT_PORTS[self.scheme] == self.port else f":{self.port}"
        query = f"?{self.query}" if self.query else ""
        return f"{self.scheme}://{self.host}{port}{self.path}{query}"


def _unescape_unreserved(path: str) -> str:
    def one(match: re.Match[str]) -> str:
        char = chr(int(match.group(1), 16))
        return char if char in _UNRESERVED else f"%{match.group(1).upper()}"
    return _ESCAPE.sub(one, path)


def remove_dot_segments(path: str) -> str:
    """RFC 3986 5.2.4, on a path that starts with "/" (or is empty)."""
    output: list[str] = []
    segments = path.split("/")[1:] if path else [""]
    for index, segment in enumerate(segments):
        last = index == len(segments) - 1
        if segment == ".":
            if last:
                output.append("")
        elif segment == "..":
            if output:
                output.pop()
            if last:
                output.append("")
        else:
            output.append(segment)
    return "/" + "/".join(output)


def normal_url(text: str) -> NormalUrl | None:
    """`text` in the normal form (module docstring); None if it is not a plain http(s)
    URL."""
    # ASCII: the only whitespace that is printable is the space.
    if not text.isascii() or not text.isprintable() or " " in text or "\\" in text:
        return None
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme not in DEFAULT_PORTS or not _PLAIN_NETLOC.fullmatch(parts.netloc):
        return None
    host = (parts.hostname or "").lower().removesuffix(".")
    if not host or host.endswith("."):
        return None
    path = remove_dot_segments(_unescape_unreserved(parts.path))
    return NormalUrl(scheme, host, port if port is not None else DEFAULT_PORTS[scheme], path,
                     parts.query)


def origin(text: str) -> Origin | None:
    """The normalised (scheme, host, port) of an http(s) URL; None if it is none."""
    url = normal_url(text)
    return url.origin if url is not None else None
