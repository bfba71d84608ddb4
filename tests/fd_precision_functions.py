"""Functions for tests/test_fd_precision.py: forwards that round through float32 inside."""

from __future__ import annotations

import torch


class Float32Inside(torch.autograd.Function):
    """exp(sin(x)) * 50, computed in float32 and returned at the input's dtype (as a numpy or
    numba kernel working in float32 does); its backward is exact. Correct."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x):
        return (torch.exp(torch.sin(x.float())) * 50).to(x.dtype)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * 50 * torch.exp(torch.sin(x)) * torch.cos(x)


class Float32InsideOff(Float32Inside):
    """Twin: its backward off by 2 % (a real bug, well above float32's noise)."""

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * 51 * torch.exp(torch.sin(x)) * torch.cos(x)


def samples(seed):
    gen = torch.Generator().manual_seed(seed)
    return [(torch.randn(6, 5, generator=gen, dtype=torch.float64) * 2,)]
