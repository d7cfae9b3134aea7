"""`python -m scheduler_dedup_kit <command>`: the same as `scheduler-dedup <command>`."""

import sys

from scheduler_dedup_kit.cli import main

sys.exit(main())
