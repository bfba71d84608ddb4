"""Planted random Functions for torch's un-batching bug under grad_of_vmap and jvp_of_vmap
(issue 31 part 3): inverted dropout whose vmap rule, under ``randomness='same'``, draws
one mask and returns it unbatched (out_dim None), and a twin whose rule is really wrong.
"""

from __future__ import annotations

import torch


class SharedMaskDropout(torch.autograd.Function):
    """(x * keep / (1 - p), keep), keep drawn from the global RNG; under 'same' the rule
    draws one mask with the per-slice shape and returns it unbatched, as a user would:
    correct, and hit by torch 2.13's un-batching bug at out_dims != 0."""

    @staticmethod
    def forward(x, p):
        keep = (torch.rand(x.shape, dtype=torch.float64) >= p).to(x.dtype)
        return x * keep / (1 - p), keep

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.mark_non_differentiable(output[1])
        ctx.save_for_backward(output[1])
        ctx.save_for_forward(output[1])
        ctx.p = inputs[1]

    @staticmethod
    def backward(ctx, grad, _grad_keep):
        (keep,) = ctx.saved_tensors
        return grad * keep / (1 - ctx.p), None

    @staticmethod
    def jvp(ctx, x_t, _p):
        (keep,) = ctx.saved_tensors
        return x_t * keep / (1 - ctx.p), None

    @staticmethod
    def vmap(info, in_dims, x, p):
        if info.randomness == "error":
            raise RuntimeError("draws random numbers: use randomness='same' or 'different'")
        x = x.movedim(in_dims[0], 0)
        if info.randomness == "same":
            keep = (torch.rand(x.shape[1:], dtype=torch.float64) >= p).to(x.dtype)
            return (x * keep / (1 - p), keep), (0, None)
        keep = (torch.rand(x.shape, dtype=torch.float64) >= p).to(x.dtype)
        return (x * keep / (1 - p), keep), (0, 0)


class PerSliceMaskUnderSame(SharedMaskDropout):
    """Twin: under 'same' it draws a mask per slice (the batched shape), applies each to its
    slice, and returns slice 0's mask unbatched: every slice must see one shared draw."""

    @staticmethod
    def vmap(info, in_dims, x, p):
        if info.randomness == "error":
            raise RuntimeError("draws random numbers: use randomness='same' or 'different'")
        x = x.movedim(in_dims[0], 0)
        keep = (torch.rand(x.shape, dtype=torch.float64) >= p).to(x.dtype)
        if info.randomness == "same":
            return (x * keep / (1 - p), keep[0]), (0, None)
        return (x * keep / (1 - p), keep), (0, 0)


def samples(seed: int):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(4, 7, generator=g, dtype=torch.float64), 0.3)]
