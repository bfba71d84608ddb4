"""Every ``reproduce:`` line of a recorded check reproduces its case (issue 35 part 1).

On ``examples/recorded_project`` (``softlib.repro_cases``, its tests in ``repro_tests``)
with four planted bugs (``SOFTLIB_PLANTED=subcheck,large,factory,local``): a backward that
gives input 1's gradient only when input 0 needs one (only the "input 1 alone" sub-check
sees it), a wrong gradient on inputs whose Jacobian would take 130 GB, a class made by a
factory, a class made inside a test. Each line runs: its script exits 1 on the planted bug
and 0 on the correct twin (the same script, the bug not planted), a script that cannot
run (its recording gone) exits 2, and the local class's line reruns its test.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness.core.schema import read_report

ROOT = Path(__file__).resolve().parent.parent
PROJECT = ROOT / "examples" / "recorded_project"
PLANTED = "subcheck,large,factory,local"


def _run(cwd: Path, argv: list[str], planted: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SOFTLIB_PLANTED")}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    if planted:
        env["SOFTLIB_PLANTED"] = planted
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


PYTEST = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-W", "ignore"]


@pytest.fixture(scope="module")
def checked(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    proj = tmp_path_factory.mktemp("repro") / "proj"
    shutil.copytree(PROJECT, proj, ignore=shutil.ignore_patterns(".afdb", "__pycache__"))
    argv = [*PYTEST, "repro_tests", "--afdb", "--afdb-checks", "vjp", "--afdb-json", "r.json"]
    proc = _run(proj, argv, PLANTED)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lines = {
        c["entry"]: c["repro"]
        for c in read_report(str(proj / "r.json"))["cases"]
        if c["status"] == "fail" and "/dtype=" not in c["id"]
    }
    return proj, lines


def _made_per_call(lines: dict[str, str], name: str) -> str:
    """The line of the one class made per call named ``name`` (its recorded name adds what
    its closures hold: ``ScaledSin[alpha=2.0]``)."""
    (key,) = [k for k in lines if k == name or k.startswith(name + "[")]
    return lines[key]


def test_the_sub_check_and_the_rebuilt_factory_are_named(checked):
    _, lines = checked
    assert "--sub-check 'input 1 alone, all outputs'" in lines["softlib.repro_cases:SynthPair"]
    assert "--sub-check" not in lines["softlib.repro_cases:BigBlend"]  # all inputs fail too
    factory = _made_per_call(lines, "softlib.repro_cases:make_scaled_sin.<locals>.ScaledSin")
    assert "--rebuild softlib.repro_cases:make_scaled_sin --rebuild-args '{\"alpha\": 2.0}'" in (
        factory
    )
    local = _made_per_call(lines, "test_repro_cases:test_a_class_made_in_the_test.<locals>.Cube")
    assert local.startswith("pytest --afdb repro_tests/test_repro_cases.py::test_a_class_made")


def test_every_reproduce_line_exits_1_on_the_bug_and_0_on_its_twin(checked):
    proj, lines = checked
    scripts = []
    for entry, line in sorted(lines.items()):
        if not line.startswith("afdb "):
            continue
        out = proj / f"repro_{len(scripts)}.py"
        argv = [*shlex.split(line), "-o", str(out)]
        wrote = _run(proj, argv, PLANTED)
        assert wrote.returncode == 0 and "a minimal script" in wrote.stdout, (
            wrote.stdout + wrote.stderr
        )
        scripts.append((entry, out))
    assert len(scripts) == 3
    for entry, script in scripts:
        bug = _run(proj, [sys.executable, str(script)], PLANTED)
        assert bug.returncode == 1 and "REPRODUCED" in bug.stdout, (entry, bug.stdout + bug.stderr)
        twin = _run(proj, [sys.executable, str(script)], "")
        assert twin.returncode == 0 and "not reproduced" in twin.stdout, (entry, twin.stdout)
    # a script that cannot run (its recording moved away) is no reproduction: exit 2
    shutil.move(proj / ".afdb", proj / "moved")
    try:
        crash = _run(proj, [sys.executable, str(scripts[0][1])], PLANTED)
    finally:
        shutil.move(proj / "moved", proj / ".afdb")
    assert crash.returncode == 2 and "Traceback" in crash.stderr, crash.stdout + crash.stderr


def test_the_local_class_line_reruns_its_test(checked, tmp_path):
    proj, lines = checked
    line = _made_per_call(lines, "test_repro_cases:test_a_class_made_in_the_test.<locals>.Cube")
    # afdb repro without --rebuild says in one line where to go instead
    ident = line.split("# then read case ", 1)[1].strip()
    said = _run(proj, ["afdb", "repro", ident, "--recorded", ".afdb/recorded"], "")
    assert said.returncode == 2 and "rerun `pytest --afdb repro_tests/" in said.stderr, said.stderr
    # the rerun records anew: in a copy, so the other tests keep the fixture's recording
    copy = tmp_path / "proj"
    shutil.copytree(proj, copy)
    argv = [*PYTEST, *shlex.split(line.split("  #", 1)[0])[1:]]
    assert _run(copy, argv, PLANTED).returncode == 1
    assert _run(copy, argv, "").returncode == 0


def test_the_full_script_of_a_large_input_says_it_cannot_and_exits_2(checked):
    proj, lines = checked
    out = proj / "full.py"
    argv = [*shlex.split(lines["softlib.repro_cases:BigBlend"]), "--full", "-o", str(out)]
    assert _run(proj, argv, PLANTED).returncode == 0
    run = _run(proj, [sys.executable, str(out)], PLANTED)
    assert run.returncode == 2, run.stdout + run.stderr
    assert "could not run: the whole Jacobian would take 121 GiB" in run.stdout, run.stdout
