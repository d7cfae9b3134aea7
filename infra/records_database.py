"""A Firestore database of run records: the dedup service's, and the proxy's own (and,
declared the same way, the watchdog's own database of cursors and re-run requests).

Each component that writes run records has a database of its own, because Firestore IAM
conditions name databases, not collections: `roles/datastore.user` conditioned to a
database lets its holder write every document in it. The dedup function runs the team's
job code; were the proxy's records in its database, that code could write a proxied job's
record and silently suppress the run. Both databases are declared here, one way: the
same location, delete protection and point-in-time recovery (from the stack's dedup
settings), and the same collection with the TTL policy on `expire_at`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

import pulumi

from infra import gcp
from infra.config import DedupSettings

TTL_FIELD: Final = "expire_at"
SCHEDULE_TIME_FIELD: Final = "schedule_time"


@dataclass(frozen=True)
class RecordsDatabase:
    database: gcp.firestore.Database
    ttl_field: gcp.firestore.Field
    """TTL policy on expire_at, which is exempt from indexing."""
    schedule_time_field: gcp.firestore.Field
    """schedule_time exempt from indexing (no TTL)."""


def declare_records_database(
    name: str,
    *,
    parent: pulumi.Resource,
    project: str,
    database_name: str,
    dedup: DedupSettings,
    depends_on: Sequence[pulumi.Resource] = (),
) -> RecordsDatabase:
    """The database `database_name` with the records' collection `dedup.collection`;
    resources named `<name>-database`, `<name>-ttl-field`, `<name>-schedule-time-field`."""
    database = declare_database(
        f"{name}-database", parent=parent, project=project, database_name=database_name,
        dedup=dedup, depends_on=depends_on,
    )
    ttl_field = declare_unindexed_field(
        f"{name}-ttl-field", parent=parent, project=project, database=database.name,
        collection=dedup.collection, field_name=TTL_FIELD, ttl=True,
    )
    # After the TTL field, not beside it: Firestore has answered field operations run side
    # by side on a new database with 409 ("underlying data changed").
    schedule_time_field = declare_unindexed_field(
        f"{name}-schedule-time-field", parent=parent, project=project, database=database.name,
        collection=dedup.collection, field_name=SCHEDULE_TIME_FIELD, ttl=False,
        after=[ttl_field],
    )
    return RecordsDatabase(database, ttl_field, schedule_time_field)


def declare_database(
    resource_name: str,
    *,
    parent: pulumi.Resource,
    project: str,
    database_name: str,
    dedup: DedupSettings,
    depends_on: Sequence[pulumi.Resource] = (),
) -> gcp.firestore.Database:
    """A Firestore database of the kit: the stack's location, delete protection and
    point-in-time recovery (its dedup settings)."""
    return gcp.firestore.Database(
        resource_name,
        project=project,
        name=database_name,
        location_id=dedup.firestore_location,
        type="FIRESTORE_NATIVE",
        app_engine_integration_mode="DISABLED",
        delete_protection_state=(
            "DELETE_PROTECTION_ENABLED" if dedup.delete_protection
            else "DELETE_PROTECTION_DISABLED"
        ),
        point_in_time_recovery_enablement=(
            "POINT_IN_TIME_RECOVERY_ENABLED"
            if dedup.point_in_time_recovery
            else "POINT_IN_TIME_RECOVERY_DISABLED"
        ),
        # Let `pulumi destroy` delete an unprotected database; a protected one is also
        # `protect`ed in Pulumi, so destroy refuses before touching anything.
        deletion_policy="DELETE",
        opts=pulumi.ResourceOptions(
            parent=parent, depends_on=list(depends_on), protect=dedup.delete_protection
        ),
    )


def declare_unindexed_field(
    resource_name: str,
    *,
    parent: pulumi.Resource,
    project: str,
    database: pulumi.Input[str],
    collection: str,
    field_name: str,
    ttl: bool,
    after: Sequence[pulumi.Resource] = (),
) -> gcp.firestore.Field:
    """One field of a records collection, exempt from indexing, with the TTL policy if
    `ttl`; declared after `after` (one field operation at a time on a database).

    Firestore indexes every field by default; the records are only ever read by document
    ID. expire_at carries the TTL policy (Firestore deletes expired records, typically
    within a day) and, like schedule_time, is exempt from indexing: both keep increasing
    across documents, and a field indexed in sequence writes each new entry next to the
    previous one, which caps the collection at about 500 writes per second and costs an
    index write per record."""
    return gcp.firestore.Field(
        resource_name,
        project=project,
        database=database,
        collection=collection,
        field=field_name,
        ttl_config=gcp.firestore.FieldTtlConfigArgs() if ttl else None,
        index_config=gcp.firestore.FieldIndexConfigArgs(),
        opts=pulumi.ResourceOptions(parent=parent, depends_on=list(after)),
    )
