"""``pytest --afdb`` and ``afdb record`` + ``afdb check --recorded`` on the example project
``examples/recorded_project`` (softlib), run as a user runs them (subprocesses in a copy).

softlib's own tests pass with and without its planted bugs (``SOFTLIB_PLANTED=vmap,backward``:
ScaledTanh's vmap rule returns the wrong out_dims, SoftClamp's backward drops a factor);
the recorded check finds every Function, passes the correct ones and fails exactly the two
planted ones. Most runs select a few checks to stay fast.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness.core.schema import read_report

ROOT = Path(__file__).resolve().parent.parent
PROJECT = ROOT / "examples" / "recorded_project"
FUNCTIONS = (
    "GatherRows",
    "LegacyCube",
    "PowerNorm",
    "RoundSTE",
    "ScaledTanh",
    "SmoothAbs",
    "SoftClamp",
)
FAST = "contract,vmap,vjp"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    shutil.copytree(
        PROJECT, tmp_path / "proj", ignore=shutil.ignore_patterns(".afdb", "__pycache__")
    )
    return tmp_path / "proj"


def run(cwd: Path, *argv: str, planted: bool = False) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    env.pop("SOFTLIB_PLANTED", None)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    if planted:
        env["SOFTLIB_PLANTED"] = "vmap,backward"
    return subprocess.run(list(argv), cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def pytest_argv(*extra: str) -> list[str]:
    return [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-W", "ignore", *extra]


def verdict(out: str, name: str) -> str:
    prefix = f"  softlib.functions:{name} "
    line = next((ln for ln in out.splitlines() if ln.startswith(prefix)), None)
    assert line is not None, f"no line for {name} in:\n{out}"
    return line[len(prefix) :].strip()


def test_the_correct_project_conforms_under_pytest_afdb(project: Path):
    proc = run(project, *pytest_argv("--afdb"))
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    assert (
        "16 passed" in out
    )  # 7 in test_softlib.py, 3 in test_data_kinds.py, 6 in test_live_kinds.py
    assert "afdb: the Functions these tests called" in out
    for name in FUNCTIONS:
        assert "conforms (" in verdict(out, name), out
    assert verdict(out, "LegacyCube").startswith("legacy: eager checks only, see ")
    # softlib.functions' 7, softlib.data_kinds' 3 and softlib.live_kinds' 7
    assert (
        "17 Functions called by 16 tests: 17 conform (1 legacy: eager checks only), 0 fail" in out
    )


def test_the_planted_bugs_fail_the_session_though_its_tests_pass(project: Path):
    proc = run(
        project,
        *pytest_argv("--afdb", "--afdb-checks", FAST, "--afdb-json", "r.json"),
        planted=True,
    )
    out = proc.stdout
    assert proc.returncode == 1, out + proc.stderr
    assert "16 passed" in out  # the project's own tests do not see the bugs
    assert verdict(out, "ScaledTanh").startswith("FAIL: ") and "vmap" in verdict(out, "ScaledTanh")
    assert verdict(out, "SoftClamp").startswith("FAIL: ") and "in vjp" in verdict(out, "SoftClamp")
    for name in set(FUNCTIONS) - {"ScaledTanh", "SoftClamp", "LegacyCube"}:
        assert "conforms (" in verdict(out, name), out
    assert verdict(out, "LegacyCube").startswith("legacy: ")  # its checks are eager_*
    assert "17 Functions called by 16 tests: 14 conform, 2 fail, 1 nothing checked" in out
    cases = read_report(str(project / "r.json"))["cases"]
    bad = {c["entry"] for c in cases if c["status"] in ("fail", "error")}
    assert bad == {"softlib.functions:ScaledTanh", "softlib.functions:SoftClamp"}
    assert "afdb: wrote r.json" in out


def test_report_only_keeps_the_session_green(project: Path):
    proc = run(
        project, *pytest_argv("--afdb", "--afdb-report-only", "--afdb-checks", "vmap"), planted=True
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert verdict(proc.stdout, "ScaledTanh").startswith("FAIL: ")
    assert "--afdb-report-only: the session's exit status ignores these failures" in proc.stdout


def test_a_wrong_declaration_is_one_line_and_a_usage_error(project: Path):
    proc = run(
        project, *pytest_argv("--afdb", "--afdb-declare", "softlib.functions:RoundSTE colour=red")
    )
    assert proc.returncode == 4, proc.stdout + proc.stderr
    (line,) = proc.stderr.strip().splitlines()  # before the tests run: none passed
    assert line.startswith(
        "ERROR: afdb: declaration 'softlib.functions:RoundSTE colour=red': unknown key 'colour'"
    )
    assert "passed" not in proc.stdout


def test_afdb_record_then_check_recorded(project: Path):
    afdb = str(Path(sys.executable).parent / "afdb")
    proc = run(
        project, afdb, "record", "-m", "pytest", "-q", "-p", "no:cacheprovider", planted=True
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr  # the tests pass
    declare = ["--declare", "softlib.functions:RoundSTE gradient=custom"]
    checked = run(project, afdb, "check", "--recorded", "--checks", FAST, *declare, planted=True)
    out = checked.stdout
    assert checked.returncode == 1, out + checked.stderr
    assert verdict(out, "ScaledTanh").startswith("FAIL: ")
    assert verdict(out, "SoftClamp").startswith("FAIL: ")
    for name in set(FUNCTIONS) - {"ScaledTanh", "SoftClamp", "LegacyCube"}:
        assert "conforms (" in verdict(out, name), out
    assert verdict(out, "LegacyCube").startswith("legacy: ")  # its checks are eager_*
    # the same recording with the bugs gone (the classes are imported again), one Function
    # selected by a case id prefix: only its vmap cases run, and they conform
    prefix = "softlib.functions:ScaledTanh/vmap"
    fixed = run(project, afdb, "check", "--recorded", ".afdb/recorded", prefix, "--json", "f.json")
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert "SoftClamp" not in fixed.stdout
    assert verdict(fixed.stdout, "ScaledTanh").startswith("conforms (")
    ran = {(c["entry"], c["check"]) for c in read_report(str(project / "f.json"))["cases"]}
    assert ran == {("softlib.functions:ScaledTanh", "vmap")}
    # not a terminal: no progress lines (`ENTRY: N pass (... in cases)`), only the verdicts
    assert "in cases)" not in checked.stdout + fixed.stdout


def test_xdist_workers_are_checked_in_the_controller(project: Path):
    pytest.importorskip("xdist")
    proc = run(
        project, *pytest_argv("-n", "2", "--afdb", "--afdb-checks", "vmap,vjp"), planted=True
    )
    out = proc.stdout
    assert proc.returncode == 1, out + proc.stderr
    assert out.count("afdb: the Functions these tests called") == 1
    assert verdict(out, "ScaledTanh").startswith("FAIL: ")
    assert verdict(out, "SoftClamp").startswith("FAIL: ")
    # the workers' live values and classes made per call are gone in the controller
    assert (
        "17 Functions called by 16 tests: 11 conform, 2 fail, 1 nothing checked (every case "
        "skipped), 1 live-only (need the recording process), 2 not checkable (2 not importable "
        "here)"
    ) in out
    assert (
        "1 call needs the recording process (a pytest-xdist worker): run `pytest --afdb` without -n"
        in out
    )


def test_the_suites_own_pytest_does_not_collect_the_example():
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert config["tool"]["pytest"]["ini_options"]["testpaths"] == ["tests"]


LOCAL_TEST = """
import torch


