"""No false alarms on the Function classes real libraries ship (issue 14, sections 2-4).

Each class: the correct fixture passes every check it claims, the false alarm the suite
used to raise is shown (the old reference or default disagrees with it), and the
planted wrong twin still fails with a message naming the real problem.
"""

from __future__ import annotations

import pytest
import torch

import harness
from harness.checks import tolerances as dtype_tolerance
from harness.checks.autodiff_refs import DiffView
from harness.checks.catalogue import check_names
from harness.checks.second_order import EAGER_DOUBLE_BACKWARD
from harness.core.options import Options
from harness.engine.runner import run_entries

from . import planted_autodiff as planted
from . import real_library_functions as R

AUTODIFF = tuple(check_names("autodiff"))
DIRECT = ("jvp", "vjp", "jvp_of_vjp", "vjp_of_vjp", "jacrev", "jacfwd")  # vs float64 refs
FD_HINT = "if this gradient is intentional (surrogate, straight-through, tangent-space)"


def by_check(result):
    """The cases by check, without the float32 legs of float64 samples (``legs``)."""
    out: dict[str, list] = {}
    for r in result.cases:
        if "/dtype=" not in r.id:
            out.setdefault(r.check, []).append(r)
    return out


def legs(result):
    """The float32 legs (``.../dtype=float32``) that jvp and vjp add for float64 samples."""
    return [r for r in result.cases if "/dtype=" in r.id]


def bad(result):
    return [(r.id, r.status, r.message) for r in result.cases if r.status not in ("pass",)]


def assert_all_pass(result, allowed=("pass", "unsupported")):
    problems = [(r.id, r.status, r.message) for r in result.cases if r.status not in allowed]
    assert not problems, problems


# --- section 2: custom gradients -------------------------------------------------------------


def test_rotation_fit_true_derivative_jvp_passes_in_custom_mode_when_declared():
    # Its jvp is the true derivative, not the custom backward's Jacobian: jacfwd and jacrev
    # disagree. Issue 42: forward and reverse mode must agree unless the Function declares
    # jvp=true-derivative; declared, the jvp is held to finite differences.
    (q,) = R.quaternion_samples(0)[0]
    t = torch.randn_like(q)
    _, jvp_out = torch.func.jvp(R.NormalizeQuaternion.apply, (q,), (t,))
    jac = torch.func.jacrev(R.NormalizeQuaternion.apply)(q)
    assert not torch.allclose(jvp_out, torch.einsum("abij,ij->ab", jac, t))

    result = harness.check(
        R.NormalizeQuaternion,
        R.quaternion_samples,
        gradient="custom",
        jvp_true_derivative=True,
    )
    assert_all_pass(result)
    checks = by_check(result)
    for name in ("jvp", "jacfwd"):
        (case,) = checks[name]
        assert case.reference == "finite differences (float64)"
        assert "declared jvp=true-derivative" in case.message

    undeclared = harness.check(
        R.NormalizeQuaternion, R.quaternion_samples, gradient="custom", checks=DIRECT
    )
    checks = by_check(undeclared)
    for name in ("jvp", "jacfwd"):
        (case,) = checks[name]
        assert case.status == "fail" and "forward and reverse mode disagree" in case.message


def test_rotation_fit_twin_with_a_wrong_jvp_matches_neither():
    result = harness.check(
        R.NormalizeQuaternionBadJvp, R.quaternion_samples, gradient="custom", checks=DIRECT
    )
    checks = by_check(result)
    for name in ("jvp", "jacfwd"):
        (case,) = checks[name]
        assert case.status == "fail"
        assert "matches neither finite differences" in case.message
    assert {r.status for r in checks["vjp"]} == {"pass"}


def test_lie_algebra_gradients_pass_in_custom_mode_including_second_order():
    result = harness.check(R.SO3Exp, R.axis_angle_samples, gradient="custom")
    assert_all_pass(result)
    checks = by_check(result)
    (jvp,) = checks["jvp"]
    assert jvp.reference == "eager backward (gradient=custom)"  # its jvp follows the backward
    (vv,) = checks["vjp_of_vjp"]
    assert vv.reference == EAGER_DOUBLE_BACKWARD  # never finite differences of the backward


