"""A bad environment gets one line, before the tests run (issue 44, part 2).

A small project (one Function, one test) is written to a temporary folder and run as a
user runs it (``python -m pytest --afdb`` in a subprocess); each test plants one thing in
its environment (a file where the recording folder goes, a link in the recording folder,
a wrong option, a declaration of a class that is not a recorded Function) and checks the
one line, the exit status and that the tests did not run; the twin without it conforms.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

MINI = """
import torch


class Double(torch.autograd.Function):
    @staticmethod
    def forward(x):
        return x * 2

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def backward(ctx, g):
        return g * 2

    @staticmethod
    def vmap(info, in_dims, x):
        return x * 2, in_dims[0]


class NotAFunction:
    pass
"""

TEST = """
import torch
from mini import Double


def test_double():
    x = torch.randn(3, requires_grad=True)
    assert torch.equal(Double.apply(x), x * 2)
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    (root / "tests").mkdir(parents=True)
    (root / "mini.py").write_text(textwrap.dedent(MINI))
    (root / "tests" / "test_mini.py").write_text(textwrap.dedent(TEST))
    (root / "pytest.ini").write_text("[pytest]\n")
    return root


def run(cwd: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return subprocess.run(list(argv), cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def pytest_afdb(cwd: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-W", "ignore"]
    return run(cwd, *argv, "--afdb", "--afdb-checks", "vmap", *extra)


def refused_before_the_tests(proc: subprocess.CompletedProcess[str], *words: str) -> str:
    """Exit 4, one line on stderr naming the problem, no traceback, no test run."""
    assert proc.returncode == 4, proc.stdout + proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("ERROR: ") and "Traceback" not in proc.stdout + proc.stderr
    for word in words:
        assert word in line, line
    assert "passed" not in proc.stdout and "test_double" not in proc.stdout, proc.stdout
    return line


def conforms(proc: subprocess.CompletedProcess[str]) -> None:
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "  mini:Double  conforms (" in proc.stdout, proc.stdout
    assert "1 passed" in proc.stdout


def test_a_file_where_the_recording_folder_goes_is_one_line_before_the_tests(project):
    (project / ".afdb").write_text("")
    line = refused_before_the_tests(
        pytest_afdb(project), "--afdb: .afdb: exists and is not a folder (in the way of .afdb/"
    )
    assert str(project) not in line  # where, as the user reads it: relative
    (project / ".afdb").unlink()
    conforms(pytest_afdb(project))


def test_a_recording_folder_holding_a_link_is_refused_before_the_tests(project, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (project / ".afdb" / "recorded").mkdir(parents=True)
    os.symlink(outside, project / ".afdb" / "recorded" / "tensors")
    refused_before_the_tests(
        pytest_afdb(project), "--afdb: .afdb/recorded/tensors: is a link; a recording holds no"
    )
    assert list(outside.iterdir()) == []  # nothing written through it
    os.unlink(project / ".afdb" / "recorded" / "tensors")
    conforms(pytest_afdb(project))


def test_afdb_record_refuses_a_file_in_the_way_before_the_program_runs(project):
    (project / "prog.py").write_text("open('ran', 'w').close()\n")
    (project / "out").write_text("")
    proc = run(project, sys.executable, "-m", "harness.cli", "record", "-o", "out/rec", "prog.py")
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert "out: exists and is not a folder (in the way of out/rec)" in line, line
    assert not (project / "ran").exists()


@pytest.mark.parametrize(
    ("option", "words"),
    [
        (("--afdb-declare", "mini:Double colour=red"), "unknown key 'colour'"),
        (("--afdb-checks", "vmapp"), "unknown check 'vmapp'"),
        (("--afdb-expectations", "nope.json"), "nope.json: cannot read the expectations file"),
        (("--afdb-json", "tests"), "--json tests: is a directory"),
    ],
)
def test_a_wrong_option_is_refused_before_the_tests(project, option, words):
    refused_before_the_tests(pytest_afdb(project, *option), "ERROR: afdb: ", words)


def test_a_declaration_of_no_recorded_function_is_said_in_the_summary_and_report(project):
    (project / "pyproject.toml").write_text(
        '[tool.afdb]\ndeclare = ["mini:NotAFunction gradient=custom"]\n'
    )
    proc = pytest_afdb(
        project, "--afdb-declare", "mini:Dubble nondiff-args=0", "--afdb-json", "r.json"
    )
    conforms(proc)  # a note, not a failure: the tests and the Function are fine
    notes = [ln for ln in proc.stdout.splitlines() if ln.startswith("note: a declaration")]
    assert notes == [
        "note: a declaration names mini:NotAFunction, which the recording does not hold "
        "(mini:NotAFunction is a class but not an autograd.Function); the line is not used",
        "note: a declaration names mini:Dubble, which the recording does not hold (no "
        "Function of that name was called; did you mean mini:Double?); the line is not used",
    ]
    report = json.loads((project / "r.json").read_text())
    assert report["metadata"]["recorded"]["notes"] == notes
    # the twin: a declaration of the recorded Function is used, and noted nowhere
    (project / "pyproject.toml").write_text(
        '[tool.afdb]\ndeclare = ["mini:Double dtypes=float64"]\n'
    )
    proc = pytest_afdb(project, "--afdb-json", "r.json")
    conforms(proc)
    assert "note: a declaration" not in proc.stdout
    assert "notes" not in json.loads((project / "r.json").read_text())["metadata"]["recorded"]


def test_afdb_check_recorded_says_the_same_notes(project, monkeypatch, capsys):
    from harness.cli.main import main
    from harness.recording import recording

    monkeypatch.chdir(project)
    monkeypatch.syspath_prepend(str(project))
    import mini
    import torch

    with recording("rec"):
        mini.Double.apply(torch.ones(3, requires_grad=True))
    status = main(
        ["check", "--recorded", "rec", "--checks", "vmap", "--declare", "mini:Dubble randomness"]
    )
    out = capsys.readouterr().out
    assert status == 0, out
    lines = out.splitlines()
    sentence = next(i for i, ln in enumerate(lines) if ln.startswith("1 Function called"))
    assert lines[sentence + 1].startswith(
        "note: a declaration names mini:Dubble, which the recording does not hold (no "
        "Function of that name was called; did you mean mini:Double?)"
    )


def test_the_place_of_a_recording_is_checked_in_order(tmp_path, monkeypatch):
    """A folder of other things is named as such (not for a link it holds); inside a
    recording folder a link, and a recording file of the wrong kind, are refused."""
    from harness.core.errors import UsageError
    from harness.recording.store import check_target

    monkeypatch.chdir(tmp_path)
    Path("src").mkdir()
    os.symlink(tmp_path, "src/loop")
    with pytest.raises(
        UsageError, match=r"^src: a folder that is not a recording \(it holds 'loop'"
    ):
        check_target(Path("src"))
    Path("rec").mkdir()
    Path("rec/recording.json").write_text("{}")
    check_target(Path("rec"))  # the twin: a recording is replaced
    os.symlink(tmp_path / "src", "rec/tensors")
    with pytest.raises(UsageError, match=r"^rec/tensors: is a link; a recording holds no links"):
        check_target(Path("rec"))
    os.unlink("rec/tensors")
    Path("rec/tensors").write_text("")
    with pytest.raises(UsageError, match=r"^rec/tensors: is not a folder"):
        check_target(Path("rec"))
