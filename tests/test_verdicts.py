"""Verdicts you can trust (issue 14 §1, §5; issue 12 item 6): real classes of Functions that
the suite once misjudged, each with a planted wrong twin that still fails for the right reason.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import harness
from harness.cli import main
from tests import verdict_functions as vf

ROOT = Path(__file__).resolve().parent.parent
VF = ROOT / "tests" / "verdict_functions.py"
BAD = {"fail", "error", "xpass", "timeout", "crash", "internal"}


def bad_cases(result):
    return [c for c in result.cases if c.status in BAD]


# --- §1 pytree outputs ---------------------------------------------------------------------


def test_function_returning_tensor_and_dict_of_stats_passes_every_check():
    """Before: 'Boolean value of Tensor with more than one value is ambiguous' in compare.py
    (vmap), contract failures for a dict out_dim, autodiff failures on the untracked stats."""
    result = harness.check(vf.NormWithStats, vf.norm_samples, dtype=torch.float64)
    assert not bad_cases(result), [(c.id, c.message[:300]) for c in bad_cases(result)]
    checks = {c.check for c in result.cases if c.status == "pass"}
    assert {"vmap", "vmap_nested", "contract", "jvp", "vjp", "vmap_of_jvp"} <= checks


def test_wrong_variance_under_vmap_fails_naming_the_leaf_path():
    result = harness.check(
        vf.NormWithStatsWrongVar,
        vf.norm_samples,
        dtype=torch.float64,
        checks=["vmap", "contract"],
    )
    vmap_fails = [c for c in result.cases if c.check == "vmap" and c.status == "fail"]
    assert vmap_fails
    for c in vmap_fails:
        assert "output 1['var']" in c.message and "output 1['mean']" not in c.message
        assert "output 0" not in c.message
    # The twin's rule returns one int out_dim for the whole (y, dict): a valid prefix.
    assert all(c.status == "pass" for c in result.cases if c.check == "contract")


def test_rule_returning_a_wrong_structure_fails_the_contract():
    class DropsStats(vf.NormWithStats):
        @staticmethod
        def vmap(info, in_dims, x):
            x = x.movedim(in_dims[0], 0)
            y, stats = vf.NormWithStats.apply(x)
            return (y, {"mean": stats["mean"]}), (0, {"mean": 0})

    result = harness.check(DropsStats, vf.norm_samples, dtype=torch.float64, checks=["contract"])
    fails = [c for c in result.cases if c.status == "fail"]
    assert fails
    assert "structured as (*, {'mean': *}); forward returns (*, {'mean': *, 'var': *})" in (
        fails[0].message
    )


def test_repro_script_of_a_pytree_case_reproduces_the_leaf(tmp_path, capsys):
    target = [f"{VF}:NormWithStatsWrongVar", "--samples", f"{VF}:norm_samples"]
    case = "NormWithStatsWrongVar/vmap/s0/in_dims=(0,)"
    script = tmp_path / "repro.py"
    rc = main(["repro", case, *target, "--dtype", "float64", "-o", str(script)])
    capsys.readouterr()
    assert rc == 0
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run(
        [sys.executable, "-I", str(script)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "REPRODUCED" in proc.stdout and "output 2" in proc.stdout


def test_repro_script_of_the_correct_pytree_function_passes(tmp_path, capsys):
    target = [f"{VF}:NormWithStats", "--samples", f"{VF}:norm_samples"]
    script = tmp_path / "repro.py"
    case = "NormWithStats/vmap/s0/in_dims=(0,)"
    assert main(["repro", case, *target, "--dtype", "float64", "-o", str(script)]) == 0
    capsys.readouterr()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run(
        [sys.executable, "-I", str(script)], capture_output=True, text=True, env=env, timeout=120
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize(
    "actual, expected, needle",
    [
        ((1, {"n": 2}), (1, {"n": 3}), "output 1['n']: got 2, reference 3"),
        ([torch.ones(2)], [torch.ones(2), torch.ones(2)], "1 outputs, reference 2"),
        ((torch.ones(1), [torch.ones(1)]), (torch.ones(1), torch.ones(1)), "structured as"),
    ],
)
def test_compare_outputs_walks_every_leaf(actual, expected, needle):
    problems = harness.compare.compare_outputs(actual, expected, rtol=0, atol=0, label="L")
    assert problems and needle in problems[0]
    assert harness.compare.compare_outputs(expected, expected, rtol=0, atol=0, label="L") == []
