"""Structured logs for job code: what a job logs with `logging` becomes one JSON line.

Cloud Logging reads each JSON object a Cloud Run instance writes to stdout as a
structured entry (`severity`, `message`, and the rest as `jsonPayload`). The function
configures the root logger once at start-up (`configure_logging`, from main.py), so a job's
`logging.getLogger(__name__).info(...)` is a line at the level it used, locally and on
Cloud Run, next to the function's own one-line request log.

While a job runs, its run's fields (`run_id`, `job`, `attempt`, `trigger`) ride on a
context variable (`run_fields`, set around the job call by `dedup.job_logic`), so every
line the job logs, from any module or thread started with the run's context, names its run.
"""

from __future__ import annotations

import contextvars
import logging
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from types import MappingProxyType
from typing import Any, Final

Emit = Callable[[Mapping[str, Any]], None]

_RUN_FIELDS: contextvars.ContextVar[Mapping[str, Any]] = contextvars.ContextVar(
    "dedup_run_fields", default=MappingProxyType({})
)
# Python's levels as Cloud Logging's LogSeverity names, highest first.
_SEVERITIES: Final = (
    (logging.CRITICAL, "CRITICAL"),
    (logging.ERROR, "ERROR"),
    (logging.WARNING, "WARNING"),
    (logging.INFO, "INFO"),
)


def severity(levelno: int) -> str:
    """The LogSeverity of a Python logging level (DEBUG below INFO)."""
    return next((name for level, name in _SEVERITIES if levelno >= level), "DEBUG")


@contextmanager
def run_fields(**fields: Any) -> Iterator[None]:
    """Attach `fields` (None values left out) to every log line while the block runs."""
    token = _RUN_FIELDS.set({k: v for k, v in fields.items() if v is not None})
    try:
        yield
    finally:
        _RUN_FIELDS.reset(token)


def current_run_fields() -> Mapping[str, Any]:
    return _RUN_FIELDS.get()


class JsonLineHandler(logging.Handler):
    """Each record as one structured entry: severity, message (with any traceback), the
    logger's name and the current run's fields, written by `emit_entry`."""

    def __init__(self, emit_entry: Emit, level: int = logging.NOTSET) -> None:
        super().__init__(level)
        self._emit_entry = emit_entry
        self._formatter = logging.Formatter()

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = record.getMessage()
            if record.exc_info:
                message += "\n" + self._formatter.formatException(record.exc_info)
            self._emit_entry({
                "severity": severity(record.levelno),
                "message": message,
                "logger": record.name,
                **current_run_fields(),
            })
        except Exception:  # logging must never break the job
            self.handleError(record)


def configure_logging(emit_entry: Emit, level: int = logging.INFO) -> None:
    """Route the root logger to JSON lines at `level` and above; once per process (a
    second call changes nothing)."""
    root = logging.getLogger()
    if any(isinstance(handler, JsonLineHandler) for handler in root.handlers):
        return
    root.addHandler(JsonLineHandler(emit_entry))
    root.setLevel(level)
