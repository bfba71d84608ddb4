"""User-facing messages pinned word for word (expecttest, as PyTorch pins its error messages).

A change of wording shows up here as a diff; accept a deliberate one with
``EXPECTTEST_ACCEPT=1 python -m pytest tests/test_messages.py``.
"""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import expecttest
import torch

from harness.checks.catalogue import NonFiniteSample
from harness.checks.compare import (
    compare_outputs,
    compare_tensors,
    nonfinite_outputs,
    require_finite,
)
from harness.checks.contract import RuleCall, validate_call
from harness.cli.main import main
from harness.engine.blame import internal_message
from harness.plans.pytrees import output_structure

ROOT = Path(__file__).resolve().parent.parent
ROT = ROOT / "examples" / "rotations.py"
TOL = {"rtol": 1.3e-6, "atol": 1e-5}


def usage_error(*argv: str) -> str:
    """The one line `afdb` prints for bad usage (exit 2), with the repository path shortened."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        rc = main(list(argv))
    assert rc == 2
    return err.getvalue().replace(str(ROOT), "ROOT").strip()


class TestMismatchMessages(expecttest.TestCase):
    def test_values_outside_tolerance(self) -> None:
        msg = compare_tensors(
            torch.tensor([[1.0, 2.0], [3.0, 4.0]]),
            torch.tensor([[1.0, 2.0], [3.5, 4.0]]),
            label="vmap in_dims=(0,), output 0",
            **TOL,
        )
        self.assertExpectedInline(
            str(msg),
            """vmap in_dims=(0,), output 0: 1 of 4 values outside tolerance; worst at (1, 0): got 3, reference 3.5, abs error 0.5, rel error 0.143; rtol=1.3e-06, atol=1e-05""",
        )

    def test_a_zero_reference_gives_no_relative_error(self) -> None:
        msg = compare_tensors(
            torch.tensor([0.25, 0.0]), torch.tensor([0.0, 0.0]), label="jvp: tangent", **TOL
        )
        self.assertExpectedInline(
            str(msg),
            """jvp: tangent: 1 of 2 values outside tolerance; worst at (0): got 0.25, reference 0, abs error 0.25 (the reference is 0: no relative error); rtol=1.3e-06, atol=1e-05""",
        )

    def test_a_huge_difference_is_not_a_meaningless_number(self) -> None:
        msg = compare_tensors(
            torch.tensor([1e308], dtype=torch.float64),
            torch.tensor([-1e308], dtype=torch.float64),
            label="vjp: grad of input 0",
            **TOL,
        )
        self.assertExpectedInline(
            str(msg),
            """vjp: grad of input 0: 1 of 1 values outside tolerance; worst at (0): got 1e+308, reference -1e+308 (their difference overflows float64); rtol=1.3e-06, atol=1e-05""",
        )

    def test_a_nan_result_against_a_finite_reference(self) -> None:
        msg = compare_tensors(
            torch.tensor([1.0, float("nan")]), torch.tensor([1.0, 2.0]), label="L", **TOL
        )
        self.assertExpectedInline(
            str(msg),
            """L: 1 of 2 values outside tolerance; worst at (1): got nan, reference 2 (not finite); rtol=1.3e-06, atol=1e-05""",
        )

    def test_shape_dtype_and_integer_mismatches(self) -> None:
        shape = compare_tensors(torch.zeros(2, 4, 3), torch.zeros(4, 2, 3), label="L", **TOL)
        dtype = compare_tensors(
            torch.zeros(2), torch.zeros(2, dtype=torch.float64), label="L", **TOL
        )
        ints = compare_tensors(torch.tensor([1, 2, 3]), torch.tensor([1, 5, 3]), label="L", **TOL)
        self.assertExpectedInline(
            f"{shape}\n{dtype}\n{ints}",
            """\
