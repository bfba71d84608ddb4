"""Masked attention: logits with -inf entries where the Functions and their gradients are
finite. ``MaskedSoftmax`` is correct; ``DropsTheSum`` plants a wrong backward and jvp."""

import torch


class MaskedSoftmax(torch.autograd.Function):
    @staticmethod
    def forward(x):
        return torch.softmax(x, -1)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(output)
        ctx.save_for_forward(output)

    @staticmethod
    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        return y * (g - (g * y).sum(-1, keepdim=True))

    @staticmethod
    def jvp(ctx, t):
        (y,) = ctx.saved_tensors
        return y * (t - (t * y).sum(-1, keepdim=True))

    @staticmethod
    def vmap(info, in_dims, x):
        return MaskedSoftmax.apply(x.movedim(in_dims[0], 0)), 0


class DropsTheSum(MaskedSoftmax):
    @staticmethod
    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        return y * g

    @staticmethod
    def jvp(ctx, t):
        (y,) = ctx.saved_tensors
        return y * t


def samples(seed):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(3, 5, generator=gen, dtype=torch.float64)
    x[:, -1] = float("-inf")
    x[1, 0] = float("-inf")
    x[0, 2] = 5e-324  # subnormal
    x[0, 0] = -0.0
    return [(x,)]
