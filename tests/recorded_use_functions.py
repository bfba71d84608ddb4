"""Functions for tests/test_recorded_use.py (importable: ``tests.recorded_use_functions``)."""

from __future__ import annotations

import torch


class AdjointLike(torch.autograd.Function):
    """y = x * exp(p) (elementwise). Its backward takes the gradient of both inputs at once
    with torch.autograd.grad on a recomputation, as an ODE adjoint does with its parameters:
    it raises when only one input needs a gradient (a pattern its public API never makes)."""

    generate_vmap_rule = False

    @staticmethod
    def forward(x, p):
        return x * torch.exp(p)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs)

    @staticmethod
    def backward(ctx, grad):
        x, p = ctx.saved_tensors
        if not (ctx.needs_input_grad[0] and ctx.needs_input_grad[1]):
            raise RuntimeError("One of the differentiated Tensors does not require grad")
        return grad * torch.exp(p), grad * x * torch.exp(p)


class AdjointLikeWrong(AdjointLike):
    """Twin: p's gradient off by 1 % (a wrong value on the pattern the program uses)."""

    @staticmethod
    def backward(ctx, grad):
        x, p = ctx.saved_tensors
        if not (ctx.needs_input_grad[0] and ctx.needs_input_grad[1]):
            raise RuntimeError("One of the differentiated Tensors does not require grad")
        return grad * torch.exp(p), 1.01 * grad * x * torch.exp(p)


def call(cls, x_grad: bool = True, p_grad: bool = True, backward: bool = True) -> None:
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(4, 3, generator=gen, dtype=torch.float64).requires_grad_(x_grad)
    p = torch.randn(4, 3, generator=gen, dtype=torch.float64).requires_grad_(p_grad)
    y = cls.apply(x, p)
    if backward and y.requires_grad:
        torch.autograd.grad(y.sum(), [t for t in (x, p) if t.requires_grad], allow_unused=True)


class Checkpointed(torch.autograd.Function):
    """Reentrant checkpointing of y = sin(x) * w (legacy style, as fairscale's
    CheckpointFunction): its backward recomputes under grad mode and refuses
    torch.autograd.grad as torch's reentrant checkpoint does; .backward() works."""

    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        with torch.no_grad():
            return torch.sin(x) * w

    @staticmethod
    def backward(ctx, grad):
        if not torch.autograd._is_checkpoint_valid():
            raise RuntimeError(
                "Checkpointing is not compatible with .grad(), please use .backward() if possible"
            )
        x, w = ctx.saved_tensors
        with torch.enable_grad():
            xd, wd = x.detach().requires_grad_(), w.detach().requires_grad_()
            y = torch.sin(xd) * wd
        gx, gw = torch.autograd.grad(y, (xd, wd), grad)
        return gx, gw


class CheckpointedWrong(Checkpointed):
    """Twin: the gradient of x off by 1 %."""

    @staticmethod
    def backward(ctx, grad):
        gx, gw = Checkpointed.backward(ctx, grad)
        return gx * 1.01, gw


def checkpoint_samples(seed):
    gen = torch.Generator().manual_seed(seed)
    return [
        (
            torch.randn(4, 3, generator=gen, dtype=torch.float64),
            torch.randn(4, 3, generator=gen, dtype=torch.float64),
        )
    ]
