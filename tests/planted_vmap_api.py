"""Planted bugs in the less-travelled parts of the vmap-staticmethod API, each beside its
correct twin: tuple arguments, forward mode through the rule, layouts the rule hands to
backward, batched index tensors, and rules that find the batch by its size."""

from __future__ import annotations

import torch

from autograd_function_db._sampling import Maker
from autograd_function_db._util import broadcast_front
from autograd_function_db.containers import ScaleShiftPair
from autograd_function_db.entry import Sample

# --- 1. a tuple argument: the first element's batch dim applied to the second -------------


class TupleDimMixup(ScaleShiftPair):
    """Reads the tuple's in_dims as one dim for both elements (the scale's)."""

    @staticmethod
    def vmap(info, in_dims, x, pair):
        x_bdim, (s_bdim, _b_bdim) = in_dims
        scale, shift = pair
        xb, sb, bb = broadcast_front((x, scale, shift), (x_bdim, s_bdim, s_bdim))
        return TupleDimMixup.apply(xb, (sb, bb)), 0


# --- 2. forward mode through the rule: a start dim the rule shifts -------------------------


class FlattenFrom(torch.autograd.Function):
    """x.flatten(start_dim): the rule moves the batch to 0 and passes start_dim + 1."""

    @staticmethod
    def forward(x, start_dim):
        return x.flatten(start_dim)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.shape = inputs[0].shape
        ctx.start_dim = inputs[1]

    @staticmethod
    def backward(ctx, g):
        return g.reshape(ctx.shape), None

    @staticmethod
    def jvp(ctx, t, _start_dim):
        return t.flatten(ctx.start_dim)

    @staticmethod
    def vmap(info, in_dims, x, start_dim):
        return FlattenFrom.apply(x.movedim(in_dims[0], 0), start_dim + 1), 0


class FlattenFromJvpIgnoresStart(FlattenFrom):
    """jvp flattens from 0, which is right for every sample (start_dim=0) but not for the
    shifted start dim the vmap rule passes."""

    @staticmethod
    def jvp(ctx, t, _start_dim):
        return t.flatten(0)

    @staticmethod
    def vmap(info, in_dims, x, start_dim):
        return FlattenFromJvpIgnoresStart.apply(x.movedim(in_dims[0], 0), start_dim + 1), 0


def flatten_samples(seed: int, dtype: torch.dtype, device: str) -> list[Sample]:
    m = Maker(seed, dtype, device)
    return [Sample((m.randn(4, 5, 6), 0), "start-0")]


# --- 3. backward flattens a saved input with .view ----------------------------------------


class RowScale(torch.autograd.Function):
    """x * y for x and y of one shape; backward flattens x to rows with reshape."""

    @staticmethod
    def forward(x, y):
        return x * y

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs)

    @staticmethod
    def backward(ctx, g):
        x, y = ctx.saved_tensors
        rows = x.reshape(-1, x.shape[-1])  # one row per line of x
        return (g * y).sum_to_size(x.shape), (g * rows.reshape(x.shape)).sum_to_size(y.shape)

    @staticmethod
    def vmap(info, in_dims, x, y):
        x_bdim, y_bdim = in_dims
        if y_bdim is None:  # cheap path: y broadcasts against the batch, x keeps its layout
            return RowScale.apply(x.movedim(x_bdim, 0), y), 0
        if x_bdim is None:
            return RowScale.apply(x, y.movedim(y_bdim, 0)), 0
        xb, yb = (t.movedim(d, 0) for t, d in zip((x, y), in_dims))
        xb, yb = (t.contiguous() for t in torch.broadcast_tensors(xb, yb))
        return RowScale.apply(xb, yb), 0


class RowScaleViews(RowScale):
    """backward uses x.view(-1, k): fine for every contiguous x, and the rule hands it a
    non-contiguous one only when x sits at an interior or last dim while y is unbatched."""

    @staticmethod
    def backward(ctx, g):
        x, y = ctx.saved_tensors
        rows = x.view(-1, x.shape[-1])
        return (g * y).sum_to_size(x.shape), (g * rows.reshape(x.shape)).sum_to_size(y.shape)

    @staticmethod
    def vmap(info, in_dims, x, y):
        x_bdim, y_bdim = in_dims
        if y_bdim is None:
            return RowScaleViews.apply(x.movedim(x_bdim, 0), y), 0
        if x_bdim is None:
            return RowScaleViews.apply(x, y.movedim(y_bdim, 0)), 0
        xb, yb = (t.movedim(d, 0) for t, d in zip((x, y), in_dims))
        xb, yb = (t.contiguous() for t in torch.broadcast_tensors(xb, yb))
        return RowScaleViews.apply(xb, yb), 0


