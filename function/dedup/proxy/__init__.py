"""The idempotent proxy: a Scheduler delivery turned into one start of a Google target
(handler), the targets and their calls (targets), and the signed run tokens it passes on
(tokens) for the downstream guard, dedup.idempotency."""
