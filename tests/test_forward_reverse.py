"""Forward and reverse mode must agree, also under ``gradient=custom``.

A straight-through estimator whose jvp is the true derivative (zero) while its backward
passes the gradient through: ``jacfwd`` and ``jacrev`` give different Jacobians of one
Function, so it fails ("forward and reverse mode disagree"), unless it declares
``jvp=true-derivative``; its consistent twin (a jvp that passes the tangent through, as the
backward does) conforms.
"""

from __future__ import annotations

import pytest
import torch

import harness
from harness.cli.main import main
from harness.core.errors import UsageError
from harness.sources.declare import parse_declaration


class PassThroughRound(torch.autograd.Function):
    """Straight-through rounding: forward and reverse mode both pass through."""

    @staticmethod
    def forward(x):
        return torch.round(x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def backward(ctx, g):
        return g

    @staticmethod
    def jvp(ctx, t):
        return t

    @staticmethod
    def vmap(info, in_dims, x):
        return PassThroughRound.apply(x), in_dims[0]


class TrueJvpRound(PassThroughRound):
    """The planted twin: the jvp is round's true derivative (zero), the backward is not."""

    @staticmethod
    def jvp(ctx, t):
        return torch.zeros_like(t)

    @staticmethod
    def vmap(info, in_dims, x):
        return TrueJvpRound.apply(x), in_dims[0]


def samples(seed):
    gen = torch.Generator().manual_seed(seed)
    return [(3 * torch.randn(3, 4, generator=gen, dtype=torch.float64) + 0.25,)]


CHECKS = ["jvp", "jacfwd", "jacrev", "vjp"]


def _run(fn, **kw):
    result = harness.check(fn, samples, gradient="custom", checks=CHECKS, **kw)
    return {c.check: c for c in result.cases if "dtype=" not in c.id}


def test_a_consistent_straight_through_estimator_conforms():
    found = _run(PassThroughRound)
    assert {c.status for c in found.values()} == {"pass"}, found


def test_a_true_derivative_jvp_beside_a_pass_through_backward_fails():
    found = _run(TrueJvpRound)
    for check in ("jvp", "jacfwd"):
        assert found[check].status == "fail", found[check]
        assert "forward and reverse mode disagree" in found[check].message
    assert found["jacrev"].status == "pass" and found["vjp"].status == "pass"


def test_declared_true_derivative_jvp_is_checked_against_finite_differences():
    found = _run(TrueJvpRound, jvp_true_derivative=True)
    assert {c.status for c in found.values()} == {"pass"}, found
    assert "declared jvp=true-derivative" in found["jvp"].message
    # the declaration does not excuse a jvp that is the true derivative of nothing
    wrong = _run(PassThroughRound, jvp_true_derivative=True)
    assert wrong["jvp"].status == "fail" and wrong["jacfwd"].status == "fail"


def test_the_declaration_line():
    d = parse_declaration("mylib.ops:RoundSTE gradient=custom jvp=true-derivative")
    assert d.gradient == "custom" and d.capabilities == {"jvp_true_derivative": True}
    with pytest.raises(UsageError, match="jvp=true-derivative"):
        parse_declaration("mylib.ops:RoundSTE jvp=zero")


def test_the_command_line_flag(capsys):
    spec = "tests/test_forward_reverse.py"
    argv = ["check", f"{spec}:TrueJvpRound", "--samples", f"{spec}:samples"]
    argv += ["--gradient", "custom", "--checks", "jvp", "-n", "0"]
    assert main(argv) == 1
    assert "forward and reverse mode disagree" in capsys.readouterr().out
    assert main([*argv, "--jvp", "true-derivative"]) == 0
