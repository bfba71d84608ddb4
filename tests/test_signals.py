"""A signal to the controller at any moment ends it cleanly (issue 21 section 5): exit 130,
no temporary folder or file left behind, no traceback, no "Exception ignored" noise.

``tests/signal_moments.py`` sends the signal at one exact moment (during the torch import,
right after a worker is forked or the xdist pool started, right after a temporary folder
or a report's temporary file is made), so each test is deterministic.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TESTS = Path(__file__).resolve().parent
SLOW = TESTS / "slow_functions.py"

CHECK = ["check", f"{SLOW}:Sleepy", "--samples", f"{SLOW}:samples", "--checks", "vmap"]


def _interrupt(tmp_path: Path, moment: str, signame: str, args: list[str], **env: str):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    proc = subprocess.run(
        [sys.executable, str(TESTS / "signal_moments.py"), moment, signame, *args],
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(ROOT), TMPDIR=str(tmp), **env),
        cwd=tmp_path,
        timeout=180,
    )
    return proc, tmp


def _clean(proc: subprocess.CompletedProcess[str], tmp: Path) -> None:
    out = proc.stdout + proc.stderr
    assert proc.returncode == 130, out
    assert "Traceback" not in out and "Exception ignored" not in out, out
    assert list(tmp.iterdir()) == [], list(tmp.iterdir())


@pytest.mark.parametrize("signame", ["SIGINT", "SIGTERM"])
def test_a_signal_during_the_torch_import_exits_130_quietly(tmp_path, signame):
    proc, tmp = _interrupt(tmp_path, "import:torch", signame, ["list"])
    _clean(proc, tmp)
    assert "afdb: interrupted" in proc.stderr


@pytest.mark.parametrize("signame", ["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("moment", ["mkdtemp", "fork"])
def test_a_signal_while_the_fork_workers_start_leaves_nothing_behind(tmp_path, moment, signame):
    proc, tmp = _interrupt(tmp_path, moment, signame, CHECK)
    _clean(proc, tmp)


@pytest.mark.parametrize("signame", ["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("moment", ["mkdtemp", "popen"])
def test_a_signal_while_the_xdist_pool_starts_leaves_nothing_behind(tmp_path, moment, signame):
    proc, tmp = _interrupt(tmp_path, moment, signame, CHECK, AFDB_WORKER_ENGINE="xdist")
    _clean(proc, tmp)


def test_a_signal_while_a_report_is_written_leaves_no_temporary_file(tmp_path):
    """The report's temporary file is made beside it: nothing of it may remain."""
    proc, tmp = _interrupt(tmp_path, "mkstemp", "SIGTERM", [*CHECK, "--json", "r.json"])
    _clean(proc, tmp)
    assert [p.name for p in tmp_path.iterdir()] == ["tmp"], list(tmp_path.iterdir())
