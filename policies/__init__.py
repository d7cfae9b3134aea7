"""The kit's CrossGuard policy pack, as plain functions.

Every policy is a pure function over (resource type, camelCase properties), or over the
whole set of a stack's resources, returning violation messages. `policies.pack` wraps them
into pulumi_policy objects for `pulumi preview --policy-pack policies`; `policies.offline_check`
runs the very same functions over the resources the Pulumi program declares under mocks.
Importing this package (or any module but `__main__`) never starts the policy server.
"""