def test_lie_algebra_gradients_in_derivative_mode_get_the_hint_and_one_root_cause():
    result = harness.check(R.SO3Exp, R.axis_angle_samples, checks=DIRECT)
    checks = by_check(result)
    (vjp,) = checks["vjp"]
    assert vjp.status == "fail" and FD_HINT in vjp.message and "--gradient custom" in vjp.message
    for name in ("vjp_of_vjp", "jvp_of_vjp"):
        (case,) = checks[name]
        assert case.status == "fail"
        assert "follows from the first-order failure of SO3Exp/vjp/s0" in case.message


def test_lie_algebra_twin_with_a_wrong_backward_fails_in_custom_mode():
    result = harness.check(
        R.SO3ExpBadBackward, R.axis_angle_samples, gradient="custom", checks=DIRECT
    )
    (jvp,) = by_check(result)["jvp"]
    assert jvp.status == "fail"
    assert "eager backward (gradient=custom)" in jvp.message
    assert "matches neither" in jvp.message


@pytest.mark.parametrize(
    "fn,twin",
    [(R.SignSTE, R.SignSTEBadJvp), (R.Spike, R.SpikeBadJvp)],
    ids=["straight-through", "spiking-surrogate"],
)
def test_surrogate_gradients(fn, twin):
    name = fn.__name__
    # derivative mode: the false alarm, now with the hint and one root cause
    plain = by_check(harness.check(fn, R.away_from_zero_samples, checks=DIRECT))
    (vjp,) = plain["vjp"]
    assert vjp.status == "fail" and FD_HINT in vjp.message
    (vv,) = plain["vjp_of_vjp"]
    assert f"follows from the first-order failure of {name}/vjp/s0" in vv.message
    # custom mode: everything it claims passes
    assert_all_pass(harness.check(fn, R.away_from_zero_samples, gradient="custom"))
    # the twin's jvp matches neither the true derivative nor the surrogate
    result = harness.check(twin, R.away_from_zero_samples, gradient="custom", checks=DIRECT)
    (jvp,) = by_check(result)["jvp"]
    assert jvp.status == "fail" and "matches neither" in jvp.message


def test_planted_straight_through_keeps_its_custom_verdicts():
    pair = planted.PAIRS["straight-through jvp disagrees with its backward"]
    results = run_entries([pair.bug], Options(checks=("jvp",)))
    assert {r.status for r in results} == {"fail"}


# --- section 3: dtypes -----------------------------------------------------------------------


def test_float64_only_function_keeps_its_samples_dtype_by_default():
    result = harness.check(R.Float64Only, R.float64_samples)
    assert_all_pass(result)
    assert {r.dtype for r in result.cases if r not in legs(result)} == {"float64"}
    assert result.metadata["dtype"] == "samples"
    # its float32 legs are skipped with a note: it refuses float32
    assert {(r.check, r.status, r.dtype) for r in legs(result)} == {
        ("jvp", "unsupported", "float32"),
        ("vjp", "unsupported", "float32"),
    }
    assert all("refuses float32" in r.message for r in legs(result))
    # the old default (cast to float32) makes its plain call raise its own assertion: the
    # samples no longer fit it, refused before any case (issue 30), naming the cast
    with pytest.raises(harness.UsageError) as refused:
        harness.check(R.Float64Only, R.float64_samples, dtype="float32", checks=["vjp"])
    assert "needs float64 input" in str(refused.value)
    assert "the samples were cast to float32 (--dtype float32, dtype=)" in str(refused.value)


def test_float64_only_twin_fails_for_its_backward():
    result = harness.check(R.Float64OnlyBadBackward, R.float64_samples, checks=DIRECT)
    (vjp,) = by_check(result)["vjp"]
    assert vjp.status == "fail" and "grad of input 0" in vjp.message


def test_normalisation_at_float32_passes_and_its_twin_fails():
    result = harness.check(R.Normalize, R.activation_samples)
    assert_all_pass(result)
    assert {r.dtype for r in result.cases} == {"float32"}
    twin = by_check(harness.check(R.NormalizeBadBackward, R.activation_samples, checks=DIRECT))
    (vjp,) = twin["vjp"]
    assert vjp.status == "fail" and "grad of input 0" in vjp.message


