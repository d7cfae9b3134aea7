import sys

from demo.cli import main
from demo.run import main_keeping_firestore

# --keep (make demo DEMO_ARGS=--keep): the Firestore emulator outlives the report, for make
# runs to read (demo.run.main_keeping_firestore); otherwise the demo as is.
sys.exit(main_keeping_firestore(sys.argv[1:], main))
