"""The stack's runtimes as `make demo` and `make serve` serve them (LocalRuntime), and the
local secrets file their secret values come from.

Each runtime is served as a function of its own (its own functions-framework process:
demo.local_function.LocalFunction starts it next to the dedup function), with what the
Pulumi program gives it deployed (infra/job_runtime.py): the kit's DEDUP_* settings with
its own records database (`<databaseName>-<name>`, on the Firestore emulator), its job
table (StackConfig.job_routes), the identities it admits; but two things differ:
- its plain settings are `RuntimeSettings.environment(demo=True)`: `demoSettings` over
  `settings` (a local URL instead of the internal API, a demo bucket);
- its secrets' values come from the team's local, git-ignored file
  `<stack dir>/<stack>.local-secrets.yaml`, a YAML mapping secret ID -> value, never from
  Secret Manager. An `env:` secret becomes that environment variable; a `path:` secret is
  written to that file before the functions start (write_secret_files), and removed after.

Everything is checked before anything is served (local_runtimes, write_secret_files): a
missing file, a secret it lacks, a file that cannot be written, each a LocalSecretsError
naming the file, the secret, the runtime and what needs it, and the fix. A value never
appears in an error, a log line, a repr or the report: only secret IDs, variable names and
paths do.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import yaml

from infra.config import RuntimeSettings, StackConfig
from local_stack import LocalStackError
from local_stack.tables import write_job_tables
from operator_tools.stack_files import display_path, stack_name_of
from scheduler_emulator.stack import Stack

LOCAL_SECRETS_SUFFIX: Final = ".local-secrets.yaml"
"""`<stack>.local-secrets.yaml`, beside `Pulumi.<stack>.yaml` (.gitignore ignores it)."""
EXAMPLE_JOBS: Final = "example_jobs."
"""The kit's own example job logic: jobs outside it run the team's code."""
NEVER_COMMIT: Final = "it is git-ignored: never commit it"


class LocalSecretsError(LocalStackError):
    """A runtime's secret without a local value (or a file secret that cannot be
    written): what is missing, who needs it, and the fix. Never a value."""


def local_secrets_file(stack_file: str | Path) -> Path:
    """The local secrets file of the stack in `stack_file`:
    `<stack dir>/<stack>.local-secrets.yaml`."""
    path = Path(stack_file)
    return path.parent / f"{stack_name_of(path)}{LOCAL_SECRETS_SUFFIX}"


@dataclass(frozen=True)
class NeededSecret:
    """One secret a served runtime declares: who needs it, and as what."""

    runtime: str
    secret: str  # its ID
    env: str | None
    path: str | None

    @property
    def use(self) -> str:
        return (f"environment variable {self.env}" if self.env is not None
                else f"file {self.path}")

    @property
    def needed_by(self) -> str:
        return f"runtime {self.runtime!r} needs it as {self.use}"


@dataclass(frozen=True)
class LocalRuntime:
    """One runtime as served locally: what its function's process is given. The secret
    values (`secret_env`, `secret_files`) are left out of its repr."""

    name: str
    database: str  # its own records database, `<databaseName>-<name>`
    job_routes: Mapping[str, str]  # its job table: deployed job ID -> `module:function`
    settings: Mapping[str, str]  # its plain settings, demoSettings over settings
    demo_settings: tuple[str, ...]  # the names demoSettings gave (replaced or added)
    secrets: tuple[NeededSecret, ...]
    allowed_callers: tuple[str, ...]  # the invoker, and the watchdog where it delivers
    max_instances: int
    secrets_file: Path | None = None  # where its values came from (None: it has none)
    secret_env: Mapping[str, str] = field(default_factory=dict, repr=False)
    secret_files: Mapping[str, str] = field(default_factory=dict, repr=False)

    def workers(self, most: int) -> int:
        """Its local worker processes: as many as it may have instances, up to `most`."""
        return max(1, min(most, self.max_instances))

    def environment(self, base: Mapping[str, str], *, tables_dir: Path, job: str,
                    job_logic_env: str) -> dict[str, str]:
        """Its function's environment: `base` (the dedup function's, as served locally)
        with its own database, callers and job table, its settings and `env:` secrets.
        Locally every job runs through the ledger wrapper `job`, which runs its own logic
        (`job_logic_env`: the wrapper's map of job ID -> logic); the table lists only this
        runtime's jobs, so the function refuses any other, as deployed."""
        table = write_job_tables(tables_dir, job_routes=dict.fromkeys(self.job_routes, job))
        return {
            # The team's names never clash with the kit's (no DEDUP_*, config-checked); the
            # local harness's own (DEMO_*, the emulator's host) win over a setting anyway.
            **self.settings,
            **self.secret_env,
            **base,
            "DEDUP_DATABASE": self.database,
            "DEDUP_ALLOWED_CALLERS": ",".join(self.allowed_callers),
            job_logic_env: json.dumps(dict(self.job_routes), sort_keys=True),
            **table,
        }

    def describe(self) -> str:
        """Its database, settings and secrets by name (never a value), for the report."""
        names = [f"{name} (demoSettings)" if name in self.demo_settings else name
                 for name in sorted(self.settings)]
        text = f"records database {self.database}; settings: {', '.join(names) or 'none'}"
        if self.secrets:
            where = display_path(self.secrets_file) if self.secrets_file else "?"
            text += "; secrets from " + where + ": " + ", ".join(
                f"{s.secret} as {s.env or s.path}" for s in self.secrets)
        return text

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name, "database": self.database, "jobs": sorted(self.job_routes),
            "settings": sorted(self.settings), "demo_settings": list(self.demo_settings),
            "secrets": [{"secret": s.secret, "env": s.env, "path": s.path}
                        for s in self.secrets],
            "secrets_file": str(self.secrets_file) if self.secrets_file else None,
        }


