"""Where the suite's own files live: the package folder and the checkout (or site-packages) above it.

One place, so that modules moving between wings never change what "the suite's code" or
"the shipped expectations" means.
"""

from __future__ import annotations

from pathlib import Path

#: ``.../harness``: every frame under it is the suite's own.
PACKAGE_DIR = Path(__file__).resolve().parent.parent
#: The folder holding ``harness`` (a checkout's root, or site-packages).
SUITE_ROOT = PACKAGE_DIR.parent
