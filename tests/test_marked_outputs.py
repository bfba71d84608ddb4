"""Outputs a Function marks non-differentiable get no cotangent and no tangent (issue 14:
no false alarm on a Function that returns auxiliary values, as roma's Procrustes does)."""

from __future__ import annotations

import harness

from . import marked_outputs as M

CHECKS = ["jvp", "vjp", "jacrev", "jacfwd", "vjp_of_vjp", "jvp_of_vjp", "grad_of_vmap"]


def test_marked_output_is_not_differentiated():
    result = harness.check(M.ScaleWithMagnitude, M.samples, checks=CHECKS)
    problems = [(r.id, r.status, r.message) for r in result.cases if r.status != "pass"]
    assert not problems, problems
    assert {r.check for r in result.cases} == set(CHECKS)


def test_wrong_backward_beside_a_marked_output_still_fails():
    result = harness.check(M.ScaleWithMagnitudeWrongBackward, M.samples, checks=["vjp", "jacrev"])
    failed = [r for r in result.cases if r.status == "fail"]
    assert {r.check for r in failed} == {"vjp", "jacrev"}
    assert all("input 0" in r.message for r in failed)
