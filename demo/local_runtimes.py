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
  written to that file before the functions start (write_secret_files), only where nothing
  is (never over a file), with a marker beside it naming the process that wrote it, and
  both are removed when they stop (remove_secret_files: exactly what it created).

Everything is checked before anything is served (local_runtimes, check_secret_files): a
missing file, a secret it lacks, a secret's file already there (yours, or one a killed
demo left: its marker tells), a file that cannot be written, each a LocalSecretsError
naming the file, the secret, the runtime and what needs it, and the fix. A value never
appears in an error, a log line, a repr or the report: only secret IDs, variable names and
paths do.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
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
MARKER_SUFFIX: Final = ".written-by-demo"
"""`<file>.written-by-demo`: beside each secret file the demo writes (secret_file_marker)."""
MARKER_HEADER: Final = (
    "# A secret file make demo / make serve wrote (scheduler-dedup, demo/local_runtimes.py);\n"
    "# it removes the file and this marker when it stops. If the process below is gone\n"
    "# (killed), remove both.\n")


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
    a secret has none, or its file cannot be written (check_secret_files). Nothing is
    written or served yet."""
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
    served = tuple(_local_runtime(cfg, runtime, values, secrets_file) for runtime in runtimes)
    check_secret_files(served)
    return served


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


def secret_file_marker(path: str | Path) -> Path:
    """The marker beside a secret file the demo wrote (`<file>.written-by-demo`): which
    process wrote it, so that a file a killed demo left is told apart from one of yours."""
    target = Path(path)
    return target.with_name(target.name + MARKER_SUFFIX)


def check_secret_files(runtimes: Sequence[LocalRuntime]) -> None:
    """LocalSecretsError, before anything is written or served, when a `path:` secret
    cannot be written where it is read: two runtimes give one path different values, or a
    file (or its marker) is already there: the demo never writes over a file."""
    occupied = [problem for secret in _file_secrets(runtimes).values()
                if (problem := _occupied(secret.need)) is not None]
    if occupied:
        raise LocalSecretsError("; ".join(occupied))


def write_secret_files(runtimes: Sequence[LocalRuntime]) -> list[Path]:
    """Write each `path:` secret's local value to its file (mode 0600), with its marker
    beside it, before the functions start; only where nothing is (check_secret_files,
    and each file created exclusively, so a file that appears meanwhile is not written
    over either). The folders and files it created, in order: remove_secret_files
    removes exactly those. A folder that cannot be created or a file that cannot be
    written: LocalSecretsError naming the path and the fix, and nothing left behind."""
    check_secret_files(runtimes)
    created: list[Path] = []
    try:
        for need in _file_secrets(runtimes).values():
            _write_secret_file(need, created)
    except BaseException:
        remove_secret_files(created)
        raise
    return created


def remove_secret_files(created: Sequence[Path]) -> None:
    """Remove what write_secret_files created, newest first: each secret file before its
    marker (a demo killed in between leaves a marker, which says whose it was), then
    the folders it made, each only if empty."""
    for path in reversed(created):
        with contextlib.suppress(OSError):
            if path.is_dir() and not path.is_symlink():
                path.rmdir()
            else:
                path.unlink()


@dataclass(frozen=True)
class _FileSecret:
    """One `path:` secret's file to write: who reads it, and the value."""

    need: NeededSecret
    value: str = field(repr=False)

    @property
    def path(self) -> Path:
        assert self.need.path is not None  # only `path:` secrets
        return Path(self.need.path)


def _file_secrets(runtimes: Sequence[LocalRuntime]) -> dict[str, _FileSecret]:
    """Each `path:` secret's file (one per path; two runtimes reading one secret at one
    path share it); LocalSecretsError when two give one path different values."""
    files: dict[str, _FileSecret] = {}
    for runtime in runtimes:
        for need in runtime.secrets:
            if need.path is None:
                continue
            other = files.setdefault(need.path, _FileSecret(need, runtime.secret_files[need.path]))
            if other.value != runtime.secret_files[need.path]:
                raise LocalSecretsError(
                    f"runtimes {other.need.runtime!r} and {runtime.name!r} both read a secret "
                    f"file at {need.path}, with different secrets: locally they share one "
                    "machine, so give one of them another path, or use `env:` for it")
    return files


