"""What torch.func cannot differentiate, checked eagerly; torch's un-batching bug by its
signature; runs that check nothing (exit 5); nondiff_args.

Each fixture of ``tests/legacy_functions.py`` passes the checks it claims and its planted
twin fails, naming the sub-check and the reference.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import harness
from autograd_function_db import REGISTRY
from harness.checks.catalogue import CATALOGUE_ORDER, LEGACY_FIX, check_names, get_check
from harness.cli.main import main
from harness.core.options import Options
from harness.engine.runner import run_entries

from . import legacy_functions as lf

pytest_plugins = ["pytester"]

EAGER = ("eager_vjp", "eager_jvp", "eager_vjp_of_vjp")
LEGACY = Path(lf.__file__)


def by_check(result):
    out: dict[str, list] = {}
    for c in result.cases:
        out.setdefault(c.check, []).append(c)
    return out


def statuses(cases):
    return {c.status for c in cases}


def bad(result):
    return [c for c in result.cases if c.status not in ("pass", "unsupported")]


# --- the catalogue ---------------------------------------------------------------------------


def test_eager_checks_are_catalogued_in_order_and_only_for_functions_torch_func_refuses():
    assert CATALOGUE_ORDER[-3:] == EAGER
    assert check_names("eager") == list(EAGER)
    for name in EAGER:
        assert get_check(name).by_default is not None
    modern = next(e for e in REGISTRY if e.caps.setup_context and e.custom_op is None)
    ids = [c.id for c in run_entries([modern], Options(checks=("vmap", "vjp")))]
    assert ids and not any("/eager_" in i for i in ids)
    assert run_entries([modern], Options(checks=EAGER)) == []  # named or not: no case, no id


# --- legacy Functions ------------------------------------------------------------------------


def test_legacy_function_is_checked_eagerly_and_passes():
    result = harness.check(lf.LegacyScaledTanh, lf.three_samples)
    per = by_check(result)
    for name in EAGER:
        assert statuses(per[name]) == {"pass"}, [(c.id, c.message) for c in per[name]]
    for name in ("vmap", "vjp", "jvp", "vjp_of_vjp"):
        assert [c.message for c in per[name]] == [LEGACY_FIX]
    assert result.exit_status == 0 and result.verdict == "PASS"
    assert per["eager_vjp"][0].reference == "finite differences (float64)"


@pytest.mark.parametrize(
    ("twin", "check", "words"),
    [
        (
            lf.LegacyBackwardForgetsW,
            "eager_vjp",
            ["[input 0 alone, all outputs]", "grad of input 0"],
        ),
        (lf.LegacyJvpForgetsWTangent, "eager_jvp", ["[input 1 alone]", "the Function's jvp"]),
        (lf.LegacyDetachedBackward, "eager_vjp_of_vjp", ["d<vjp, w>/d input 0", "got 0"]),
        (lf.LegacyAssumesContiguous, "eager_vjp", ["failing sub-checks: [non-contiguous inputs"]),
    ],
)
def test_legacy_twin_fails_its_eager_check_naming_the_sub_check(twin, check, words):
    result = harness.check(twin, lf.three_samples)
    failed = [c for c in result.cases if c.status == "fail"]
    assert check in {c.check for c in failed}, [(c.id, c.status) for c in result.cases]
    message = next(c.message for c in failed if c.check == check)
    for word in words:
        assert word in message, message
    assert "finite differences (float64)" in message
    assert result.exit_status == 1


def test_legacy_twin_only_fails_where_it_is_wrong():
    # a wrong backward: the jvp (right) still passes; a wrong jvp: the backward still passes
    per = by_check(harness.check(lf.LegacyBackwardForgetsW, lf.three_samples))
    assert statuses(per["eager_jvp"]) == {"pass"}
    per = by_check(harness.check(lf.LegacyJvpForgetsWTangent, lf.three_samples))
    assert statuses(per["eager_vjp"]) == {"pass"} and statuses(per["eager_vjp_of_vjp"]) == {"pass"}
    # second order follows from a wrong first order, and says so
    per = by_check(harness.check(lf.LegacyBackwardForgetsW, lf.three_samples))
    assert "follows from the first-order failure of LegacyBackwardForgetsW/eager_vjp/s0" in (
        per["eager_vjp_of_vjp"][0].message
    )


def test_legacy_in_place_rules():
    ok = harness.check(lf.LegacyScaleInPlace, lf.one_sample, inplace_args=(0,), checks=EAGER)
    assert statuses(by_check(ok)["eager_vjp"]) == {"pass"}
    twin = harness.check(lf.LegacyScaleInPlaceUndeclared, lf.one_sample, checks=EAGER)
    failed = [c for c in twin.cases if c.status == "fail"]
    assert {c.check for c in failed} == {"eager_vjp", "eager_vjp_of_vjp"}
    assert all("input 0 was modified in place" in c.message for c in failed)


def test_legacy_custom_gradient_holds_the_backward_to_itself_and_says_so():
    ok = harness.check(lf.LegacyClippedSTE, lf.away_from_one_samples, gradient="custom")
    per = by_check(ok)
    assert statuses(per["eager_vjp"]) == {"pass"}
    assert "no independent reference" in per["eager_vjp"][0].message
    assert per["eager_vjp"][0].reference.startswith("the same eager backward")
    assert statuses(per["eager_vjp_of_vjp"]) == {"pass"}
    twin = harness.check(
        lf.LegacyClippedSTEDropsClipAlone, lf.away_from_one_samples, gradient="custom"
    )
    failed = [c for c in twin.cases if c.status == "fail"]
    assert [c.check for c in failed] == ["eager_vjp"]
    assert "failing sub-checks: [input 0 alone, all outputs]" in failed[0].message


def test_custom_gradient_second_order_from_saved_outputs_is_unsupported_with_the_reason():
    result = harness.check(lf.LegacySTEFromOutput, lf.one_sample, gradient="custom")
    case = by_check(result)["eager_vjp_of_vjp"][0]
    assert case.status == "unsupported"
    assert "saved tensor 0 (shape (4, 5)) is not an input" in case.message


def test_afdb_check_of_a_legacy_function_says_what_to_change(capsys):
    rc = main(["check", f"{LEGACY}:LegacyScaledTanh", "--samples", f"{LEGACY}:three_samples",
               "--no-isolate"])  # fmt: skip
    out = capsys.readouterr().out
    assert rc == 0, out
    note = next(line for line in out.splitlines() if line.startswith("note: torch.func"))
    assert "setup_context(ctx, inputs, output)" in note and "generate_vmap_rule = True" in note
    assert "ok   eager_vjp" in out
    rc = main(["check", f"{LEGACY}:LegacyBackwardForgetsW", "--samples",
               f"{LEGACY}:three_samples", "--no-isolate", "-q"])  # fmt: skip
    assert rc == 1


def test_repro_script_of_an_eager_case_reproduces(tmp_path, capsys):
    import subprocess
    import sys

    script = tmp_path / "repro.py"
    rc = main(["repro", "LegacyBackwardForgetsW/eager_vjp/s0", f"{LEGACY}:LegacyBackwardForgetsW",
               "--samples", f"{LEGACY}:three_samples", "--dtype", "samples", "-o", str(script)])  # fmt: skip
    assert rc == 0, capsys.readouterr()
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "REPRODUCED" in done.stdout and "eager backward" in done.stdout


# --- custom ops ----------------------------------------------------------------------------


def test_custom_op_refused_by_torch_func_is_unsupported_in_torchs_words_and_checked_eagerly():
    result = harness.check(lf.ScaledMulOp, lf.mul_samples)
    per = by_check(result)
    for name in ("vjp", "grad_of_vmap", "vmap_of_vjp", "vjp_of_vjp", "jacrev"):
        assert statuses(per[name]) == {"unsupported"}, name
        assert "must override the setup_context staticmethod" in per[name][0].message
    assert statuses(per["eager_vjp"]) == {"pass"}
    assert statuses(per["eager_vjp_of_vjp"]) == {"pass"}
    assert result.exit_status == 0


def test_custom_op_whose_backward_forgets_its_scalar_fails():
    result = harness.check(lf.ScaledMulForgetsAlpha, lf.mul_samples)
    failed = [c for c in result.cases if c.status == "fail"]
    assert {c.check for c in failed} == {"eager_vjp", "eager_vjp_of_vjp"}
    assert "grad of input 0 vs finite differences (float64)" in failed[0].message
    assert not [c for c in result.cases if c.status == "error"]


def test_database_custom_ops_pass_their_eager_checks():
    ops = [e for e in REGISTRY if e.custom_op is not None][:2]
    results = run_entries(ops, Options(checks=EAGER))
    assert {r.status for r in results if r.check != "eager_jvp"} == {"pass"}
    assert {r.status for r in results if r.check == "eager_jvp"} == {"unsupported"}


# --- torch's vmap un-batching bug, recognised by its signature --------------------------------


def test_correct_rule_with_out_dim_none_meets_torchs_bug_as_xfail_with_a_repro():
    result = harness.check(lf.CountedSum, lf.counted_samples, checks=["vmap", "contract"])
    xfails = [c for c in result.cases if c.status == "xfail"]
    assert xfails and not bad(result) or all(c.status == "xfail" for c in bad(result))
    assert {"vmap", "contract"} <= {c.check for c in xfails}
    for c in xfails:
        assert "out_dims=0 or " not in c.message
        assert "bug, not the Function's" in c.message
        assert "Plain torch" in c.message and "torch.func.vmap(lambda x: (x, torch.arange(" in (
            c.message
        )
        assert "out_dims=(0, " in c.message
    assert all("out_dims=0" not in c.id.split("/")[-1] for c in xfails)
    assert result.exit_status == 0


def test_wrong_rule_with_out_dim_none_still_fails():
    result = harness.check(lf.CountedSumWrongNone, lf.counted_samples, checks=["vmap"])
    assert not [c for c in result.cases if c.status == "xfail"]
    assert result.exit_status == 1
    plain = [c for c in result.cases if "out_dims" not in c.id]
    assert plain and all(c.status == "fail" for c in plain)


def test_dropout_like_function_meets_the_bug_under_randomness_same():
    ok = harness.check(
        lf.DropoutLike, lf.dropout_samples, randomness=True, checks=["vmap", "contract"]
    )
    assert not bad(ok) or {c.status for c in bad(ok)} == {"xfail"}
    assert any(c.status == "xfail" and "randomness='same'" in c.message for c in ok.cases)
    assert ok.exit_status == 0
    twin = harness.check(
        lf.DropoutLikeSharedOutput, lf.dropout_samples, randomness=True, checks=["vmap"]
    )
    assert not [c for c in twin.cases if c.status == "xfail"]
    assert twin.exit_status == 1


def test_the_database_entry_needs_no_expectation_for_it():
    import json

    from harness.expectations import installed_torch, torch_admits
    from harness.sources.database import expectations_path

    exps = json.loads(Path(expectations_path("afdb")).read_text())["expectations"]
    here = [e for e in exps if torch_admits(e.get("torch", ""), installed_torch())]
    assert not [e for e in here if e["id"].startswith("RowSumWithCount/")]
    entry = next(e for e in REGISTRY if e.name == "RowSumWithCount")
    results = run_entries([entry], Options(checks=("vmap",)))
    assert {r.status for r in results} == {"pass", "xfail"}


# --- nothing checked: exit 5 -------------------------------------------------------------------


def test_a_run_that_checks_nothing_is_not_conforms():
    result = harness.check(lf.LegacyScaledTanh, lf.three_samples, checks=["vmap", "contract"])
    assert {c.status for c in result.cases} == {"unsupported"}
    assert result.ok  # nothing failed...
    assert result.nothing_checked and not result.conforms  # ...but nothing was checked
    assert result.exit_status == 5 and result.verdict == "NOTHING CHECKED"
    with pytest.raises(AssertionError, match="nothing checked: all 2 cases are unsupported"):
        harness.assert_conforms(lf.LegacyScaledTanh, lf.three_samples, checks=["vmap", "contract"])
    harness.assert_conforms(lf.LegacyScaledTanh, lf.three_samples, checks=["eager_vjp"])


def test_afdb_check_exits_5_and_says_nothing_checked(capsys):
    rc = main(["check", f"{LEGACY}:LegacyScaledTanh", "--samples", f"{LEGACY}:three_samples",
               "--no-isolate", "--checks", "vmap,jvp"])  # fmt: skip
    out = capsys.readouterr().out
    assert rc == 5, out
    assert "nothing checked: every case is unsupported or skipped" in out
    assert out.strip().splitlines()[-1].startswith("NOTHING CHECKED: 2 cases: 2 unsupported")


def test_afdb_run_exits_5_when_nothing_is_checked(capsys):
    rc = main(["run", "--checks", "eager_vjp", "RowSumWithCount"])
    out = capsys.readouterr().out
    assert rc == 5, out
    assert "nothing checked" in out and "NOTHING CHECKED: 0 cases: no cases" in out


def test_an_interrupted_run_is_not_called_nothing_checked():
    from harness.api import summary_notes
    from harness.core.results import RunResult

    # Ctrl-C before the first case: exit 130, and no "nothing checked ... (exit 5)" line
    stopped = RunResult([], {"interrupted": True})
    assert not [n for n in summary_notes(stopped) if "nothing checked" in n]
    assert [n for n in summary_notes(RunResult([], {})) if "nothing checked" in n]


PLUGIN_MODULE = """
from harness.pytest_plugin import conformance_tests
from legacy_functions import LegacyScaledTanh, three_samples

