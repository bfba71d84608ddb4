"""Indexing with integer index tensors: gather, scatter_add, a weighted index_select with an
optional (None) weight, and numpy/torch top-k with non-differentiable indices."""

from __future__ import annotations

import numpy as np
import torch

from ._sampling import Maker
from ._util import from_numpy, front, to_numpy, wrap_dim
from .entry import Entry, Sample, entry

# --- Gather: the rule expands unbatched arguments to info.batch_size ------------------------


class Gather(torch.autograd.Function):
    @staticmethod
    def forward(x, dim, index):
        return torch.gather(x, dim, index)

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, dim, index = inputs
        ctx.save_for_backward(index)
        ctx.save_for_forward(index)
        ctx.dim, ctx.shape = dim, x.shape

    @staticmethod
    def backward(ctx, grad):
        (index,) = ctx.saved_tensors
        return grad.new_zeros(ctx.shape).scatter_add(ctx.dim, index, grad), None, None

    @staticmethod
    def jvp(ctx, x_t, _dim, _index):
        (index,) = ctx.saved_tensors
        return Gather.apply(x_t, ctx.dim, index)

    @staticmethod
    def vmap(info, in_dims, x, dim, index):
        x_bdim, _, index_bdim = in_dims
        dim = wrap_dim(dim, x.dim() - (x_bdim is not None)) + 1
        x = front(x, x_bdim, info.batch_size)
        index = front(index, index_bdim, info.batch_size)
        return Gather.apply(x, dim, index), 0


def gather_samples(seed: int, dtype: torch.dtype, device: str) -> list[Sample]:
    m = Maker(seed, dtype, device)
    return [
        Sample((m.randn(5), 0, m.integers(0, 5, 4)), "1d"),
        Sample((m.randn(4, 5), 1, m.integers(0, 5, 4, 6)), "2d-dim1-repeats"),
        Sample((m.randn(4, 5, 6), 0, m.integers(0, 4, 1, 5, 6)), "3d-dim0"),
        Sample((m.randn(4, 5, 6), -1, m.integers(0, 6, 4, 5, 1)), "3d-dim-1"),
    ]


# --- ScatterAdd: generated rule; base and src both differentiable ---------------------------


class ScatterAddGenerated(torch.autograd.Function):
    generate_vmap_rule = True

    @staticmethod
    def forward(base, dim, index, src):
        return base.scatter_add(dim, index, src)

    @staticmethod
    def setup_context(ctx, inputs, output):
        _, dim, index, _ = inputs
        ctx.save_for_backward(index)
        ctx.save_for_forward(index)
        ctx.dim = dim

    @staticmethod
    def backward(ctx, grad):
        (index,) = ctx.saved_tensors
        return grad, None, None, torch.gather(grad, ctx.dim, index)

    @staticmethod
    def jvp(ctx, base_t, _dim, _index, src_t):
        (index,) = ctx.saved_tensors
        return base_t.scatter_add(ctx.dim, index, src_t)


def scatter_samples(seed: int, dtype: torch.dtype, device: str) -> list[Sample]:
    m = Maker(seed, dtype, device)
    return [
        Sample((m.randn(5), 0, m.integers(0, 5, 6), m.randn(6)), "1d-collisions"),
        Sample((m.randn(4, 5), 1, m.integers(0, 5, 4, 6), m.randn(4, 6)), "2d-dim1"),
        Sample((m.randn(5, 4), 0, m.integers(0, 5, 6, 4), m.randn(6, 4)), "2d-dim0"),
    ]


# --- WeightedIndexSelect: an optional weight that may be None -----------------------------


