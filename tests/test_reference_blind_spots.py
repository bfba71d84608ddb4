"""References that could not see a bug (issue 19 §1, the first six bullets).

For each class: the planted wrong twin (``tests/reference_functions.py``) now fails with a
message naming the problem, where the old reference let it pass or raised a false alarm;
the correct Function passes every check it claims.
"""

from __future__ import annotations

import json
from collections import Counter

import pytest
import torch

import harness
from autograd_function_db.entry import Sample
from harness.checks import finite_diff as fd
from harness.checks.autodiff_refs import DiffView
from harness.checks.catalogue import get_check
from harness.checks.containers import WHY, nested_outputs
from harness.checks.saved import backward_reads
from harness.checks.second_order import (
    CUSTOM_FD_SECOND_ORDER,
    EAGER_DOUBLE_BACKWARD,
    eager_double_backward,
    first_order_vjp,
)
from harness.cli.main import main
from harness.engine.cases import enumerate_cases
from harness.engine.sample_cache import EntryData
from harness.plans.plan import ArgLayout, hazard_plans
from harness.sources.entries import make_entry

from . import reference_functions as rf
from . import verdict_functions as vf

BAD = {"fail", "error", "xpass", "timeout", "crash", "internal"}
SECOND = ["jvp_of_vjp", "vjp_of_vjp"]


def bad(result):
    return [(c.id, c.status, c.message[:400]) for c in result.cases if c.status in BAD]


def by_id(result):
    return {c.id: c for c in result.cases}


# --- second order under gradient="custom" ----------------------------------------------------


def test_backward_that_detaches_what_it_saved_fails_its_custom_second_order():
    result = harness.check(
        rf.WeightedSpikeDetached, rf.spike_samples, gradient="custom", checks=SECOND
    )
    assert {c.check: c.status for c in result.cases} == {"jvp_of_vjp": "fail", "vjp_of_vjp": "fail"}
    for c in result.cases:
        assert CUSTOM_FD_SECOND_ORDER in c.message, c.message
        assert "it saves only inputs (input 0, input 1)" in c.message


def test_the_old_reference_agrees_with_the_detached_backward():
    """Why the old reference passed it: eager double backward of the same Function loses the
    same terms as torch.func, so the two agree (both zero for input 1)."""
    v, w = rf.spike_samples(0)[0]
    c = torch.randn(4, 5, dtype=torch.float64)
    entry = make_entry(rf.WeightedSpikeDetached, rf.spike_samples, gradient="custom")
    view = DiffView(entry, (v, w), (0, 1), (0,), (rf.WeightedSpikeDetached.apply(v, w).detach(),))
    t = [torch.randn_like(v), torch.randn_like(w)]
    eager = eager_double_backward(view, [v, w, c], t)
    _, vjp2 = torch.func.vjp(first_order_vjp(view, (v, w)), v, w, c)
    func = vjp2(tuple(t))
    for a, b in zip(eager, func):
        torch.testing.assert_close(a, b)
    assert not eager[0].any() and not eager[1].any()  # every second-order term lost


def test_correct_custom_first_order_passes_against_finite_differences_of_its_backward():
    result = harness.check(rf.WeightedSpike, rf.spike_samples, gradient="custom")
    assert not bad(result), bad(result)
    for c in result.cases:
        if c.check in SECOND:
            assert c.status == "pass" and c.reference == CUSTOM_FD_SECOND_ORDER
            assert "independent of the Function's double backward" in c.message


def test_a_backward_reading_a_saved_output_keeps_eager_double_backward_and_says_so():
    result = harness.check(rf.Rodrigues, rf.rotation_samples, gradient="custom")
    assert not bad(result), bad(result)
    (vv,) = [c for c in result.cases if c.check == "vjp_of_vjp"]
    assert vv.status == "pass" and vv.reference == EAGER_DOUBLE_BACKWARD
    assert "because it reads the saved output 0" in vv.message
    assert "cannot see a backward that detaches what it saved" in vv.message


class _SavesIntermediate(rf.WeightedSpike):
    @staticmethod
    def setup_context(ctx, inputs, output):
        v, w = inputs
        ctx.save_for_backward(v, w, v.abs())


class _KeepsOutputOnCtx(rf.WeightedSpike):
    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs)
        ctx.out = output


class _SavesDetachedInput(rf.WeightedSpike):
    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*(t.detach() for t in inputs))


