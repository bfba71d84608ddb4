"""Loop-reference comparisons at float32 know the computation's own rounding noise (issue 31,
part 2): a correct ill-conditioned numpy-backed Function passes every loop-reference check,
which it failed with the fixed per-dtype tolerance, while wrong rules still fail with the
noise allowance applied and named in the message."""

from __future__ import annotations

import pytest
import torch

from autograd_function_db.entry import entry
from autograd_function_db.numpy_ops import NumpyCube, unary_samples
from harness.checks import noise
from harness.core.options import Options
from harness.engine.runner import run_entries
from tests import noisy_functions as nf
from tests import planted_vmap as pv

#: The checks that compare with a loop of per-slice calls (the vmap family).
LOOP_CHECKS = (
    "vmap",
    "vmap_nested",
    "vmap_chunked",
    "grad_of_vmap",
    "jvp_of_vmap",
    "vmap_of_vjp",
    "vmap_of_jvp",
    "vmap_of_vjp_of_vjp",
    "vmap_of_jvp_of_vjp",
)
ALLOWED = "float32 rounding noise allowed for"


def _run(cls: type, checks: tuple[str, ...] = LOOP_CHECKS, samples=nf.samples, **kw):
    e = entry(cls.__name__, cls, samples, jvp=True, **kw)
    return run_entries([e], Options(checks=checks))


@pytest.fixture(scope="module")
def correct():
    return _run(nf.IllSolve)


def test_an_ill_conditioned_correct_function_passes_every_loop_check(correct):
    assert {r.id.split("/")[1] for r in correct} == set(LOOP_CHECKS)
    bad = [(r.id, r.status, r.message) for r in correct if r.status != "pass"]
    assert not bad, bad[:3]
    noted = [r for r in correct if ALLOWED in r.message]
    assert noted, "no case needed the noise allowance: the sample is not ill-conditioned enough"
    # the tolerance used is named in the pass note
    assert all("atol=" in r.message and "at most" in r.message for r in noted)


def test_without_the_allowance_it_fails(monkeypatch):
    """The same Function with the allowance set to zero: the fixed tolerance fails it."""
    monkeypatch.setattr(noise, "NOISE_MULTIPLE", 0.0)
    results = _run(nf.IllSolve)
    failed = {r.id.split("/")[1] for r in results if r.status == "fail"}
    assert {"grad_of_vmap", "vmap_of_vjp", "vmap_of_vjp_of_vjp"} <= failed, failed
    assert all(r.status in ("pass", "fail") for r in results)


def test_a_rule_off_by_one_percent_fails_every_loop_check():
    results = _run(nf.NearlySolve)
    for check in LOOP_CHECKS:
        mine = [r for r in results if r.id.split("/")[1] == check]
        failed = [r for r in mine if r.status == "fail"]
        assert failed, f"{check}: the 1% error passed"
        assert all(ALLOWED in r.message for r in failed), failed[0].message
        # every plan that batches an argument through the rule fails
        assert all(r.status == "fail" for r in mine if "None,None" not in r.id), [
            (r.id, r.status) for r in mine if r.status != "fail"
        ][:3]


def test_a_transposing_rule_fails_with_the_allowance_named():
    results = _run(nf.TransposedSolve, ("vmap",))
    assert results and all(r.status == "fail" for r in results)
    assert all(ALLOWED in r.message and "rel error" in r.message for r in results)


@pytest.mark.parametrize(
    "planted,check",
    [
        (pv.FirstSliceCube, "vmap"),
        (pv.HardcodedBatchCube, "vmap_nested"),
        (pv.FirstSliceCube, "vmap_chunked"),
        (pv.FirstSliceCube, "grad_of_vmap"),
        (pv.FirstSliceCube, "jvp_of_vmap"),
        (pv.FirstSliceCube, "vmap_of_vjp"),
        (pv.FirstSliceCube, "vmap_of_jvp"),
        (pv.FirstSliceCube, "vmap_of_vjp_of_vjp"),
        (pv.FirstSliceCube, "vmap_of_jvp_of_vjp"),
    ],
)
def test_planted_rule_bugs_still_fail_at_float32_with_the_allowance(planted, check):
    """The planted vmap-rule bugs of tests/planted_vmap.py at float32: the noise allowance is
    measured and applied, and they fail all the same; the correct twin passes."""
    results = _run(planted, (check,), unary_samples)
    failed = [r for r in results if r.status == "fail"]
    assert failed, [(r.id, r.status) for r in results][:3]
    assert any(ALLOWED in r.message for r in failed), failed[0].message
    twin = _run(NumpyCube, (check,), unary_samples)
    assert twin and all(r.status == "pass" for r in twin), [
        (r.id, r.message) for r in twin if r.status != "pass"
    ][:2]


def test_the_allowance_is_capped():
    """A reference whose float64 upcast differs wildly (a Function that rounds terribly, or a
    float64 call that computes something else) buys at most CAP_EPS * eps of the values."""
    expected = torch.tensor([100.0, -50.0])
    wide = expected.double() + 30.0  # noise 30: 4 x 30 would allow anything
    actual = expected * 1.01  # off by 1%
    seen: list[float] = []

    def compare(extra: float) -> str | None:
        seen.append(extra)
        return None if float((actual - expected).abs().max()) <= 1e-5 + extra else "differs"

    again = noise.recheck([compare], [expected], [wide], torch.float32, 1e-5)
    assert again is not None and again.problems == ("differs",)
    assert seen == [pytest.approx(noise.CAP_EPS * torch.finfo(torch.float32).eps * 100.0)]
    assert "(capped)" in again.words


def test_nothing_changes_where_no_noise_can_be_measured():
    """A float64 loop that raised (a Function refusing float64) leaves the comparison alone."""
    assert noise.recheck([lambda extra: "differs"], [torch.ones(2)], None, torch.float32, 0) is None
    assert not noise.applies(torch.float64, random=False)
    assert not noise.applies(torch.float32, random=True)
