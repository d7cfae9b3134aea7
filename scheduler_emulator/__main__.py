import sys

from scheduler_emulator.cli import main

sys.exit(main())
