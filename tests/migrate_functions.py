"""Legacy ``forward(ctx, ...)`` Functions in the styles real code uses, for ``afdb migrate``.

Each class is migrated (or refused) by tests/test_migrate.py from a copy of this file; each
has a ``<name>_samples`` function. The file is ruff-formatted, so its migrated copy must be
too.
"""

from __future__ import annotations

import numpy as np
import torch
from torch.autograd import Function
from torch.autograd.function import once_differentiable

# --- samples ---------------------------------------------------------------------------------


def _g(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def pair_samples():
    g = _g()
    return [(torch.randn(3, 4, generator=g), torch.randn(3, 4, generator=g))]


def one_samples():
    return [(torch.randn(3, 4, generator=_g(1)),)]


def away_samples():
    """Values away from 0 and from the STE clip at 1 (no kink inside a finite difference)."""
    g = _g(2)
    mag = 0.2 + 0.6 * torch.rand(3, 4, generator=g)
    sign = torch.where(torch.rand(3, 4, generator=g) < 0.5, -1.0, 1.0)
    big = 1.5 + torch.rand(3, 4, generator=g)
    return [(torch.cat([mag * sign, big * sign], dim=1),)]


def pow_samples():
    return [(1.0 + torch.rand(3, 4, generator=_g(3)), 3, 0.5)]


def broadcast_samples():
    g = _g(4)
    return [(torch.randn(3, 4, generator=g), torch.randn(4, generator=g))]


def sort_samples():
    return [(torch.randn(3, 5, generator=_g(5)), 1)]


def linear_samples():
    g = _g(6)
    x, w = torch.randn(5, 4, generator=g), torch.randn(3, 4, generator=g)
    return [(x, w, torch.randn(3, generator=g))]


def stack_samples():
    g = _g(7)
    return [(torch.randn(4, generator=g), torch.randn(4, generator=g), torch.randn(4, generator=g))]


# --- saves its inputs ------------------------------------------------------------------------


class MulSavesInputs(Function):
    """x * y, saving both inputs."""

    @staticmethod
    def forward(ctx, x, y):
        ctx.save_for_backward(x, y)
        return x * y

    @staticmethod
    def backward(ctx, grad):
        x, y = ctx.saved_tensors
        return grad * y, grad * x


# --- saves its output ------------------------------------------------------------------------


class ExpSavesOutput(Function):
    @staticmethod
    def forward(ctx, x):
        result = x.exp()
        ctx.save_for_backward(result)  # the output, read back in backward
        return result

    @staticmethod
    def backward(ctx, grad):
        (result,) = ctx.saved_tensors
        return grad * result


# --- non-tensor options on ctx ---------------------------------------------------------------


class ScaledPow(Function):
    @staticmethod
    def forward(ctx, x, p, scale):
        ctx.p = p
        ctx.scale = scale
        ctx.save_for_backward(x)
        return scale * x**p

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * ctx.scale * ctx.p * x ** (ctx.p - 1), None, None


# --- keeps input shapes ----------------------------------------------------------------------


class BroadcastAdd(Function):
    @staticmethod
    def forward(ctx, x, y):
        ctx.x_shape = x.shape
        ctx.y_shape = y.shape
        return x + y

    @staticmethod
    def backward(ctx, grad):
        return grad.sum_to_size(ctx.x_shape), grad.sum_to_size(ctx.y_shape)


# --- mark_non_differentiable -----------------------------------------------------------------


class SortWithIndices(Function):
    @staticmethod
    def forward(ctx, x, dim):
        values, indices = torch.sort(x, dim=dim)
        ctx.mark_non_differentiable(indices)
        ctx.save_for_backward(indices)
        ctx.dim = dim
        return values, indices

    @staticmethod
    def backward(ctx, grad_values, grad_indices):
        (indices,) = ctx.saved_tensors
        grad = torch.zeros_like(grad_values).scatter(ctx.dim, indices, grad_values)
        return grad, None


# --- mark_dirty: in place --------------------------------------------------------------------


class InplaceScale(Function):
    @staticmethod
    def forward(ctx, x):
        x.mul_(3.0)
        ctx.mark_dirty(x)
        return x

    @staticmethod
    def backward(ctx, grad):
        return grad * 3.0


# --- once_differentiable ---------------------------------------------------------------------


class CubeOnce(Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x**3

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * 3 * x**2


# --- needs_input_grad ------------------------------------------------------------------------


class LinearNeedsInputGrad(Function):
    @staticmethod
    def forward(ctx, x, weight, bias):
        ctx.save_for_backward(x, weight)
        out = x @ weight.t()
        return out + bias

    @staticmethod
    def backward(ctx, grad):
        x, weight = ctx.saved_tensors
        grad_x = grad_w = grad_b = None
        if ctx.needs_input_grad[0]:
            grad_x = grad @ weight
        if ctx.needs_input_grad[1]:
            grad_w = grad.t() @ x
        if ctx.needs_input_grad[2]:
            grad_b = grad.sum(0)
        return grad_x, grad_w, grad_b


# --- an intermediate that can be recomputed ---------------------------------------------------


class ReluMask(Function):
    @staticmethod
    def forward(ctx, x):
        x = x.contiguous()
        mask = x > 0
        ctx.save_for_backward(mask)
        return x * mask

    @staticmethod
    def backward(ctx, grad):
        (mask,) = ctx.saved_tensors
        return grad * mask


# --- an intermediate that cannot (refused) -----------------------------------------------------


class DropoutMask(Function):
    @staticmethod
    def forward(ctx, x):
        keep = (torch.rand_like(x) > 0.5).to(x.dtype) * 2.0
        ctx.save_for_backward(keep)
        return x * keep

    @staticmethod
    def backward(ctx, grad):
        (keep,) = ctx.saved_tensors
        return grad * keep


# --- numpy inside forward (no generated vmap rule) -----------------------------------------------


class NumpySin(Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        y = np.sin(x.detach().cpu().numpy())
        return torch.from_numpy(y).to(x.dtype)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * x.cos()


# --- a straight-through estimator ------------------------------------------------------------


class StraightThroughSign(Function):
    """sign(x) forward; the gradient of hardtanh (1 inside [-1, 1]) backward."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.sign(x)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * (x.abs() <= 1).to(grad.dtype)


# --- *args and a conditional save ------------------------------------------------------------


class WeightedStack(Function):
    @staticmethod
    def forward(ctx, *xs):
        ctx.n = len(xs)
        if ctx.needs_input_grad[0]:
            ctx.first_shape = xs[0].shape
        return torch.stack(xs) * 2.0

    @staticmethod
    def backward(ctx, grad):
        return tuple(grad[i] * 2.0 for i in range(ctx.n))


# --- saves only when the input requires grad (spikingjelly's style) -------------------------------


class SurrogateSpike(Function):
    @staticmethod
    def forward(ctx, x, alpha):
        if x.requires_grad:
            ctx.save_for_backward(x)
            ctx.alpha = alpha
        return (x >= 0).to(x.dtype)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * ctx.alpha / (1 + (ctx.alpha * x) ** 2), None


def spike_samples():
    return [(away_samples()[0][0], 2.0)]


# --- classmethods (entmax's style) ------------------------------------------------------------


class ClassmethodSoftSquare(Function):
    @classmethod
    def _square(cls, x):
        return x * x

    @classmethod
    def forward(cls, ctx, x, dim=-1):
        ctx.dim = dim
        y = cls._square(x)
        ctx.save_for_backward(x)
        return y / (1 + y.sum(dim=dim, keepdim=True))

    @classmethod
    def backward(cls, ctx, grad):
        (x,) = ctx.saved_tensors
        y = cls._square(x)
        s = 1 + y.sum(dim=ctx.dim, keepdim=True)
        gy = grad / s - (grad * y).sum(dim=ctx.dim, keepdim=True) / s**2
        return 2 * x * gy, None


# --- already new-style -------------------------------------------------------------------------


class AlreadyNew(Function):
    generate_vmap_rule = True

    @staticmethod
    def forward(x):
        return x * 2

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def backward(ctx, grad):
        return grad * 2
