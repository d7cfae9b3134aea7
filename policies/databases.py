"""Stack policies on the kit's Firestore databases (the dedup database, the proxy's, and
any other a function of the kit names): only the accounts that must write one may write
it, and no Firebase rules release opens one to clients.

A database of the kit is one a function of the kit (dedup function, proxy, watchdog)
names in a `DEDUP_*DATABASE` setting (DEDUP_DATABASE, or e.g. a watchdog's own database
setting), or a `gcp:firestore/database:Database` the stack declares. The accounts that
must write it are the runtime accounts of the functions naming it (the proxy's: also the
account declared in its component), but for a watchdog that has a database of its own
(DEDUP_WATCH_DATABASE), which writes that one only and reads the others. Any other
member holding a role that writes entities (`roles/datastore.user`,
`roles/datastore.owner`, a custom role with datastore.entities.create/update/delete) is
refused, whether the grant's condition names the database or it has no one-database
condition on the database's project, a folder or the organization. Firestore roles act on
databases through the project (IAM conditions name databases, not collections), so that
is where writers are found.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Final

from policies.facts import StackFacts, stack_facts
from policies.gcp import FIRESTORE_DATABASE, service_account_email
from policies.grants import (
    PRIMITIVE_ROLES,
    condition_database,
    is_hierarchy_level,
    level_name,
    role_permissions,
)
from policies.kit_resources import (
    DEFAULT_DATABASE,
    WATCH_DATABASE_ENV,
    RecordsDatabase,
    database_id,
    has_own_database,
    is_watchdog_function,
    label,
    runtime_email,
)
from policies.model import Finding, Resource
from policies.permissions import DATASTORE_WRITE
from policies.values import MISSING, as_mapping, get, is_unknown, known_str

FIREBASE_RULES_RELEASE: Final = "gcp:firebaserules/release:Release"
# Release names of Firestore rules: `cloud.firestore` (the (default) database) or
# `cloud.firestore/<database>` (https://www.pulumi.com/registry/packages/gcp/api-docs/
# firebaserules/release/), optionally as `projects/P/releases/<name>`.
FIRESTORE_RELEASE: Final = "cloud.firestore"


@dataclass(frozen=True)
class KitDatabase:
    database: RecordsDatabase
    writers: frozenset[str] | None
    """E-mails of the accounts that must write it; None if one is not known yet."""
    named_by: tuple[str, ...]
    """Labels of the functions (and settings) naming it, for messages."""


def _named_databases(function: Resource) -> Iterator[tuple[str, RecordsDatabase]]:
    """(setting, database) for each DEDUP_*DATABASE setting of the function."""
    env = as_mapping(get(function.props, "serviceConfig", "environmentVariables"))
    if env is None:
        if not is_unknown(get(function.props, "serviceConfig", "environmentVariables")):
            yield "DEDUP_DATABASE", RecordsDatabase(
                known_str(get(function.props, "project")), DEFAULT_DATABASE)
        return
    keys = {str(k) for k in env if str(k).startswith("DEDUP_") and str(k).endswith("DATABASE")}
    keys.add("DEDUP_DATABASE")  # unset: the (default) database
    project = get(env, "DEDUP_PROJECT")
    if project is MISSING or project == "":
        project = get(function.props, "project")
    for key in sorted(keys):
        name = known_str(database_id(get(env, key)))
        if name is not None:
            yield key, RecordsDatabase(known_str(project), name)


def kit_databases(facts: StackFacts) -> list[KitDatabase]:
    """The databases of the kit and who must write each (derived once per stack:
    `facts.derived(kit_databases)`)."""
    found: list[KitDatabase] = []

    def add(database: RecordsDatabase, writers: frozenset[str] | None, named_by: str) -> None:
        for index, known in enumerate(found):
            if known.database.same_as(database):
                merged = None if known.writers is None or writers is None else (
                    known.writers | writers)
                labels = (*known.named_by, named_by) if named_by else known.named_by
                found[index] = KitDatabase(known.database, merged, labels)
                return
        found.append(KitDatabase(database, writers, (named_by,) if named_by else ()))

    unsure = False  # some function's database settings are unknown: it may name any
    for function in facts.kit_functions:
        env = get(function.props, "serviceConfig", "environmentVariables")
        unsure = unsure or is_unknown(env) or any(
            is_unknown(v) for k, v in (as_mapping(env) or {}).items()
            if str(k).startswith("DEDUP_") and str(k).endswith(("DATABASE", "PROJECT"))
        )
        if facts.is_proxy(function):
            accounts: frozenset[str] | None = facts.own_account_emails(function) or None
        else:
            email = runtime_email(function)
            accounts = frozenset({email}) if email else None
        named_as = label(function)
        # A watchdog with a database of its own writes only that one: it reads the others.
        reads_only = is_watchdog_function(function) and has_own_database(function)
        for key, database in _named_databases(function):
            writes = frozenset() if reads_only and key != WATCH_DATABASE_ENV else accounts
            add(database, writes, f"{named_as} ({key})")
    for declared in facts.of_type(FIRESTORE_DATABASE):
        name = known_str(get(declared.props, "name"))
        if name is not None:
            project = known_str(get(declared.props, "project"))
            database = RecordsDatabase(project, database_id(name))
            if not any(known.database.same_as(database) for known in found):
                # No function names it: nobody must write it (unless an unknown setting
                # of some function names it).
                found.append(KitDatabase(database, frozenset(), ()))
    if unsure:  # a function whose settings are unknown may write any of them
        return [KitDatabase(d.database, None, d.named_by) for d in found]
    return found


def database_writers(resources: Sequence[Resource]) -> list[Finding]:
    """Every database of the kit: a member holding a role that writes entities on it is
    one of the accounts that must write it. Not judged while those accounts, a grant's
    member or its condition are unknown."""
    facts = stack_facts(resources)
    declared = facts.custom_roles
    findings: list[Finding] = []
    databases = [d for d in facts.derived(kit_databases) if d.writers is not None]
    for resource, found in facts.granting:
        for grant in found:
            role = known_str(grant.role)
            if role is None or role in PRIMITIVE_ROLES:
                continue  # iam-no-primitive-roles blocks those: one violation per grant
            if not (role_permissions(role, declared) or frozenset()) & DATASTORE_WRITE:
                continue
            for kit in databases:
                how = _reach(resource, grant.condition, kit.database)
                if how is None:
                    continue
                assert kit.writers is not None
                for member in grant.members or []:
                    name = known_str(member)
                    if name is None or (
                        name.startswith("serviceAccount:")
                        and service_account_email(name) in kit.writers
                    ):
                        continue
                    findings.append(Finding(_writer_message(name, role, kit, how), resource.urn))
    return findings


def _reach(grant_on: Resource, condition: Any, database: RecordsDatabase) -> str | None:
    """How a grant on `grant_on` with `condition` reaches `database`, or None if it does
    not (or is not known yet): its one-database condition names it, or it has no such
    condition and is granted on the database's project, a folder or the organization."""
    if not is_hierarchy_level(grant_on.type):
        return None  # Firestore roles act on databases through the project only
    named = condition_database(condition)
    if is_unknown(named):
        return None
    if isinstance(named, str):
        return "its condition names it" if database.named_by(named) else None
    level = level_name(grant_on.type)
    if level != "project":
        return f"granted at {level} level without a one-database condition"
    project = get(grant_on.props, "project")
    if is_unknown(project):
        return None
    text = known_str(project)  # unset: the provider's default project, the stack's own
    if text is None or database.project is None or text == database.project:
        return "granted on its project without a one-database condition"
    return None



