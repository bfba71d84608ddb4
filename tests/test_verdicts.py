"""Verdicts you can trust (issue 14 §1, §5; issue 12 item 6): real classes of Functions that
the suite once misjudged, each with a planted wrong twin that still fails for the right reason.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import harness
from harness.cli.main import main
from harness.core.schema import schema_errors
from tests import verdict_functions as vf

ROOT = Path(__file__).resolve().parent.parent
VF = ROOT / "tests" / "verdict_functions.py"
BAD = {"fail", "error", "xpass", "timeout", "crash", "internal"}


def bad_cases(result):
    return [c for c in result.cases if c.status in BAD]


# --- §1 pytree outputs ---------------------------------------------------------------------


#: NormWithStats returns (y, {"mean": ..., "var": ...}): autograd does not track the stats
#: nested in the dict, so it declares its output 1 non-differentiable (issue 19: otherwise
#: the nested stats are a finding of their own, see test_reference_blind_spots.py).
STATS = {"nondiff_outputs": (1,)}


def test_function_returning_tensor_and_dict_of_stats_passes_every_check():
    """Before: 'Boolean value of Tensor with more than one value is ambiguous' in compare.py
    (vmap), contract failures for a dict out_dim, autodiff failures on the untracked stats."""
    result = harness.check(vf.NormWithStats, vf.norm_samples, dtype=torch.float64, **STATS)
    assert not bad_cases(result), [(c.id, c.message[:300]) for c in bad_cases(result)]
    checks = {c.check for c in result.cases if c.status == "pass"}
    assert {"vmap", "vmap_nested", "contract", "jvp", "vjp", "vmap_of_jvp"} <= checks


def test_wrong_variance_under_vmap_fails_naming_the_leaf_path():
    result = harness.check(
        vf.NormWithStatsWrongVar,
        vf.norm_samples,
        dtype=torch.float64,
        checks=["vmap", "contract"],
        **STATS,
    )
    vmap_fails = [c for c in result.cases if c.check == "vmap" and c.status == "fail"]
    assert vmap_fails
    for c in vmap_fails:
        assert "output 1['var']" in c.message and "output 1['mean']" not in c.message
        assert "output 0" not in c.message
    # The twin's rule returns one int out_dim for the whole (y, dict): a valid prefix.
    assert all(c.status == "pass" for c in result.cases if c.check == "contract")


def test_wrong_jvp_of_the_pytree_function_fails_on_its_tensor_output():
    result = harness.check(
        vf.NormWithStatsWrongJvp,
        vf.norm_samples,
        dtype=torch.float64,
        checks=["jvp", "vjp"],
        **STATS,
    )
    status = {c.check: c for c in result.cases}
    assert status["vjp"].status == "pass"
    assert status["jvp"].status == "fail"
    assert "tangent of output 0, torch.func.jvp (the Function's jvp)" in status["jvp"].message


def test_rule_returning_a_wrong_structure_fails_the_contract():
    class DropsStats(vf.NormWithStats):
        @staticmethod
        def vmap(info, in_dims, x):
            x = x.movedim(in_dims[0], 0)
            y, stats = vf.NormWithStats.apply(x)
            return (y, {"mean": stats["mean"]}), (0, {"mean": 0})

    result = harness.check(
        DropsStats, vf.norm_samples, dtype=torch.float64, checks=["contract"], **STATS
    )
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
    problems = harness.checks.compare.compare_outputs(actual, expected, rtol=0, atol=0, label="L")
    assert problems and needle in problems[0]
    assert (
        harness.checks.compare.compare_outputs(expected, expected, rtol=0, atol=0, label="L") == []
    )


# --- §1 the suite's own exceptions: status internal, exit 3 ----------------------------------


def test_an_exception_in_the_suites_own_code_is_internal_not_the_functions(monkeypatch):
    """A bug of the suite (here: a wrong call in vmap_checks) is `internal`, named at the
    suite's line, listed first; the run goes on and the other checks still pass."""
    import harness.checks.vmap as vc
    from harness.plans.pytrees import describe_structure

    monkeypatch.setattr(vc, "compare_outputs", describe_structure)  # a call with bad arguments
    result = harness.check(
        vf.NormWithStats, vf.norm_samples, dtype=torch.float64, checks=["vmap", "contract"], **STATS
    )
    internal = [c for c in result.cases if c.status == "internal"]
    assert internal and all(c.check == "vmap" for c in internal)
    msg = internal[0].message
    assert msg.startswith("internal error of the suite at harness/checks/vmap.py:"), msg
    assert "(please report it): vmap in_dims=" in msg and "TypeError" in msg
    assert "the Function raised" not in msg
    assert all(c.status == "pass" for c in result.cases if c.check == "contract")
    assert result.failures()[0].status == "internal"
    assert result.exit_status == 3
    data = result.to_json_dict()
    assert data["cases"][0]["status"] == "internal"
    assert next(iter(data["summary"]["counts"])) == "internal"


