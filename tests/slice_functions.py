"""Recorded Functions with an index argument no call differentiates: ``Take`` is correct;
``TakeDropsIndexBatch``'s vmap rule uses the first slice's index for every slice (a bug
that equal index slices would hide); ``Ordered`` refuses its knots in any other order."""

from __future__ import annotations

import torch


class Take(torch.autograd.Function):
    """``x[..., idx]`` for a 1-D ``x`` and an int64 index."""

    @staticmethod
    def forward(x, idx):
        return x[idx]

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, idx = inputs
        ctx.save_for_backward(idx)
        ctx.size = x.shape[0]

    @staticmethod
    def backward(ctx, grad):
        (idx,) = ctx.saved_tensors
        return grad.new_zeros(ctx.size).index_add(0, idx, grad), None

    @staticmethod
    def vmap(info, in_dims, x, idx):
        xd, jd = in_dims
        n = info.batch_size
        x = x.movedim(xd, 0) if xd is not None else x.expand(n, *x.shape)
        idx = idx.movedim(jd, 0) if jd is not None else idx.expand(n, *idx.shape)
        return torch.gather(x, 1, idx), 0


class TakeDropsIndexBatch(Take):
    """The planted bug: the index's batch dim is dropped (slice 0 used for every slice)."""

    @staticmethod
    def vmap(info, in_dims, x, idx):
        xd, jd = in_dims
        n = info.batch_size
        x = x.movedim(xd, 0) if xd is not None else x.expand(n, *x.shape)
        one = idx.select(jd, 0) if jd is not None else idx
        return torch.gather(x, 1, one.expand(n, *one.shape)), 0


class Ordered(torch.autograd.Function):
    """``x * prod(sqrt(diff(k)))`` for increasing integer knots ``k``: any other order makes
    the outputs NaN (the forward refuses a shuffled ``k``)."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x, k):
        return x * Ordered.factor(k)

    @staticmethod
    def factor(k):
        return (k[..., 1:] - k[..., :-1]).double().sqrt().prod(-1, keepdim=True)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[1])

    @staticmethod
    def backward(ctx, grad):
        (k,) = ctx.saved_tensors
        return grad * Ordered.factor(k), None


def program(cls) -> None:
    """What the user's test does: one call, the index never differentiated."""
    x = torch.randn(7, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    idx = torch.tensor([4, 0, 6, 2, 2], dtype=torch.int64)
    cls.apply(x.requires_grad_(), idx).sum().backward()


def knots_program() -> None:
    x = torch.randn(5, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    Ordered.apply(x.requires_grad_(), torch.tensor([1, 3, 4, 8])).sum().backward()