def test_dropout_finite_differences_see_the_calls_draw(monkeypatch):
    result = harness.check(R.Dropout, R.float32_samples, randomness=True, checks=DIRECT)
    assert_all_pass(result)
    # the false alarm: finite differences in float64 draw another mask
    monkeypatch.setattr(DiffView, "same_dtype_fd", property(lambda self: False))
    old = harness.check(R.Dropout, R.float32_samples, randomness=True, checks=["vjp"])
    assert {r.status for r in old.cases} == {"fail"}


def test_dropout_twin_that_redraws_its_mask_fails():
    result = harness.check(R.DropoutRedraws, R.float32_samples, randomness=True, checks=DIRECT)
    (vjp,) = by_check(result)["vjp"]
    assert vjp.status == "fail" and "grad of input 0" in vjp.message


@pytest.mark.parametrize(
    "fn,samples",
    [(R.Normalize, R.activation_samples), (R.NormalizeQuaternion, R.quaternion_samples)],
    ids=["normalize", "quaternion"],
)
def test_fixtures_pass_at_float32_with_a_10x_margin(monkeypatch, fn, samples):
    monkeypatch.setattr(dtype_tolerance, "MARGIN", 0.1)
    # NormalizeQuaternion: a custom (tangent-space) backward beside a true-derivative jvp
    declared = {"gradient": "custom", "jvp_true_derivative": True}
    kw = declared if fn is R.NormalizeQuaternion else {}
    assert_all_pass(harness.check(fn, samples, dtype="float32", checks=DIRECT, **kw))


def test_examples_pass_at_float32_with_a_10x_margin(monkeypatch):
    import importlib
    from pathlib import Path

    monkeypatch.syspath_prepend(str(Path(__file__).parent.parent / "examples"))
    rotations = importlib.import_module("rotations")  # kept in sys.modules for other tests
    monkeypatch.setattr(dtype_tolerance, "MARGIN", 0.1)
    result = harness.check(
        rotations.RotatePoints, rotations.rotation_samples, dtype="float32", checks=DIRECT
    )
    assert_all_pass(result)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_half_precisions_pass_the_correct_and_fail_the_twins(dtype):
    """The rule saturates at 10% (MAX_RELATIVE), so it never passes a wrong formula."""
    for fn, twin, samples, kw in (
        (R.Normalize, R.NormalizeBadBackward, R.activation_samples, {}),
        (R.Dropout, R.DropoutRedraws, R.float32_samples, {"randomness": True}),
    ):
        assert_all_pass(harness.check(fn, samples, dtype=dtype, checks=["jvp", "vjp"], **kw))
        (vjp,) = harness.check(twin, samples, dtype=dtype, checks=["vjp"], **kw).cases
        assert vjp.status == "fail" and vjp.dtype == dtype, vjp.message


def test_dtype_rule_scales_with_precision_and_values():
    e = torch.tensor([1.0, 1e-3, -2.0], dtype=torch.float64)
    for dtype in (torch.float32, torch.float16):
        a = e.to(dtype)
        rtol, atol = dtype_tolerance.tolerances(a, e)
        assert rtol == pytest.approx(dtype_tolerance.K * torch.finfo(dtype).eps)
        assert atol == pytest.approx(rtol * 2.0)  # the largest value sets the absolute part
    rtol, atol = dtype_tolerance.tolerances(e.bfloat16(), e)
    assert (rtol, atol) == (dtype_tolerance.MAX_RELATIVE, dtype_tolerance.MAX_RELATIVE * 2.0)
    rtol, atol = dtype_tolerance.tolerances(e.float(), e, amplification=100.0)
    assert atol == pytest.approx(rtol * 200.0)
    assert dtype_tolerance.amplification([torch.tensor([100.0])], [torch.tensor([1.0])]) == 100.0
    assert not dtype_tolerance.applies(torch.float64, torch.float64)
    assert not dtype_tolerance.applies(torch.float32, torch.float32)  # loops: same dtype


# --- section 4: complex numbers --------------------------------------------------------------