def test_an_exception_in_the_functions_module_stays_error():
    class RaisesInRule(vf.NormWithStats):
        @staticmethod
        def vmap(info, in_dims, x):
            raise ValueError("rule not written yet")

    result = harness.check(
        RaisesInRule, vf.norm_samples, dtype=torch.float64, checks=["vmap"], **STATS
    )
    assert {c.status for c in result.cases} == {"error"}
    assert "the Function raised ValueError: rule not written yet" in result.cases[0].message
    assert result.exit_status == 1


def test_torch_refusing_what_the_function_returned_is_the_functions_error():
    """torch raises after the rule returned (its frames are gone): still the Function's."""

    class BadOutDims(vf.NormWithStats):
        @staticmethod
        def vmap(info, in_dims, x):
            x = x.movedim(in_dims[0], 0)
            return vf.NormWithStats.apply(x), (0, 0, 0)  # 3 out_dims for (y, dict)

    result = harness.check(
        BadOutDims, vf.norm_samples, dtype=torch.float64, checks=["vmap"], **STATS
    )
    assert result.cases and {c.status for c in result.cases} == {"error"}


def test_exit_status_3_on_the_cli_and_internal_first_in_every_report(monkeypatch, tmp_path, capsys):
    import xml.etree.ElementTree as ET

    import harness.checks.vmap as vc
    from harness.plans.pytrees import describe_structure

    monkeypatch.setattr(vc, "compare_outputs", describe_structure)
    out = {k: tmp_path / f"r.{k}" for k in ("json", "md", "html", "xml")}
    rc = main(
        [
            "check",
            f"{VF}:NormWithStats",
            "--samples",
            f"{VF}:norm_samples",
            "--nondiff-output",
            "1",
            "--dtype",
            "float64",
            "--no-isolate",
            "--checks",
            "contract,vmap",
            "--json",
            str(out["json"]),
            "--markdown",
            str(out["md"]),
            "--html",
            str(out["html"]),
            "--junit",
            str(out["xml"]),
        ]
    )
    text = capsys.readouterr().out
    assert rc == 3
    blocks = [line.split()[0] for line in text.splitlines() if line.startswith("  INTERNAL ")]
    # one block per root cause (grouped), listed before the summary line
    assert blocks and text.index("  INTERNAL ") < text.index("FAIL:")
    assert "NormWithStats/vmap/" in text.split("  INTERNAL ", 1)[1]
    data = json.loads(out["json"].read_text())
    assert data["cases"][0]["status"] == "internal"
    assert schema_errors(data) == []
    md = out["md"].read_text()
    assert "**internal**" in md.split("## Failures")[1].splitlines()[2]
    first = ET.parse(out["xml"]).getroot().find(".//testcase")
    assert first is not None and first.find("error").get("type") == "internal"
    assert '"internal"' in out["html"].read_text()


# --- §1 the reference raised, not the transform ----------------------------------------------


