"""The pytest plugin in a user's project (issue 30, parts 1 and 7): conformance items are
known by their marker, never by the folder a project lives in; a daemon a case starts does
not outlive pytest."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parent.parent
LEGACY = ROOT / "tests" / "legacy_functions.py"

PLAIN_TESTS = """
import pytest


def test_plain():
    assert 1 + 1 == 2


@pytest.mark.skip(reason="needs a GPU")
def test_needs_a_gpu():
    pass
"""

NOTHING_CHECKED = """
from harness.pytest_plugin import conformance_tests
from legacy_functions import LegacyScaledTanh, three_samples

test_legacy = conformance_tests(LegacyScaledTanh, three_samples, checks=["vmap", "jvp"])
"""


@pytest.fixture
def afdb_folder(pytester, monkeypatch):
    """A project in a folder named ``afdb`` (as ``git clone ... afdb`` makes)."""
    folder = pytester.mkdir("afdb")
    (folder / "test_plain.py").write_text(PLAIN_TESTS)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), str(folder)]))
    monkeypatch.chdir(folder)
    return folder


def test_skipped_tests_in_a_folder_named_afdb_exit_0(pytester, afdb_folder):
    """Before the fix the plugin took every test under a folder named ``afdb`` for a
    conformance case (``report.keywords`` hold the parent folders' names), so a skipped
    test was a group that "checked nothing" and the run exited 5."""
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-rs", str(afdb_folder))
    out = result.stdout.str()
    assert result.ret == 0, out
    assert result.parseoutcomes() == {"passed": 1, "skipped": 1}, out
    assert "nothing checked" not in out
    result.stdout.fnmatch_lines(["SKIPPED *needs a GPU"])


def test_a_conformance_group_that_checked_nothing_still_exits_5_under_xdist(pytester, afdb_folder):
    """The marker's attribute travels from the xdist workers to the controller: the
    conformance group that checked nothing is found, the skipped plain test is not."""
    (afdb_folder / "legacy_functions.py").write_text(LEGACY.read_text())
    (afdb_folder / "test_conf.py").write_text(NOTHING_CHECKED)
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-n", "2", str(afdb_folder), timeout=300
    )
    out = result.stdout.str()
    assert result.ret == 5, out
    notes = [ln for ln in out.splitlines() if ln.startswith("afdb: nothing checked by ")]
    assert len(notes) == 1 and "test_conf.py::test_legacy" in notes[0], notes
