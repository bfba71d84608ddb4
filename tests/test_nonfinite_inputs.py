"""Inputs that hold infinities (masked attention logits), and the literals repro scripts write.

Finite differences step only finite elements: a correct masked softmax conforms (before,
the step was ``inf`` and every reference NaN, so every case was ``error``); its planted twin
with a wrong backward and jvp still fails. Every value a reproducer writes is Python source
that gives the value back bit for bit (``float('inf')``, ``float('nan')``, ``-0.0``,
subnormals, the largest doubles), and the scripts written for a masked sample run.
"""

from __future__ import annotations

import math
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import harness
import harness.cli.main as cli
from harness.checks import finite_diff as fd
from harness.repro.literal import literal
from harness.sources.user_samples import finite_noise
from tests import masked_functions as lib

CHECKS = ["vmap", "jvp", "vjp", "jacrev", "vjp_of_vjp", "grad_of_vmap"]


def _statuses(fn):
    result = harness.check(fn, lib.samples, checks=CHECKS)
    return {c.id: (c.status, c.message or "") for c in result.cases}


def test_a_correct_masked_softmax_conforms_and_says_what_was_held_fixed():
    found = _statuses(lib.MaskedSoftmax)
    assert found and all(s == "pass" for s, _ in found.values()), found
    status, message = found["MaskedSoftmax/vjp/s0"]
    assert "input 0 holds 4 non-finite element(s) (-inf)" in message
    assert "compared with 0" in message


def test_a_wrong_backward_on_masked_logits_still_fails():
    found = _statuses(lib.DropsTheSum)
    for case in ("DropsTheSum/vjp/s0", "DropsTheSum/jvp/s0", "DropsTheSum/jacrev/s0"):
        assert found[case][0] == "fail", found[case]
    assert found["DropsTheSum/vmap/s0/in_dims=(0,)"][0] == "pass"


def test_finite_differences_hold_non_finite_elements_fixed():
    x = torch.tensor([0.3, float("-inf"), -1.2], dtype=torch.float64)
    (jac,) = fd.jacobian(lambda v: (torch.softmax(v, 0),), [x])[0]
    assert torch.isfinite(jac).all() and (jac[:, 1] == 0).all()
    (jt,) = fd.directional(lambda v: (torch.softmax(v, 0),), [x], [torch.ones(3)])
    assert torch.isfinite(jt).all()


def test_slice_noise_keeps_infinities_and_stays_finite_elsewhere():
    x = torch.tensor([[1.0, float("-inf")], [float("nan"), 2.0]], dtype=torch.float64)
    noisy = finite_noise(x, torch.Generator().manual_seed(0))
    assert noisy[0, 1] == float("-inf") and math.isnan(noisy[1, 0])
    assert torch.isfinite(noisy[[0, 1], [0, 1]]).all() and not torch.equal(noisy[0, 0], x[0, 0])


#: Non-finite, signed zero, subnormal and extreme values, alone and inside containers.
VALUES = [
    float("inf"),
    float("-inf"),
    float("nan"),
    -0.0,
    0.0,
    5e-324,
    2.2250738585072014e-308,
    1.7976931348623157e308,
    -1.7976931348623157e308,
    1e-300,
    0.1,
    -(2**63),
    2**70,
    True,
    None,
    "inf",
]


def test_every_written_literal_is_python_that_gives_the_value_back(tmp_path):
    values = [*VALUES, tuple(VALUES), [VALUES[:3]], {"h": float("nan"), "k": (-0.0,)}, (1.0,)]
    script = tmp_path / "literals.py"
    lines = ["import math, struct, sys", "got = ["]
    lines += [f"    {literal(v)}," for v in values]
    lines += [
        "]",
        "print(repr([struct.pack('<d', v).hex() if type(v) is float else v "
        f"for v in got[:{len(VALUES)}]]))",
    ]
    script.write_text("\n".join(lines) + "\n")
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    expected = [struct.pack("<d", v).hex() if type(v) is float else v for v in VALUES]
    assert run.stdout.strip() == repr(expected)
    assert literal(float("-inf")) == "float('-inf')" and literal(-0.0) == "-0.0"
    with pytest.raises(ValueError):
        literal(torch.tensor(1.0))


def _repro(project: Path, name: str, case: str) -> subprocess.CompletedProcess[str]:
    out = project / f"{name}-{case.replace('/', '_')}.py"
    spec = "lib/masked_functions.py"
    argv = ["repro", f"{name}/{case}", f"{spec}:{name}", "--samples", f"{spec}:samples"]
    assert cli.main([*argv, "-o", str(out)]) == 0
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run(
        [sys.executable, str(out)],
        cwd=project.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.parametrize("case", ["jvp/s0", "vjp/s0"])
def test_repro_scripts_for_masked_samples_run(tmp_path, monkeypatch, case):
    project = tmp_path / "project"
    (project / "lib").mkdir(parents=True)
    (project / "lib" / "masked_functions.py").write_text(Path(lib.__file__).read_text())
    monkeypatch.chdir(project)
    twin = _repro(project, "MaskedSoftmax", case)
    assert twin.returncode == 0 and "not reproduced" in twin.stdout, twin.stdout + twin.stderr
    bug = _repro(project, "DropsTheSum", case)
    assert bug.returncode == 1 and "REPRODUCED" in bug.stdout, bug.stdout + bug.stderr