def test_reference_raising_is_reported_as_such_with_its_meaning():
    """forward returns its input as-is, jvp a new tensor: torch.func.jvp accepts it, eager
    forward AD refuses it. Before: 'the Function raised RuntimeError ...' as if vmap(jvp(f))
    had failed."""
    result = harness.check(
        vf.PassThrough, vf.plain_samples, dtype=torch.float64, checks=["vmap_of_jvp", "jvp"]
    )
    cases = [c for c in result.cases if c.check == "vmap_of_jvp"]
    assert cases and {c.status for c in cases} == {"error"}
    msg = cases[0].message
    assert "the reference raised, not the transform under test" in msg
    assert "loop of per-slice eager forward-mode jvps" in msg
    assert "returning a view (or an input as-is)" in msg
    assert "Eager forward-mode AD of the Function" in msg and "fails for its users" in msg
    assert "the transform under test (vmap of jvp) itself ran without error" in msg
    assert "the Function raised" not in msg


# --- §5 vacuous and impossible comparisons ---------------------------------------------------


def test_a_function_that_is_nan_everywhere_never_passes():
    """Before: forward, backward and jvp all NaN, and every case passed (NaN matches NaN)."""
    result = harness.check(vf.AllNaN, vf.plain_samples, dtype=torch.float64)
    ran = [c for c in result.cases if c.status != "unsupported"]
    assert ran and {c.status for c in ran} == {"error"}
    for c in ran:
        assert c.message.endswith(
            "the sample gives non-finite outputs (NaN in output 0): choose samples where the "
            "Function is finite"
        ), c.message


def test_a_nan_backward_fails_against_a_finite_reference_and_against_itself():
    """The twin: a finite forward whose backward is NaN. Against finite differences it is a
    real failure; where the reference is the Function's own eager backward the comparison is
    vacuous, and the NaN is still the Function's own: a failure, not the sample's (issue 42,
    part 2)."""
    result = harness.check(
        vf.NaNBackward, vf.plain_samples, dtype=torch.float64, checks=["vjp", "vmap_of_vjp"]
    )
    vjp = next(c for c in result.cases if c.check == "vjp")
    assert vjp.status == "fail"
    assert "values outside tolerance; worst at (0, 0): got nan, reference " in vjp.message
    assert "(not finite)" in vjp.message
    loops = [c for c in result.cases if c.check == "vmap_of_vjp" and c.status != "unsupported"]
    assert loops and {c.status for c in loops} == {"fail"}
    assert "its backward gives NaN in the grad of input 0" in loops[0].message
    assert "non-finite outputs (NaN in grad of input 0 from the reference, loop of" in (
        loops[0].message
    )
    vmap = harness.check(vf.NaNBackward, vf.plain_samples, dtype=torch.float64, checks=["vmap"])
    assert {c.status for c in vmap.cases} == {"pass"}  # the forward is finite


def test_a_jacobian_beyond_the_memory_budget_is_unsupported_with_the_size():
    """Before: torch.func.jacrev of a 1e7-element sample tried to allocate 800 TB and the
    case read 'the Function raised RuntimeError: ... can't allocate memory'."""
    result = harness.check(
        vf.Double, vf.huge_samples, dtype=torch.float32, checks=["jacrev", "jacfwd"]
    )
    assert {c.status for c in result.cases} == {"unsupported"}
    msg = result.cases[0].message
    assert "10000000 output x 10000000 input elements, 728 TiB in float64" in msg
    assert "memory budget of 1 GiB" in msg and "smaller sample" in msg


def test_the_same_function_on_a_small_sample_passes_jacrev():
    result = harness.check(
        vf.Double, vf.plain_samples, dtype=torch.float64, checks=["jacrev", "jacfwd"]
    )
    assert {c.status for c in result.cases} == {"pass"}


