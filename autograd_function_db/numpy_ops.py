"""Numpy-backed Functions with hand-written vmap rules, and torch twins with generated rules.

The numpy-backed forwards are opaque to torch (no batching rule can see inside
them), so the hand-written ``vmap`` staticmethod is the only thing that makes
them batchable. Backward and jvp use torch ops (or other Functions of this
module) so they compose with vmap and higher-order autodiff. The twins compute
the same thing in torch with ``generate_vmap_rule = True``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from ._sampling import Maker
from .entry import Entry, Sample, entry


def to_numpy(t: torch.Tensor) -> np.ndarray:
    return t.detach().cpu().numpy()


def from_numpy(a: Any, like: torch.Tensor) -> torch.Tensor:
    return torch.as_tensor(np.asarray(a), device=like.device)


def move_bdim_to_front(t: torch.Tensor, bdim: int | None, batch_size: int) -> torch.Tensor:
    """Batch dim at 0; an unbatched tensor is expanded to the batch size."""
    if bdim is None:
        return t.expand(batch_size, *t.shape)
    return t.movedim(bdim, 0)


# --- NumpyCube: two outputs, backward uses both incoming gradients -----------------------


class _CubeRule:
    """setup_context, backward and jvp of NumpyCube and CubeGenerated (a mixin, not a Function)."""

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0], output[1])
        ctx.save_for_forward(inputs[0], output[1])

    @staticmethod
    def backward(ctx, grad_out, grad_dx):
        x, dx = ctx.saved_tensors
        return grad_out * dx + grad_dx * 6 * x

    @staticmethod
    def jvp(ctx, x_t):
        x, dx = ctx.saved_tensors
        return x_t * dx, 6 * x * x_t


class NumpyCube(_CubeRule, torch.autograd.Function):
    """x -> (x**3, 3*x**2), computed in numpy."""

    @staticmethod
    def forward(x):
        xn = to_numpy(x)
        return from_numpy(xn**3, x), from_numpy(3 * xn**2, x)

    @staticmethod
    def vmap(info, in_dims, x):
        out, dx = NumpyCube.apply(x)
        return (out, dx), (in_dims[0], in_dims[0])


class CubeGenerated(_CubeRule, torch.autograd.Function):
    generate_vmap_rule = True

    @staticmethod
    def forward(x):
        return x**3, 3 * x**2


def unary_samples(seed: int, dtype: torch.dtype, device: str) -> list[Sample]:
    m = Maker(seed, dtype, device)
    return [
        Sample((m.randn(),), "0d"),
        Sample((m.randn(5),), "1d"),
        Sample((m.randn(4, 5),), "2d"),
        Sample((m.randn(4, 1, 6),), "3d"),
    ]


# --- NumpyMul: numpy broadcasting; the rule aligns and pads batch dims -------------------


def _reduce_to(grad: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    return grad.sum_to_size(shape) if grad.shape != shape else grad


class _MulRule:
    """setup_context and jvp of NumpyMul and MulGenerated (their backwards differ: only
    NumpyMul reads ``ctx.needs_input_grad``)."""

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs)
        ctx.save_for_forward(*inputs)

    @staticmethod
    def jvp(ctx, x_t, y_t):
        x, y = ctx.saved_tensors
        return x_t * y + x * y_t


class NumpyMul(_MulRule, torch.autograd.Function):
    """x * y with numpy broadcasting."""

    @staticmethod
    def forward(x, y):
        return from_numpy(to_numpy(x) * to_numpy(y), x)

    @staticmethod
    def backward(ctx, grad):
        x, y = ctx.saved_tensors
        gx = _reduce_to(grad * y, x.shape) if ctx.needs_input_grad[0] else None
        gy = _reduce_to(grad * x, y.shape) if ctx.needs_input_grad[1] else None
        return gx, gy

    @staticmethod
    def vmap(info, in_dims, x, y):
        x_bdim, y_bdim = in_dims
        # Per-slice ranks: numpy aligns trailing dims, so the batch dim of the
        # lower-rank operand must be padded out to sit under the other's.
        rank = max(x.dim() - (x_bdim is not None), y.dim() - (y_bdim is not None))

        def front(t: torch.Tensor, bdim: int | None) -> torch.Tensor:
            if bdim is None:
                return t
            t = t.movedim(bdim, 0)
            pad = rank - (t.dim() - 1)
            return t.reshape(t.shape[0], *([1] * pad), *t.shape[1:])

        x, y = front(x, x_bdim), front(y, y_bdim)
        if x_bdim is None:
            x = x.reshape(1, *([1] * (rank - x.dim())), *x.shape)
        if y_bdim is None:
            y = y.reshape(1, *([1] * (rank - y.dim())), *y.shape)
        return NumpyMul.apply(x, y), 0


class MulGenerated(_MulRule, torch.autograd.Function):
    generate_vmap_rule = True

    @staticmethod
    def forward(x, y):
        return x * y

    @staticmethod
    def backward(ctx, grad):
        x, y = ctx.saved_tensors
        return _reduce_to(grad * y, x.shape), _reduce_to(grad * x, y.shape)


def binary_samples(seed: int, dtype: torch.dtype, device: str) -> list[Sample]:
    m = Maker(seed, dtype, device)
    return [
        Sample((m.randn(5), m.randn(5)), "same-shape-1d"),
        Sample((m.randn(), m.randn(4)), "0d-with-1d"),
        Sample((m.randn(4, 5), m.randn(5)), "broadcast-rank"),
        Sample((m.randn(5, 1), m.randn(1, 4)), "broadcast-both"),
        Sample((m.randn(4, 5, 6), m.randn(6)), "3d-with-1d"),
    ]


# --- NumpyExp_: in place, mark_dirty ----------------------------------------------------


class NumpyExp_(torch.autograd.Function):
    """x.exp_() through numpy, writing into x's own storage."""

    @staticmethod
    def forward(x):
        xn = to_numpy(x)
        np.exp(xn, out=xn)
        return x

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.mark_dirty(inputs[0])
        ctx.save_for_backward(output)
        ctx.save_for_forward(output)

    @staticmethod
    def backward(ctx, grad):
        (out,) = ctx.saved_tensors
        return grad * out

    @staticmethod
    def jvp(ctx, x_t):
        (out,) = ctx.saved_tensors
        x_t.mul_(out)
        return x_t

    @staticmethod
    def vmap(info, in_dims, x):
        NumpyExp_.apply(x)
        return x, in_dims[0]