L: shape (2, 4, 3), reference (4, 2, 3)
L: dtype torch.float32, reference torch.float64
L: 1 of 3 values differ; first at (1): 2 vs reference 5""",
        )

    def test_pytree_leaves_are_named_by_path(self) -> None:
        actual = (torch.zeros(2), {"mean": torch.zeros(1), "var": torch.ones(1)})
        expected = (torch.zeros(2), {"mean": torch.zeros(1), "var": torch.zeros(1)})
        short = (torch.zeros(2), {"mean": torch.zeros(1)})
        msgs = [
            *compare_outputs(actual, expected, label="vmap in_dims=(0,)", **TOL),
            *compare_outputs(short, expected, label="vmap in_dims=(0,)", **TOL),
            *compare_outputs((1, [2, "a"]), (1, [2, "b"]), label="L", **TOL),
        ]
        self.assertExpectedInline(
            "\n".join(msgs),
            """\
vmap in_dims=(0,), output 1['var']: 1 of 1 values outside tolerance; worst at (0): got 1, reference 0, abs error 1 (the reference is 0: no relative error); rtol=1.3e-06, atol=1e-05
vmap in_dims=(0,): outputs structured as (*, {'mean': *}), reference (*, {'mean': *, 'var': *})
L, output 1[1]: got 'a', reference 'b'""",
        )

    def test_non_finite_samples(self) -> None:
        forward = nonfinite_outputs((torch.ones(2), {"var": torch.tensor([float("inf")])}))
        try:
            require_finite(
                torch.tensor([float("nan")]),
                "vjp: all inputs (torch.func.vjp): grad of input 0 vs finite differences "
                "(float64) (reference)",
            )
        except NonFiniteSample as e:
            backward = str(e)
        self.assertExpectedInline(
            f"{forward}\n{backward}",
            """\
the sample gives non-finite outputs (inf in output 1['var']): choose samples where the Function is finite
the sample gives non-finite outputs (NaN in grad of input 0 from the reference, finite differences (float64)): choose samples where the Function is finite""",
        )

    def test_internal_error(self) -> None:
        self.assertExpectedInline(
            internal_message(
                "harness/checks/compare.py:112", "vmap in_dims=(0,): RuntimeError: boom"
            ),
            """internal error of the suite at harness/checks/compare.py:112 (please report it): vmap in_dims=(0,): RuntimeError: boom""",
        )


class TestContractMessages(expecttest.TestCase):
    def test_rule_returns(self) -> None:
        x = torch.zeros(4, 2, 3)
        ref = (torch.zeros(2, 3),)
        calls = [
            RuleCall(4, (0,), x),
            RuleCall(4, (0,), (x, 1)),
            RuleCall(4, (1,), (torch.zeros(2, 5, 3), 0)),
            RuleCall(4, (0,), (x, "0")),
            RuleCall(4, (0,), (x.double(), 0)),
            RuleCall(4, (0,), ((x, x), (0, 0))),
        ]
        msgs = [p for c in calls for p in validate_call("Rotate", c, ref, False)]
        self.assertExpectedInline(
            "\n".join(msgs),
            """\
vmap rule of Rotate (info.batch_size=4, in_dims=(0,)) returned Tensor; it must return a 2-tuple (outputs, out_dims)
vmap rule of Rotate (info.batch_size=4, in_dims=(0,)), output 0: size 2 at out_dim 1 (shape (4, 2, 3)), info.batch_size 4: the batch dim seems to be at dim 0
vmap rule of Rotate (info.batch_size=4, in_dims=(1,)), output 0: size 2 at out_dim 0 (shape (2, 5, 3)), info.batch_size 4: the rule returned a wrong batch size
vmap rule of Rotate (info.batch_size=4, in_dims=(0,)), output 0: out_dim '0' is a str; it must be an int or None
vmap rule of Rotate (info.batch_size=4, in_dims=(0,)), output 0: dtype torch.float64, forward gives torch.float32
vmap rule of Rotate (info.batch_size=4, in_dims=(0,)) returned 2 output(s) as a tuple; forward returns 1""",
        )

    def test_pytree_rule_returns(self) -> None:
        stats = {"mean": torch.zeros(4, 1), "var": torch.zeros(4, 1)}
        forward = (torch.zeros(5), {"mean": torch.zeros(1), "var": torch.zeros(1)})
        leaves = (torch.zeros(5), torch.zeros(1), torch.zeros(1))
        spec = output_structure(forward)
        calls = [
            RuleCall(4, (0,), ((torch.zeros(4, 5), stats), (0, {"mean": 0, "var": 1}))),
            RuleCall(4, (0,), ((torch.zeros(4, 5), stats), (0, 0, 0))),
            RuleCall(4, (0,), ((torch.zeros(4, 5), {"mean": stats["mean"]}), 0)),
        ]
        msgs = [p for c in calls for p in validate_call("Norm", c, leaves, True, spec)]
        self.assertExpectedInline(
            "\n".join(msgs),
            """\
