"""Elementwise Functions: numpy/torch unary twins, a broadcasting binary op with Python
numbers and a default argument, a non-differentiable float output, and a complex op."""

from __future__ import annotations

import numpy as np
import torch

from ._sampling import Maker
from ._util import broadcast_front, from_numpy, sum_to, to_numpy
from .entry import Entry, Sample, entry

COMPLEX = (torch.float32, torch.float64, torch.complex64, torch.complex128)


# --- NumpyTanh / TanhGenerated: unary, saves its output ------------------------------------


class _TanhRule:
    """setup_context, backward and jvp of NumpyTanh and TanhGenerated (a mixin, not a Function)."""

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(output)
        ctx.save_for_forward(output)

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        return grad * (1 - y * y)

    @staticmethod
    def jvp(ctx, x_t):
        (y,) = ctx.saved_tensors
        return x_t * (1 - y * y)


class NumpyTanh(_TanhRule, torch.autograd.Function):
    @staticmethod
    def forward(x):
        return from_numpy(np.tanh(to_numpy(x)), x)

    @staticmethod
    def vmap(info, in_dims, x):
        return NumpyTanh.apply(x), in_dims[0]


class TanhGenerated(_TanhRule, torch.autograd.Function):
    generate_vmap_rule = True

    @staticmethod
    def forward(x):
        return torch.tanh(x)


def unary_samples(seed: int, dtype: torch.dtype, device: str) -> list[Sample]:
    m = Maker(seed, dtype, device)
    return [
        Sample((m.randn(),), "0d"),
        Sample((m.randn(6),), "1d"),
        Sample((m.randn(4, 5),), "2d"),
        Sample((m.randn(5, 1, 4),), "3d"),
    ]


# --- Axpby: alpha * x + beta * y, Python floats, a default argument, broadcasting ------------


class Axpby(torch.autograd.Function):
    """alpha * x + beta * y with broadcasting; ``beta`` defaults to 1."""

    @staticmethod
    def forward(x, y, alpha, beta=1.0):
        return alpha * x + beta * y

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, y, alpha, *rest = inputs
        ctx.alpha, ctx.beta = alpha, (rest[0] if rest else 1.0)
        ctx.shapes = (x.shape, y.shape)

    @staticmethod
    def backward(ctx, grad):
        xs, ys = ctx.shapes
        gx = sum_to(grad * ctx.alpha, xs) if ctx.needs_input_grad[0] else None
        gy = sum_to(grad * ctx.beta, ys) if ctx.needs_input_grad[1] else None
        return gx, gy, None, None

    @staticmethod
    def jvp(ctx, x_t, y_t, _alpha, _beta=None):
        return x_t * ctx.alpha + y_t * ctx.beta

    @staticmethod
    def vmap(info, in_dims, x, y, alpha, beta=1.0):
        x, y = broadcast_front((x, y), in_dims[:2])
        return Axpby.apply(x, y, alpha, beta), 0


def axpby_samples(seed: int, dtype: torch.dtype, device: str) -> list[Sample]:
    m = Maker(seed, dtype, device)
    return [
        Sample((m.randn(5), m.randn(5), 0.5), "1d-default-beta"),
        Sample((m.randn(4, 5), m.randn(5), -1.5, 2.0), "broadcast-rank"),
        Sample((m.randn(4, 1), m.randn(1, 6), 2.0, -0.5), "broadcast-both"),
        Sample((m.randn(), m.randn(4, 5), 3.0), "0d-with-2d"),
    ]


# --- Frac: (x - floor(x), floor(x)); floor is a non-differentiable float output ------------


class _FracRule:
    """setup_context, backward and jvp of Frac and NumpyFrac (a mixin, not a Function)."""

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.mark_non_differentiable(output[1])

    @staticmethod
    def backward(ctx, grad, _grad_whole):
        return grad

    @staticmethod
    def jvp(ctx, x_t):
        return x_t, None


class Frac(_FracRule, torch.autograd.Function):
    @staticmethod
    def forward(x):
        whole = torch.floor(x)
        return x - whole, whole

    @staticmethod
    def vmap(info, in_dims, x):
        return Frac.apply(x), (in_dims[0], in_dims[0])


