"""Stack policies on the kit's Firestore databases (the dedup database, the proxy's, and
any other a function of the kit names): only the accounts that must write one may write
it, and no Firebase rules release opens one to clients.

A database of the kit is one a function of the kit (dedup function, proxy, watchdog)
names in a `DEDUP_*DATABASE` setting (DEDUP_DATABASE, or e.g. a watchdog's own database
setting), or a `gcp:firestore/database:Database` the stack declares. The accounts that
must write it are the runtime accounts of the functions naming it (the proxy's: also the
account declared in its component), but for a watchdog that has a database of its own
(DEDUP_WATCH_DATABASE), which writes that one only and reads the others; a team service's
database (docs/own-service.md) is written by the account its TeamService component grants
roles/datastore.user conditioned to it. Any other
member holding a role that writes entities (`roles/datastore.user`,
`roles/datastore.owner`, a custom role with datastore.entities.create/update/delete) is
refused, whether the grant's condition names the database or it has no one-database
condition on the database's project, a folder or the organization. Firestore roles act on
databases through the project (IAM conditions name databases, not collections), so that
is where writers are found.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from policies.facts import KitDatabase, stack_facts
from policies.gcp import service_account_email
from policies.grants import PRIMITIVE_ROLES, role_permissions
from policies.kit_resources import DEFAULT_DATABASE, RecordsDatabase
from policies.model import Finding, Resource
from policies.permissions import DATASTORE_WRITE
from policies.reach import database_reach
from policies.values import get, known_str

FIREBASE_RULES_RELEASE: Final = "gcp:firebaserules/release:Release"
# Release names of Firestore rules: `cloud.firestore` (the (default) database) or
# `cloud.firestore/<database>` (https://www.pulumi.com/registry/packages/gcp/api-docs/
# firebaserules/release/), optionally as `projects/P/releases/<name>`.
FIRESTORE_RELEASE: Final = "cloud.firestore"


def database_writers(resources: Sequence[Resource]) -> list[Finding]:
    """Every database of the kit: a member holding a role that writes entities on it is
    one of the accounts that must write it. Not judged while those accounts, a grant's
    member or its condition are unknown."""
    facts = stack_facts(resources)
    declared = facts.custom_roles
    findings: list[Finding] = []
    databases = [d for d in facts.kit_databases if d.writers is not None]
    for resource, found in facts.granting:
        for grant in found:
            role = known_str(grant.role)
            if role is None or role in PRIMITIVE_ROLES:
                continue  # iam-no-primitive-roles blocks those: one violation per grant
            if not (role_permissions(role, declared) or frozenset()) & DATASTORE_WRITE:
                continue
            for kit in databases:
                how = database_reach(resource, grant.condition, kit.database)
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
    databases = [d.database for d in facts.kit_databases]
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