# No generate_vmap_rule twin: torch refuses a generated rule for a mark_dirty Function
# that saves its output ("An input that has been returned as-is as output is being saved
# for backward"), and saving a view instead trips the dirty-output check.


# --- NumpySort and NumpyTake: integer outputs and integer index inputs ------------------


def _take_rule(take: Callable[[], type[torch.autograd.Function]]) -> type:
    """setup_context, backward and jvp of a take-along-axis Function; ``take()`` is the
    Function they apply (the Function itself: NumpyTake or TakeGenerated)."""

    class TakeRule:
        @staticmethod
        def setup_context(ctx, inputs, output):
            _, ind, ind_inv, dim = inputs
            ctx.save_for_backward(ind, ind_inv)
            ctx.save_for_forward(ind, ind_inv)
            ctx.dim = dim

        @staticmethod
        def backward(ctx, grad):
            ind, ind_inv = ctx.saved_tensors
            return take().apply(grad, ind_inv, ind, ctx.dim), None, None, None

        @staticmethod
        def jvp(ctx, x_t, ind_t, ind_inv_t, _):
            ind, ind_inv = ctx.saved_tensors
            return take().apply(x_t, ind, ind_inv, ctx.dim)

    return TakeRule


def _sort_rule(take: Callable[[], type[torch.autograd.Function]]) -> type:
    """setup_context, backward and jvp of a sort Function, whose gradients go through the
    take-along-axis Function ``take()`` (NumpyTake for NumpySort, TakeGenerated for SortGenerated)."""

    class SortRule:
        @staticmethod
        def setup_context(ctx, inputs, output):
            _, dim = inputs
            _, ind, ind_inv = output
            ctx.mark_non_differentiable(ind, ind_inv)
            ctx.save_for_backward(ind, ind_inv)
            ctx.save_for_forward(ind, ind_inv)
            ctx.dim = dim

        @staticmethod
        def backward(ctx, grad, _grad_ind, _grad_ind_inv):
            ind, ind_inv = ctx.saved_tensors
            return take().apply(grad, ind_inv, ind, ctx.dim), None

        @staticmethod
        def jvp(ctx, x_t, _):
            ind, ind_inv = ctx.saved_tensors
            return take().apply(x_t, ind, ind_inv, ctx.dim), None, None

    return SortRule


