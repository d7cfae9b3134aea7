"""Start, wait for and stop the Firestore emulator and functions-framework servers.

Each child runs in its own process group and is stopped with its whole group, so no
emulator JVM or gunicorn worker outlives the caller, even on Ctrl-C.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import IO

from infra import PROJECT_FUNCTION_DIR

REPO_ROOT = Path(__file__).resolve().parent.parent
"""The kit's tree (a checkout, or the installed package's folder)."""
FUNCTION_DIR = REPO_ROOT / "function"

INSTALL_HINT = (
    "The Firestore emulator is required. Install the Google Cloud CLI and its emulator: "
    "`apt-get install google-cloud-cli google-cloud-cli-firestore-emulator` (Debian/Ubuntu, "
    "from Google's apt repository) or `gcloud components install cloud-firestore-emulator`; "
    "it also needs Java 11+ (`apt-get install openjdk-17-jre-headless`)."
)


class LocalStackError(RuntimeError):
    """A local process could not be started; the message says what to do."""


class EmulatorMissing(LocalStackError):
    pass


class PortInUse(LocalStackError):
    pass


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _port_taken(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def _stop_group(process: subprocess.Popen[bytes], grace_seconds: float = 5.0) -> None:
    """SIGTERM the child's whole process group, wait for every member, SIGKILL stragglers.

    Waiting for the leader alone is not enough: the emulator's JVM is a grandchild and
    can outlive `gcloud` by a second or more.
    """
    pgid = process.pid
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace_seconds
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(grace_seconds)
    while _group_alive(pgid) and time.monotonic() < deadline:
        time.sleep(0.05)
    if _group_alive(pgid):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)
        process.wait()  # reap the leader, or the group never looks empty
        while _group_alive(pgid) and time.monotonic() < deadline + grace_seconds:
            time.sleep(0.05)


class _ManagedProcess:
    """A child process in its own group, with its output in a temp file."""

    name = "process"

    def __init__(self, port: int | None) -> None:
        self.port = port or free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def log_text(self) -> str:
        if self._log is None:
            return ""
        self._log.flush()
        return Path(self._log.name).read_text(errors="replace")

    def _spawn(self, argv: list[str], env: Mapping[str, str], cwd: Path) -> None:
        if _port_taken(self.port):
            raise PortInUse(
                f"{self.name}: port {self.port} on 127.0.0.1 is already in use; "
                "stop what listens there or pick another port"
            )
        # Lives as long as the child, closed in stop(): not a with-block.
        self._log = tempfile.NamedTemporaryFile(prefix=f"{self.name}-", suffix=".log")  # noqa: SIM115
        self.process = subprocess.Popen(
            argv, env=dict(env), cwd=cwd, stdout=self._log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def _wait_ready(self, url: str, timeout_seconds: float) -> None:
        deadline = time.monotonic() + timeout_seconds
        while time.monotonic() < deadline:
            assert self.process is not None
            if self.process.poll() is not None:
                raise LocalStackError(
                    f"{self.name} exited with code {self.process.returncode}:\n"
                    f"{self.log_text[-3000:]}"
                )
            try:
                with urllib.request.urlopen(url, timeout=1):
                    return
            except urllib.error.HTTPError:
                return  # any HTTP answer means it is serving
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise LocalStackError(
            f"{self.name} did not answer on {url} within {timeout_seconds:g}s:\n"
            f"{self.log_text[-3000:]}"
        )

    def stop(self) -> None:
        if self.process is not None:
            _stop_group(self.process)
        if self._log is not None:
            self._log.close()
            self._log = None

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


class FirestoreEmulator(_ManagedProcess):
    """`gcloud emulators firestore start` on 127.0.0.1:PORT."""

    name = "firestore-emulator"

    def __init__(self, port: int | None = None) -> None:
        super().__init__(port)

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout_seconds: float = 60.0) -> FirestoreEmulator:
        gcloud = shutil.which("gcloud")
        if gcloud is None:
            raise EmulatorMissing(f"`gcloud` is not on PATH. {INSTALL_HINT}")
        self._spawn(
            [gcloud, "emulators", "firestore", "start", f"--host-port={self.host}", "--quiet"],
            env={**os.environ, "CLOUDSDK_CORE_DISABLE_PROMPTS": "1"},
            cwd=REPO_ROOT,
        )
        try:
            self._wait_ready(f"http://{self.host}/", timeout_seconds)
        except LocalStackError as exc:
            if "component" in str(exc).lower() or "not installed" in str(exc).lower():
                raise EmulatorMissing(f"{exc}\n{INSTALL_HINT}") from exc
            raise
        return self

    def reset(self) -> None:
        """Delete every document (the emulator's own reset endpoint)."""
        request = urllib.request.Request(f"http://{self.host}/reset", method="POST")
        urllib.request.urlopen(request, timeout=10).close()

    def __enter__(self) -> FirestoreEmulator:
        return self.start()


class FunctionServer(_ManagedProcess):
    """The kit's function served by functions-framework (gunicorn, WORKERS processes)."""

    name = "function-server"

    def __init__(
        self,
        env: Mapping[str, str],
        *,
        port: int | None = None,
        workers: int = 1,
        threads: int = 8,
        target: str = "handle_scheduled_job",
        source: Path = FUNCTION_DIR / "main.py",
        extra_pythonpath: list[Path] | None = None,
    ) -> None:
        super().__init__(port)
        self._source = source
        self._env = env
        self._workers = workers
        self._threads = threads
        self._target = target
        # The team's function/ too (its `jobs`), when the kit is installed (infra.PROJECT_DIR).
        self._pythonpath = [PROJECT_FUNCTION_DIR, FUNCTION_DIR, *(extra_pythonpath or [])]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    def start(self, timeout_seconds: float = 30.0) -> FunctionServer:
        executable = Path(sys.executable).with_name("functions-framework")
        env = {
            **os.environ,
            **self._env,
            "WORKERS": str(self._workers),
            "THREADS": str(self._threads),
            "PYTHONPATH": os.pathsep.join(str(p) for p in self._pythonpath),
            "PYTHONUNBUFFERED": "1",
        }
        self._spawn(
            [str(executable), "--target", self._target, "--source",
             str(self._source), "--host", "127.0.0.1", "--port", str(self.port)],
            env=env,
            cwd=FUNCTION_DIR,
        )
        self._wait_ready(self.url, timeout_seconds)
        return self

    def worker_pids(self) -> list[int]:
        """The gunicorn worker processes (children of the server's master process)."""
        assert self.process is not None
        children = Path(f"/proc/{self.process.pid}/task/{self.process.pid}/children")
        return [int(pid) for pid in children.read_text().split()]

    def __enter__(self) -> FunctionServer:
        return self.start()


class ServiceServer(_ManagedProcess):
    """A team's own service (examples/own-service/<app>/main.py exposing `app`) served as a
    team serves it: werkzeug's server (`flask run`) for a WSGI app, uvicorn for an ASGI one;
    by `python` (default: this interpreter), with `pythonpath` (default: the kit's function/,
    where `dedup` is) or none (an interpreter whose virtualenv installed the protocol)."""

    name = "service-server"

    def __init__(
        self,
        app_dir: Path,
        server: str,
        env: Mapping[str, str],
        *,
        python: Path | None = None,
        pythonpath: list[Path] | None = None,
        port: int | None = None,
    ) -> None:
        super().__init__(port)
        self._app_dir = app_dir
        self._server = server
        self._env = env
        self._python = python or Path(sys.executable)
        self._pythonpath = [FUNCTION_DIR] if pythonpath is None else pythonpath
        self.name = f"{app_dir.name}-server"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def argv(self) -> list[str]:
        port = str(self.port)
        if self._server == "werkzeug":
            return [str(self._python), "-m", "flask", "--app", "main", "run", "--with-threads",
                    "--host", "127.0.0.1", "--port", port]
        if self._server == "uvicorn":
            return [str(self._python), "-m", "uvicorn", "main:app", "--host", "127.0.0.1",
                    "--port", port]
        raise ValueError(f"unknown server {self._server!r}: werkzeug or uvicorn")

    def start(self, timeout_seconds: float = 60.0) -> ServiceServer:
        env = {
            **{k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")},
            **self._env,
            "PYTHONUNBUFFERED": "1",
        }
        if self._pythonpath:
            env["PYTHONPATH"] = os.pathsep.join(str(p) for p in self._pythonpath)
        self._spawn(self.argv(), env=env, cwd=self._app_dir)
        self._wait_ready(self.url + "/", timeout_seconds)
        return self

    def __enter__(self) -> ServiceServer:
        return self.start()
