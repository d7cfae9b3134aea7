"""Both handlers served the same way: functions-framework (gunicorn) via local_stack.

The only difference between a kit server and a textbook server is the `--source` file.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from local_stack import FunctionServer
from local_stack.processes import FUNCTION_DIR, REPO_ROOT


@dataclass(frozen=True)
class Handler:
    name: str  # "kit" | "textbook"
    source: Path  # the functions-framework source file


KIT = Handler("kit", FUNCTION_DIR / "main.py")
TEXTBOOK = Handler("textbook", Path(__file__).resolve().with_name("textbook_main.py"))
HANDLERS = (KIT, TEXTBOOK)


def serve(
    handler: Handler, env: Mapping[str, str], *, workers: int = 1, threads: int = 8
) -> FunctionServer:
    """A server for `handler` (not started: use it as a context manager or .start())."""
    # REPO_ROOT on the path: the comparator (bench.textbook) and the job that records
    # executions (local_stack.steered_job) import from the repository root.
    return FunctionServer(
        env, source=handler.source, workers=workers, threads=threads,
        extra_pythonpath=[REPO_ROOT],
    )
