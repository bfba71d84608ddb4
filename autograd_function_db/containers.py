"""Tensors inside container arguments: a tuple of tensors and a dict of tensors.

``torch.func.vmap`` batches tensors inside tuple, list and dict arguments, and the
vmap staticmethod receives ``in_dims`` as a pytree with the arguments' structure
(``(0, (None, 1))`` for ``f(x, (a, b))``). Autograd treats tensors inside a container
as constants (only top-level tensors get gradients), so these Functions differentiate
``x`` only; under vmap every leaf of the container can be batched on its own.
"""

from __future__ import annotations

import torch

from ._sampling import Maker
from ._util import broadcast_front
from .entry import Entry, Sample, entry


def _affine_rule(apply, x_bdim, s_bdim, b_bdim, x, scale, shift) -> tuple[torch.Tensor, int]:
    """One batch dim per leaf, each moved to 0 and padded so broadcasting lines up."""
    xb, sb, bb = broadcast_front((x, scale, shift), (x_bdim, s_bdim, b_bdim))
    return apply(xb, sb, bb), 0


class ScaleShiftPair(torch.autograd.Function):
    """x * scale + shift, with ``(scale, shift)`` passed as one tuple argument."""

    @staticmethod
    def forward(x, pair):
        scale, shift = pair
        return x * scale + shift

    @staticmethod
    def setup_context(ctx, inputs, output):
        _, (scale, _) = inputs
        ctx.save_for_backward(scale)
        ctx.save_for_forward(scale)
        ctx.x_shape = inputs[0].shape
        ctx.out_shape = output.shape

    @staticmethod
    def backward(ctx, g):
        (scale,) = ctx.saved_tensors
        return (g * scale).sum_to_size(ctx.x_shape), None

    @staticmethod
    def jvp(ctx, x_t, _pair_t):
        (scale,) = ctx.saved_tensors
        # The output may be larger than x (a batched shift under vmap with x unbatched).
        return (x_t * scale).expand(ctx.out_shape)

    @staticmethod
    def vmap(info, in_dims, x, pair):
        x_bdim, (s_bdim, b_bdim) = in_dims
        scale, shift = pair
        return _affine_rule(
            lambda a, s, b: ScaleShiftPair.apply(a, (s, b)),
            x_bdim,
            s_bdim,
            b_bdim,
            x,
            scale,
            shift,
        )


class ScaleShiftDict(torch.autograd.Function):
    """x * params["scale"] + params["shift"], with the parameters in one dict argument."""

    @staticmethod
    def forward(x, params):
        return x * params["scale"] + params["shift"]

    @staticmethod
    def setup_context(ctx, inputs, output):
        scale = inputs[1]["scale"]
        ctx.save_for_backward(scale)
        ctx.save_for_forward(scale)
        ctx.x_shape = inputs[0].shape
        ctx.out_shape = output.shape

    @staticmethod
    def backward(ctx, g):
        (scale,) = ctx.saved_tensors
        return (g * scale).sum_to_size(ctx.x_shape), None

    @staticmethod
    def jvp(ctx, x_t, _params_t):
        (scale,) = ctx.saved_tensors
        # The output may be larger than x (a batched shift under vmap with x unbatched).
        return (x_t * scale).expand(ctx.out_shape)

    @staticmethod
    def vmap(info, in_dims, x, params):
        x_bdim, dims = in_dims
        return _affine_rule(
            lambda a, s, b: ScaleShiftDict.apply(a, {"scale": s, "shift": b}),
            x_bdim,
            dims["scale"],
            dims["shift"],
            x,
            params["scale"],
            params["shift"],
        )


def pair_samples(seed: int, dtype: torch.dtype, device: str) -> list[Sample]:
    m = Maker(seed, dtype, device)
    return [
        Sample((m.randn(4, 5), (m.randn(4, 5), m.randn(4, 5))), "same-shape"),
        Sample((m.randn(4, 5), (m.randn(5), m.randn(4, 1))), "broadcast"),
    ]


def dict_samples(seed: int, dtype: torch.dtype, device: str) -> list[Sample]:
    m = Maker(seed, dtype, device)
    return [
        Sample((m.randn(4, 5), {"scale": m.randn(4, 5), "shift": m.randn(5)}), "broadcast"),
    ]


TAGS = (
    "op:elementwise",
    "op:broadcast",
    "inputs:several",
    "inputs:container",
    "saved:inputs",
    "saved:for-forward",
    "backend:torch",
    "vmap:rule",
)


def entries() -> list[Entry]:
    return [
        entry(
            "ScaleShiftPair",
            ScaleShiftPair,
            pair_samples,
            tags=TAGS,
            description="a tuple of tensors as one argument: in_dims (x_bdim, (s_bdim, b_bdim))",
        ),
        entry(
            "ScaleShiftDict",
            ScaleShiftDict,
            dict_samples,
            tags=TAGS,
            description="a dict of tensors as one argument: in_dims (x_bdim, {scale:.., shift:..})",
        ),
    ]