test_legacy = conformance_tests(LegacyScaledTanh, three_samples, checks={checks!r})
"""


@pytest.mark.parametrize(("checks", "ret"), [(["vmap", "jvp"], 5), (["vmap", "eager_vjp"], 0)])
def test_plugin_exits_5_when_a_group_checks_nothing(pytester, monkeypatch, checks, ret):
    import os

    root = Path(__file__).resolve().parent.parent
    pytester.makepyfile(
        legacy_functions=LEGACY.read_text(), test_conf=PLUGIN_MODULE.format(checks=checks)
    )
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(root), str(pytester.path)]))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-q", timeout=300)
    assert result.ret == ret, result.stdout.str()
    if ret == 5:
        result.stdout.fnmatch_lines(["*afdb: nothing checked by test_conf.py::test_legacy*"])


# --- nondiff_args ----------------------------------------------------------------------------


def test_nondiff_args_demand_no_gradient_of_a_parameter_table():
    before = harness.check(lf.PairEnergy, lf.pair_samples, checks=["vjp", "jacrev"])
    assert before.exit_status == 1  # a gradient is demanded of the table, which has none
    result = harness.check(
        lf.PairEnergy, lf.pair_samples, nondiff_args=(1,), checks=["vjp", "jacrev", "vjp_of_vjp"]
    )
    assert {c.status for c in result.cases} == {"pass"}, [c.message for c in result.cases]
    twin = harness.check(lf.PairEnergyWrongGrad, lf.pair_samples, nondiff_args=(1,), checks=["vjp"])
    # float64 samples: the case at their dtype, and its float32 leg (dtype=float32), both fail
    assert {c.status for c in twin.cases} == {"fail"}
    (main_case,) = [c for c in twin.cases if "/dtype=" not in c.id]
    assert "grad of input 0" in main_case.message
    assert "input 1" not in main_case.message


def test_nondiff_args_on_the_command_line_and_in_the_repro_command(capsys):
    argv = ["check", f"{LEGACY}:PairEnergyWrongGrad", "--samples", f"{LEGACY}:pair_samples",
            "--no-isolate", "--checks", "vjp", "--nondiff-args", "1"]  # fmt: skip
    rc = main(argv)
    out = capsys.readouterr().out
    assert rc == 1
    assert "non-differentiated args [1]" in out
    assert "--nondiff-args 1" in out  # the repro command names it again
    rc = main([argv[0], f"{LEGACY}:PairEnergy", *argv[2:]])
    assert rc == 0, capsys.readouterr().out
    assert main([*argv[:-1], "one"]) == 2
    assert "--nondiff-args: expected argument positions" in capsys.readouterr().err


def test_nondiff_args_in_the_plugin_are_a_capability():
    from harness.sources.entries import make_entry

    entry = make_entry(lf.PairEnergy, lf.pair_samples, nondiff_args=(1,))
    assert entry.caps.nondiff_args == (1,)