@pytest.mark.parametrize(
    "cls, inputs_only, words",
    [
        (rf.WeightedSpike, True, "it saves only inputs (input 0, input 1)"),
        (_SavesDetachedInput, True, "it saves only inputs (input 0, input 1)"),
        (_SavesIntermediate, False, "an intermediate (saved tensor 2)"),
        (_KeepsOutputOnCtx, False, "the saved output 0 (ctx.out)"),
        (rf.Rodrigues, False, "the saved output 0"),
    ],
)
def test_what_backward_reads_is_worked_out_from_the_ctx(cls, inputs_only, words):
    samples = rf.rotation_samples if cls is rf.Rodrigues else rf.spike_samples
    args = samples(0)[0]
    entry = make_entry(cls, samples, gradient="custom")
    out = cls.apply(*args)
    view = DiffView(entry, args, tuple(range(len(args))), (0,), (out.detach(),))
    reads = backward_reads(view)
    assert reads.known and reads.inputs_only == inputs_only
    assert words in reads.describe()


# --- outputs inside containers ---------------------------------------------------------------


@pytest.mark.parametrize(
    "cls, leaf, kind",
    [(rf.SinCosDict, "output 0['cos']", "dict"), (rf.SinCosList, "output 0[1]", "list")],
    ids=["dict", "list"],
)
def test_outputs_inside_a_container_fail_once_per_check_family(cls, leaf, kind):
    result = harness.check(cls, rf.plain_samples)
    fails = [c for c in result.cases if c.status == "fail"]
    assert sorted(c.id for c in fails) == sorted(
        [f"{cls.__name__}/vmap/s0/in_dims=(0,)", f"{cls.__name__}/jvp/s0"]
    )
    for c in fails:
        assert f"{leaf} is inside a {kind}: {WHY}" in c.message
    # no other case claims anything about the untracked gradients
    assert not [c for c in result.cases if c.check == "vjp" and c.status == "pass"]


def test_the_tuple_twin_passes_every_check():
    result = harness.check(rf.SinCos, rf.plain_samples)
    assert not bad(result), bad(result)


def test_stats_nested_in_a_returned_tuple_are_a_finding_unless_declared_non_differentiable():
    result = harness.check(vf.NormWithStats, vf.norm_samples, dtype=torch.float64)
    fails = [c for c in result.cases if c.status == "fail"]
    families = Counter(get_check(c.check).family for c in fails)
    assert families == {"vmap": 1, "autodiff": 1}, [c.id for c in fails]
    assert "output 1['mean'] is inside a dict, output 1['var'] is inside a dict" in (
        fails[0].message
    )
    declared = harness.check(
        vf.NormWithStats, vf.norm_samples, dtype=torch.float64, nondiff_outputs=(1,)
    )
    assert not bad(declared), bad(declared)


class _DictOutDims(vf.NormWithStats):
    """A rule returning out_dims as a pytree with a dict (legal)."""

    @staticmethod
    def vmap(info, in_dims, x):
        y, stats = vf.NormWithStats.vmap(info, in_dims, x)[0]
        return (y, stats), (0, {"mean": 0, "var": 0})


def test_dict_out_dims_of_a_vmap_rule_stay_legal():
    result = harness.check(
        _DictOutDims,
        vf.norm_samples,
        dtype=torch.float64,
        nondiff_outputs=(1,),
        checks=["vmap", "vmap_nested", "contract"],
    )
    assert not bad(result) and {c.status for c in result.cases} == {"pass"}, bad(result)


def test_nested_outputs_names_every_floating_leaf():
    x = torch.ones(2)
    assert nested_outputs(x) == []
    assert nested_outputs((x, x)) == []
    assert nested_outputs({"a": x, "n": torch.arange(2)}) == [("output 0['a']", "dict")]
    assert nested_outputs((x, [x, (x,)])) == [("output 1[0]", "list"), ("output 1[1][0]", "tuple")]
    assert nested_outputs((x, {"m": x}), nondiff=(1,)) == []


# --- finite-difference steps -----------------------------------------------------------------


def test_mixed_scale_softplus_passes_its_jvp_and_the_wrong_formula_fails():
    result = harness.check(rf.Softplus, rf.mixed_scale_samples, checks=["jvp", "vjp"])
    assert {c.status for c in result.cases} == {"pass"}, bad(result)
    twin = harness.check(rf.SoftplusWrongJvp, rf.mixed_scale_samples, checks=["jvp"])
    (case,) = twin.cases
    assert case.status == "fail"
    assert "tangent of output 0, torch.func.jvp (the Function's jvp) vs finite differences" in (
        case.message
    )


def test_the_step_is_scaled_per_decade_of_the_element():
    x = torch.tensor([0.5, -2.0, 3e3, 40.0], dtype=torch.float64)
    t = torch.ones_like(x)
    groups = fd.scale_groups([x], [t])
    assert [g[0] for g in groups] == [2.0, 40.0, 3e3]
    assert sum(g[1][0] for g in groups).equal(t)  # the parts add up to the direction
    got = fd.directional(lambda a: (torch.nn.functional.softplus(a),), [x], [t])[0]
    torch.testing.assert_close(got, torch.sigmoid(x), rtol=1e-9, atol=1e-12)


