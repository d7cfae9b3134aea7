"""TeamService: what the kit declares around a team's own service (`services[]`).

The service itself (a Cloud Run service or function, or an App Engine service) is the
team's: it runs the protocol library (docs/own-service.md), and the kit neither builds nor
deploys it. Around it the kit declares:
- its own records database (`<databaseName>-<name>`) with the TTL policy, like a runtime's
  (infra/records_database.py): Firestore IAM conditions name databases, not collections,
  so the service's account may claim runs there and in no other of the kit's databases;
- `roles/datastore.user` for the service's runtime account, conditioned to that database
  (the same condition as a runtime's account on its own, infra/cloud_function.py);
- for a Cloud Run service: `roles/run.invoker` for the jobs' invoker account on that one
  service (gcp.cloudrunv2.ServiceIamMember, arguments project, location, name, role,
  member: https://www.pulumi.com/registry/packages/gcp/api-docs/cloudrunv2/serviceiammember).
  The watchdog grants itself the same when it delivers the service's runs (infra/watchdog.py).
  For an App Engine service nothing per service is grantable: Scheduler's App Engine targets
  carry no token, and App Engine has no per-service invoker role (access is the app's
  ingress, firewall or IAP: docs/own-service.md).
What the kit cannot see (the service's code, its own IAM, ingress, runtime account and
DEDUP_* settings) `make plan` prints as a checklist (operator_tools/plan.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

import pulumi

from infra import gcp
from infra.cloud_function import grant_database_user, grant_invoker
from infra.config import DedupSettings, StackConfig, TeamServiceSettings
from infra.records_database import declare_records_database
from infra.shared_facts import TEAM_SERVICE_COMPONENT_TYPE

COMPONENT_TYPE: Final = TEAM_SERVICE_COMPONENT_TYPE


def run_service_name(project: str, region: str, service: TeamServiceSettings) -> str | None:
    """A team's Cloud Run service by its full name (as the kit's own invoker grants name
    theirs); None for an App Engine service."""
    if service.cloud_run is None:
        return None
    return f"projects/{project}/locations/{region}/services/{service.cloud_run}"


@dataclass(frozen=True)
class TeamServiceArgs:
    """One team service's settings and what it shares with the stack."""

    project: str
    region: str
    service: TeamServiceSettings
    database_name: str
    dedup: DedupSettings
    invoker_member: pulumi.Input[str]
    """The jobs' invoker account as an IAM member (`serviceAccount:...`)."""
    depends_on: Sequence[pulumi.Resource]
    """What its database waits for (the APIs)."""

    @classmethod
    def from_config(
        cls, cfg: StackConfig, service: TeamServiceSettings, *,
        invoker_member: pulumi.Input[str], depends_on: Sequence[pulumi.Resource],
    ) -> TeamServiceArgs:
        return cls(project=cfg.project, region=cfg.region, service=service,
                   database_name=cfg.service_database(service), dedup=cfg.dedup,
                   invoker_member=invoker_member, depends_on=depends_on)

    @property
    def member(self) -> str:
        """The service's runtime account as an IAM member."""
        return f"serviceAccount:{self.service.service_account}"


class TeamService(pulumi.ComponentResource):
    """A team service's records database, its account's claim on it, and the invoker's
    grant on a Cloud Run service."""

    database: gcp.firestore.Database
    datastore_user: gcp.projects.IAMMember
    """roles/datastore.user for the service's account, conditioned to its database."""
    invoker_binding: gcp.cloudrunv2.ServiceIamMember | None
    """roles/run.invoker for the invoker on the Cloud Run service; None on App Engine."""

    def __init__(
        self, name: str, args: TeamServiceArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__(COMPONENT_TYPE, name, None, opts)
        service = args.service
        records = declare_records_database(
            name, parent=self, project=args.project, database_name=args.database_name,
            dedup=args.dedup, depends_on=args.depends_on,
        )
        self.database = records.database
        self.ttl_field = records.ttl_field
        self.datastore_user = grant_database_user(
            f"{name}-datastore-user", parent=self, project=args.project, member=args.member,
            database=self.database.name,
        )
        self.invoker_binding = None
        if (run_service := run_service_name(args.project, args.region, service)) is not None:
            self.invoker_binding = grant_invoker(
                f"{name}-invoker", parent=self, project=args.project, region=args.region,
                service_name=run_service, member=args.invoker_member,
            )
        self.register_outputs({"databaseName": self.database.name})

    @property
    def ready(self) -> Sequence[pulumi.Resource]:
        """What a job aimed at the service waits for before its first delivery: its records
        database's TTL policy, its account's claim, and the invoker's grant."""
        return [self.ttl_field, self.datastore_user,
                *([self.invoker_binding] if self.invoker_binding is not None else [])]
