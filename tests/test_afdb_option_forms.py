"""``--afdb-X VALUE`` (space form) and ``--afdb-X=VALUE`` on a second run as on the first.

pytest picks its rootdir and ini file from the test paths on its command line before it
loads the plugin, so it reads the VALUE of a plugin's option given in its own argument as a
test path: once ``--afdb-json FILE`` exists (the second run of a CI gate), a FILE outside the
project made pytest take FILE's folder as rootdir, the project's ``pytest.ini`` was not read,
and its ``afdb_declare`` line for a straight-through estimator was lost (the STE then fails).
The plugin refuses exactly the space forms whose value changes the rootdir or ini file (on
the first run too, where FILE's folder would), with one line that says to write ``=``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

STE = '''import torch


class RoundSTE(torch.autograd.Function):
    """round in the forward, the identity's gradient in the backward (by design)."""

    @staticmethod
    def forward(x):
        return torch.round(x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def backward(ctx, grad):
        return grad
'''

TEST = """import torch

from stelib import RoundSTE


def test_round():
    x = torch.linspace(-2.2, 2.3, 6, dtype=torch.float64).reshape(2, 3).requires_grad_()
    RoundSTE.apply(x).sum().backward()
    assert x.grad is not None
"""

INI = "[pytest]\nafdb_declare =\n    stelib:RoundSTE gradient=custom\n"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / "stelib.py").write_text(STE)
    (proj / "test_ste.py").write_text(TEST)
    (proj / "pytest.ini").write_text(INI)
    (tmp_path / "out").mkdir()
    return proj


def session(proj: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTEST_ADDOPTS")}
    env["PYTHONPATH"] = str(proj)
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-W", "ignore"]
    argv += ["--afdb", "--afdb-checks=vjp", *extra]
    return subprocess.run(argv, cwd=proj, env=env, capture_output=True, text=True, timeout=300)


def ste_line(out: str) -> str:
    return next(ln for ln in out.splitlines() if ln.strip().startswith("stelib:RoundSTE"))


def test_equals_form_reads_the_projects_ini_on_both_runs(project: Path):
    report = project.parent / "out" / "r.json"
    for run in (1, 2):
        proc = session(project, f"--afdb-json={report}")
        out = proc.stdout + proc.stderr
        assert proc.returncode == 0, (run, out)
        assert "conforms" in ste_line(out), (run, out)
        assert report.exists()


def test_space_form_that_would_move_the_rootdir_is_refused_on_both_runs(project: Path):
    report = project.parent / "out" / "r.json"
    for run in (1, 2):
        proc = session(project, "--afdb-json", str(report))
        out = proc.stdout + proc.stderr
        assert proc.returncode == 4, (run, out)
        lines = [ln for ln in out.splitlines() if "write --afdb-json=" in ln]
        assert len(lines) == 1 and "the project's ini would not be read" in lines[0], out
        assert "Traceback" not in out
        report.write_text("{}")  # the second run finds FILE there, as a CI gate's does


def test_space_form_inside_the_project_works_on_both_runs(project: Path):
    for run in (1, 2):
        proc = session(project, "--afdb-json", "r.json", "--afdb-workers", "1")
        out = proc.stdout + proc.stderr
        assert proc.returncode == 0, (run, out)
        assert "conforms" in ste_line(out), (run, out)
        assert (project / "r.json").exists()


def test_planted_the_ini_lost_fails_the_ste(project: Path):
    """What reading the wrong configuration does: the declaration is lost, the STE fails
    (so the runs above, which conform, did read the project's ini)."""
    (project / "pytest.ini").write_text("[pytest]\n")
    proc = session(project, f"--afdb-json={project.parent / 'out' / 'r.json'}")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert "conforms" not in ste_line(out), out


def test_space_form_values():
    from afdb_pytest_plugin import space_form_values

    args = ["--afdb", "--afdb-json", "r.json", "--afdb-checks=vjp", "--afdb-record", "-q"]
    assert space_form_values(args) == [("--afdb-json", "r.json")]
    assert space_form_values(["--afdb-record", "tests/"]) == [("--afdb-record", "tests/")]
    assert space_form_values(["--", "--afdb-json", "x"]) == []
