"""The example project's Functions that take data beyond plain tensors and numbers
(``softlib.data_kinds``: a complex tensor, an index with ``Ellipsis``, an enum option):
``pytest --afdb`` and ``afdb record`` + ``afdb check --recorded`` find and check each, pass
the correct ones and fail exactly the planted ones (``SOFTLIB_PLANTED=complex,ellipsis,enum``),
which the project's own tests miss."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness.core.schema import read_report
from tests.test_recorded_project import PROJECT, pytest_argv

FUNCTIONS = ("ComplexGain", "Reduce", "TakeLast")
PLANTED = "complex,ellipsis,enum"
FAST = "contract,vmap,vjp"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    shutil.copytree(
        PROJECT, tmp_path / "proj", ignore=shutil.ignore_patterns(".afdb", "__pycache__")
    )
    return tmp_path / "proj"


def _run(cwd: Path, *argv: str, planted: bool = False) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    env["SOFTLIB_PLANTED"] = PLANTED if planted else ""
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return subprocess.run(list(argv), cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def verdict(out: str, name: str) -> str:
    prefix = f"  softlib.data_kinds:{name} "
    line = next((ln for ln in out.splitlines() if ln.startswith(prefix)), None)
    assert line is not None, f"no line for {name} in:\n{out}"
    return line[len(prefix) :].strip()


def test_each_kind_is_checked_and_conforms(project: Path):
    proc = _run(project, *pytest_argv("--afdb", "--afdb-checks", FAST, "tests/test_data_kinds.py"))
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    for name in FUNCTIONS:
        assert "conforms (" in verdict(out, name), out
    assert "3 Functions called by 3 tests: 3 conform, 0 fail" in out


def test_the_planted_bugs_fail_under_pytest_afdb(project: Path):
    argv = pytest_argv("--afdb", "--afdb-checks", FAST, "--afdb-json", "r.json")
    proc = _run(project, *argv, "tests/test_data_kinds.py", planted=True)
    out = proc.stdout
    assert proc.returncode == 1, out + proc.stderr
    assert "3 passed" in out  # the project's own tests do not see the bugs
    for name in FUNCTIONS:
        assert verdict(out, name).startswith("FAIL: "), out
    cases = read_report(str(project / "r.json"))["cases"]
    bad = {c["entry"] for c in cases if c["status"] in ("fail", "error")}
    assert bad == {f"softlib.data_kinds:{n}" for n in FUNCTIONS}


def test_afdb_record_then_check_recorded(project: Path):
    afdb = str(Path(sys.executable).parent / "afdb")
    argv = ("record", "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_data_kinds.py")
    proc = _run(project, afdb, *argv, planted=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "not recorded" not in proc.stdout + proc.stderr
    checked = _run(project, afdb, "check", "--recorded", "--checks", FAST, planted=True)
    assert checked.returncode == 1, checked.stdout + checked.stderr
    for name in FUNCTIONS:
        assert verdict(checked.stdout, name).startswith("FAIL: "), checked.stdout
    fixed = _run(project, afdb, "check", "--recorded", "--checks", FAST)  # bugs gone
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    for name in FUNCTIONS:
        assert verdict(fixed.stdout, name).startswith("conforms ("), fixed.stdout