def served_runtimes(stack: Stack) -> tuple[RuntimeSettings, ...]:
    """The stack's runtimes Scheduler delivers to locally (an active job of theirs)."""
    cfg = stack.config
    if cfg is None:
        return ()
    wanted = set(stack.active_runtimes)
    return tuple(runtime for runtime in cfg.runtimes if runtime.name in wanted)


def local_runtimes(stack: Stack, secrets_file: Path | None = None) -> tuple[LocalRuntime, ...]:
    """The runtimes to serve for `stack`, each with its local secret values, read from
    `secrets_file` (default: the stack file's, local_secrets_file); LocalSecretsError when
    a secret has none. Nothing is written or served yet."""
    runtimes = served_runtimes(stack)
    if not runtimes:
        return ()
    cfg = stack.config
    assert cfg is not None  # served_runtimes: a stack file's config
    needed = [NeededSecret(r.name, s.secret, s.env, s.path) for r in runtimes for s in r.secrets]
    values: dict[str, str] = {}
    if needed:
        if secrets_file is None:
            if not stack.source:
                raise LocalSecretsError(
                    f"runtime {needed[0].runtime!r} declares secrets, but this stack was not "
                    "read from a stack file, so it has no local secrets file: load it with "
                    "load_stack, or give the file")
            secrets_file = local_secrets_file(stack.source)
        values = read_local_secrets(secrets_file, needed)
    return tuple(_local_runtime(cfg, runtime, values, secrets_file) for runtime in runtimes)


def _local_runtime(cfg: StackConfig, runtime: RuntimeSettings, values: Mapping[str, str],
                   secrets_file: Path | None) -> LocalRuntime:
    watchdog = cfg.watchdog_delivers_to(runtime=runtime.name)
    return LocalRuntime(
        name=runtime.name,
        database=cfg.runtime_database(runtime),
        job_routes=cfg.job_routes(runtime.name),
        settings=runtime.environment(demo=True),
        demo_settings=tuple(runtime.demo_settings),
        secrets=tuple(NeededSecret(runtime.name, s.secret, s.env, s.path)
                      for s in runtime.secrets),
        allowed_callers=(cfg.invoker_email, *([cfg.watchdog_email] if watchdog else [])),
        max_instances=runtime.function.max_instances,
        secrets_file=secrets_file if runtime.secrets else None,
        secret_env={s.env: values[s.secret] for s in runtime.secrets if s.env is not None},
        secret_files={s.path: values[s.secret] for s in runtime.secrets if s.path is not None},
    )