# --- the float64 reference of another function -----------------------------------------------


def test_svd_sign_gauge_is_never_a_failure_at_float32():
    result = harness.check(rf.LeftSingularVectors, rf.gauge_samples, double_backward=False)
    assert not bad(result), bad(result)
    for name in ("vjp", "jacrev"):
        (case,) = [c for c in result.cases if c.check == name]
        assert case.status == "unsupported"
        assert case.message.startswith(
            "the float64 forward differs from float32 at output 0 (sign of singular vectors?)"
        )


def test_the_wrong_svd_backward_fails_where_the_reference_is_the_same_function():
    at32 = harness.check(rf.LeftSingularVectorsWrongBackward, rf.gauge_samples, checks=["vjp"])
    assert {c.status for c in at32.cases} == {"unsupported"}  # never fail from another function
    at64 = harness.check(
        rf.LeftSingularVectorsWrongBackward, rf.gauge_samples, dtype="float64", checks=["vjp"]
    )
    (case,) = at64.cases
    assert case.status == "fail" and "grad of input 0 vs finite differences" in case.message
    right = harness.check(rf.LeftSingularVectors, rf.gauge_samples, dtype="float64", checks=["vjp"])
    assert {c.status for c in right.cases} == {"pass"}


def test_a_dtype_dependent_constant_is_compared_at_the_run_dtype():
    checks = ["vjp", "jacrev", "vjp_of_vjp"]
    result = harness.check(rf.SafeNormalize, rf.vector_samples, checks=checks)
    assert {c.status for c in result.cases} == {"pass"}, bad(result)
    for c in result.cases:
        assert "the float64 forward differs from float32 at output 0" in c.message
        assert "the finite differences ran at float32" in c.message
    twin = harness.check(rf.SafeNormalizeWrongBackward, rf.vector_samples, checks=["vjp"])
    (case,) = twin.cases
    assert case.status == "fail" and "grad of input 0" in case.message
    assert "the finite differences ran at float32, the function the call computes" in case.message


# --- a float32 leg for float64 samples -------------------------------------------------------


def test_softmax_without_the_max_shift_fails_its_float32_leg():
    result = harness.check(rf.SoftmaxNoShift, rf.logit_samples, checks=["jvp", "vjp"])
    cases = by_id(result)
    assert set(cases) == {
        "SoftmaxNoShift/jvp/s0",
        "SoftmaxNoShift/jvp/s0/dtype=float32",
        "SoftmaxNoShift/vjp/s0",
        "SoftmaxNoShift/vjp/s0/dtype=float32",
    }
    for name in ("jvp", "vjp"):
        assert cases[f"SoftmaxNoShift/{name}/s0"].status == "pass"  # float64 sees nothing
        leg = cases[f"SoftmaxNoShift/{name}/s0/dtype=float32"]
        assert leg.status == "fail" and leg.dtype == "float32"
        assert leg.message.startswith("float32 leg (the float64 sample cast to float32")
        assert "got nan" in leg.message
    custom = harness.check(rf.SoftmaxNoShift, rf.logit_samples, gradient="custom", checks=["vjp"])
    leg = by_id(custom)["SoftmaxNoShift/vjp/s0/dtype=float32"]
    assert leg.status == "fail" and "eager backward (gradient=custom)" in leg.message


def test_the_shifted_softmax_passes_its_legs_with_a_note():
    result = harness.check(rf.Softmax, rf.logit_samples, checks=["jvp", "vjp"])
    assert {c.status for c in result.cases} == {"pass"}, bad(result)
    legs = [c for c in result.cases if c.id.endswith("/dtype=float32")]
    assert len(legs) == 2 and all("float32 leg" in c.message for c in legs)


def test_a_function_refusing_float32_skips_its_leg_and_declared_dtypes_override():
    result = harness.check(rf.Float64OnlySoftmax, rf.logit_samples, checks=["jvp", "vjp"])
    legs = [c for c in result.cases if c.id.endswith("/dtype=float32")]
    assert len(legs) == 2 and {c.status for c in legs} == {"unsupported"}
    assert all("refuses float32" in c.message and "dtypes=" in c.message for c in legs)
    assert result.exit_status == 0
    only64 = harness.check(
        rf.Float64OnlySoftmax, rf.logit_samples, checks=["jvp", "vjp"], dtypes=("float64",)
    )
    assert [c.id for c in only64.cases] == [
        "Float64OnlySoftmax/jvp/s0",
        "Float64OnlySoftmax/vjp/s0",
    ]
    both = harness.check(
        rf.SoftmaxNoShift, rf.logit_samples, checks=["vjp"], dtypes=(torch.float32, torch.float64)
    )
    assert "SoftmaxNoShift/vjp/s0/dtype=float32" in by_id(both)
    fixed = harness.check(rf.SoftmaxNoShift, rf.logit_samples, checks=["vjp"], dtype="float64")
    assert [c.id for c in fixed.cases] == ["SoftmaxNoShift/vjp/s0"]  # a fixed dtype: no leg


