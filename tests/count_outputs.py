"""A Function with a non-differentiable integer output (a count), and planted rules that
return that output wrong (issue 31, part 4): every check that runs the forward under vmap
must compare it."""

from __future__ import annotations

import torch

from autograd_function_db._sampling import Maker
from autograd_function_db.entry import Sample


class SinCount(torch.autograd.Function):
    """(sin x, the number of positive elements of x): the count is not differentiable."""

    @staticmethod
    def forward(x):
        return torch.sin(x), (x > 0).sum()

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.mark_non_differentiable(output[1])
        ctx.save_for_backward(inputs[0])
        ctx.save_for_forward(inputs[0])

    @staticmethod
    def backward(ctx, g, _g_count):
        (x,) = ctx.saved_tensors
        return g * torch.cos(x)

    @staticmethod
    def jvp(ctx, t):
        (x,) = ctx.saved_tensors
        return t * torch.cos(x), None

    @staticmethod
    def vmap(info, in_dims, x):
        x = x.movedim(in_dims[0], 0)
        return (torch.sin(x), (x > 0).flatten(1).sum(1)), (0, 0)


class KeepdimCount(SinCount):
    """Planted: the count comes back with a trailing dim of 1 (wrong shape)."""

    @staticmethod
    def vmap(info, in_dims, x):
        x = x.movedim(in_dims[0], 0)
        return (torch.sin(x), (x > 0).flatten(1).sum(1, keepdim=True)), (0, 0)


class WrongCount(SinCount):
    """Planted: the count is off by one and counts zeros (wrong values, right shape)."""

    @staticmethod
    def vmap(info, in_dims, x):
        x = x.movedim(in_dims[0], 0)
        return (torch.sin(x), (x >= 0).flatten(1).sum(1) + 1), (0, 0)


def samples(seed: int, dtype: torch.dtype, device: str) -> list[Sample]:
    m = Maker(seed, dtype, device)
    return [Sample((m.randn(4, 5),), "matrix"), Sample((m.randn(7),), "vector")]
