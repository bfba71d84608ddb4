"""softlib's Functions that take data beyond plain tensors and numbers (issue 36 part 1).

* ``ComplexGain``: ``z * gain`` for a complex signal ``z`` and a complex ``gain``.
* ``TakeLast``: ``x[index]`` for an index tuple with ``Ellipsis`` (``(..., slice(0, 2))``).
* ``Reduce``: ``x.sum(-1)`` or ``x.mean(-1)`` chosen by the enum option ``Reduction``.

``SOFTLIB_PLANTED`` (comma-separated) plants one bug in each that the project's own tests
do not catch: ``complex`` (ComplexGain's backward forgets to conjugate the gain),
``ellipsis`` (TakeLast's backward doubles the gradient) and ``enum`` (Reduce's backward
for ``Reduction.MEAN`` forgets to divide by the count).
"""

from __future__ import annotations

import enum
import os

import torch

PLANTED = frozenset(p.strip() for p in os.environ.get("SOFTLIB_PLANTED", "").split(",") if p)


class Reduction(enum.Enum):
    SUM = "sum"
    MEAN = "mean"


class ComplexGain(torch.autograd.Function):
    """``z * gain``, both complex; the gradient of ``z`` is ``grad * conj(gain)``."""

    generate_vmap_rule = True

    @staticmethod
    def forward(z, gain):
        return z * gain

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs)

    @staticmethod
    def backward(ctx, grad):
        z, gain = ctx.saved_tensors
        g = gain if "complex" in PLANTED else gain.conj()
        return grad * g, grad * z.conj()


class TakeLast(torch.autograd.Function):
    """``x[index]`` for an index that starts with ``Ellipsis`` (batch dims stay in front)."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x, index):
        return x[index].clone()

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, index = inputs
        ctx.shape, ctx.index = x.shape, index
        ctx.dtype = x.dtype

    @staticmethod
    def backward(ctx, grad):
        out = grad.new_zeros(ctx.shape)
        out[ctx.index] = grad * (2 if "ellipsis" in PLANTED else 1)
        return out, None


class Reduce(torch.autograd.Function):
    """The last dim summed or averaged, as ``how`` (a ``Reduction``) says."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x, how):
        return x.sum(-1) if how is Reduction.SUM else x.mean(-1)

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, how = inputs
        ctx.n, ctx.how = x.shape[-1], how

    @staticmethod
    def backward(ctx, grad):
        g = grad.unsqueeze(-1).expand(*grad.shape, ctx.n)
        if ctx.how is Reduction.MEAN and "enum" not in PLANTED:
            g = g / ctx.n
        return g.clone(), None


def complex_gain(z: torch.Tensor, gain: torch.Tensor) -> torch.Tensor:
    return ComplexGain.apply(z, gain)


def take_last(x: torch.Tensor, n: int) -> torch.Tensor:
    return TakeLast.apply(x, (Ellipsis, slice(0, n)))


def reduce(x: torch.Tensor, how: Reduction = Reduction.SUM) -> torch.Tensor:
    return Reduce.apply(x, how)
