"""A legacy ``forward(ctx, ...)`` Function, the input of ``afdb migrate`` in docs/migrating.md:
``afdb migrate examples/legacy_swish.py:Swish --samples examples/legacy_swish.py:swish_samples
--vmap generate``.
"""

import torch


class Swish(torch.autograd.Function):
    """x * sigmoid(x), saving the input (timm's memory-efficient style)."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * torch.sigmoid(x)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        s = torch.sigmoid(x)
        return grad * (s * (1 + x * (1 - s)))


def swish_samples():
    return [(torch.randn(4, 5, generator=torch.Generator().manual_seed(0)),)]
