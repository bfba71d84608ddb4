"""A Function with an auxiliary output it marks non-differentiable (as an SVD-based
rotation fit returns its U and V factors), and a twin with a wrong backward."""

from __future__ import annotations

import torch


class ScaleWithMagnitude(torch.autograd.Function):
    """``(2 x, |x|)``; ``|x|`` is auxiliary and marked non-differentiable."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x):
        return 2 * x, x.abs()

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.mark_non_differentiable(output[1])

    @staticmethod
    def backward(ctx, grad_y, grad_aux):
        return 2 * grad_y

    @staticmethod
    def jvp(ctx, x_t):
        return 2 * x_t, None


class ScaleWithMagnitudeWrongBackward(ScaleWithMagnitude):
    @staticmethod
    def backward(ctx, grad_y, grad_aux):
        return 3 * grad_y


def samples(seed):
    gen = torch.Generator().manual_seed(seed)
    return [(torch.randn(2, 3, generator=gen, dtype=torch.float64) + 0.1,)]
