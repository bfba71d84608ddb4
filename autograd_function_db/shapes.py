"""Shape Functions: views of inputs (transpose, expand), reshape with a tuple argument, a numpy
transpose, and outputs that are inputs returned as-is."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from ._sampling import Maker
from ._util import from_numpy, sum_to, to_numpy, wrap_dim
from .entry import Entry, Sample, entry

# --- Transpose: returns a view of its input --------------------------------------------


class Transpose(torch.autograd.Function):
    @staticmethod
    def forward(x, d0, d1):
        return x.transpose(d0, d1)

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, d0, d1 = inputs
        ctx.dims = (d0, d1)

    @staticmethod
    def backward(ctx, grad):
        return Transpose.apply(grad, *ctx.dims), None, None

    @staticmethod
    def jvp(ctx, x_t, _d0, _d1):
        return Transpose.apply(x_t, *ctx.dims)

    @staticmethod
    def vmap(info, in_dims, x, d0, d1):
        x = x.movedim(in_dims[0], 0)
        rank = x.dim() - 1
        return Transpose.apply(x, wrap_dim(d0, rank) + 1, wrap_dim(d1, rank) + 1), 0


def transpose_samples(seed: int, dtype: torch.dtype, device: str) -> list[Sample]:
    m = Maker(seed, dtype, device)
    return [
        Sample((m.randn(4, 5), 0, 1), "2d"),
        Sample((m.randn(4, 5, 6), 0, -1), "3d-0-last"),
        Sample((m.randn(4, 5, 6), 1, 1), "3d-same-dim"),
    ]


# --- NumpyPermute: a numpy-backed copy with an axes tuple ----------------------------------


def _inverse(perm: tuple[int, ...]) -> tuple[int, ...]:
    inv = [0] * len(perm)
    for i, p in enumerate(perm):
        inv[p] = i
    return tuple(inv)


def _permute_rule(permute: Callable[[], type[torch.autograd.Function]]) -> type:
    """setup_context, backward and jvp of NumpyPermute and PermuteGenerated; backward and jvp
    apply ``permute()``, the Function itself."""

    class PermuteRule:
        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.perm = tuple(wrap_dim(p, inputs[0].dim()) for p in inputs[1])

        @staticmethod
        def backward(ctx, grad):
            return permute().apply(grad, _inverse(ctx.perm)), None

        @staticmethod
        def jvp(ctx, x_t, _perm):
            return permute().apply(x_t, ctx.perm)

    return PermuteRule


class NumpyPermute(_permute_rule(lambda: NumpyPermute), torch.autograd.Function):  # type: ignore[misc]
    """np.transpose(x, perm) (a copy): ``perm`` is a Python tuple."""

    @staticmethod
    def forward(x, perm):
        return from_numpy(np.transpose(to_numpy(x), perm), x)

    @staticmethod
    def vmap(info, in_dims, x, perm):
        x = x.movedim(in_dims[0], 0)
        rank = x.dim() - 1
        return NumpyPermute.apply(x, (0, *(wrap_dim(p, rank) + 1 for p in perm))), 0


class PermuteGenerated(_permute_rule(lambda: PermuteGenerated), torch.autograd.Function):  # type: ignore[misc]
    generate_vmap_rule = True

    @staticmethod
    def forward(x, perm):
        return x.permute(perm).clone()


def permute_samples(seed: int, dtype: torch.dtype, device: str) -> list[Sample]:
    m = Maker(seed, dtype, device)
    return [
        Sample((m.randn(4, 5), (1, 0)), "2d"),
        Sample((m.randn(4, 5, 6), (2, 0, 1)), "3d-cycle"),
        Sample((m.randn(4, 5, 6), (-1, 1, 0)), "3d-negative"),
    ]


# --- Reshape: a shape tuple argument --------------------------------------------------------


class Reshape(torch.autograd.Function):
    @staticmethod
    def forward(x, shape):
        return x.reshape(shape)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.in_shape = tuple(inputs[0].shape)
        ctx.shape = tuple(output.shape)

    @staticmethod
    def backward(ctx, grad):
        return Reshape.apply(grad, ctx.in_shape), None

    @staticmethod
    def jvp(ctx, x_t, _shape):
        return Reshape.apply(x_t, ctx.shape)

    @staticmethod
    def vmap(info, in_dims, x, shape):
        x = x.movedim(in_dims[0], 0)
        return Reshape.apply(x, (x.shape[0], *shape)), 0


def reshape_samples(seed: int, dtype: torch.dtype, device: str) -> list[Sample]:
    m = Maker(seed, dtype, device)
    return [
        Sample((m.randn(4, 5), (20,)), "flatten"),
        Sample((m.randn(4, 5, 6), (5, -1)), "infer-dim"),
        Sample((m.randn(20), (4, 1, 5)), "unflatten"),
    ]


# --- ExpandGenerated: a broadcast view, backward sums ------------------------------------


class ExpandGenerated(torch.autograd.Function):
    generate_vmap_rule = True

    @staticmethod
    def forward(x, shape):
        return x.expand(shape)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.in_shape = inputs[0].shape
        ctx.shape = tuple(inputs[1])

    @staticmethod
    def backward(ctx, grad):
        return sum_to(grad, ctx.in_shape), None

    @staticmethod
    def jvp(ctx, x_t, _shape):
        return x_t.expand(ctx.shape)


def expand_samples(seed: int, dtype: torch.dtype, device: str) -> list[Sample]:
    m = Maker(seed, dtype, device)
    return [
        Sample((m.randn(5), (4, 5)), "new-leading"),
        Sample((m.randn(4, 1), (4, 6)), "size-1"),
        Sample((m.randn(1, 5), (6, 4, 5)), "both"),
    ]


# --- Inputs returned as-is -------------------------------------------------------------------


class KeepAndExp(torch.autograd.Function):
    """(x, exp(x)): the first output is the input itself, returned as-is (no mark_dirty)."""

    @staticmethod
    def forward(x):
        return x, torch.exp(x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(output[1])
        ctx.save_for_forward(output[1])

    @staticmethod
    def backward(ctx, grad_x, grad_exp):
        (e,) = ctx.saved_tensors
        return grad_x + grad_exp * e

    @staticmethod
    def jvp(ctx, x_t):
        (e,) = ctx.saved_tensors
        # forward returns its input as-is, so the tangent must come back as a view too.
        return x_t.view_as(x_t), x_t * e

    @staticmethod
    def vmap(info, in_dims, x):
        return KeepAndExp.apply(x), (in_dims[0], in_dims[0])


class IdentityGenerated(torch.autograd.Function):
    """Returns its input as-is; generated vmap rule."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x):
        return x

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def backward(ctx, grad):
        return grad

    @staticmethod
    def jvp(ctx, x_t):
        return x_t.view_as(x_t)