class NumpyTake(_take_rule(lambda: NumpyTake), torch.autograd.Function):  # type: ignore[misc]
    """take_along_axis(x, ind, dim); ``ind_inv`` is the inverse permutation, used by backward."""

    @staticmethod
    def forward(x, ind, ind_inv, dim):
        return from_numpy(np.take_along_axis(to_numpy(x), to_numpy(ind), dim), x)

    @staticmethod
    def vmap(info, in_dims, x, ind, ind_inv, dim):
        x_bdim, ind_bdim, ind_inv_bdim, _ = in_dims
        logical_rank = x.dim() - (x_bdim is not None)
        dim = dim % logical_rank if logical_rank else 0
        x = move_bdim_to_front(x, x_bdim, info.batch_size)
        ind = move_bdim_to_front(ind, ind_bdim, info.batch_size)
        ind_inv = move_bdim_to_front(ind_inv, ind_inv_bdim, info.batch_size)
        return NumpyTake.apply(x, ind, ind_inv, dim + 1), 0


class NumpySort(_sort_rule(lambda: NumpyTake), torch.autograd.Function):  # type: ignore[misc]
    """Sort along ``dim``: (values, indices, inverse indices); the indices are not differentiable."""

    @staticmethod
    def forward(x, dim):
        xn = to_numpy(x)
        ind = np.argsort(xn, axis=dim, kind="stable")
        ind_inv = np.argsort(ind, axis=dim, kind="stable")
        values = np.take_along_axis(xn, ind, axis=dim)
        return from_numpy(values, x), from_numpy(ind, x), from_numpy(ind_inv, x)

    @staticmethod
    def vmap(info, in_dims, x, dim):
        x_bdim, _ = in_dims
        rank = x.dim() - 1
        dim = dim % rank if rank else 0
        x = x.movedim(x_bdim, 0)
        return NumpySort.apply(x, dim + 1), (0, 0, 0)


class TakeGenerated(_take_rule(lambda: TakeGenerated), torch.autograd.Function):  # type: ignore[misc]
    generate_vmap_rule = True

    @staticmethod
    def forward(x, ind, ind_inv, dim):
        return torch.take_along_dim(x, ind, dim)


class SortGenerated(_sort_rule(lambda: TakeGenerated), torch.autograd.Function):  # type: ignore[misc]
    generate_vmap_rule = True

    @staticmethod
    def forward(x, dim):
        values, ind = torch.sort(x, dim=dim, stable=True)
        ind_inv = torch.argsort(ind, dim=dim, stable=True)
        return values, ind, ind_inv


def sort_samples(seed: int, dtype: torch.dtype, device: str) -> list[Sample]:
    m = Maker(seed, dtype, device)
    return [
        Sample((m.spread(5), 0), "1d-dim0"),
        Sample((m.spread(4, 5), 1), "2d-dim1"),
        Sample((m.spread(4, 5), -2), "2d-dim-2"),
        Sample((m.spread(4, 5, 6), 1), "3d-dim1"),
    ]


def take_samples(seed: int, dtype: torch.dtype, device: str) -> list[Sample]:
    m = Maker(seed, dtype, device)
    out = []
    for name, shape, dim in (
        ("1d-dim0", (5,), 0),
        ("2d-dim1", (4, 5), 1),
        ("2d-dim0", (4, 5), 0),
        ("3d-dim-1", (4, 5, 6), -1),
    ):
        ind = m.permutation_along(shape, dim)
        ind_inv = ind.argsort(dim=dim)
        out.append(Sample((m.randn(*shape), ind, ind_inv, dim), name))
    return out


# --- Select: a Python int index ----------------------------------------------------------


def _select_rule(select: Callable[[], type[torch.autograd.Function]]) -> type:
    """setup_context, backward and jvp of Select and SelectGenerated; jvp applies ``select()``,
    the Function itself."""

    class SelectRule:
        @staticmethod
        def setup_context(ctx, inputs, output):
            x, idx = inputs
            ctx.x_shape = x.shape
            ctx.idx = idx

        @staticmethod
        def backward(ctx, grad):
            zeros = grad.new_zeros(ctx.x_shape)
            return zeros.select_scatter(grad, 0, ctx.idx), None

        @staticmethod
        def jvp(ctx, x_t, _):
            return select().apply(x_t, ctx.idx)

    return SelectRule


