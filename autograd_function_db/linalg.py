"""Linear algebra: matmul with broadcast batch dims (numpy and torch), a linear solve and a
Cholesky factorisation (numpy and torch), gradients written from the matrix identities."""

from __future__ import annotations

import numpy as np
import torch

from ._sampling import Maker
from ._util import broadcast_front, from_numpy, sum_to, to_numpy
from .entry import Entry, Sample, entry

COMPLEX = (torch.float32, torch.float64, torch.complex64, torch.complex128)


# --- MatMul: a @ b, both at least 2-d, batch dims broadcast -------------------------------


def _matmul_backward(ctx, grad, a, b):
    ga = sum_to(grad @ b.mH, a.shape) if ctx.needs_input_grad[0] else None
    gb = sum_to(a.mH @ grad, b.shape) if ctx.needs_input_grad[1] else None
    return ga, gb


class _MatMulRule:
    """setup_context, backward and jvp of MatMul, NumpyMatMul and MatMulGenerated (a mixin)."""

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs)
        ctx.save_for_forward(*inputs)

    @staticmethod
    def backward(ctx, grad):
        return _matmul_backward(ctx, grad, *ctx.saved_tensors)

    @staticmethod
    def jvp(ctx, a_t, b_t):
        a, b = ctx.saved_tensors
        return a_t @ b + a @ b_t


class MatMul(_MatMulRule, torch.autograd.Function):
    @staticmethod
    def forward(a, b):
        return a @ b

    @staticmethod
    def vmap(info, in_dims, a, b):
        return MatMul.apply(*broadcast_front((a, b), in_dims)), 0


class NumpyMatMul(_MatMulRule, torch.autograd.Function):
    @staticmethod
    def forward(a, b):
        return from_numpy(np.matmul(to_numpy(a), to_numpy(b)), a)

    @staticmethod
    def vmap(info, in_dims, a, b):
        return NumpyMatMul.apply(*broadcast_front((a, b), in_dims)), 0


class MatMulGenerated(_MatMulRule, torch.autograd.Function):
    generate_vmap_rule = True

    @staticmethod
    def forward(a, b):
        return a @ b


def matmul_samples(seed: int, dtype: torch.dtype, device: str) -> list[Sample]:
    m = Maker(seed, dtype, device)
    return [
        Sample((m.randn(4, 5), m.randn(5, 6)), "2d"),
        Sample((m.randn(6, 4, 5), m.randn(5, 4)), "batched-with-2d"),
        Sample((m.randn(4, 1, 5, 6), m.randn(7, 6, 4)), "broadcast-batch"),
    ]


# --- Solve: x = A^{-1} b ----------------------------------------------------------------


class Solve(torch.autograd.Function):
    generate_vmap_rule = True

    @staticmethod
    def forward(a, b):
        return torch.linalg.solve(a, b)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0], output)
        ctx.save_for_forward(inputs[0], output)
        ctx.b_shape = inputs[1].shape

    @staticmethod
    def backward(ctx, grad):
        a, x = ctx.saved_tensors
        gb = torch.linalg.solve(a.mH, grad)
        ga = sum_to(-gb @ x.mH, a.shape) if ctx.needs_input_grad[0] else None
        return ga, sum_to(gb, ctx.b_shape) if ctx.needs_input_grad[1] else None

    @staticmethod
    def jvp(ctx, a_t, b_t):
        a, x = ctx.saved_tensors
        return torch.linalg.solve(a, b_t - a_t @ x)


def _well_conditioned(m: Maker, *shape: int) -> torch.Tensor:
    n = shape[-1]
    return m.randn(*shape) / n**0.5 + 2 * torch.eye(n, dtype=m.dtype, device=m.device)


def solve_samples(seed: int, dtype: torch.dtype, device: str) -> list[Sample]:
    m = Maker(seed, dtype, device)
    return [
        Sample((_well_conditioned(m, 4, 4), m.randn(4, 1)), "one-rhs"),
        Sample((_well_conditioned(m, 5, 5), m.randn(5, 6)), "several-rhs"),
        Sample((_well_conditioned(m, 6, 4, 4), m.randn(1, 4, 5)), "broadcast-batch"),
    ]


# --- Cholesky of the symmetric part: L = chol((A + A^T) / 2) ---------------------------------


def _sym(a: torch.Tensor) -> torch.Tensor:
    return (a + a.mT) / 2


def _phi(x: torch.Tensor) -> torch.Tensor:
    """Lower triangle with the diagonal halved."""
    return x.tril() - x.diagonal(dim1=-2, dim2=-1).diag_embed() / 2


