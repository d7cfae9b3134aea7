"""Stack policies for alerting: a stack of the kit has alert policies that notify someone.

A stack is production-like when a Firestore database of it has delete protection on
(`deleteProtectionState: DELETE_PROTECTION_ENABLED`, the kit's `deleteProtection: true`);
then at least one `gcp:monitoring/alertPolicy:AlertPolicy` must name at least one
notification channel (mandatory). Other stacks of the kit get the same advice (advisory).
Only stacks with a function of the kit are judged. Channels whose IDs are not known yet
(created in the same update) count.
"""

from __future__ import annotations

from collections.abc import Sequence

from policies.gcp import ALERT_POLICY, FIRESTORE_DATABASE
from policies.model import Finding, Resource
from policies.stack import dedup_functions
from policies.values import as_list, get, is_unknown, known_str

PROTECTED: str = "DELETE_PROTECTION_ENABLED"


def production_like(resources: Sequence[Resource]) -> bool:
    """A Firestore database of the stack has delete protection on."""
    return any(
        r.type == FIRESTORE_DATABASE
        and known_str(get(r.props, "deleteProtectionState")) == PROTECTED
        for r in resources
    )


def notifies(policy: Resource) -> bool:
    """The policy names a notification channel (or ones not known yet)."""
    channels = get(policy.props, "notificationChannels")
    if is_unknown(channels):
        return True
    listed = as_list(channels) or []
    return any(is_unknown(c) or known_str(c) for c in listed)


def _problem(resources: Sequence[Resource]) -> list[Finding]:
    functions = dedup_functions(resources)
    if not functions:
        return []
    policies = [r for r in resources if r.type == ALERT_POLICY]
    if any(notifies(p) for p in policies):
        return []
    if policies:
        message = (
            f"none of the stack's {len(policies)} alert policies names a notification "
            "channel, so a missed, failed or overlong run alerts nobody: set the stack "
            "config alerts.emails (or the policies' notificationChannels)"
        )
    else:
        message = (
            "the stack has no alert policy, so a missed, failed or overlong run alerts "
            "nobody: declare alert policies with at least one notification channel (the "
            "kit's program does, from the stack config alerts.emails)"
        )
    return [Finding(message, functions[0].urn)]


def production_alerting(resources: Sequence[Resource]) -> list[Finding]:
    """dedup-alerting-notifies-production: mandatory for a delete-protected stack."""
    return _problem(resources) if production_like(resources) else []


def alerting(resources: Sequence[Resource]) -> list[Finding]:
    """dedup-alerting-notifies: the same advice for the other stacks (advisory)."""
    return [] if production_like(resources) else _problem(resources)
