"""Helpers for the shim tests: a fresh interpreter's JSON answer, a shim installed for one test."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def fresh_json(code: str, env_extra: dict[str, str]) -> dict[str, Any]:
    """Run ``code`` in a fresh interpreter (this checkout first on the path) and return the
    JSON object its last line prints: what a process that imported nothing else does."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), **env_extra)
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=240
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def install_for_test(shim: Any, monkeypatch: Any) -> None:
    """Install ``shim`` (a ``harness.core`` shim module) whatever the process did before;
    the caller uninstalls it after the test (monkeypatch puts its switch back)."""
    shim.PATCH.uninstall()
    monkeypatch.setattr(shim.PATCH, "off", False)
    assert shim.PATCH.install()