def test_a_function_refusing_float64_gets_its_reference_at_float32():
    """Before issue 34 part 2 this case was ``error`` (the float64 copy raised); the reference
    is now computed at the Function's own dtype, and the message says so."""
    result = harness.check(vf.Float32Only, vf.plain_samples, dtype=torch.float32, checks=["jvp"])
    (case,) = result.cases
    assert case.status == "pass", case.message
    assert case.message.startswith(
        "jvp: the Function raises on the float64 copy of the sample (TypeError: Float32Only "
        "supports float32 only"
    ), case.message
    assert "so the finite differences ran at float32" in case.message


def test_a_finite_difference_reference_that_raises_says_so():
    result = harness.check(vf.Float32OnlyOnGrid, vf.grid_samples, checks=["jvp"])
    (case,) = result.cases
    assert case.status == "error"
    assert case.message.startswith(
        "jvp: the reference raised, not the transform under test: the finite differences "
        "(reference, at the call's own dtype) raised TypeError: Float32OnlyOnGrid"
    ), case.message
    assert "fails at its own dtype on the points finite differences evaluate" in case.message


def test_a_bug_in_the_suites_reference_code_is_internal(monkeypatch):
    import harness.checks.first_order as fo
    from harness.plans.pytrees import describe_structure

    monkeypatch.setattr(fo.fd, "directional", describe_structure)  # a wrong call
    result = harness.check(vf.Double, vf.plain_samples, dtype=torch.float64, checks=["jvp"])
    (case,) = result.cases
    assert case.status == "internal", case.message
    assert case.message.startswith(
        "internal error of the suite at harness/checks/autodiff_refs.py:"
    )


@pytest.mark.parametrize("name, rc", [("NormWithStats", 0), ("NormWithStatsWrongJvp", 1)])
def test_autodiff_repro_of_a_pytree_function_treats_nested_stats_as_non_differentiable(
    name, rc, tmp_path, capsys
):
    script = tmp_path / "repro.py"
    target = [f"{VF}:{name}", "--samples", f"{VF}:norm_samples", "--dtype", "float64"]
    assert main(["repro", f"{name}/jvp/s0", *target, "-o", str(script)]) == 0
    capsys.readouterr()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run(
        [sys.executable, "-I", str(script)], capture_output=True, text=True, env=env, timeout=120
    )
    assert proc.returncode == rc, proc.stdout + proc.stderr
    if rc:
        assert "REPRODUCED" in proc.stdout and "output 0" in proc.stdout


@pytest.mark.parametrize(
    "values, kinds",
    [
        ([1e308, 1e308], ""),  # finite values whose sum overflows: still finite
        ([1.0, float("nan")], "NaN"),
        ([float("inf"), -float("inf")], "inf"),  # their sum is NaN: looked at one by one
        ([float("nan"), float("inf")], "NaN and inf"),
    ],
)
def test_nonfinite_phrase_is_exact_whatever_the_sum_gives(values, kinds):
    from harness.checks.compare import nonfinite_phrase

    assert nonfinite_phrase(torch.tensor(values, dtype=torch.float64)) == kinds
    assert (
        nonfinite_phrase(torch.tensor([complex(1, v) for v in values], dtype=torch.complex128))
        == kinds
    )


def test_equal_tensors_skip_isclose_but_nan_and_mismatches_do_not():
    from harness.checks.catalogue import NonFiniteSample
    from harness.checks.compare import compare_tensors

    x = torch.tensor([1.0, 2.0], dtype=torch.float64)
    assert compare_tensors(x, x.clone(), rtol=0, atol=0, label="l") is None
    msg = compare_tensors(x, x + 1e-3, rtol=0, atol=0, label="l")
    assert msg is not None and "2 of 2 values outside tolerance" in msg
    nan = torch.tensor([float("nan"), 1.0])
    assert (
        compare_tensors(nan, nan.clone(), rtol=0, atol=0, label="l", finite_reference=False) is None
    )
    with pytest.raises(NonFiniteSample):
        compare_tensors(nan, nan.clone(), rtol=0, atol=0, label="l")
