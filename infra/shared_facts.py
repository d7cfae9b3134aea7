"""Facts the stack config, the program and the policy pack share, declared once: the
component type of a team's own service and Google's default runtime accounts.

Standard library only, and no import of the kit: the policy pack's own process loads this
module (policies/gcp.py re-exports it) without pydantic or Pulumi's gcp provider, as it
loads `infra.scheduler_rules` (tests/policies/test_packaging.py).
"""

from __future__ import annotations

import re
from typing import Final

TEAM_SERVICE_COMPONENT_TYPE: Final = "scheduler-dedup:index:TeamService"
"""The type of what the kit declares around a team's own service (infra/team_service.py),
in its children's URNs, where the policy pack finds them."""

# Google's default runtime accounts: Compute Engine's (`PROJECT_NUMBER-compute@developer...`)
# and App Engine's (`PROJECT_ID@appspot...`). Both are often granted Editor, which holds
# datastore.user on every database of the project: a grant conditioned to one database adds
# nothing to such an account, and code running as it is bounded by nothing the kit declares.
_APP_ENGINE_DEFAULT_ACCOUNT: Final = re.compile(r"^[^@]+@appspot\.gserviceaccount\.com$")
_COMPUTE_DEFAULT_ACCOUNT_DOMAIN: Final = "-compute@developer.gserviceaccount.com"


def account_email(member: str) -> str:
    """The lower-case e-mail in `serviceAccount:E`, `projects/P/serviceAccounts/E` or `E`."""
    email = member.strip().removeprefix("serviceAccount:")
    if "/serviceAccounts/" in email:
        email = email.rsplit("/serviceAccounts/", 1)[1]
    return email.lower()


def is_default_runtime_account(email: str) -> bool:
    """The Compute Engine or App Engine default service account (in any of
    `account_email`'s forms; the `-compute@` one also with a project ID for the number)."""
    address = account_email(email)
    return address.endswith(_COMPUTE_DEFAULT_ACCOUNT_DOMAIN) or bool(
        _APP_ENGINE_DEFAULT_ACCOUNT.match(address))
