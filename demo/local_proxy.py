"""The kit's idempotent proxy served locally for a stack's proxied jobs (LocalProxy), on
fake Google APIs (local_stack.fake_google_apis) that count each run's starts and can refuse
one on purpose."""

from __future__ import annotations

import secrets
from pathlib import Path

from dedup.proxy.tokens import TOKEN_SECRET_ENV
from demo.local_function import SERVED_FUNCTION, function_env, warm_up
from demo.store_faults import StoreTiming
from infra.config import proxy_database_of
from local_stack import FunctionServer, free_port
from local_stack.fake_google_apis import Behaviour, FakeGoogleApis, service_account_file
from local_stack.processes import REPO_ROOT
from local_stack.tables import write_job_tables
from scheduler_emulator.stack import Stack

PROXY_TARGET = "proxy_scheduled_job"
# What the fake downstream says when it refuses a start on purpose, per target kind.
REFUSAL_MESSAGES = {
    "workflow": "Permission 'workflows.executions.create' denied on resource",
    "run_job": "Permission 'run.jobs.runWithOverrides' denied on resource",
    "build_trigger": "User not authorized to perform this action (pubsub.topics.publish)",
}


def proxy_env(
    stack: Stack,
    *,
    firestore_host: str,
    scale: float,
    timing: StoreTiming,
    tables_dir: Path,
    api_base: str,
    credentials: Path,
    token_secret: str,
    collection: str | None = None,
) -> dict[str, str]:
    """The proxy's environment for `stack`, as infra/dedup_proxy.py sets it (its own
    database `<databaseName>-proxy`, its routes table, the token secret), but for its API
    base, the fake Google APIs, and its credentials, a key whose token endpoint is the
    fakes'. Its store is the Firestore emulator, directly."""
    env = function_env(
        stack, firestore_host=firestore_host, ledger=Path("/dev/null"), scale=scale,
        timing=timing, collection=collection,
    )
    for key in ("DEDUP_JOB", "DEMO_JOB_LOGIC", "DEMO_LEDGER", "DEMO_WORK_SECONDS"):
        env.pop(key, None)
    return {
        **env,
        "DEDUP_DATABASE": proxy_database_of(stack.database_name),
        # The Scheduler jobs' account only: the demo's watchdog delivers to the function.
        "DEDUP_ALLOWED_CALLERS": stack.invoker_email,
        **write_job_tables(tables_dir, proxy_routes=stack.proxy_routes()),
        "DEDUP_PROXY_API_BASE": api_base,
        # Real seconds, like the store timeout: the fakes answer in milliseconds, and a
        # start that timed out would be retried (a second start: dedup upstream narrows
        # that window but cannot close it, docs/proxy.md).
        "DEDUP_PROXY_TIMEOUT_SECONDS": f"{min(stack.proxy_timeout_seconds, 10.0):g}",
        TOKEN_SECRET_ENV: token_secret,
        "GOOGLE_APPLICATION_CREDENTIALS": str(credentials),
    }


class LocalProxy:
    """The kit's idempotent proxy served locally for `stack`'s proxied jobs, on fake
    Google APIs (local_stack.fake_google_apis, in this process): functions-framework on
    demo/served_function.py's proxy_scheduled_job (main.py's, on the replay's clock),
    WORKERS processes, its own database on the Firestore emulator.

    `refuse`: the fake refuses the start of the n-th run it sees of the first proxied
    job's target with 403, on every start request of that run (0: none).
    """

    def __init__(
        self,
        stack: Stack,
        firestore_host: str,
        *,
        scale: float,
        timing: StoreTiming,
        workdir: Path,
        workers: int = 2,
        threads: int = 8,
        collection: str | None = None,
        refuse: int = 0,
    ) -> None:
        self.stack = stack
        self.firestore_host = firestore_host
        self.scale = scale
        self.timing = timing
        self.workdir = workdir
        self.workers = workers
        self.threads = threads
        self.collection = collection or stack.collection
        self.refuse = refuse
        self.apis = FakeGoogleApis(token_names=_token_names(stack))
        self.port = free_port()
        self._server: FunctionServer | None = None
        self._apis_started = False

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    @property
    def log_text(self) -> str:
        return self._server.log_text if self._server is not None else ""

    @property
    def database(self) -> str:
        return proxy_database_of(self.stack.database_name)

    def start(self) -> LocalProxy:
        try:
            self.apis.__enter__()
            self._apis_started = True
            first = next(iter(self.stack.active_proxied_jobs), None)
            if self.refuse and first is not None and first.proxy is not None:
                self.apis.strike_run(self.refuse, Behaviour(
                    status=403, message=f"{REFUSAL_MESSAGES.get(first.proxy.target, 'denied')}"
                    f" {first.proxy.resource} (make demo: refused on purpose)",
                ), resource=first.proxy.started_resource)
            env = proxy_env(
                self.stack, firestore_host=self.firestore_host, scale=self.scale,
                timing=self.timing, tables_dir=self.workdir / "proxy-tables",
                api_base=self.apis.url,
                credentials=service_account_file(
                    self.workdir / "proxy-adc", self.apis.token_uri, self.stack.project),
                token_secret=secrets.token_hex(32), collection=self.collection,
            )
            self._server = FunctionServer(
                env, port=self.port, workers=self.workers, threads=self.threads,
                target=PROXY_TARGET, source=SERVED_FUNCTION, extra_pythonpath=[REPO_ROOT],
            )
            self._server.start(timeout_seconds=60)
            warm_up(self.url, self.stack)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()
        if self._apis_started:
            self.apis.__exit__(None, None, None)
            self._apis_started = False

    def __enter__(self) -> LocalProxy:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def _token_names(stack: Stack) -> dict[str, str]:
    """Where the fakes read the token, per target kind: the proxy's defaults, or the
    stack's `tokenName` (one per kind: the fakes read one name per kind)."""
    names = {"workflow": "dedup_token", "run_job": "DEDUP_TOKEN",
             "build_trigger": "_DEDUP_TOKEN"}
    for job in stack.proxied_jobs:
        if job.proxy is not None and job.proxy.token_name:
            names[job.proxy.target] = job.proxy.token_name
    return names
