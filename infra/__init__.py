"""The kit's Pulumi program (Pulumi.yaml: `main: infra/`).

Importable pieces (this package imports nothing itself, so `infra.scheduler_rules` stays
light for the policy pack and the Scheduler emulator):

- `infra.config`: `load_config(mapping)` / `config_from_pulumi()` -> validated `StackConfig`
- `infra.schema`: `python -m infra.schema` (`make schema`) regenerates Pulumi.yaml's config
  block, docs/configuration.md's reference and schema/stack.schema.json from the config models
- `infra.dedup_service`: `DedupService` component (function, identities, Firestore, IAM)
- `infra.dedup_proxy`: `DedupProxy` component (the idempotent proxy, its account and roles)
- `infra.cloud_function`: what both declare alike (the function and its invoker grant,
  the conditioned database role, API enablement)
- `infra.scheduled_job`: `ScheduledJob` component (one Cloud Scheduler job with OIDC)
- `infra.program`: `build(cfg)` declares the whole stack; `main()` is what `pulumi up` runs
- `infra.offline`: run the program under Pulumi's mocks (`run_offline`, `declare_stack`)
- `infra.plan`: `python -m infra.plan <stack>`, the offline plan
"""