def row_samples(seed: int, dtype: torch.dtype, device: str) -> list[Sample]:
    m = Maker(seed, dtype, device)
    return [Sample((m.randn(4, 5), m.randn(4, 5)), "4x5")]


# --- 4. a batched index: example 0 used for the whole batch --------------------------------


class Gather(torch.autograd.Function):
    """x[idx] along dim 0 (idx a 1-d int64 index)."""

    @staticmethod
    def forward(x, idx):
        return x.index_select(0, idx)

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, idx = inputs
        ctx.save_for_backward(idx)
        ctx.rows = x.shape[0]

    @staticmethod
    def backward(ctx, g):
        (idx,) = ctx.saved_tensors
        return g.new_zeros(ctx.rows, *g.shape[1:]).index_add(0, idx, g), None

    @staticmethod
    def vmap(info, in_dims, x, idx):
        x_bdim, i_bdim = in_dims
        x = front(x, x_bdim, info.batch_size)
        idx = Gather.batch_index(info, idx, i_bdim)
        rows = torch.arange(info.batch_size, device=x.device)[:, None]
        return x[rows, idx], 0

    @staticmethod
    def batch_index(info, idx, i_bdim):
        return front(idx, i_bdim, info.batch_size)


class GatherFirstIndex(Gather):
    """Uses example 0 of a batched index for every element of the batch."""

    @staticmethod
    def batch_index(info, idx, i_bdim):
        if i_bdim is None:
            return idx.expand(info.batch_size, *idx.shape)
        return idx.select(i_bdim, 0).expand(info.batch_size, *idx.select(i_bdim, 0).shape)

    @staticmethod
    def vmap(info, in_dims, x, idx):
        x_bdim, i_bdim = in_dims
        x = front(x, x_bdim, info.batch_size)
        idx = GatherFirstIndex.batch_index(info, idx, i_bdim)
        rows = torch.arange(info.batch_size, device=x.device)[:, None]
        return x[rows, idx], 0


class SortedGather(Gather):
    """Refuses an index that is not sorted (so the suite cannot shuffle it)."""

    @staticmethod
    def forward(x, idx):
        if bool((idx[1:] < idx[:-1]).any()):
            raise ValueError("SortedGather needs a sorted index")
        return x.index_select(0, idx)


def front(t: torch.Tensor, bdim: int | None, batch_size: int) -> torch.Tensor:
    return t.expand(batch_size, *t.shape) if bdim is None else t.movedim(bdim, 0)


def gather_samples():
    """No seed parameter: the suite varies the slices itself."""
    gen = torch.Generator().manual_seed(0)
    return [(torch.randn(5, 4, generator=gen), torch.tensor([4, 0, 3, 1, 1, 2]))]


def sorted_gather_samples():
    gen = torch.Generator().manual_seed(0)
    return [(torch.randn(5, 4, generator=gen), torch.tensor([0, 1, 1, 3, 4, 4]))]


# --- 6. a rule that finds the batch dim by its size ----------------------------------------


class FindsBatchBySize(torch.autograd.Function):
    """2 * x; the rule ignores in_dims and looks for a dim of size info.batch_size."""

    @staticmethod
    def forward(x):
        return 2 * x

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def backward(ctx, g):
        return 2 * g

    @staticmethod
    def vmap(info, in_dims, x):
        bdim = list(x.shape).index(info.batch_size)
        return FindsBatchBySize.apply(x.movedim(bdim, 0)), 0


class UsesInDims(FindsBatchBySize):
    """The correct twin: the batch dim is the one in_dims names."""

    @staticmethod
    def vmap(info, in_dims, x):
        return UsesInDims.apply(x.movedim(in_dims[0], 0)), 0


def matrix_samples(seed: int) -> list[Sample]:
    """A user's samples: dims 4 and 5 (the suite's own batch sizes avoid them)."""
    return [Sample((Maker(seed, torch.float32, "cpu").randn(4, 5),), "4x5")]