def read_local_secrets(path: Path, needed: Sequence[NeededSecret]) -> dict[str, str]:
    """The values of the `needed` secrets from the local secrets file at `path` (a YAML
    mapping secret ID -> value); one LocalSecretsError listing every secret it lacks."""
    shown = display_path(path)
    if not path.is_file():
        raise LocalSecretsError(
            f"{shown}: no such file, and the stack's runtimes need local values of their "
            "secrets: " + "; ".join(f"secret {n.secret!r} ({n.needed_by})" for n in needed)
            + ". Create it with one `<secret-id>: <value>` line per secret, e.g. "
            f"`{needed[0].secret}: <value>` ({NEVER_COMMIT}; make demo and make serve read "
            "secret values only from it, never from Secret Manager)")
    try:
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise LocalSecretsError(f"{shown}: cannot read it ({type(exc).__name__}): make it a "
                                "readable UTF-8 file") from None
    except yaml.YAMLError as exc:
        # The problem's position only: the parser's message may quote a line, a value.
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise LocalSecretsError(f"{shown}: not valid YAML{where}: write one "
                                "`<secret-id>: <value>` line per secret") from None
    if document is None:
        document = {}
    if not isinstance(document, dict):
        raise LocalSecretsError(f"{shown}: is not a mapping of secret ID to value: write "
                                "one `<secret-id>: <value>` line per secret")
    problems = []
    for need in dict.fromkeys(needed):
        value = document.get(need.secret)
        if need.secret not in document or value is None or value == "":
            problems.append(f"{shown} has no value for secret {need.secret!r}, which "
                            f"{need.needed_by}: add `{need.secret}: <value>` to it")
        elif not isinstance(value, str):
            problems.append(f"{shown}: the value of secret {need.secret!r} ({need.needed_by}) "
                            "is not text: quote it, e.g. `" + need.secret + ": \"...\"`")
    if problems:
        raise LocalSecretsError("; ".join(problems) + f" ({NEVER_COMMIT})")
    return {need.secret: str(document[need.secret]) for need in needed}


def write_secret_files(runtimes: Sequence[LocalRuntime]) -> list[Path]:
    """Write each `path:` secret's local value to its file (mode 0600), before the
    functions start; the files it created (remove_secret_files removes them). A folder
    that cannot be created or a file that cannot be written: LocalSecretsError naming
    the path and the fix. Two runtimes giving one path different values: the same."""
    owners: dict[str, tuple[str, str]] = {}
    for runtime in runtimes:
        for path, value in runtime.secret_files.items():
            other = owners.setdefault(path, (runtime.name, value))
            if other[1] != value:
                raise LocalSecretsError(
                    f"runtimes {other[0]!r} and {runtime.name!r} both read a secret file at "
                    f"{path}, with different secrets: locally they share one machine, so "
                    "give one of them another path, or use `env:` for it")
    created: list[Path] = []
    try:
        for path, (runtime_name, value) in owners.items():
            target = Path(path)
            existed = target.exists()
            try:
                target.parent.mkdir(parents=True, exist_ok=True)
                fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                with os.fdopen(fd, "w", encoding="utf-8") as out:
                    out.write(value)
            except OSError as exc:
                raise LocalSecretsError(
                    f"runtime {runtime_name!r} reads a secret as the file {path}, which "
                    f"cannot be written here ({exc.strerror or type(exc).__name__}): create "
                    f"the folder {target.parent} writable by you (e.g. `sudo mkdir -p "
                    f"{target.parent} && sudo chown $USER {target.parent}`), or use `env:` "
                    "for that secret") from None
            if not existed:
                created.append(target)
    except BaseException:
        remove_secret_files(created)
        raise
    return created


def remove_secret_files(created: Sequence[Path]) -> None:
    """Remove the secret files write_secret_files created (not those it overwrote)."""
    for path in created:
        with contextlib.suppress(OSError):
            path.unlink()


@contextlib.contextmanager
def secret_files_written(runtimes: Sequence[LocalRuntime]) -> Iterator[None]:
    """The runtimes' `path:` secrets written for as long as the block runs."""
    created = write_secret_files(runtimes)
    try:
        yield
    finally:
        remove_secret_files(created)


def team_code_warning(stack: Stack) -> str | None:
    """One line, when the stack's jobs run the team's code (a jobLogic outside the kit's
    example_jobs, or any runtime): it runs for real on this machine, side effects and all."""
    team = sorted({job.job_logic for job in stack.active_jobs
                   if job.job_logic and not job.job_logic.startswith(EXAMPLE_JOBS)})
    runtimes = stack.active_runtimes
    if not team and not runtimes:
        return None
    what = ", ".join([*team[:3], *(["..."] if len(team) > 3 else [])]
                     + [f"runtime {name}" for name in runtimes])
    return (f"WARNING: this runs your jobs' real code on this machine ({what}): whatever it "
            "does, it really does (calls APIs, writes files and buckets, sends messages). "
            "Point it at local stand-ins with runtimes[].demoSettings; secret values come "
            "from the stack's local secrets file (docs/demo.md)")
