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

from policies.facts import StackFacts, stack_facts
from policies.gcp import ALERT_POLICY
from policies.kit_resources import notifies
from policies.model import Finding, Resource


def _problem(facts: StackFacts) -> list[Finding]:
    functions = facts.dedup_functions
    if not functions:
        return []
    policies = facts.of_type(ALERT_POLICY)
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
    facts = stack_facts(resources)
    return _problem(facts) if facts.production_like else []


def alerting(resources: Sequence[Resource]) -> list[Finding]:
    """dedup-alerting-notifies: the same advice for the other stacks (advisory)."""
    facts = stack_facts(resources)
    return [] if facts.production_like else _problem(facts)