def test_a_function_defined_in_a_test():
    class Triple(torch.autograd.Function):  # <locals>: only the recording process has it
        generate_vmap_rule = True

        @staticmethod
        def forward(x):
            return 3 * x

        @staticmethod
        def setup_context(ctx, inputs, output):
            pass

        @staticmethod
        def backward(ctx, grad):
            return 3 * grad

    Triple.apply(torch.randn(5, 7, requires_grad=True)).sum().backward()
"""


@pytest.mark.parametrize("workers", [None, "2"])
def test_a_class_defined_in_a_test_is_checked_or_named(tmp_path: Path, workers):
    if workers:
        pytest.importorskip("xdist")
    (tmp_path / "test_local.py").write_text(LOCAL_TEST)
    extra = ("-n", workers) if workers else ()
    proc = run(tmp_path, *pytest_argv(*extra, "--afdb", "--afdb-checks", "vmap,vjp"))
    line = next(ln for ln in proc.stdout.splitlines() if "<locals>.Triple" in ln)
    if workers:  # the worker's live class is gone: named, with how to check it
        assert "not checked: " in line and "run `pytest --afdb` without -n" in line, line
        assert proc.returncode == 5, proc.stdout + proc.stderr  # the tests passed, nothing checked
    else:  # checked in the pytest process with the live class
        assert "conforms (" in line, line
        assert proc.returncode == 0, proc.stdout + proc.stderr
