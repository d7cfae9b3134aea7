"""The demo's functions-framework entry points: the kit's function (and its idempotent
proxy), on the replay's clock.

The demo serves this file instead of function/main.py. Every request is answered by
main.py's own handle_scheduled_job (proxy_scheduled_job, for the proxy served with
`--target proxy_scheduled_job`), unchanged, except for the instance's clock: the demo
replays schedules in simulated time (scheduler_emulator.clock), so the function's "now"
must be the simulated instant the emulator sent the delivery at (X-Emulator-Now, sent
with traced deliveries only). That is what tells a forced run ("Run now": a schedule time
ahead of the instance's clock) from the scheduled run of that time; on the real clock,
every future tick of a fast-forwarded replay would look forced, and every forced run of a
replay in the past would look scheduled. Requests without the header (the warm-up) keep
the real clock.

The function reads its clock as `datetime.now(UTC)` in dedup/entry/http.py; that module's
`datetime` is swapped for one whose now() follows the header, for the request's thread
only. (An explicit clock parameter of the handler would make this swap unnecessary.)
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import datetime, tzinfo
from typing import Self

import flask
import functions_framework
import main  # function/main.py: builds the kit's handler at import, as on Cloud Run
from flask.typing import ResponseReturnValue

import dedup.entry.http

NOW_HEADER = "X-Emulator-Now"
_request = threading.local()


class _ReplayClock(datetime):
    """datetime whose now() is the current request's simulated instant, if it has one."""

    @classmethod
    def now(cls, tz: tzinfo | None = None) -> Self:
        simulated: datetime | None = getattr(_request, "now", None)
        if simulated is None:
            return super().now(tz)
        return cls.fromtimestamp(simulated.timestamp(), tz)


if getattr(dedup.entry.http, "datetime", None) is not datetime:
    raise RuntimeError(
        "dedup/entry/http.py no longer reads its clock as datetime.now(): update "
        "demo/served_function.py to give the function the replay's clock"
    )
dedup.entry.http.datetime = _ReplayClock  # type: ignore[attr-defined]


def _on_replay_clock(
    request: flask.Request, serve: Callable[[flask.Request], ResponseReturnValue]
) -> ResponseReturnValue:
    value = request.headers.get(NOW_HEADER)
    _request.now = datetime.fromisoformat(value) if value else None
    try:
        return serve(request)
    finally:
        _request.now = None


@functions_framework.http
def handle_scheduled_job(request: flask.Request) -> ResponseReturnValue:
    return _on_replay_clock(request, main.handle_scheduled_job)


@functions_framework.http
def proxy_scheduled_job(request: flask.Request) -> ResponseReturnValue:
    return _on_replay_clock(request, main.proxy_scheduled_job)