def test_leg_ids_are_stable_and_distinct():
    entry = make_entry(rf.SoftmaxNoShift, rf.logit_samples)
    options = harness.Options(dtype=None, checks=("jvp", "vjp", "jacrev"))
    ids = [c.id for c in enumerate_cases(EntryData(entry, options))]
    assert ids == [c.id for c in enumerate_cases(EntryData(entry, options))]
    assert len(ids) == len(set(ids))
    assert [i for i in ids if "dtype=" in i] == [
        "SoftmaxNoShift/jvp/s0/dtype=float32",
        "SoftmaxNoShift/vjp/s0/dtype=float32",
    ]


def test_dtypes_on_the_command_line(tmp_path, capsys):
    fixtures = rf.__file__
    argv = ["check", f"{fixtures}:Float64OnlySoftmax", "--samples", f"{fixtures}:logit_samples"]
    argv += ["--no-isolate", "--checks", "vjp", "-q"]
    report = tmp_path / "r.json"
    assert main([*argv, "--dtypes", "float64", "--json", str(report)]) == 0
    ids = [c["id"] for c in json.loads(report.read_text())["cases"]]
    assert ids == ["Float64OnlySoftmax/vjp/s0"]
    assert main([*argv, "--dtypes", "float65"]) == 2
    err = capsys.readouterr().err
    assert "--dtypes float65" in err and "unknown dtype" in err and "Traceback" not in err


def test_the_repro_of_a_leg_reproduces_it(tmp_path, capsys):
    import runpy

    fixtures = rf.__file__
    script = tmp_path / "repro.py"
    case = "SoftmaxNoShift/vjp/s0/dtype=float32"
    target = [f"{fixtures}:SoftmaxNoShift", "--samples", f"{fixtures}:logit_samples"]
    assert main(["repro", case, *target, "--dtype", "samples", "-o", str(script)]) == 0
    capsys.readouterr()
    with pytest.raises(SystemExit) as exited:
        runpy.run_path(str(script), run_name="__main__")
    out = capsys.readouterr().out
    assert exited.value.code == 1 and "dtype leg" in out and "REPRODUCED" in out, out


# --- the hazard probe with unbatched arguments -----------------------------------------------


def test_hazard_probe_leaves_an_argument_with_a_dim_of_the_batch_size_unbatched():
    result = harness.check(
        rf.MulBatchLastBySize, rf.pair_samples, checks=["vmap_hazard"], hazard_probe=True
    )
    fails = {c.id: c for c in result.cases if c.status == "fail"}
    assert set(fails) == {
        "MulBatchLastBySize/vmap_hazard/s0/in_dims=(None,0),B=5,hazard=5",
        "MulBatchLastBySize/vmap_hazard/s0/in_dims=(0,None),B=5,hazard=5",
    }
    for c in fails.values():
        assert "is unbatched here and has a dim of size 5, the batch size" in c.message
        assert "x.shape[-1] == info.batch_size" in c.message
    twin = harness.check(
        rf.MulBatchLast, rf.pair_samples, checks=["vmap_hazard"], hazard_probe=True
    )
    assert twin.cases and {c.status for c in twin.cases} == {"pass"}, bad(twin)


def test_hazard_plans_unbatch_only_leaves_with_a_dim_of_that_size():
    sample = Sample((torch.ones(4, 5), torch.ones(5)), "s")
    layout = ArgLayout.of(sample)
    ids = [p.id for p in hazard_plans(layout, layout.sizes)]
    assert "in_dims=(None,0),B=4,hazard=4" in ids  # argument 0 has a dim of 4
    assert "in_dims=(0,None),B=4,hazard=4" not in ids  # argument 1 has none
    assert {"in_dims=(None,0),B=5,hazard=5", "in_dims=(0,None),B=5,hazard=5"} <= set(ids)


def _two_samples(seed):
    return rf.plain_samples(seed) + rf.plain_samples(seed + 1)


def test_the_container_finding_is_reported_once_whatever_the_number_of_samples():
    result = harness.check(rf.SinCosDict, _two_samples, checks=["vmap", "jvp", "vjp"])
    fails = sorted(c.id for c in result.cases if c.status == "fail")
    assert fails == ["SinCosDict/jvp/s0", "SinCosDict/vmap/s0/in_dims=(0,)"]
