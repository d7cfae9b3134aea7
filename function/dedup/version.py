"""The kit's version, declared here and nowhere else.

The deployed functions name it in every log line (`kit_version`, dedup.entry.http.emit_log_line),
the Pulumi program in the stack outputs (`kitVersion`), and CHANGELOG.md's latest release
carries it (tests/test_release.py checks all three). A plain constant: the function reads no
package metadata to know it. Bump it with a release in CHANGELOG.md; this file is part of
each function's content-hashed archive (infra/source.py), so a new version redeploys them.
"""

from __future__ import annotations

from typing import Final

__version__: Final = "1.0.0"
