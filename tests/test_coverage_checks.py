"""The checks that close the gap with PyTorch's functorch tests and opcheck: each catches its
planted bug (and no other check does, where the bug is one only it can see), and the
correct twin passes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import harness
from autograd_function_db.entry import entry
from autograd_function_db.numpy_ops import NumpyCube
from harness.checks import fallback
from harness.checks.catalogue import check_names, get_check
from harness.core.options import Options
from harness.engine.runner import run_entries
from tests import planted_coverage as pc

BAD = {"fail", "error"}

VMAP_FAMILY = ("vmap", "vmap_nested", "vmap_chunked")
TRANSFORMS = tuple(n for n in check_names() if not n.startswith("opcheck_"))


def run(cls, checks, samples=pc.samples, **caps):
    return run_entries([entry(cls.__name__, cls, samples, **caps)], Options(checks=tuple(checks)))


def flagged_checks(results):
    return {r.check for r in results if r.status in BAD}


def all_pass(results):
    return results and all(r.status == "pass" for r in results)


# --- the catalogue ---------------------------------------------------------------------------


def test_new_checks_are_in_the_catalogue_in_order():
    names = check_names()
    for name in (
        "vmap_fallback",
        "vmap_of_vjp_of_vjp",
        "vmap_of_jvp_of_vjp",
        "vmap_of_autograd_grad",
        "opcheck_schema",
        "opcheck_autograd_registration",
        "opcheck_faketensor",
        "opcheck_aot_dispatch_static",
        "opcheck_aot_dispatch_dynamic",
    ):
        assert name in names
    assert names.index("vjp_of_vjp") < names.index("vmap_of_vjp_of_vjp")
    assert names.index("vmap_hazard") < names.index("vmap_fallback") < names.index("contract")
    assert get_check("vmap_fallback").family == "vmap"
    assert get_check("opcheck_faketensor").family == "opcheck"


# --- non-contiguous batched inputs -----------------------------------------------------------


@pytest.mark.parametrize("check", VMAP_FAMILY)
def test_noncontiguous_plans_catch_a_rule_that_assumes_contiguous_memory(check):
    results = run(pc.FrontBatchAssumedContiguousCube, [check])
    bad = [r for r in results if r.status in BAD]
    assert bad, f"{check} passed a rule that reads a strided batch as contiguous"
    assert any(r.id.endswith(",noncontig") for r in bad)
    assert all("values outside tolerance" in r.message for r in bad), bad[0].message
    if check != "vmap_nested":
        # one level, contiguous stacked batches: only the new plans see the bug (nested
        # levels already hand the inner rule a strided batch when the outer dim is -1)
        assert all(r.id.endswith(",noncontig") for r in bad), [r.id for r in bad]
        assert any(r.status == "pass" for r in results)


@pytest.mark.parametrize("check", VMAP_FAMILY)
def test_noncontiguous_twin_passes(check):
    results = run(NumpyCube, [check])
    assert all_pass(results), [(r.id, r.message) for r in results if r.status != "pass"]
    assert any(r.id.endswith(",noncontig") for r in results)


def test_noncontiguous_plans_keep_the_plain_ids_and_add_distinct_ones():
    from harness.checks.vmap import _nested, _single
    from harness.plans.plan import ArgLayout, nested_plans, single_level_plans

    layout = ArgLayout.of(pc.samples(0, torch.float32, "cpu")[1])
    options = Options()
    plain = [p.id for p in single_level_plans(layout, 2, cap=16, seed=0)]
    ids = [p.id for p in _single(layout, options)]
    assert ids[: len(plain)] == plain
    assert ids[len(plain) :] == ["in_dims=(0,),noncontig"]
    nested = [p.id for p in nested_plans(layout, (2, 3), cap=16, seed=0)]
    assert [p.id for p in _nested(layout, options)][:-1] == nested
    assert len(set(ids)) == len(ids)


def test_noncontiguous_batched_arguments_have_the_same_values():
    from harness.plans.layouts import NonContiguousPlan, with_layout
    from harness.plans.plan import LevelPlan

    plan = NonContiguousPlan((LevelPlan(2, (0, None)),))
    a, b = torch.randn(2, 4, 5), torch.randn(4, 5)
    x, y = with_layout(plan, (a, b))
    assert not x.is_contiguous() and torch.equal(x, a)
    assert y is b  # unbatched arguments are left alone


# --- three transforms ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "planted,check",
    [
        (pc.CubeInnerBackwardBug, "vmap_of_vjp_of_vjp"),
        (pc.CubeInnerJvpBug, "vmap_of_jvp_of_vjp"),
    ],
)
def test_three_level_check_alone_catches_a_rule_only_second_order_under_vmap_runs(planted, check):
    results = run(planted, TRANSFORMS)
    assert flagged_checks(results) == {check}, [
        (r.id, r.message[:200]) for r in results if r.status in BAD
    ]
    bad = [r for r in results if r.status in BAD]
    assert all(r.status == "fail" for r in bad)
    assert "values outside tolerance" in bad[0].message
    assert "loop of per-slice eager" in bad[0].message


def test_three_level_twin_passes():
    results = run(pc.CubeViaHelpers, ["vmap_of_vjp_of_vjp", "vmap_of_jvp_of_vjp"])
    assert all_pass(results), [(r.id, r.message) for r in results if r.status != "pass"]


def test_three_level_plans_pair_primals_and_both_cotangent_levels():
    from harness.plans.composite import GroupsPlan
    from harness.plans.plan import ArgLayout

    layout = ArgLayout.of(pc.samples(0, torch.float32, "cpu")[1])
    for check, second in (
        ("vmap_of_vjp_of_vjp", "outer_cotangents"),
        ("vmap_of_jvp_of_vjp", "tangents"),
    ):
        plans = get_check(check).plans(layout, Options())
        assert all(isinstance(p, GroupsPlan) for p in plans)
        seen = {(p.levels[0].in_dims[0], *p.extra_dims[0]) for p in plans}
        for x in (None, 0, -1):
            for c in (None, 0):
                assert any(s[0] == x and s[1] == c for s in seen), (x, c)
                assert any(s[0] == x and s[2] == c for s in seen), (x, c)
        assert all(",cotangents=" in p.id and f",{second}=" in p.id for p in plans)


def test_three_level_respects_double_backward_claims():
    results = run(NumpyCube, ["vmap_of_vjp_of_vjp"], double_backward=False)
    assert [r.status for r in results] == ["unsupported"]
    assert "double_backward=False" in results[0].message


def test_three_level_gradient_custom_is_compared_with_eager_references():
    results = run_entries(
        [entry("CubeViaHelpers", pc.CubeViaHelpers, pc.samples, gradient="custom")],
        Options(checks=("vmap_of_vjp_of_vjp", "vmap_of_jvp_of_vjp")),
    )
    assert all_pass(results)
    assert {r.reference for r in results} >= {
        "loop of per-slice eager double backward (torch.autograd.grad twice, create_graph=True)"
    }


# --- vmap over torch.autograd.grad -----------------------------------------------------------


def test_vmap_of_autograd_grad_alone_catches_a_backward_batched_gradients_cannot_enter():
    # a numpy backward is not differentiable again (eager_vjp_of_vjp reports its silent
    # zeros): declared here, so that only the first-order bug is left to find. A legacy
    # Function claims no vmap: the raise is named, `unsupported` (issue 42); declared
    # (claims=vmap), it is the Function's error, caught by this check alone.
    results = run(pc.LegacyNumpyBackwardSin, TRANSFORMS, double_backward=False, claims=("vmap",))
    assert flagged_checks(results) == {"vmap_of_autograd_grad"}, [
        (r.id, r.status, r.message[:200]) for r in results if r.status in BAD
    ]
    bad = [r for r in results if r.check == "vmap_of_autograd_grad"]
    assert bad and all(r.status == "error" for r in bad)
    assert "vmap_of_autograd_grad" in bad[0].message
    loud = run(pc.LegacyNumpyBackwardSin, ["vmap_of_autograd_grad"], double_backward=False)
    assert loud and {r.status for r in loud} == {"unsupported"}
    assert "vmap raises (" in loud[0].message


def test_vmap_of_autograd_grad_twin_passes_in_float32_and_float64():
    results = run(pc.LegacySin, ["vmap_of_autograd_grad"])
    assert all_pass(results), [(r.id, r.message) for r in results if r.status != "pass"]
    ids = [r.id for r in results]
    assert any(i.endswith(",float64") for i in ids)
    assert any(not i.endswith(",float64") for i in ids)


# --- no silent fallback ----------------------------------------------------------------------


def test_vmap_fallback_names_the_op_that_runs_as_a_loop():
    results = run(pc.LogNdtrGenerated, TRANSFORMS)
    assert flagged_checks(results) == {"vmap_fallback"}
    bad = [r for r in results if r.check == "vmap_fallback"]
    assert bad and all(r.status == "fail" for r in bad)
    msg = bad[0].message
    assert msg.startswith("performance: correct, but aten::special_log_ndtr has no batch rule")
    assert "per-example" in msg and "vmap of vjp" in msg


def test_vmap_fallback_twin_passes():
    assert all_pass(run(pc.LogNdtrBatched, ["vmap_fallback"]))


def test_vmap_fallback_restores_torch_warning_setting():
    set_warning = torch._C._functorch._set_vmap_fallback_warning_enabled
    for before in (False, True):
        set_warning(before)
        try:
            run(pc.LogNdtrGenerated, ["vmap_fallback"])
            assert fallback.fallback_warning_enabled() is before
        finally:
            set_warning(True)


# --- custom ops: accepted everywhere, opcheck's tests --------------------------------------

OPCHECK = tuple(n for n in check_names() if n.startswith("opcheck_"))


def op_results(op, checks=OPCHECK):
    return harness.check(op, pc.op_samples, checks=list(checks)).cases


def test_custom_op_twin_passes_every_opcheck_test_and_the_vmap_checks():
    results = op_results(pc.good_sin, [*OPCHECK, "vmap", "vmap_fallback", "contract"])
    assert all_pass(results), [(r.id, r.message) for r in results if r.status != "pass"]
    assert {r.check for r in results} >= set(OPCHECK)


@pytest.mark.parametrize(
    "op,caught,words",
    [
        (
            pc.mutates_input,
            {"opcheck_schema"},
            "Argument x is not defined as mutable but was mutated",
        ),
        (
            pc.wrong_fake_shape,
            # opcheck's aot tests run the fake kernel too (supersets of test_faketensor)
            {"opcheck_faketensor", "opcheck_aot_dispatch_static", "opcheck_aot_dispatch_dynamic"},
            "Shapes torch.Size([4, 5]) and torch.Size([4, 6]) are not equal",
        ),
        (
            pc.autograd_in_kernel,
            {
                "opcheck_autograd_registration",
                "opcheck_faketensor",
                "opcheck_aot_dispatch_static",
                "opcheck_aot_dispatch_dynamic",
            },
            "does not have an autograd kernel defined at an autograd key",
        ),
        (
            pc.numpy_backward,
            {"opcheck_aot_dispatch_static", "opcheck_aot_dispatch_dynamic"},
            ".numpy() is not supported for tensor subclasses",
        ),
    ],
    ids=["mutates-input", "wrong-fake-shape", "autograd-in-kernel", "numpy-backward"],
)
def test_opcheck_checks_catch_planted_custom_op_bugs(op, caught, words):
    results = op_results(op)
    assert flagged_checks(results) == caught, [(r.id, r.message[:200]) for r in results]
    messages = " | ".join(r.message for r in results if r.status in BAD)
    assert words in messages
    assert all(r.status == "fail" for r in results if r.status in BAD)
    assert "/work/" not in messages and "scroll up" not in messages


def test_opcheck_checks_make_no_case_for_an_autograd_function():
    # named or by default: an autograd.Function gets no opcheck case (not five
    # `unsupported` lines in every report), and its other checks run as before
    assert run(NumpyCube, OPCHECK) == []
    results = run(NumpyCube, ("vmap", *OPCHECK))
    assert results and {r.check for r in results} == {"vmap"}
    assert not [r for r in run(NumpyCube, TRANSFORMS) if r.check.startswith("opcheck_")]


def test_custom_op_overload_and_packet_are_accepted():
    for target in (torch.ops.afdb_planted.good_sin, torch.ops.afdb_planted.good_sin.default):
        result = harness.check(target, pc.op_samples, checks=["vmap", "opcheck_schema"])
        assert result.ok, [(c.id, c.message) for c in result.cases]
        assert all(c.entry == "afdb_planted.good_sin" for c in result.cases)


def test_assert_conforms_names_the_custom_op_failure():
    with pytest.raises(AssertionError, match="opcheck_faketensor"):
        harness.assert_conforms(pc.wrong_fake_shape, pc.op_samples, checks=["opcheck_faketensor"])


def test_afdb_check_takes_a_custom_op(tmp_path):
    module = Path(pc.__file__)
    out = tmp_path / "r.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "harness.cli",
            "check",
            f"{module}:wrong_fake_shape",
            "--samples",
            f"{module}:op_samples",
            "--checks",
            "opcheck_schema,opcheck_faketensor",
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        cwd=Path(__file__).parent.parent,
    )
    assert proc.returncode == 1, proc.stderr
    assert "not a torch.autograd.Function" not in proc.stdout + proc.stderr
    cases = {c["check"]: c["status"] for c in json.loads(out.read_text())["cases"]}
    assert cases == {"opcheck_schema": "pass", "opcheck_faketensor": "fail"}


def test_plugin_conformance_tests_take_a_custom_op():
    from harness.pytest_plugin import conformance_tests

    good = conformance_tests(pc.good_sin, pc.op_samples, checks=["opcheck_faketensor"])
    (mark,) = [m for m in good.pytestmark if m.name == "parametrize"]
    assert list(mark.args[1]) == ["afdb_planted.good_sin/opcheck_faketensor/s0"]
    good("afdb_planted.good_sin/opcheck_faketensor/s0")  # passes: no exception
    bad = conformance_tests(pc.wrong_fake_shape, pc.op_samples, checks=["opcheck_faketensor"])
    with pytest.raises(pytest.fail.Exception, match="test_faketensor failed"):
        bad("afdb_planted.wrong_fake_shape/opcheck_faketensor/s0")


def test_afdb_repro_of_an_opcheck_case_reruns_opcheck(tmp_path):
    module = Path(pc.__file__)
    script = tmp_path / "repro.py"
    target = [f"{module}:wrong_fake_shape", "--samples", f"{module}:op_samples"]
    case = "afdb_planted.wrong_fake_shape/opcheck_faketensor/s0"
    root = Path(__file__).parent.parent
    made = subprocess.run(
        [sys.executable, "-m", "harness.cli", "repro", case, *target, "-o", str(script)],
        capture_output=True,
        text=True,
        cwd=root,
    )
    assert made.returncode == 0, made.stderr
    ran = subprocess.run([sys.executable, str(script)], capture_output=True, text=True)
    assert ran.returncode == 1, ran.stdout + ran.stderr
    assert "test_faketensor failed" in ran.stdout
