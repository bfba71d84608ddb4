"""A Function's own non-finite values are its failure, not the sample's (issue 42, part 2):
where the forward is finite at the sample and the backward gives NaN, the checks whose
references are built from that backward (loops of eager vjps, finite differences of the
eager vjp) fail instead of blaming the sample; a forward that is itself non-finite at the
sample still blames the sample."""

from __future__ import annotations

import torch

from harness import check
from harness.api import verdict_line


def samples(seed=0):
    gen = torch.Generator().manual_seed(seed)
    return [(torch.randn(3, 4, generator=gen, dtype=torch.float64),)]


class Sin(torch.autograd.Function):
    @staticmethod
    def forward(x):
        return torch.sin(x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * torch.cos(x)

    @staticmethod
    def vmap(info, in_dims, x):
        return Sin.apply(x), in_dims[0]


class OverflowingBackward(Sin):
    """Finite outputs; the backward overflows (inf / inf = NaN), as a projection with a
    parameter of 1000 does."""

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        big = torch.exp(1000 + x.abs())
        return g * torch.cos(x) * big / big

    @staticmethod
    def vmap(info, in_dims, x):
        return OverflowingBackward.apply(x), in_dims[0]


class NanForward(Sin):
    """Its forward is NaN at the sample: the sample's fault, every case ``error``."""

    @staticmethod
    def forward(x):
        return torch.sin(x) * float("nan")

    @staticmethod
    def vmap(info, in_dims, x):
        return NanForward.apply(x), in_dims[0]


CHECKS = ["grad_of_vmap", "vjp_of_vjp", "vmap_of_vjp"]


def test_nan_from_the_backward_at_a_finite_forward_fails():
    r = check(OverflowingBackward, samples, checks=CHECKS)
    by_check = {}
    for c in r.cases:
        by_check.setdefault(c.check, set()).add(c.status)
    assert by_check == {k: {"fail"} for k in CHECKS}, [(c.id, c.message[:200]) for c in r.cases]
    msg = next(c.message for c in r.cases if c.check == "grad_of_vmap")
    assert "its backward gives NaN in the grad of input 0" in msg
    assert "not the sample's" in msg
    assert "choose samples" not in msg
    assert verdict_line(r).startswith("FAIL: ")


def test_the_correct_twin_passes():
    r = check(Sin, samples, checks=CHECKS)
    assert {c.status for c in r.cases} == {"pass"}, [c.message for c in r.cases]


def test_a_forward_that_is_itself_non_finite_still_blames_the_sample():
    r = check(NanForward, samples, checks=["grad_of_vmap"])
    assert {c.status for c in r.cases} == {"error"}, [c.message for c in r.cases]
    assert "choose samples where the Function is finite" in r.cases[0].message


class LegacyOverflowingBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.sin(x)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        big = torch.exp(1000 + x.abs())
        return g * torch.cos(x) * big / big


def test_a_legacy_functions_nan_backward_fails_its_eager_checks():
    r = check(LegacyOverflowingBackward, samples, checks=["eager_vjp", "eager_vjp_of_vjp"])
    assert {c.status for c in r.cases} == {"fail"}, [(c.id, c.message[:200]) for c in r.cases]