@pytest.mark.parametrize(
    "fn,twin,samples",
    [
        (R.ComplexMul, R.ComplexMulNoConj, R.complex_pair_samples),
        (R.Polar, R.PolarNoConj, R.polar_samples),
    ],
    ids=["complex-multiply", "polar"],
)
def test_complex_functions_and_a_forgotten_conjugate(fn, twin, samples):
    result = harness.check(fn, samples, checks=AUTODIFF)
    checks = by_check(result)
    for name in ("jvp", "vjp", "jvp_of_vjp", "vjp_of_vjp"):
        assert {r.status for r in checks[name]} == {"pass"}, bad(result)
    for name in ("jacrev", "jacfwd"):
        (case,) = checks[name]
        assert case.status == "unsupported"
        assert "Expected all" in case.message and "to be real" in case.message
    twin_result = by_check(harness.check(twin, samples, checks=DIRECT))
    (vjp,) = twin_result["vjp"]
    assert vjp.status == "fail" and "<t, J^T c>" in vjp.message
    assert "real inner product" in vjp.message


def test_complex_multiply_at_complex64():
    result = harness.check(
        R.ComplexMul, R.complex_pair_samples, dtype="complex64", checks=["jvp", "vjp"]
    )
    assert_all_pass(result, allowed=("pass",))
    assert {r.dtype for r in result.cases} == {"complex64"}


# --- afdb repro uses the suite's reference ---------------------------------------------------


@pytest.mark.parametrize(
    "cls,gradient,case,reproduces",
    [
        ("SO3Exp", "custom", "SO3Exp/vjp_of_vjp/s0", False),  # passes in the suite
        ("SO3Exp", "derivative", "SO3Exp/vjp_of_vjp/s0", True),  # fails in the suite
        ("SO3ExpBadBackward", "custom", "SO3ExpBadBackward/jvp/s0", True),
    ],
)
def test_autodiff_repro_uses_the_suites_reference(
    tmp_path, capsys, cls, gradient, case, reproduces
):
    import runpy
    from pathlib import Path

    from harness.cli.main import main

    fixtures = Path(R.__file__).resolve()
    suite = harness.check(
        getattr(R, cls), R.axis_angle_samples, gradient=gradient, checks=[case.split("/")[1]]
    )
    (record,) = [c for c in suite.cases if c.id == case]
    assert (record.status == "fail") == reproduces, record.message
    script = tmp_path / "repro.py"
    argv = [f"{fixtures}:{cls}", "--samples", f"{fixtures}:axis_angle_samples"]
    argv += ["--gradient", gradient, "--dtype", "float64", "-o", str(script)]
    assert main(["repro", case, *argv]) == 0
    capsys.readouterr()
    # in-process (the standalone run is covered by test_gate_cli): its exit status says
    # whether the mismatch reproduced
    with pytest.raises(SystemExit) as exited:
        runpy.run_path(str(script), run_name="__main__")
    out = capsys.readouterr().out
    assert exited.value.code == (1 if reproduces else 0), out


def test_afdb_check_keeps_the_samples_dtype_unless_dtype_is_given(tmp_path, capsys):
    import json
    from pathlib import Path

    from harness.cli.main import main

    fixtures = Path(R.__file__).resolve()
    argv = [f"{fixtures}:Float64Only", "--samples", f"{fixtures}:float64_samples"]
    argv += ["--no-isolate", "--checks", "vjp", "-q"]
    own, cast = tmp_path / "own.json", tmp_path / "cast.json"
    assert main(["check", *argv, "--json", str(own)]) == 0
    # cast to float32, the samples no longer fit its plain call: refused before any case
    assert main(["check", *argv, "--dtype", "float32", "--json", str(cast)]) == 2
    assert "the samples were cast to float32" in capsys.readouterr().err
    assert not cast.exists()
    own_report = json.loads(own.read_text())
    assert own_report["metadata"]["dtype"] == "samples"
    own_cases = {c["id"]: c for c in own_report["cases"]}
    assert {c["dtype"] for i, c in own_cases.items() if "/dtype=" not in i} == {"float64"}
    leg = own_cases["Float64Only/vjp/s0/dtype=float32"]  # the float32 leg, refused
    assert leg["dtype"] == "float32" and leg["status"] == "unsupported"
