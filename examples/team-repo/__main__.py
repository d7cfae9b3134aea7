"""What `pulumi up` runs: the kit's Pulumi program, at the version requirements.txt pins.

Nothing to change here: your stacks (stacks/), jobs (function/jobs/) and their tests
(tests/jobs/) are what you edit.
"""

from scheduler_dedup_kit import run_program

run_program()
