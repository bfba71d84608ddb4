"""Functions for tests/test_recorded_check.py: correct ones and planted twins.

``Mul`` multiplies two tensors; ``MulLosesW`` is its twin whose backward returns zero for
``w`` (a gradient no recorded call may need). ``Ste``/``SteTwin``: round with the
straight-through gradient, correct only as a declared custom gradient.
"""

from __future__ import annotations

import torch


class Mul(torch.autograd.Function):
    generate_vmap_rule = True

    @staticmethod
    def forward(x, w):
        return x * w

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs)

    @staticmethod
    def backward(ctx, grad):
        x, w = ctx.saved_tensors
        return grad * w, grad * x


class MulLosesW(Mul):
    @staticmethod
    def backward(ctx, grad):
        x, w = ctx.saved_tensors
        return grad * w, grad * 0


class Ste(torch.autograd.Function):
    generate_vmap_rule = True

    @staticmethod
    def forward(x):
        return torch.round(x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def backward(ctx, grad):
        return grad


class Legacy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return 2 * grad * x


class MulDropsW(Mul):
    """Treats ``w`` as non-differentiable: its backward returns None for it."""

    @staticmethod
    def backward(ctx, grad):
        x, w = ctx.saved_tensors
        return grad * w, None


class MulWOnlyWithX(Mul):
    """A gradient for ``w`` only when ``x`` needs one too (like pytorch_wavelets' SFB1D)."""

    @staticmethod
    def backward(ctx, grad):
        x, w = ctx.saved_tensors
        if ctx.needs_input_grad[0]:
            return grad * w, grad * x
        return None, None


class Spike(torch.autograd.Function):
    """Heaviside forward, sigmoid-derivative backward: a surrogate gradient."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x):
        return (x > 0).to(x.dtype)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        s = torch.sigmoid(4 * x)
        return grad * 4 * s * (1 - s)


class SmoothWrong(torch.autograd.Function):
    """A smooth forward (sin) with a wrong backward: no surrogate."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x):
        return torch.sin(x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * torch.sigmoid(x)


def mul_samples(seed):
    """Samples for checking the Mul family as a user target (``afdb check FILE:Mul``)."""
    g = torch.Generator().manual_seed(seed)
    return [tuple(torch.randn(3, 4, generator=g, dtype=torch.float64) for _ in range(2))]
