"""`make bench`: the kit's dedup protocol against the textbook transactional version.

textbook.py       the comparator: the usual transactional dedup handler
textbook_main.py  its functions-framework entry point, served like function/main.py
servers.py        both handlers served the same way (local_stack.FunctionServer)
scenarios.py      the six scenarios, each run for both handlers, interleaved
paired.py         timing verdicts: the median kit/comparator ratio of paired rounds
report.py         figures, targets, the table, latest.json and latency.png
harness.py        the command line: `python -m bench [--quick] [--strict]`
"""

from __future__ import annotations

import sys
from pathlib import Path

# The function's source root (function/) imports as `dedup`, `jobs`, `main`, as it does on
# Cloud Run and under pytest (pyproject's pythonpath); `python -m bench` needs it too.
_FUNCTION_DIR = str(Path(__file__).resolve().parent.parent / "function")
if _FUNCTION_DIR not in sys.path:
    sys.path.insert(0, _FUNCTION_DIR)
