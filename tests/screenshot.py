"""Regenerate ``reports/screenshot-html-report.png``: the HTML report of a run with failures.

    .venv/bin/python -m tests.screenshot

The report joins a few database entries (passes, expected failures, unsupported checks)
with the README's ``BrokenRotatePoints`` (real failures), so the grid shows every colour.
Needs headless Chromium.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from harness.core.results import RunResult
from harness.reports.html import write_html

ROOT = Path(__file__).resolve().parent.parent
TARGET = ROOT / "reports" / "screenshot-html-report.png"
ENTRIES = ["RowSumWithCount", "NumpyCube", "CustomNumpySin", "NumpySort", "CubeGenerated"]


def afdb(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "harness.cli", *args], cwd=ROOT, check=False)


def main() -> int:
    chromium = next(
        (p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p),
        None,
    )
    if chromium is None:
        print("needs headless Chromium (apt-get install -y chromium)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        db, broken = Path(tmp, "db.json"), Path(tmp, "broken.json")
        afdb("run", *ENTRIES, "-q", "--json", str(db))
        rot = "examples/rotations.py"
        afdb(
            "check",
            f"{rot}:BrokenRotatePoints",
            "--samples",
            f"{rot}:rotation_samples",
            "--no-isolate",
            "-q",
            "--json",
            str(broken),
        )
        first = RunResult.from_json_dict(json.loads(db.read_text()))
        second = RunResult.from_json_dict(json.loads(broken.read_text()))
        result = RunResult(second.cases + first.cases, first.metadata)
        page = Path(tmp, "report.html")
        write_html(result, page)
        subprocess.run(
            [
                chromium,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--hide-scrollbars",
                f"--user-data-dir={tmp}/profile",
                "--window-size=1280,1000",
                f"--screenshot={TARGET}",
                page.as_uri(),
            ],
            check=True,
            capture_output=True,
            timeout=120,
        )
    print(f"wrote {TARGET}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
