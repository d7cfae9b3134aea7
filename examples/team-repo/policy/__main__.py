"""The kit's policy pack, at the version requirements.txt pins: what
`pulumi preview --policy-pack policy` and `pulumi up --policy-pack policy` run.

Nothing to change here: turn a policy advisory or off for a stack in
policies/policy-config.<stack>.json.
"""

from scheduler_dedup_kit import run_policy_pack

run_policy_pack()