def _occupied(need: NeededSecret) -> str | None:
    """Why the secret's file cannot be written (it, or its marker, is there), with the
    fix; None when nothing is there."""
    assert need.path is not None
    path, marker = Path(need.path), secret_file_marker(need.path)
    there = [p for p in (path, marker) if os.path.lexists(p)]
    if not there:
        return None
    head = f"runtime {need.runtime!r} reads secret {need.secret!r} as the file {path}"
    if marker not in there:
        return (f"{head}, which already exists and is not a secret file a demo wrote (no "
                f"{marker.name} beside it): make demo and make serve write a secret's file "
                "only where nothing is, never over a file of yours, and remove it when they "
                "stop. Move it aside while the demo runs, or give that secret another "
                "`path:` (or use `env:` for it)")
    remove = "rm " + " ".join(shlex.quote(str(p)) for p in there)
    pid = _marker_pid(marker)
    if pid is None:
        return (f"{head}: a demo wrote {' and '.join(map(str, there))} (its marker is "
                f"unreadable): if no make demo or make serve is running, remove it: `{remove}`")
    if _process_running(pid):
        return (f"{head}: a demo still running wrote it (process {pid}, says {marker}): "
                "stop that one first (Ctrl-C; it removes its files when it stops)")
    return (f"{head}: a demo that was killed (process {pid}, says {marker}; it is gone) "
            f"left {' and '.join(map(str, there))} behind: remove it: `{remove}`")


def _marker_pid(marker: Path) -> int | None:
    """The process that wrote the marker, as it says; None when it cannot be read."""
    try:
        document = yaml.safe_load(marker.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return None
    pid = document.get("pid") if isinstance(document, dict) else None
    return pid if isinstance(pid, int) and pid > 0 else None


def _process_running(pid: int) -> bool:
    try:
        os.kill(pid, 0)  # signal 0: only asks whether it exists
    except ProcessLookupError:
        return False
    except PermissionError:  # it exists, another user's
        return True
    return True


def _write_secret_file(secret: _FileSecret, created: list[Path]) -> None:
    """Its missing folders, its marker, then the file; each appended to `created` as soon
    as it exists (the marker first, so the file is never there without it)."""
    target, need = secret.path, secret.need
    try:
        _make_folders(target.parent, created)
        _create(secret_file_marker(target), MARKER_HEADER + yaml.safe_dump({
            "file": str(target), "runtime": need.runtime, "secret": need.secret,
            "pid": os.getpid(), "written": datetime.now(UTC).isoformat(timespec="seconds"),
        }, sort_keys=False), created)
        _create(target, secret.value, created)
    except FileExistsError:  # it appeared since check_secret_files
        raise LocalSecretsError(_occupied(need) or f"{target}: appeared meanwhile") from None
    except OSError as exc:
        raise LocalSecretsError(
            f"runtime {need.runtime!r} reads a secret as the file {target}, which cannot "
            f"be written here ({exc.strerror or type(exc).__name__}): create the folder "
            f"{target.parent} writable by you (e.g. `sudo mkdir -p {target.parent} && sudo "
            f"chown $USER {target.parent}`), or use `env:` for that secret") from None


def _make_folders(folder: Path, created: list[Path]) -> None:
    """`folder` and its missing parents, outermost first; those it made go to `created`."""
    missing: list[Path] = []
    while not os.path.lexists(folder):
        missing.append(folder)
        folder = folder.parent
    for path in reversed(missing):
        try:
            path.mkdir()
        except FileExistsError:  # made meanwhile by someone else: not ours to remove
            continue
        created.append(path)


def _create(path: Path, text: str, created: list[Path]) -> None:
    """Create the file (mode 0600) with `text`; FileExistsError if anything is there."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    created.append(path)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(text)


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
