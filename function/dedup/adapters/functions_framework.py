"""The protocol in a functions-framework HTTP function of a team's own (docs/own-service.md):

    @functions_framework.http
    @deduplicated                # or @deduplicated(guard=my_guard)
    def export(run: RunContext) -> dict[str, Any]: ...

functions-framework passes the function a flask.Request; the decorated function takes it,
runs `export` once per scheduled run (its return value is the run's result, replayed to
duplicates) and answers as the kit's own function does. It needs flask (which
functions-framework brings), not functions-framework itself: the decorator registers nothing.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, overload

from dedup.adapters.guard import ServiceGuard, shared_guard
from dedup.adapters.wsgi import View, answer_flask_request

if TYPE_CHECKING:
    import flask

HttpFunction = Callable[["flask.Request"], "flask.Response"]


@overload
def deduplicated(function: View, /) -> HttpFunction: ...


@overload
def deduplicated(*, guard: ServiceGuard | None = None) -> Callable[[View], HttpFunction]: ...


def deduplicated(
    function: View | None = None, /, *, guard: ServiceGuard | None = None
) -> HttpFunction | Callable[[View], HttpFunction]:
    """`function` (taking the RunContext) as a functions-framework HTTP function taking the
    request. The guard is the process's (shared_guard, from the DEDUP_* environment) unless
    given, built when the function is decorated: a bad setting fails the instance's start."""

    def decorate(job: View) -> HttpFunction:
        service = guard or shared_guard()

        @functools.wraps(job)
        def http_function(request: flask.Request) -> flask.Response:
            return answer_flask_request(service, job, request)

        return http_function

    return decorate if function is None else decorate(function)
