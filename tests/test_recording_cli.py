"""``afdb record`` and ``pytest --afdb-record``: the program runs as Python would run it,
its exit status is kept, its recording is written whatever way it ends, and a pytest-xdist
run records what a serial run records, byte for byte."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from harness.recording import load_recording

ROOT = Path(__file__).resolve().parent.parent

LIB = """
import torch


class Scale(torch.autograd.Function):
    generate_vmap_rule = True

    @staticmethod
    def forward(x, k):
        return x * k

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.k = inputs[1]

    @staticmethod
    def backward(ctx, g):
        return g * ctx.k, None


class Unused(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x


def scale(x, k):
    return Scale.apply(x, k)
"""

PROG = """
import sys

import torch

from mylib import scale

print("ARGV", sys.argv[1:], "PATH0", sys.path[0] == __import__("os").path.dirname(__import__("os").path.realpath(__file__)), "NAME", __name__)


class Local(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x + 1

    @staticmethod
    def backward(ctx, g):
        return g


scale(torch.ones(3), 2.0)
Local.apply(torch.ones(2))
if sys.argv[1:] == ["raise"]:
    raise ValueError("the program failed")
sys.exit(int(sys.argv[1]) if sys.argv[1:] else 0)
"""

TESTS = """
import threading

import pytest
import torch

from mylib import scale


def test_object():
    with pytest.raises(TypeError):
        scale(torch.ones(2), (i for i in ()))  # a generator: neither data nor held


@pytest.mark.parametrize("n", range(2, 14))
def test_sizes(n):
    assert scale(torch.ones(n), 2.0).shape == (n,)


@pytest.mark.parametrize("k", [1.0, 2.0])
def test_values(k):
    assert torch.equal(scale(torch.ones(3), k), torch.full((3,), k))

"""


@pytest.fixture
def project(tmp_path):
    (tmp_path / "mylib").mkdir()
    (tmp_path / "mylib" / "__init__.py").write_text(textwrap.dedent(LIB))
    (tmp_path / "prog.py").write_text(textwrap.dedent(PROG))
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_lib.py").write_text(textwrap.dedent(TESTS))
    return tmp_path


def _run(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST", "PYTHON"))}
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.run(
        [sys.executable, "-c", "from harness.cli.main import entry; entry()", *args],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )


def test_a_script_runs_as_python_runs_it_and_keeps_its_exit_status(project):
    proc = _run(project, "record", "--source", "mylib", "prog.py", "7")
    assert proc.returncode == 7, proc.stderr
    assert "ARGV ['7'] PATH0 True NAME __main__" in proc.stdout
    assert proc.stderr.strip().splitlines()[-1] == (
        "recorded 2 Functions (2 calls) to .afdb/recorded; 1 Function of the named sources never called"
    )
    rec = load_recording(project / ".afdb" / "recorded")
    local = rec.function("__main__:Local")
    assert local.legacy and not local.importable
    line = textwrap.dedent(PROG).splitlines().index("scale(torch.ones(3), 2.0)") + 1
    assert rec.function("mylib:Scale").calls[0].where == f"prog.py:{line}"  # the script's line
    assert rec.never_called == ("mylib:Unused",) and rec.program == "prog.py 7"


def test_a_program_that_raises_keeps_its_recording_and_its_traceback(project):
    proc = _run(project, "record", "-o", "out", "prog.py", "raise")
    assert proc.returncode == 1
    assert "ValueError: the program failed" in proc.stderr
    assert "harness" not in proc.stderr.split("ValueError")[0]  # the program's frames only
    assert len(load_recording(project / "out").functions) == 2


def test_a_module_runs_as_python_m_runs_it(project):
    (project / "mylib" / "__main__.py").write_text(
        "import sys, torch\nfrom mylib import scale\nscale(torch.ones(2), 3.0)\nsys.exit(4)\n"
    )
    proc = _run(project, "record", "-o", "out", "--max-calls", "1", "-m", "mylib", "x")
    assert proc.returncode == 4, proc.stderr
    rec = load_recording(project / "out")
    assert rec.program == "-m mylib x" and rec.function("mylib:Scale").calls[0].args[1] == 3.0


@pytest.mark.parametrize(
    ("args", "words"),
    [
        ((), "give the program to run"),
        (("-m",), "-m needs a module name"),
        (("missing.py",), "missing.py: no such script"),
        (("--source", "nosuchpkg", "prog.py"), "--source nosuchpkg: no such package"),
        (("-o", "mylib", "prog.py"), "mylib: a folder that is not a recording"),
        (("--max-calls", "0", "prog.py"), "give a whole number >= 1"),
    ],
)
def test_bad_usage_is_one_line_and_exit_2(project, monkeypatch, capsys, args, words):
    from harness.cli.main import main

    monkeypatch.chdir(project)
    assert main(["record", *args]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert words in line, line
    assert not (project / ".afdb").exists()


def test_pytest_records_node_ids_and_xdist_merges_to_the_serial_recording(project):
    (project / "tests" / "test_fail.py").write_text("def test_fails():\n    assert False\n")
    serial = _run(
        project, "record", "-o", "serial", "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"
    )
    assert serial.returncode == 1, serial.stdout + serial.stderr  # pytest's own status
    assert "afdb: recorded 1 Function (8 calls) to serial; 1 call not recorded" in serial.stdout
    parallel = _run(
        project,
        "record",
        "-o",
        "parallel",
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "-n",
        "2",
        "tests",
    )
    assert parallel.returncode == 1, parallel.stdout + parallel.stderr
    files = sorted(
        p.relative_to(project / "serial") for p in (project / "serial").rglob("*") if p.is_file()
    )
    assert len(files) == 2
    for name in files:
        assert (project / "serial" / name).read_bytes() == (
            project / "parallel" / name
        ).read_bytes(), name
    assert not (project / "parallel" / ".parts").exists()
    doc = json.loads((project / "serial" / "recording.json").read_text())
    assert doc["program"] == "-m pytest -q -p no:cacheprovider tests"
    scale = doc["functions"][0]
    assert scale["call_count"] == 15
    # the default 8 calls: the first of each combination (k=2.0 and k=1.0), then more sizes
    assert [c["where"] for c in scale["calls"]] == [
        *(f"tests/test_lib.py::test_sizes[{n}]" for n in range(2, 9)),
        "tests/test_lib.py::test_values[1.0]",
    ]
    assert scale["skipped"][0]["where"] == "tests/test_lib.py::test_object"