def _bcast_rows(w: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    return w.reshape(w.shape[0], *([1] * (like.dim() - 1)))


class WeightedIndexSelect(torch.autograd.Function):
    """x[index] (rows), scaled row-wise by ``weight`` unless it is None."""

    @staticmethod
    def forward(x, index, weight=None):
        rows = x.index_select(0, index)
        return rows if weight is None else rows * _bcast_rows(weight, rows)

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, index, *rest = inputs
        weight = rest[0] if rest else None
        ctx.has_weight = weight is not None
        ctx.save_for_backward(x, index, weight)
        ctx.save_for_forward(x, index, weight)

    @staticmethod
    def backward(ctx, grad):
        x, index, weight = ctx.saved_tensors
        scaled = grad if weight is None else grad * _bcast_rows(weight, grad)
        gx = grad.new_zeros(x.shape).index_add(0, index, scaled)
        gw = None
        if weight is not None and ctx.needs_input_grad[2]:
            gw = (grad * x.index_select(0, index)).reshape(grad.shape[0], -1).sum(1)
        return gx, None, gw

    @staticmethod
    def jvp(ctx, x_t, _index, w_t=None):
        x, index, weight = ctx.saved_tensors
        out = WeightedIndexSelect.apply(x_t, index, weight)
        if weight is not None and w_t is not None:
            rows = x.index_select(0, index)
            out = out + rows * _bcast_rows(w_t, rows)
        return out

    @staticmethod
    def vmap(info, in_dims, x, index, weight=None):
        # Physically: out[b, k] = x[b, index[b, k]] * weight[b, k]; written with batched torch ops.
        b = info.batch_size
        x = front(x, in_dims[0], b)
        index = front(index, in_dims[1], b)
        rows = x[torch.arange(b, device=x.device).unsqueeze(1), index]
        if weight is not None:
            w = front(weight, in_dims[2], b)
            rows = rows * w.reshape(*w.shape, *([1] * (rows.dim() - 2)))
        return rows, 0


def index_select_samples(seed: int, dtype: torch.dtype, device: str) -> list[Sample]:
    m = Maker(seed, dtype, device)
    return [
        Sample((m.randn(5, 4), m.integers(0, 5, 6), None), "explicit-none"),
        Sample((m.randn(5, 4), m.integers(0, 5, 6)), "default-none"),
        Sample((m.randn(6), m.integers(0, 6, 4), m.randn(4)), "1d-weight"),
        Sample((m.randn(5, 4, 6), m.integers(0, 5, 7), m.randn(7)), "3d-weight"),
    ]


# --- TopK: values and non-differentiable int64 indices ------------------------------------


class _TopKRule:
    """setup_context, backward and jvp of TopK and NumpyTopK (a mixin, not a Function)."""

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, _, dim = inputs
        ctx.mark_non_differentiable(output[1])
        ctx.save_for_backward(output[1])
        ctx.save_for_forward(output[1])
        ctx.shape, ctx.dim = x.shape, dim

    @staticmethod
    def backward(ctx, grad, _grad_idx):
        (idx,) = ctx.saved_tensors
        return grad.new_zeros(ctx.shape).scatter(ctx.dim, idx, grad), None, None

    @staticmethod
    def jvp(ctx, x_t, _k, _dim):
        (idx,) = ctx.saved_tensors
        return torch.gather(x_t, ctx.dim, idx), None


class TopK(_TopKRule, torch.autograd.Function):
    @staticmethod
    def forward(x, k, dim):
        values, idx = torch.topk(x, k, dim, largest=True, sorted=True)
        return values, idx

    @staticmethod
    def vmap(info, in_dims, x, k, dim):
        x = x.movedim(in_dims[0], 0)
        return TopK.apply(x, k, wrap_dim(dim, x.dim() - 1) + 1), (0, 0)


class NumpyTopK(_TopKRule, torch.autograd.Function):
    @staticmethod
    def forward(x, k, dim):
        xn = to_numpy(x)
        idx = np.flip(np.argsort(xn, axis=dim, kind="stable"), axis=dim)
        idx = np.take(idx, np.arange(k), axis=dim)
        values = np.take_along_axis(xn, idx, axis=dim)
        return from_numpy(values, x), from_numpy(idx.astype(np.int64), x)

    @staticmethod
    def vmap(info, in_dims, x, k, dim):
        x = x.movedim(in_dims[0], 0)
        return NumpyTopK.apply(x, k, wrap_dim(dim, x.dim() - 1) + 1), (0, 0)


def topk_samples(seed: int, dtype: torch.dtype, device: str) -> list[Sample]:
    m = Maker(seed, dtype, device)
    return [
        Sample((m.spread(6), 4, 0), "1d-k4"),
        Sample((m.spread(4, 6), 1, 1), "2d-k1"),
        Sample((m.spread(5, 4, 6), 4, 0), "3d-dim0"),
        Sample((m.spread(5, 4, 6), 4, -1), "3d-dim-1"),
    ]


def entries() -> list[Entry]:
    return [
        entry(
            "Gather",
            Gather,
            gather_samples,
            tags=(
                "op:indexing",
                "inputs:several",
                "inputs:index-tensor",
                "inputs:python-int",
                "outputs:one-tensor",
                "saved:inputs",
                "saved:non-tensor",
                "backend:torch",
                "vmap:rule",
                "vmap:expand-unbatched",
                "vmap:composed",
            ),
        ),
        entry(
            "ScatterAddGenerated",
            ScatterAddGenerated,
            scatter_samples,
            tags=(
                "op:indexing",
                "op:scatter",
                "inputs:several",
                "inputs:index-tensor",
                "inputs:python-int",
                "outputs:one-tensor",
                "saved:inputs",
                "backend:torch",
                "vmap:generated",
            ),
        ),
        entry(
            "WeightedIndexSelect",
            WeightedIndexSelect,
            index_select_samples,
            tags=(
                "op:indexing",
                "inputs:several",
                "inputs:index-tensor",
                "inputs:none-arg",
                "inputs:default-args",
                "outputs:one-tensor",
                "saved:inputs",
                "ctx:needs_input_grad",
                "backend:torch",
                "vmap:rule",
                "vmap:expand-unbatched",
            ),
            description="an optional weight passed as None or left to its default",
        ),
        entry(
            "TopK",
            TopK,
            topk_samples,
            tags=(
                "op:sort",
                "inputs:one-tensor",
                "inputs:python-int",
                "outputs:tuple",
                "outputs:nondiff-int",
                "ctx:mark_non_differentiable",
                "saved:outputs",
                "backend:torch",
                "vmap:rule",
                "vmap:composed",
            ),
            nondiff_outputs=(1,),
        ),
        entry(
            "NumpyTopK",
            NumpyTopK,
            topk_samples,
            tags=(
                "op:sort",
                "inputs:one-tensor",
                "inputs:python-int",
                "outputs:tuple",
                "outputs:nondiff-int",
                "ctx:mark_non_differentiable",
                "saved:outputs",
                "backend:numpy",
                "vmap:rule",
                "vmap:composed",
            ),
            nondiff_outputs=(1,),
        ),
    ]