def _cholesky_backward(L: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
    p = _phi(L.mT @ grad)
    # S = L^{-T} P L^{-1}
    s = torch.linalg.solve_triangular(L.mT, p, upper=True)
    s = torch.linalg.solve_triangular(L, s, upper=False, left=False)
    return _sym(s)


def _cholesky_jvp(L: torch.Tensor, a_t: torch.Tensor) -> torch.Tensor:
    # dL = L phi(L^{-1} dS L^{-T})
    x = torch.linalg.solve_triangular(L, _sym(a_t), upper=False)
    x = torch.linalg.solve_triangular(L.mT, x, upper=True, left=False)
    return L @ _phi(x)


class _CholeskyRule:
    """setup_context, backward and jvp of NumpyCholesky and CholeskyGenerated (a mixin)."""

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(output)
        ctx.save_for_forward(output)

    @staticmethod
    def backward(ctx, grad):
        return _cholesky_backward(ctx.saved_tensors[0], grad)

    @staticmethod
    def jvp(ctx, a_t):
        return _cholesky_jvp(ctx.saved_tensors[0], a_t)


class NumpyCholesky(_CholeskyRule, torch.autograd.Function):
    @staticmethod
    def forward(a):
        an = to_numpy(a)
        return from_numpy(np.linalg.cholesky((an + np.swapaxes(an, -1, -2)) / 2), a)

    @staticmethod
    def vmap(info, in_dims, a):
        return NumpyCholesky.apply(a.movedim(in_dims[0], 0)), 0


class CholeskyGenerated(_CholeskyRule, torch.autograd.Function):
    generate_vmap_rule = True

    @staticmethod
    def forward(a):
        return torch.linalg.cholesky(_sym(a))


def spd_samples(seed: int, dtype: torch.dtype, device: str) -> list[Sample]:
    """Symmetric positive definite, well conditioned; a seeded non-symmetric part is added
    too (the Function only sees the symmetric part), so every entry of A is exercised."""
    m = Maker(seed, dtype, device)

    def spd(*shape: int) -> torch.Tensor:
        n = shape[-1]
        x = m.randn(*shape)
        eye = torch.eye(n, dtype=dtype, device=device)
        return x @ x.mT / n + eye + 0.1 * (m.randn(*shape) - m.randn(*shape)).tril(-1)

    return [
        Sample((spd(4, 4),), "4x4"),
        Sample((spd(5, 5),), "5x5"),
        Sample((spd(6, 4, 4),), "batch"),
    ]


def entries() -> list[Entry]:
    mm = ("op:matmul", "op:broadcast", "inputs:several", "outputs:one-tensor")
    return [
        entry(
            "MatMul",
            MatMul,
            matmul_samples,
            tags=(
                *mm,
                "saved:inputs",
                "saved:for-forward",
                "ctx:needs_input_grad",
                "dtype:complex",
                "backend:torch",
                "vmap:rule",
                "vmap:composed",
            ),
            dtypes=COMPLEX,
        ),
        entry(
            "NumpyMatMul",
            NumpyMatMul,
            matmul_samples,
            tags=(
                *mm,
                "saved:inputs",
                "ctx:needs_input_grad",
                "dtype:complex",
                "backend:numpy",
                "vmap:rule",
                "vmap:composed",
            ),
            dtypes=COMPLEX,
        ),
        entry(
            "MatMulGenerated",
            MatMulGenerated,
            matmul_samples,
            tags=(*mm, "saved:inputs", "ctx:needs_input_grad", "backend:torch", "vmap:generated"),
        ),
        entry(
            "Solve",
            Solve,
            solve_samples,
            tags=(
                "op:linalg",
                "op:broadcast",
                "inputs:several",
                "outputs:one-tensor",
                "saved:inputs",
                "saved:outputs",
                "ctx:needs_input_grad",
                "backend:torch",
                "vmap:generated",
            ),
        ),
        entry(
            "NumpyCholesky",
            NumpyCholesky,
            spd_samples,
            tags=(
                "op:linalg",
                "inputs:one-tensor",
                "outputs:one-tensor",
                "saved:outputs",
                "saved:for-forward",
                "backend:numpy",
                "vmap:rule",
                "vmap:composed",
            ),
            description="Cholesky factor of the symmetric part of A",
        ),
        entry(
            "CholeskyGenerated",
            CholeskyGenerated,
            spd_samples,
            tags=(
                "op:linalg",
                "inputs:one-tensor",
                "outputs:one-tensor",
                "saved:outputs",
                "backend:torch",
                "vmap:generated",
            ),
        ),
    ]
