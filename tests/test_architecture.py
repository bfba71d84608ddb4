"""The shape of harness/ (issue 37): no import circles, no module past 600 lines, no private
name imported from another module. Each measure is shown to catch a planted defect."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.architecture import count

ROOT = Path(__file__).resolve().parent.parent / "harness"


def test_the_harness_has_no_circle_no_long_module_no_private_seam():
    counts = count(ROOT)
    assert counts.circles == [], counts.circles
    assert counts.long_modules == [], counts.long_modules
    assert counts.private_imports == [], counts.private_imports
    assert counts.modules > 100  # it read the tree


def _tree(tmp_path: Path) -> Path:
    root = tmp_path / "harness"
    shutil.copytree(ROOT, root, ignore=shutil.ignore_patterns("__pycache__"))
    return root


def test_a_planted_circle_through_a_function_level_import_is_found(tmp_path):
    root = _tree(tmp_path)
    with open(root / "core" / "errors.py", "a") as f:
        f.write("\n\ndef _late():\n    from harness.checks import compare  # planted\n")
    with open(root / "checks" / "compare.py", "a") as f:
        f.write("\nimport harness.core.errors  # planted\n")
    circles = count(root).circles
    assert any({"harness.core.errors", "harness.checks.compare"} <= set(c) for c in circles)


def test_a_planted_long_module_and_private_import_are_found(tmp_path):
    root = _tree(tmp_path)
    (root / "core" / "long.py").write_text("x = 1\n" * 601)
    with open(root / "core" / "paths.py", "a") as f:
        f.write("\nfrom harness.core.errors import _planted  # planted\n")
    counts = count(root)
    assert ("harness.core.long", 601) in counts.long_modules
    assert ("harness.core.paths", "harness.core.errors", "_planted") in counts.private_imports