vmap rule of Norm (info.batch_size=4, in_dims=(0,)), output 1['var']: size 1 at out_dim 1 (shape (4, 1)), info.batch_size 4: the batch dim seems to be at dim 0
vmap rule of Norm (info.batch_size=4, in_dims=(0,)) returned out_dims (0, 0, 0), which does not match the outputs' structure (*, {'mean': *, 'var': *}): give one int or None per output, or per leaf in the same structure
vmap rule of Norm (info.batch_size=4, in_dims=(0,)) returned outputs structured as (*, {'mean': *}); forward returns (*, {'mean': *, 'var': *})""",
        )


class TestUsageErrors(expecttest.TestCase):
    def test_fixed_batch_size_colliding_with_a_sample_dim(self) -> None:
        self.assertExpectedInline(
            usage_error(
                "check",
                f"{ROT}:RotatePoints",
                "--samples",
                f"{ROT}:rotation_samples",
                "--batch-size",
                "3",
                "--no-isolate",
            ),
            """afdb check: error: sample 0 (sample0): argument 0 has size 3 at dim 0, equal to the batch size 3 you fixed with --batch-size; use --batch-size 4 (no sample dimension uses it), or leave --batch-size out and let the suite choose""",
        )

    def test_unknown_check_and_missing_target(self) -> None:
        unknown = usage_error(
            "check",
            f"{ROT}:RotatePoints",
            "--samples",
            f"{ROT}:rotation_samples",
            "--checks",
            "vmapp",
            "--no-isolate",
        )
        missing = usage_error("check", f"{ROT}:NoSuchThing", "--no-isolate")
        self.assertExpectedInline(
            f"{unknown}\n{missing}",
            """\
afdb check: error: unknown check 'vmapp'; known checks: vmap, vmap_nested, vmap_chunked, vmap_hazard, vmap_fallback, contract, jvp, vjp, grad_of_vmap, jvp_of_vmap, vmap_of_vjp, vmap_of_jvp, jvp_of_vjp, vjp_of_vjp, vmap_of_vjp_of_vjp, vmap_of_jvp_of_vjp, vmap_of_autograd_grad, jacrev, jacfwd, opcheck_schema, opcheck_autograd_registration, opcheck_faketensor, opcheck_aot_dispatch_static, opcheck_aot_dispatch_dynamic, eager_vjp, eager_jvp, eager_vjp_of_vjp
afdb check: error: TARGET: examples/rotations.py has no attribute 'NoSuchThing'; it defines BrokenRotatePoints, RotatePoints, annotations, np, random_rotation, rotation_samples, torch""",
        )


class TestDefaults(expecttest.TestCase):
    def test_no_stated_tolerance_takes_assert_close_defaults(self) -> None:
        a = torch.tensor([1.0, 2.0])
        inside = compare_tensors(a + 1e-6, a, rtol=None, atol=None, label="L")
        outside = compare_tensors(a + 1e-4, a, rtol=None, atol=None, label="L")
        self.assertIsNone(inside)
        self.assertExpectedInline(
            str(outside),
            """L: 2 of 2 values outside tolerance; worst at (0): got 1.0001, reference 1, abs error 0.0001, rel error 0.0001; rtol=1.3e-06, atol=1e-05""",
        )