class NumpyFrac(_FracRule, torch.autograd.Function):
    @staticmethod
    def forward(x):
        xn = to_numpy(x)
        whole = np.floor(xn)
        return from_numpy(xn - whole, x), from_numpy(whole, x)

    @staticmethod
    def vmap(info, in_dims, x):
        return NumpyFrac.apply(x), (in_dims[0], in_dims[0])


def frac_samples(seed: int, dtype: torch.dtype, device: str) -> list[Sample]:
    """Values at least 0.2 away from an integer, so finite differences never cross a jump."""
    m = Maker(seed, dtype, device)

    def away(*shape: int) -> torch.Tensor:
        return m.integers(-3, 4, *shape).to(dtype) + m.positive(*shape, low=0.2, high=0.8)

    return [Sample((away(),), "0d"), Sample((away(5),), "1d"), Sample((away(4, 6),), "2d")]


# --- MulConj: x * conj(y), complex-correct gradients -------------------------------------


class MulConj(torch.autograd.Function):
    """x * conj(y) (x * y for real dtypes), with the conjugate Wirtinger gradients."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x, y):
        return x * y.conj()

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs)
        ctx.save_for_forward(*inputs)

    @staticmethod
    def backward(ctx, grad):
        x, y = ctx.saved_tensors
        gx = sum_to(grad * y, x.shape) if ctx.needs_input_grad[0] else None
        gy = sum_to(grad.conj() * x, y.shape) if ctx.needs_input_grad[1] else None
        return gx, gy

    @staticmethod
    def jvp(ctx, x_t, y_t):
        x, y = ctx.saved_tensors
        return x_t * y.conj() + x * y_t.conj()


def complex_binary_samples(seed: int, dtype: torch.dtype, device: str) -> list[Sample]:
    m = Maker(seed, dtype, device)
    return [
        Sample((m.randn(5), m.randn(5)), "same-shape"),
        Sample((m.randn(4, 5), m.randn(5)), "broadcast-rank"),
        Sample((m.randn(6, 1), m.randn(1, 4)), "broadcast-both"),
    ]


def entries() -> list[Entry]:
    unary = ("op:elementwise", "op:unary", "inputs:one-tensor", "outputs:one-tensor")
    return [
        entry(
            "NumpyTanh",
            NumpyTanh,
            unary_samples,
            tags=(*unary, "backend:numpy", "vmap:rule", "saved:outputs", "saved:for-forward"),
        ),
        entry(
            "TanhGenerated",
            TanhGenerated,
            unary_samples,
            tags=(*unary, "backend:torch", "vmap:generated", "saved:outputs", "saved:for-forward"),
        ),
        entry(
            "Axpby",
            Axpby,
            axpby_samples,
            tags=(
                "op:elementwise",
                "op:binary",
                "op:broadcast",
                "inputs:several",
                "inputs:python-float",
                "inputs:default-args",
                "outputs:one-tensor",
                "saved:non-tensor",
                "ctx:needs_input_grad",
                "backend:torch",
                "vmap:rule",
            ),
            description="alpha*x + beta*y; Python floats, a default argument, broadcasting",
        ),
        entry(
            "Frac",
            Frac,
            frac_samples,
            tags=(
                "op:elementwise",
                "op:unary",
                "inputs:one-tensor",
                "outputs:tuple",
                "outputs:nondiff-float",
                "ctx:mark_non_differentiable",
                "backend:torch",
                "vmap:rule",
                "vmap:composed",
            ),
            nondiff_outputs=(1,),
        ),
        entry(
            "NumpyFrac",
            NumpyFrac,
            frac_samples,
            tags=(
                "op:elementwise",
                "op:unary",
                "inputs:one-tensor",
                "outputs:tuple",
                "outputs:nondiff-float",
                "ctx:mark_non_differentiable",
                "backend:numpy",
                "vmap:rule",
            ),
            nondiff_outputs=(1,),
        ),
        entry(
            "MulConj",
            MulConj,
            complex_binary_samples,
            tags=(
                "op:elementwise",
                "op:binary",
                "op:broadcast",
                "inputs:several",
                "outputs:one-tensor",
                "saved:inputs",
                "saved:for-forward",
                "ctx:needs_input_grad",
                "dtype:complex",
                "backend:torch",
                "vmap:generated",
            ),
            dtypes=COMPLEX,
            description="x * conj(y) with conjugate (Wirtinger) gradients; complex dtypes too",
        ),
    ]
