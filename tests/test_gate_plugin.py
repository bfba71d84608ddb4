"""The pytest plugin in a throwaway user project: one item per case, -k, -n, JUnit."""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parent.parent
ROT = ROOT / "examples" / "rotations.py"

TEST_MODULE = """
from harness.pytest_plugin import conformance_tests
from mylib import BrokenRotatePoints, RotatePoints, rotation_samples

test_good = conformance_tests(RotatePoints, rotation_samples, checks=["vmap", "contract"])
test_broken = conformance_tests(BrokenRotatePoints, rotation_samples, checks=["vmap"])
test_misconfigured = conformance_tests(RotatePoints, lambda seed: [], checks=["vmap"])
"""


@pytest.fixture
def user_project(pytester, monkeypatch):
    pytester.makepyfile(mylib=ROT.read_text(), test_conformance=TEST_MODULE)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), str(pytester.path)]))
    return pytester


def test_items_have_stable_ids_and_k_selects(user_project):
    first = user_project.runpytest("--collect-only", "-q", "-p", "no:cacheprovider")
    second = user_project.runpytest("--collect-only", "-q", "-p", "no:cacheprovider")
    ids = [ln for ln in first.outlines if "::" in ln]
    assert ids == [ln for ln in second.outlines if "::" in ln]
    assert "test_conformance.py::test_broken[BrokenRotatePoints/vmap/s0/in_dims=(0,1),B=4]" in ids
    assert "test_conformance.py::test_good[RotatePoints/contract/s0/in_dims=(0,0),B=4]" in ids
    result = user_project.runpytest("-k", "test_broken and None", "-p", "no:cacheprovider")
    outcomes = result.parseoutcomes()
    assert outcomes.get("failed") == 2 and outcomes.get("passed") == 4, outcomes
    result.stdout.fnmatch_lines(
        ["*reproduce: afdb repro 'BrokenRotatePoints/vmap/s0/in_dims=(None,1),B=4' mylib:*"]
    )


def test_xdist_and_junit(user_project):
    junit = user_project.path / "junit.xml"
    result = user_project.runpytest_subprocess(
        "-n", "2", f"--junitxml={junit}", "-p", "no:cacheprovider", timeout=300
    )
    outcomes = result.parseoutcomes()
    assert outcomes["failed"] == 9, outcomes  # 8 broken vmap plans + the misconfigured suite
    # contract grew by pairwise nested plans; vmap by one non-contiguous plan per Function
    assert outcomes["passed"] == 54 + 9 + 2, outcomes
    cases = ET.parse(junit).getroot().iter("testcase")
    failed = {c.get("name"): c.find("failure") for c in cases if c.find("failure") is not None}
    name = "test_broken[BrokenRotatePoints/vmap/s0/in_dims=(0,-1),B=4]"
    assert name in failed
    assert "the batch dim is probably at the wrong position" in failed[name].get("message")
    setup = failed["test_misconfigured[setup]"].get("message")
    assert "returned no samples" in setup


def test_conformance_items_carry_the_afdb_marker(user_project):
    only = user_project.runpytest("--collect-only", "-q", "-p", "no:cacheprovider", "-m", "afdb")
    ids = [ln for ln in only.outlines if "::" in ln]
    assert ids and all("[" in i for i in ids)  # every conformance item, nothing else
    rest = user_project.runpytest(
        "--collect-only", "-q", "-p", "no:cacheprovider", "-m", "not afdb"
    )
    assert not [ln for ln in rest.outlines if "::" in ln]
    assert "deselected" in rest.stdout.str()