def unary_samples(seed: int, dtype: torch.dtype, device: str) -> list[Sample]:
    m = Maker(seed, dtype, device)
    return [Sample((m.randn(),), "0d"), Sample((m.randn(5),), "1d"), Sample((m.randn(4, 6),), "2d")]


def entries() -> list[Entry]:
    shape = ("op:shape", "inputs:one-tensor")
    return [
        entry(
            "Transpose",
            Transpose,
            transpose_samples,
            tags=(
                *shape,
                "inputs:python-int",
                "outputs:view",
                "outputs:one-tensor",
                "saved:non-tensor",
                "backend:torch",
                "vmap:rule",
                "vmap:composed",
            ),
            description="returns a view of its input",
        ),
        entry(
            "NumpyPermute",
            NumpyPermute,
            permute_samples,
            tags=(
                *shape,
                "inputs:python-tuple",
                "outputs:one-tensor",
                "saved:non-tensor",
                "backend:numpy",
                "vmap:rule",
                "vmap:composed",
            ),
        ),
        entry(
            "PermuteGenerated",
            PermuteGenerated,
            permute_samples,
            tags=(
                *shape,
                "inputs:python-tuple",
                "outputs:one-tensor",
                "saved:non-tensor",
                "backend:torch",
                "vmap:generated",
            ),
        ),
        entry(
            "Reshape",
            Reshape,
            reshape_samples,
            tags=(
                *shape,
                "inputs:python-tuple",
                "outputs:view",
                "outputs:one-tensor",
                "saved:non-tensor",
                "backend:torch",
                "vmap:rule",
                "vmap:composed",
            ),
        ),
        entry(
            "ExpandGenerated",
            ExpandGenerated,
            expand_samples,
            tags=(
                *shape,
                "inputs:python-tuple",
                "outputs:view",
                "outputs:one-tensor",
                "saved:non-tensor",
                "backend:torch",
                "vmap:generated",
            ),
        ),
        entry(
            "KeepAndExp",
            KeepAndExp,
            unary_samples,
            tags=(
                "op:elementwise",
                "op:unary",
                "inputs:one-tensor",
                "outputs:tuple",
                "outputs:input-as-is",
                "saved:outputs",
                "saved:for-forward",
                "backend:torch",
                "vmap:rule",
                "vmap:composed",
            ),
        ),
        entry(
            "IdentityGenerated",
            IdentityGenerated,
            unary_samples,
            tags=(
                "op:shape",
                "inputs:one-tensor",
                "outputs:one-tensor",
                "outputs:input-as-is",
                "backend:torch",
                "vmap:generated",
            ),
        ),
    ]
