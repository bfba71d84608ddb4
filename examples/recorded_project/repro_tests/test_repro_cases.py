"""Tests of ``softlib.repro_cases`` as a user writes them: values, shapes and that
gradients flow. They pass with the planted bugs too (``SOFTLIB_PLANTED=subcheck,large,
factory,local``): no test compares a gradient with the derivative, and the synthesis is
only ever differentiated through ``low``."""

from __future__ import annotations

import math
import os

import torch
from softlib import repro_cases as rc


def _x(*shape: int, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=gen, dtype=torch.float64)


def test_synthesis_reconstructs_and_trains_the_lowpass() -> None:
    low, high = _x(4, 6).requires_grad_(), _x(4, 6, seed=1)
    y = rc.synth(low, high, 0.7)
    torch.testing.assert_close(y, low.detach() * math.cos(0.7) + high * math.sin(0.7))
    y.sum().backward()
    assert low.grad is not None


def test_blend_of_a_large_image() -> None:
    x, w = _x(300, 300).requires_grad_(), _x(300, 300, seed=1).requires_grad_()
    y = rc.blend(x, w)
    assert y.shape == (300, 300)
    y.sum().backward()
    assert x.grad is not None and w.grad is not None


def test_scaled_sin_from_the_factory() -> None:
    x = _x(5, seed=3).requires_grad_()
    y = rc.scaled_sin(x)
    torch.testing.assert_close(y, 2.0 * torch.sin(x.detach()))
    y.sum().backward()
    assert x.grad is not None


def test_a_class_made_in_the_test() -> None:
    planted = "local" in os.environ.get("SOFTLIB_PLANTED", "")

    class Cube(torch.autograd.Function):
        generate_vmap_rule = True

        @staticmethod
        def forward(x):
            return x**3

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.save_for_backward(inputs[0])

        @staticmethod
        def backward(ctx, grad):
            (x,) = ctx.saved_tensors
            return grad * (2 if planted else 3) * x**2

    x = _x(6, seed=4).requires_grad_()
    Cube.apply(x).sum().backward()
    assert x.grad is not None
