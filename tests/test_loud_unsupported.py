"""A loud refusal of a transform the Function never claimed is ``unsupported``, decided by
the situation (issue 42, part 1): the planted twins (a claimed transform that raises, a
backward with a graph whose second derivative is wrong) still fail."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from harness import check
from harness.api import verdict_line
from harness.core.errors import UsageError
from harness.core.refused import refused_in, verdict_refusals
from harness.reports.report import to_markdown
from harness.sources.declare import parse_declaration


def samples(seed=0):
    gen = torch.Generator().manual_seed(seed)
    return [(torch.randn(3, 5, generator=gen, dtype=torch.float64),)]


class NumpySin(torch.autograd.Function):
    """A legacy Function whose backward goes through numpy (a sorting package's style)."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.from_numpy(np.sin(x.detach().numpy()))

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return torch.from_numpy(np.cos(x.detach().numpy()) * g.numpy())  # the numpy line


_NUMPY_LINE = next(
    i + 1
    for i, text in enumerate(open(__file__).read().splitlines())  # noqa: SIM115
    if text.endswith("# the numpy line")
)


def _by_check(r):
    return {c.check: c for c in r.cases}


def test_a_numpy_backward_legacy_function_is_unsupported_with_its_line():
    r = check(NumpySin, samples, checks=["eager_vjp", "eager_vjp_of_vjp", "vmap_of_autograd_grad"])
    statuses = {c.id: c.status for c in r.cases}
    assert _by_check(r)["eager_vjp"].status == "pass"
    assert {s for i, s in statuses.items() if "/eager_vjp/" not in i} == {"unsupported"}, statuses
    second = _by_check(r)["eager_vjp_of_vjp"]
    assert refused_in(second.message).startswith("double backward raises (RuntimeError")
    assert f"test_loud_unsupported.py:{_NUMPY_LINE}" in second.message
    assert "does not claim double backward" in second.message
    assert r.exit_status == 0
    line = verdict_line(r)
    assert line.startswith("PASS: ") and "double backward raises (RuntimeError" in line, line
    assert "vmap raises" not in line  # a legacy Function's style already says no vmap
    assert "## Unsupported transforms" in to_markdown(r)


def test_claims_double_backward_turns_the_raise_into_a_failure():
    r = check(NumpySin, samples, checks=["eager_vjp_of_vjp"], claims=("double_backward",))
    (case,) = r.cases
    assert case.status == "error", case.message
    assert "numpy" in case.message
    assert verdict_line(r).startswith("FAIL: ")


class DoubleRaisingRule(torch.autograd.Function):
    """2x whose (claimed) vmap rule raises: a raise under a claimed transform stays an error."""

    @staticmethod
    def forward(x):
        return x * 2

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def backward(ctx, g):
        return g * 2

    @staticmethod
    def vmap(info, in_dims, x):
        raise ValueError("my rule is broken")


def test_a_raise_under_a_claimed_vmap_rule_stays_an_error():
    r = check(DoubleRaisingRule, samples, checks=["vmap"])
    assert {c.status for c in r.cases} == {"error"}, [c.message for c in r.cases]


class CubeNoGraph(torch.autograd.Function):
    """x**3 whose backward computes under no_grad: correct first order, no graph at all."""

    @staticmethod
    def forward(x):
        return x**3

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        with torch.no_grad():
            return g * 3 * x * x


class CubeDetachedSaved(CubeNoGraph):
    """x**3 whose backward treats the saved input as a constant: a graph to the cotangent
    exists, and the second derivative along x is wrong (0): a failure."""

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * 3 * x.detach() ** 2


class CubeCorrect(CubeNoGraph):
    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * 3 * x * x


def test_a_graphless_backward_is_double_backward_unsupported_with_the_hint():
    r = check(CubeNoGraph, samples, checks=["vjp", "vjp_of_vjp"])
    cases = _by_check(r)
    assert cases["vjp"].status == "pass"
    second = cases["vjp_of_vjp"]
    assert second.status == "unsupported", second.message
    assert refused_in(second.message).startswith("double backward has no graph")
    assert "@once_differentiable" in second.message
    assert "double backward has no graph" in verdict_line(r)


def test_a_backward_with_a_graph_and_a_wrong_second_derivative_fails():
    r = check(CubeDetachedSaved, samples, checks=["vjp_of_vjp"])
    assert {c.status for c in r.cases} == {"fail"}, [c.message for c in r.cases]
    ok = check(CubeCorrect, samples, checks=["vjp_of_vjp"])
    assert {c.status for c in ok.cases} == {"pass"}, [c.message for c in ok.cases]


def test_a_graphless_backward_fails_where_double_backward_is_claimed():
    r = check(CubeNoGraph, samples, checks=["vjp_of_vjp"], claims=("double_backward",))
    (case,) = r.cases
    assert case.status == "fail", case.message
    assert "@once_differentiable" in case.message


def test_the_claims_declaration():
    d = parse_declaration("m:F claims=double_backward,vmap")
    assert d.capabilities["claims"] == ("double_backward", "vmap")
    with pytest.raises(UsageError, match="claims='grad'"):
        parse_declaration("m:F claims=grad")


def test_a_recorded_verdict_line_names_the_refused_transform():
    from harness.core.results import CaseResult, RunResult
    from harness.recorded.verdicts import verdicts
    from harness.sources.recorded import CHECKED, RecordedEntry

    def case(check, status, message):
        return CaseResult(f"m:F/{check}/s0", "m:F", check, 0, "", None, status, message)

    refused = (
        "vjp_of_vjp: double backward raises (in-place write, dtcwt/lowlevel.py:289): "
        "torch cannot run ..."
    )
    result = RunResult([case("vjp", "pass", ""), case("vjp_of_vjp", "unsupported", refused)])
    (v,) = verdicts(result, [RecordedEntry("m:F", CHECKED)])
    assert v.word == "conforms"
    assert v.line == (
        "conforms (1 cases); double backward raises (in-place write, dtcwt/lowlevel.py:289)"
    )
    # the same phrase in a case that is not unsupported is no refusal
    assert verdict_refusals([case("vjp_of_vjp", "fail", refused)]) == ""


class RefusesDoubleBackwardWithVmapRule(torch.autograd.Function):
    """A correct vmap rule (claimed) beside a backward that refuses to be differentiated
    (it raises when asked for a graph): double backward raises by itself, wherever it runs."""

    @staticmethod
    def forward(x):
        return torch.sin(x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        if torch.is_grad_enabled() and (g.requires_grad or x.requires_grad):
            raise RuntimeError("this backward is not differentiable")
        return g * torch.cos(x)

    @staticmethod
    def vmap(info, in_dims, x):
        return RefusesDoubleBackwardWithVmapRule.apply(x), in_dims[0]


def test_a_raise_composed_with_a_claimed_vmap_rule_is_double_backwards_only_if_it_raises_alone():
    """vmap of double backward: the claimed vmap rule's bug (BrokenRotatePoints' wrong
    out_dims reaching the backward as a mis-shaped gradient) stays the Function's error,
    never 'double backward raises'; a double backward that raises by itself is unsupported."""
    from examples.rotations import BrokenRotatePoints, rotation_samples

    composed = ["vmap_of_vjp_of_vjp", "vmap_of_jvp_of_vjp"]
    broken = check(BrokenRotatePoints, rotation_samples, checks=composed)
    assert {c.status for c in broken.cases} >= {"error"}, [(c.id, c.status) for c in broken.cases]
    assert not any(refused_in(c.message) for c in broken.cases)
    assert "double backward raises" not in verdict_line(broken)
    # the twin, at the rule: the same kind of raise in the same composed check is a refusal
    # of double backward exactly when double backward alone raises at the sample
    from harness.engine.refusals import refusal
    from harness.sources.entries import make_entry

    entry = make_entry(RefusesDoubleBackwardWithVmapRule, samples)
    try:
        RefusesDoubleBackwardWithVmapRule.backward(None, torch.ones(2, requires_grad=True))
    except Exception as e:  # noqa: BLE001 - the raise as the check meets it
        raised = e
    assert refused_in(
        refusal(entry, "vmap_of_vjp_of_vjp", raised, alone=lambda: True)
    ).startswith("double backward raises")
    assert refusal(entry, "vmap_of_vjp_of_vjp", raised, alone=lambda: False) == ""
    # and where nothing claimed is composed, the evidence is not needed
    assert refused_in(refusal(entry, "vjp_of_vjp", raised, alone=lambda: False))