def _writer_message(member: str, role: str, kit: KitDatabase, how: str) -> str:
    must = ", ".join(sorted(kit.writers or ())) or "no account of the stack"
    named = ", ".join(kit.named_by) or "no function of the kit (declared in the stack)"
    return (
        f"{member} holds {role}, which writes the kit's database {str(kit.database)!r} "
        f"({how}; named by {named}): remove it, or set its condition to "
        'resource.name == "projects/P/databases/D" naming another database (readers: '
        "roles/datastore.viewer); only the accounts that must write it may ("
        f"{must}), else whoever holds the grant could write a completed record for a "
        "future run, a re-run request or a watchdog cursor"
    )


def _release_database(release: Resource) -> tuple[str | None, str] | None:
    """(project, database) a Firestore rules release applies to; None for other releases
    or while its name is not known."""
    name = known_str(get(release.props, "name"))
    if name is None:
        return None
    project = known_str(get(release.props, "project"))
    text = name.strip().lower()
    if text.startswith("projects/") and "/releases/" in text:
        project = name.split("/")[1]
        text = text.split("/releases/", 1)[1]
    if text == FIRESTORE_RELEASE:
        return project, DEFAULT_DATABASE
    if text.startswith(f"{FIRESTORE_RELEASE}/"):
        return project, text.removeprefix(f"{FIRESTORE_RELEASE}/") or DEFAULT_DATABASE
    return None


def no_firebase_rules_on_kit_databases(resources: Sequence[Resource]) -> list[Finding]:
    """No Firebase rules release for a database of the kit: the kit reaches its databases
    with IAM only (server client libraries bypass rules), so rules can only open them to
    Firebase clients (`allow read, write: if true` opens them to the internet)."""
    facts = stack_facts(resources)
    databases = [d.database for d in facts.derived(kit_databases)]
    findings: list[Finding] = []
    for release in facts.of_type(FIREBASE_RULES_RELEASE):
        target = _release_database(release)
        if target is None:
            continue
        project, database = target  # project None (unset, unknown): matched by ID alone
        if any(d.same_as(RecordsDatabase(project, database)) for d in databases):
            findings.append(Finding(
                f"Firebase rules release {known_str(get(release.props, 'name'))!r} applies "
                f"rules to the kit's database {database!r}, which only the kit's accounts "
                "reach through IAM: rules can only let Firebase clients (mobile, web, anyone "
                "with the project's API key) read or write its records: remove the release "
                "(and its ruleset)",
                release.urn,
            ))
    return findings
