"""Your job tests import as the deployed function does: the kit's `dedup` and your `jobs`
(function/jobs/), both put on sys.path by the installed kit."""

from scheduler_dedup_kit import activate

activate()
