"""softlib's autograd.Functions: one of each kind the recorded check must handle.

* ``ScaledTanh``: a hand-written vmap rule, jvp and backward (``scale * tanh(x)``).
* ``SoftClamp``: a generated vmap rule (``generate_vmap_rule = True``).
* ``LegacyCube``: a legacy ``forward(ctx, x)`` Function (no torch.func support).
* ``PowerNorm``: int, bool and str options next to the tensor.
* ``GatherRows``: an index tensor (int64) next to the values.
* ``SmoothAbs``: calls ``ScaledTanh.apply`` inside its own forward.
* ``RoundSTE``: a straight-through estimator: its backward is deliberately not the
  derivative of ``round`` (declared ``gradient=custom`` in ``pytest.ini``).

``SOFTLIB_PLANTED`` (a comma-separated list) plants two bugs the project's own tests do
not catch: ``vmap`` (ScaledTanh's rule returns the batch at the input's dim after moving it
to the front) and ``backward`` (SoftClamp's backward drops the factor ``hi - lo``).
"""

from __future__ import annotations

import os

import torch

PLANTED = frozenset(p.strip() for p in os.environ.get("SOFTLIB_PLANTED", "").split(",") if p)


class ScaledTanh(torch.autograd.Function):
    """``scale * tanh(x)`` with a hand-written vmap rule."""

    @staticmethod
    def forward(x, scale):
        return scale * torch.tanh(x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, scale = inputs
        ctx.save_for_backward(x)
        ctx.save_for_forward(x)
        ctx.scale = scale

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * ctx.scale * (1 - torch.tanh(x) ** 2), None

    @staticmethod
    def jvp(ctx, x_t, _scale_t):
        (x,) = ctx.saved_tensors
        return x_t * ctx.scale * (1 - torch.tanh(x) ** 2)

    @staticmethod
    def vmap(info, in_dims, x, scale):
        x = x.movedim(in_dims[0], 0)
        out = ScaledTanh.apply(x, scale)
        return out, (in_dims[0] if "vmap" in PLANTED else 0)


class SoftClamp(torch.autograd.Function):
    """``lo + (hi - lo) * sigmoid(x)``, batched by the generated rule."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x, lo, hi):
        return lo + (hi - lo) * torch.sigmoid(x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, lo, hi = inputs
        ctx.save_for_backward(x)
        ctx.save_for_forward(x)
        ctx.width = hi - lo

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        s = torch.sigmoid(x)
        width = 1.0 if "backward" in PLANTED else ctx.width
        return grad * width * s * (1 - s), None, None

    @staticmethod
    def jvp(ctx, x_t, _lo_t, _hi_t):
        (x,) = ctx.saved_tensors
        s = torch.sigmoid(x)
        return x_t * ctx.width * s * (1 - s)


class LegacyCube(torch.autograd.Function):
    """``x ** 3`` in the legacy style: ctx in forward, so no torch.func transform runs it."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x**3

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * 3 * x**2


class PowerNorm(torch.autograd.Function):
    """The ``p``-norm over ``dim`` (int options, a bool and a str), generated rule."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x, p, dim, keepdim, reduction):
        norm = x.abs().pow(p).sum(dim, keepdim=keepdim).pow(1.0 / p)
        if reduction == "mean":
            norm = norm / x.shape[dim] ** (1.0 / p)
        return norm

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, p, dim, keepdim, reduction = inputs
        ctx.save_for_backward(x, output)
        ctx.options = (p, dim, keepdim, reduction)

    @staticmethod
    def backward(ctx, grad):
        x, norm = ctx.saved_tensors
        p, dim, keepdim, reduction = ctx.options
        if not keepdim:
            grad, norm = grad.unsqueeze(dim), norm.unsqueeze(dim)
        scale = x.shape[dim] ** (1.0 / p) if reduction == "mean" else 1.0
        full = norm * scale  # the plain p-norm
        g = x.sign() * x.abs().pow(p - 1) * full.pow(1 - p) / scale
        return grad * g, None, None, None, None


class GatherRows(torch.autograd.Function):
    """``x[index]`` along dim 0 (an int64 index tensor), with a hand-written vmap rule."""

    @staticmethod
    def forward(x, index):
        return x.index_select(0, index)

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, index = inputs
        ctx.save_for_backward(index)
        ctx.rows = x.shape[0]

    @staticmethod
    def backward(ctx, grad):
        (index,) = ctx.saved_tensors
        out = grad.new_zeros((ctx.rows, *grad.shape[1:]))
        return out.index_add(0, index, grad), None

    @staticmethod
    def vmap(info, in_dims, x, index):
        x_dim, index_dim = in_dims
        if index_dim is None:  # one index for every slice: gather along dim 1 of the batch
            x = x.movedim(x_dim, 0)
            return x.index_select(1, index), 0
        x = x.movedim(x_dim, 0) if x_dim is not None else x.expand(info.batch_size, *x.shape)
        index = index.movedim(index_dim, 0)
        rows = torch.arange(info.batch_size).unsqueeze(1)
        return x[rows, index], 0


class SmoothAbs(torch.autograd.Function):
    """``x * tanh(x / width)`` (a smooth |x|): its forward calls ``ScaledTanh.apply``."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x, width):
        return x * ScaledTanh.apply(x / width, 1.0)

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, width = inputs
        ctx.save_for_backward(x)
        ctx.width = width

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        t = torch.tanh(x / ctx.width)
        return grad * (t + x * (1 - t**2) / ctx.width), None


class RoundSTE(torch.autograd.Function):
    """``round(x)`` with the straight-through gradient (identity): custom by design."""

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

    @staticmethod
    def jvp(ctx, x_t):
        return x_t
