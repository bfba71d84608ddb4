"""Planted vmap-rule bugs: each class is a correct Function with exactly one bug in its rule.

The correct twins are the registry's NumpyMul and NumpyCube. Each planted class
subclasses its twin, so forward, setup_context, backward and jvp are the twin's
and only the ``vmap`` staticmethod differs.
"""

from __future__ import annotations

import torch

from autograd_function_db._sampling import Maker
from autograd_function_db.entry import Sample
from autograd_function_db.numpy_ops import NumpyCube, NumpyMul


def front(t: torch.Tensor, bdim: int | None) -> torch.Tensor:
    return t if bdim is None else t.movedim(bdim, 0)


class MisalignedMul(NumpyMul):
    """Moves batch dims to the front but never pads them to line up under numpy broadcasting."""

    @staticmethod
    def vmap(info, in_dims, x, y):
        return MisalignedMul.apply(front(x, in_dims[0]), front(y, in_dims[1])), 0


class IgnoresUnbatchedMul(NumpyMul):
    """When one argument is unbatched, the rule forgets it and returns the other unchanged."""

    @staticmethod
    def vmap(info, in_dims, x, y):
        x_bdim, y_bdim = in_dims
        if x_bdim is None:
            return y, y_bdim
        if y_bdim is None:
            return x, x_bdim
        return NumpyMul.vmap(info, in_dims, x, y)


class WrongOutDimCube(NumpyCube):
    """Moves the batch dim to 0 but reports the input's bdim as the out_dim."""

    @staticmethod
    def vmap(info, in_dims, x):
        out, dx = WrongOutDimCube.apply(x.movedim(in_dims[0], 0))
        return (out, dx), (in_dims[0], in_dims[0])


class WrongBatchSizeCube(NumpyCube):
    """Returns only the first batch element (batch size 1) for the first output."""

    @staticmethod
    def vmap(info, in_dims, x):
        out, dx = WrongBatchSizeCube.apply(x.movedim(in_dims[0], 0))
        return (out[:1], dx), (0, 0)


class NoneOutDimCube(NumpyCube):
    """Claims the outputs are unbatched (out_dims None) although they carry the batch."""

    @staticmethod
    def vmap(info, in_dims, x):
        return NoneOutDimCube.apply(x.movedim(in_dims[0], 0)), (None, None)


class FirstSliceCube(NumpyCube):
    """Computes slice 0 only and expands it over the batch."""

    @staticmethod
    def vmap(info, in_dims, x):
        x0 = x.select(in_dims[0], 0)
        out, dx = FirstSliceCube.apply(x0)
        expand = (info.batch_size, *out.shape)
        return (out.expand(expand), dx.expand(expand)), (0, 0)


class InteriorBreaksCube(NumpyCube):
    """Handles bdim 0 and the last dim only; an interior bdim is treated as the last dim."""

    @staticmethod
    def vmap(info, in_dims, x):
        bdim = in_dims[0]
        x = x.movedim(bdim, 0) if bdim == 0 else x.movedim(-1, 0)
        return InteriorBreaksCube.apply(x), (0, 0)


class HardcodedBatchCube(NumpyCube):
    """Loops over a hard-coded batch of 2 instead of info.batch_size."""

    @staticmethod
    def vmap(info, in_dims, x):
        x = x.movedim(in_dims[0], 0)
        outs = [HardcodedBatchCube.apply(x[i]) for i in range(2)]
        return (torch.stack([o[0] for o in outs]), torch.stack([o[1] for o in outs])), (0, 0)


class SwapsLevelsCube(NumpyCube):
    """Assumes one batch dim: when an outer level's call sees the inner level's batch dim as a
    leading data dim (more dims than a 1-d sample plus batch), it transposes the two levels."""

    @staticmethod
    def vmap(info, in_dims, x):
        x = x.movedim(in_dims[0], 0)
        if x.dim() > 2:
            x = x.transpose(0, 1)
        return SwapsLevelsCube.apply(x), (0, 0)


class DtypeChangingCube(NumpyCube):
    """Computes in float64 and forgets to cast back."""

    @staticmethod
    def vmap(info, in_dims, x):
        out, dx = DtypeChangingCube.apply(x.movedim(in_dims[0], 0).double())
        return (out, dx), (0, 0)


def vector_samples(seed: int, dtype: torch.dtype, device: str) -> list[Sample]:
    """1-d samples only (for SwapsLevelsCube, whose bug needs a known per-slice rank)."""
    m = Maker(seed, dtype, device)
    return [Sample((m.randn(5),), "1d"), Sample((m.randn(7),), "1d-7")]
