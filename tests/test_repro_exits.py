"""The repro a summary suggests is the short one, and its exit status means one thing
(issue 30, part 5): 1 only for a reproduced difference (or the transform raising, as the
case did), 2 with its traceback when the script itself fails, 0 when not reproduced."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.cli.main import main
from harness.core.results import CaseResult
from harness.reports.grouping import failure_groups

ROOT = Path(__file__).resolve().parent.parent
ROT = "examples/rotations.py"
WS = "tests/wrong_samples.py"
PC = "tests/planted_causes.py"


@pytest.fixture(autouse=True)
def _at_root(monkeypatch):
    monkeypatch.chdir(ROOT)


def _write(tmp_path: Path, case: str, target: str, samples: str) -> tuple[Path, str]:
    out = tmp_path / f"repro_{len(list(tmp_path.iterdir()))}.py"
    assert main(["repro", case, target, "--samples", samples, "-o", str(out)]) == 0
    return out, out.read_text()


def _run(script: Path, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run(
        [sys.executable, str(script)],
        cwd=script.parent,
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_a_generator_of_samples_gets_a_minimal_script_that_reproduces(tmp_path, capsys):
    case = "BrokenRotatePoints/vmap/s0/in_dims=(0,1),B=4"
    bug, text = _write(tmp_path, case, f"{ROT}:BrokenRotatePoints", f"{WS}:yielded")
    assert "list(yielded(" in text and "a minimal script" in capsys.readouterr().out
    run = _run(bug)
    assert run.returncode == 1 and "REPRODUCED" in run.stdout, run.stdout + run.stderr
    twin, _ = _write(tmp_path, case.replace("Broken", ""), f"{ROT}:RotatePoints", f"{WS}:yielded")
    run = _run(twin)
    assert run.returncode == 0 and "not reproduced" in run.stdout, run.stdout + run.stderr


def test_a_script_that_fails_itself_exits_2_with_its_traceback(tmp_path):
    case = "RotatePoints/vmap/s0/in_dims=(0,1),B=4"
    script, _ = _write(tmp_path, case, f"{ROT}:RotatePoints", f"{WS}:flaky")
    assert _run(script).returncode == 0  # as written: the samples draw, nothing differs
    run = _run(script, AFDB_TEST_BREAK_SAMPLES="1")  # now the samples raise: no reproduction
    assert run.returncode == 2, run.stdout + run.stderr
    assert "Traceback" in run.stderr and "RuntimeError: samples broken on purpose" in run.stderr
    assert "REPRODUCED" not in run.stdout + run.stderr


def test_a_transform_that_raises_is_the_failure_reproduced(tmp_path):
    case = "BrokenRotatePoints/vmap_of_vjp/s0/in_dims=(1,1),B=4,cotangents=0"
    script, _ = _write(
        tmp_path, case, f"{ROT}:BrokenRotatePoints", "examples/rotations.py:rotation_samples"
    )
    run = _run(script)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "REPRODUCED: torch.func.vmap of torch.func.vjp raised" in run.stderr


def test_the_vjp_repro_names_the_input_whose_gradient_differs(tmp_path):
    samples = f"{ROT}:rotation_samples"
    script, _ = _write(tmp_path, "RuleAndBackwardBugs/vjp/s0", f"{PC}:RuleAndBackwardBugs", samples)
    run = _run(script)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "differs from the reference at the grad of input 1\n" in run.stdout, run.stdout
    assert "grad of input 0" not in run.stdout  # R's gradient is right
    twin, _ = _write(tmp_path, "RotatePoints/vjp/s0", f"{ROT}:RotatePoints", samples)
    run = _run(twin)
    assert run.returncode == 0 and "not reproduced" in run.stdout, run.stdout + run.stderr


def _case(check, plan_id, levels=1, leg=False):
    plan = {"id": plan_id, "levels": [{"in_dims": [0]}] * levels}
    if leg:
        plan = {"id": plan_id, "levels": [], "dtype": "float32"}
    cid = f"F/{check}/s0/{plan_id}"
    message = "vmap rule of F: output 0: size 2 at out_dim 1"
    return CaseResult(cid, "F", check, 0, "s0", plan, "fail", message, repro=f"afdb repro {cid}")


def test_a_group_suggests_a_case_with_a_short_script_when_it_has_one():
    contract = _case("contract", "in_dims=(0,),B=4")
    nested = _case("vmap_nested", "in_dims=(0,),B=4|in_dims=(0,),B=5", levels=2)
    vmap = _case("vmap", "in_dims=(0,),B=4")
    for c in (contract, nested, vmap):
        c.message = "the Function raised ValueError: boom (at f.py:1)"
    (g,) = failure_groups([contract, nested, vmap])
    assert g.first is contract and g.repro == vmap.repro
    # a group with no such case names its first
    (g,) = failure_groups([contract, nested])
    assert g.repro == contract.repro
    leg = _case("vjp", "dtype=float32", leg=True)
    assert failure_groups([leg])[0].repro == leg.repro


LF = "tests/legacy_functions.py"


@pytest.mark.parametrize(
    "bug, check, words",
    [
        ("LegacyBackwardForgetsW", "eager_vjp", "differs from the reference at the grad of input 0"),
        ("LegacyJvpForgetsWTangent", "eager_jvp", "eager forward-mode AD (the Function's jvp) differs"),
    ],
)  # fmt: skip
def test_a_legacy_functions_eager_case_gets_a_short_script(tmp_path, capsys, bug, check, words):
    script, text = _write(tmp_path, f"{bug}/{check}/s0", f"{LF}:{bug}", f"{LF}:three_samples")
    # 46: the work, the exit-status guards and the non-finite result's guard (3 lines)
    assert "a minimal script" in capsys.readouterr().out and len(text.splitlines()) <= 46
    run = _run(script)
    assert run.returncode == 1 and words in run.stdout, run.stdout + run.stderr
    twin, _ = _write(tmp_path, f"LegacyScaledTanh/{check}/s0", f"{LF}:LegacyScaledTanh",
                     f"{LF}:three_samples")  # fmt: skip
    run = _run(twin)
    assert run.returncode == 0 and "not reproduced" in run.stdout, run.stdout + run.stderr
