"""The references of issue 19 on Functions of real PyPI libraries (skipped where the library is
not installed: ``pip install --no-deps roma pypose`` into the venv, torch kept at the pin).

* roma 1.8.0 ``_ProcrustesManualDerivatives``: the nearest rotation by SVD, vmap rule
  generated. First order passes at float64, in its float32 legs and on float32 samples; its
  backward reads the saved ``US`` and ``V``, outputs it marks non-differentiable, so its
  double backward misses their dependence on M: second order fails, naming them.
* roma ``_HornEigenvectorManualDerivatives`` asserts float64: its float32 legs are skipped.
* pypose 0.9.5 ``so3_Exp`` / ``SO3_Log`` (tangent-space gradients, ``gradient="custom"``):
  so3_Exp's backward reads only its saved input, so second order is compared with finite
  differences of its own backward; SO3_Log's reads its saved output, so with eager double
  backward, and the message says so.
"""

from __future__ import annotations

import pytest
import torch

import harness
from harness.checks.second_order import CUSTOM_FD_SECOND_ORDER, EAGER_DOUBLE_BACKWARD

#: Why a test of a real PyPI package is skipped where the package is not installed.
OPTIONAL = "{} is not installed (optional: pip install {} to check its real Functions)"


def _gen(seed):
    return torch.Generator().manual_seed(seed)


def procrustes_samples(seed):
    return [(torch.randn(4, 3, 3, generator=_gen(seed), dtype=torch.float64), True, 1e-5)]


def horn_samples(seed):
    return [(torch.randn(4, 3, 3, generator=_gen(seed), dtype=torch.float64), 1e-5)]


def axis_angle_samples(seed):
    return [(0.8 * torch.randn(4, 3, generator=_gen(seed), dtype=torch.float64),)]


def quaternion_samples(seed):
    q = torch.randn(4, 4, generator=_gen(seed), dtype=torch.float64)
    q = q / q.norm(dim=-1, keepdim=True)
    return [(q * torch.sign(q[..., 3:]),)]


def by_id(result):
    return {c.id: c for c in result.cases}


def test_roma_procrustes():
    roma = pytest.importorskip("roma.mappings", reason=OPTIONAL.format("roma", "roma"))
    fn = roma._ProcrustesManualDerivatives
    first = ["jvp", "vjp", "jacrev", "jacfwd"]
    result = by_id(harness.check(fn, procrustes_samples, checks=[*first, "vjp_of_vjp"]))
    name = fn.__name__
    for check in first:
        assert result[f"{name}/{check}/s0"].status == "pass", result[f"{name}/{check}/s0"].message
    for check in ("jvp", "vjp"):
        leg = result[f"{name}/{check}/s0/dtype=float32"]
        assert leg.status == "pass" and leg.dtype == "float32", leg.message
    vv = result[f"{name}/vjp_of_vjp/s0"]
    assert vv.status == "fail"
    assert "backward reads output 2, output 3, which the Function marks non-differentiable" in (
        vv.message
    )


def test_roma_horn_refuses_float32_and_its_legs_are_skipped():
    roma = pytest.importorskip("roma.mappings", reason=OPTIONAL.format("roma", "roma"))
    result = harness.check(roma._HornEigenvectorManualDerivatives, horn_samples, checks=["vjp"])
    cases = by_id(result)
    assert cases["_HornEigenvectorManualDerivatives/vjp/s0"].status == "pass"
    leg = cases["_HornEigenvectorManualDerivatives/vjp/s0/dtype=float32"]
    assert leg.status == "unsupported" and "refuses float32" in leg.message


def test_pypose_second_order_references_follow_what_backward_saved():
    op = pytest.importorskip(
        "pypose.lietensor.operation", reason=OPTIONAL.format("pypose", "pypose")
    )
    (exp,) = harness.check(
        op.so3_Exp, axis_angle_samples, gradient="custom", checks=["vjp_of_vjp"]
    ).cases
    assert exp.status == "pass" and exp.reference == CUSTOM_FD_SECOND_ORDER, exp.message
    (log,) = harness.check(
        op.SO3_Log, quaternion_samples, gradient="custom", checks=["vjp_of_vjp"]
    ).cases
    assert log.status == "pass" and log.reference == EAGER_DOUBLE_BACKWARD, log.message
    assert "because it reads the saved output 0" in log.message
