"""Functions called by the recording tests: importable (``tests.recording_functions:Name``).

``Scale`` (a generated vmap rule, a float option), ``Legacy`` (``forward(ctx, ...)``),
``Outer`` whose forward and backward call ``Inner``, ``Options`` with int/bool/str/dtype
options and a dict of tensors, and the custom op ``afdbrec::twice``.
"""

from __future__ import annotations

import torch


class Scale(torch.autograd.Function):
    generate_vmap_rule = True

    @staticmethod
    def forward(x, k):
        return x * k

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])
        ctx.k = inputs[1]

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * ctx.k * torch.ones_like(x), None

    @staticmethod
    def jvp(ctx, gx, gk):
        return gx * ctx.k


class Legacy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        return torch.tanh(x * w)

    @staticmethod
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        d = g * (1 - torch.tanh(x * w) ** 2)
        return d * w, d * x


class Inner(torch.autograd.Function):
    @staticmethod
    def forward(x):
        return x.sin()

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * x.cos()


class Outer(torch.autograd.Function):
    """Calls ``Inner`` in its forward and in its backward (with grad enabled there)."""

    @staticmethod
    def forward(x):
        return Inner.apply(x) * 2

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 2 * g * Inner.apply(x + torch.pi / 2)  # cos(x) = sin(x + pi/2)


class Options(torch.autograd.Function):
    """int, bool, str, dtype, None and a dict of tensors as arguments."""

    @staticmethod
    def forward(x, n, flag, mode, dtype, extra, table):
        y = x * n if flag else x
        y = y + table["b"] if mode == "add" else y * table["b"]
        return y.to(dtype)

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def backward(ctx, g):
        return None, None, None, None, None, None, None


@torch.library.custom_op("afdbrec::twice", mutates_args=())
def twice(x: torch.Tensor, k: float) -> torch.Tensor:
    return x * 2 * k


@twice.register_fake
def _(x, k):
    return torch.empty_like(x)


def _twice_backward(ctx, g):
    return g * 2 * ctx.k, None


def _twice_setup(ctx, inputs, output):
    ctx.k = inputs[1]


twice.register_autograd(_twice_backward, setup_context=_twice_setup)
