"""The pulumi-gcp modules the program declares resources from, one import each.

Imported module by module, never as `import pulumi_gcp`: that package's __init__ imports
all ~2,400 of its modules for type checkers, which cost mypy two minutes from a cold cache
(as CI starts). pyproject.toml has mypy skip that __init__ alone, so every module named
here is still checked in full (argument names included), and ruff's banned-api keeps
other files from importing pulumi_gcp directly. A resource of another service: add its
module here.
"""

from pulumi_gcp import artifactregistry as artifactregistry  # noqa: TID251
from pulumi_gcp import bigquery as bigquery  # noqa: TID251
from pulumi_gcp import cloudfunctionsv2 as cloudfunctionsv2  # noqa: TID251
from pulumi_gcp import cloudrunv2 as cloudrunv2  # noqa: TID251
from pulumi_gcp import cloudscheduler as cloudscheduler  # noqa: TID251
from pulumi_gcp import cloudtasks as cloudtasks  # noqa: TID251
from pulumi_gcp import firestore as firestore  # noqa: TID251
from pulumi_gcp import logging as logging  # noqa: TID251
from pulumi_gcp import monitoring as monitoring  # noqa: TID251
from pulumi_gcp import organizations as organizations  # noqa: TID251
from pulumi_gcp import projects as projects  # noqa: TID251
from pulumi_gcp import pubsub as pubsub  # noqa: TID251
from pulumi_gcp import secretmanager as secretmanager  # noqa: TID251
from pulumi_gcp import serviceaccount as serviceaccount  # noqa: TID251
from pulumi_gcp import storage as storage  # noqa: TID251
