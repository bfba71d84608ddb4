"""Torch refusing loudly is ``unsupported`` where the Function claims nothing (issue 34, part 3).

A correct legacy Function whose backward uses ``out=`` or in-place ops: torch cannot batch
that backward nor differentiate it again. Those cases are ``unsupported``, naming the op
and the Function's line; the same refusal under a claimed transform stays ``error``, and a
wrong answer still fails.
"""

from __future__ import annotations

import harness
from harness.engine.refusals import refusal
from harness.sources.entries import make_entry
from tests import refusal_functions as rf

GRAD = "vmap_of_autograd_grad"


def _by_check(result, check):
    cases = [c for c in result.cases if c.check == check]
    assert cases, [c.id for c in result.cases]
    return cases


def _statuses(result, check):
    return {c.status for c in _by_check(result, check)}


def test_a_legacy_backward_with_out_is_unsupported_under_vmap_and_double_backward():
    r = harness.check(rf.LegacySinOut, rf.one_sample)
    assert r.ok, [(c.id, c.status, c.message) for c in r.failures()]
    assert _statuses(r, "eager_vjp") == {"pass"}
    for c in _by_check(r, GRAD):
        assert c.status == "unsupported", c.message
        assert "`aten::mul.out` has no batching rule" in c.message
        assert "refusal_functions.py:" in c.message and "in backward" in c.message
        assert "torch.mul(g, x.cos(), out=buf)" in c.message
        assert "legacy forward(ctx, ...) Function claims no vmap" in c.message
        assert "/work/" not in c.message and "/tmp/" not in c.message  # relative path only
    (second,) = _by_check(r, "eager_vjp_of_vjp")
    assert second.status == "unsupported", second.message
    assert "`mul` with out= cannot be differentiated" in second.message
    assert "does not claim double backward" in second.message
    assert r.exit_status == 0


def test_in_place_scatter_add_gather_out_and_a_buffer_write_are_named():
    for fn, samples, needle in (
        (rf.LegacyGather, rf.gather_samples, "in-place `scatter_add_`"),
        (rf.LegacyGatherOut, rf.one_sample, "`aten::gather.out` has no batching rule"),
        (rf.LegacyAccumulate, rf.one_sample, "a batched value is written into an unbatched"),
        (rf.LegacyCheckpoint, rf.one_sample, "cannot run eager autograd (requires_grad_()"),
    ):
        r = harness.check(fn, samples, checks=[GRAD, "eager_vjp"], nondiff_args=())
        assert _statuses(r, "eager_vjp") == {"pass"}, fn.__name__
        for c in _by_check(r, GRAD):
            assert c.status == "unsupported", (fn.__name__, c.message)
            assert needle in c.message, (fn.__name__, c.message)
            assert "in backward" in c.message


def test_the_same_refusal_under_a_claimed_vmap_stays_an_error():
    r = harness.check(rf.SinOutGenerated, rf.one_sample, checks=[GRAD])
    cases = _by_check(r, GRAD)
    assert {c.status for c in cases} == {"error"}, [c.message for c in cases]
    assert "Batching rule not implemented for aten::mul.out" in cases[0].message
    assert r.exit_status == 1


def test_double_backward_refusal_is_unsupported_unless_declared():
    undeclared = harness.check(rf.SinOutGenerated, rf.one_sample, checks=["vjp_of_vjp"])
    assert _statuses(undeclared, "vjp_of_vjp") == {"unsupported"}
    declared = harness.check(
        rf.SinOutGenerated, rf.one_sample, checks=["vjp_of_vjp"], double_backward=True
    )
    (case,) = _by_check(declared, "vjp_of_vjp")
    assert case.status == "error", case.message
    assert "functions with out=... arguments don't support automatic differentiation" in (
        case.message
    )


def test_a_wrong_legacy_backward_still_fails():
    r = harness.check(rf.LegacySinOutWrong, rf.one_sample)
    assert _statuses(r, "eager_vjp") == {"fail"}
    assert _statuses(r, GRAD) == {"unsupported"}  # the refusal itself is still no verdict
    assert r.exit_status == 1


def test_the_functions_own_exception_under_an_unclaimed_vmap_is_unsupported():
    """Decided by the situation, not the message (issue 42): the Function's own ValueError
    under a vmap a legacy Function never claimed is a loud refusal, named with its line."""
    r = harness.check(rf.LegacyRaisesUnderVmap, rf.one_sample, checks=[GRAD])
    cases = _by_check(r, GRAD)
    assert {c.status for c in cases} == {"unsupported"}, [c.message for c in cases]
    assert "does not take batched gradients" in cases[0].message
    assert "vmap raises (ValueError" in cases[0].message
    assert "refusal_functions.py:" in cases[0].message


def test_refusal_is_blind_to_checks_that_transform_nothing_of_the_kind():
    """A batching refusal raised in a check that runs no vmap (eager_vjp) is not excused."""
    entry = make_entry(rf.LegacySinOut, rf.one_sample)
    exc = RuntimeError("Batching rule not implemented for aten::mul.out; the fallback ...")
    assert refusal(entry, "eager_vjp", exc) == ""
    assert "`aten::mul.out`" in refusal(entry, GRAD, exc)
    claimed = make_entry(rf.SinOutGenerated, rf.one_sample)
    assert refusal(claimed, GRAD, exc) == ""
