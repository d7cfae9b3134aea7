"""The wait for IAM propagation, inside the program: one `pulumi up` deploys a fresh project.

A new service account, and a role granted to it, take effect across Google Cloud only after
a while: Google documents that an access change usually propagates within 2 minutes and can
take 7 minutes or more. A function deployed right after its build account's grants fails
its build with a permission error (the build cannot read the staged source or push the
image); pulumi-gcp's own Cloud Functions 2nd gen example waits 60 s for exactly this, and
terraform-provider-google#20571 reports failures even then.

So the components wait with pulumiverse-time's `Sleep` (a resource of the `time` provider):
it is created once the accounts and their grants exist, and every function depends on it.
It waits when it is created, and again only when its `triggers` change (the accounts'
e-mails: new accounts, e.g. after a namePrefix change); an ordinary `pulumi up` that changes
code or settings does not wait. The length is the stack config's `iamPropagationSeconds`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final

import pulumi
from pulumiverse_time import Sleep

from infra.scheduler_rules import duration_string

SLEEP_TYPE: Final = "time:index/sleep:Sleep"


def wait_for_iam(
    resource_name: str,
    *,
    parent: pulumi.Resource,
    after: Sequence[pulumi.Resource],
    seconds: int,
    triggers: Mapping[str, pulumi.Input[str]],
) -> Sleep:
    """A `Sleep` of `seconds`, created after `after` (the accounts and grants a function
    needs); waits again whenever a value of `triggers` changes."""
    return Sleep(
        resource_name,
        create_duration=duration_string(seconds),
        triggers=dict(triggers),
        opts=pulumi.ResourceOptions(parent=parent, depends_on=list(after)),
    )
