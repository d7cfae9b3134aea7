"""`python -m simulation`: see simulation/cli.py.

A seed replays exactly only with the same string hashes (the kit iterates sets of run
IDs): the command runs itself again under PYTHONHASHSEED=0 unless already so."""

import os
import sys

if os.environ.get("PYTHONHASHSEED") != "0":
    os.environ["PYTHONHASHSEED"] = "0"
    os.execv(sys.executable, [sys.executable, "-m", "simulation", *sys.argv[1:]])

from simulation.cli import main  # after the re-run above

sys.exit(main())