class Select(_select_rule(lambda: Select), torch.autograd.Function):  # type: ignore[misc]
    """x[idx] for a Python int idx (a copy, not a view)."""

    @staticmethod
    def forward(x, idx):
        return x[idx].clone()

    @staticmethod
    def vmap(info, in_dims, x, idx):
        x_bdim, _ = in_dims
        x = x.movedim(x_bdim, 0)
        return x[:, idx].clone(), 0


class SelectGenerated(_select_rule(lambda: SelectGenerated), torch.autograd.Function):  # type: ignore[misc]
    generate_vmap_rule = True

    @staticmethod
    def forward(x, idx):
        return x[idx].clone()


def select_samples(seed: int, dtype: torch.dtype, device: str) -> list[Sample]:
    m = Maker(seed, dtype, device)
    return [
        Sample((m.randn(5), 1), "1d"),
        Sample((m.randn(4, 5), 3), "2d"),
        Sample((m.randn(4, 5, 6), -1), "3d-negative-index"),
    ]


def entries() -> list[Entry]:
    elementwise = ("op:elementwise", "inputs:one-tensor", "outputs:tuple", "saved:outputs")
    return [
        entry(
            "NumpyCube",
            NumpyCube,
            unary_samples,
            tags=(*elementwise, "backend:numpy", "vmap:rule", "saved:inputs"),
            description="two outputs; backward uses both incoming gradients",
        ),
        entry(
            "CubeGenerated",
            CubeGenerated,
            unary_samples,
            tags=(*elementwise, "backend:torch", "vmap:generated", "saved:inputs"),
        ),
        entry(
            "NumpyMul",
            NumpyMul,
            binary_samples,
            tags=(
                "op:elementwise",
                "op:broadcast",
                "inputs:several",
                "backend:numpy",
                "vmap:rule",
                "saved:inputs",
                "ctx:needs_input_grad",
            ),
            description="numpy broadcasting; the rule aligns and pads batch dims",
        ),
        entry(
            "MulGenerated",
            MulGenerated,
            binary_samples,
            tags=(
                "op:elementwise",
                "op:broadcast",
                "inputs:several",
                "backend:torch",
                "vmap:generated",
                "saved:inputs",
            ),
        ),
        entry(
            "NumpyExp_",
            NumpyExp_,
            unary_samples,
            tags=(
                "op:elementwise",
                "ctx:mark_dirty",
                "backend:numpy",
                "vmap:rule",
                "saved:outputs",
                "outputs:input-as-is",
            ),
            inplace_args=(0,),
            description="in place through numpy, mark_dirty",
        ),
        entry(
            "NumpySort",
            NumpySort,
            sort_samples,
            tags=(
                "op:sort",
                "outputs:nondiff-int",
                "outputs:tuple",
                "ctx:mark_non_differentiable",
                "inputs:python-int",
                "backend:numpy",
                "vmap:rule",
                "vmap:composed",
                "saved:outputs",
            ),
            nondiff_outputs=(1, 2),
            helper_functions=(NumpyTake,),
        ),
        entry(
            "SortGenerated",
            SortGenerated,
            sort_samples,
            tags=(
                "op:sort",
                "outputs:nondiff-int",
                "outputs:tuple",
                "ctx:mark_non_differentiable",
                "inputs:python-int",
                "backend:torch",
                "vmap:generated",
                "saved:outputs",
            ),
            nondiff_outputs=(1, 2),
        ),
        entry(
            "NumpyTake",
            NumpyTake,
            take_samples,
            tags=(
                "op:indexing",
                "inputs:index-tensor",
                "inputs:python-int",
                "backend:numpy",
                "vmap:rule",
                "vmap:expand-unbatched",
                "vmap:composed",
                "saved:inputs",
            ),
            linked_args=((1, 2),),
            description="take-along-axis; the rule expands unbatched arguments with info.batch_size",
        ),
        entry(
            "TakeGenerated",
            TakeGenerated,
            take_samples,
            tags=(
                "op:indexing",
                "inputs:index-tensor",
                "inputs:python-int",
                "backend:torch",
                "vmap:generated",
                "saved:inputs",
            ),
            linked_args=((1, 2),),
        ),
        entry(
            "Select",
            Select,
            select_samples,
            tags=(
                "op:indexing",
                "inputs:python-int",
                "backend:torch",
                "vmap:rule",
                "saved:non-tensor",
            ),
        ),
        entry(
            "SelectGenerated",
            SelectGenerated,
            select_samples,
            tags=(
                "op:indexing",
                "inputs:python-int",
                "backend:torch",
                "vmap:generated",
                "saved:non-tensor",
            ),
        ),
    ]
