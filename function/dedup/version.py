"""The kit's version, declared here and nowhere else.

The deployed functions name it in every log line (`kit_version`, dedup.entry.http.emit_log_line),
the Pulumi program in the stack outputs (`kitVersion`), and CHANGELOG.md's latest release
carries it (tests/infra/test_release.py checks all three); while CHANGELOG.md's Unreleased
section lists changes, it is the next release's development version (PEP 440, `2.0.0.dev0`),
never the last release's number. A plain constant: the function reads no package metadata to
know it. `scheduler-dedup release` writes it (operator_tools/release.py); this file is part of
each function's content-hashed archive (infra/source.py), so a new version redeploys them.
"""

from __future__ import annotations

from typing import Final

__version__: Final = "2.0.0.dev0"
