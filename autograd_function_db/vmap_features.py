"""vmap rule features: ``None`` as the out_dim of an unbatched output, and rules that honour
``info.randomness`` (a hand-written one and torch's generated one)."""

from __future__ import annotations

import torch

from ._sampling import Maker
from ._util import broadcast_front, sum_to
from .entry import Entry, Sample, entry

# --- ScaleAndSquare: the second output depends only on w: out_dim None when w is unbatched ---


class ScaleAndSquare(torch.autograd.Function):
    """(x * w, w * w) with broadcasting."""

    @staticmethod
    def forward(x, w):
        return x * w, w * w

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs)
        ctx.save_for_forward(*inputs)

    @staticmethod
    def backward(ctx, g_prod, g_sq):
        x, w = ctx.saved_tensors
        gx = sum_to(g_prod * w, x.shape) if ctx.needs_input_grad[0] else None
        gw = sum_to(g_prod * x, w.shape) + 2 * w * g_sq if ctx.needs_input_grad[1] else None
        return gx, gw

    @staticmethod
    def jvp(ctx, x_t, w_t):
        x, w = ctx.saved_tensors
        return x_t * w + x * w_t, 2 * w * w_t

    @staticmethod
    def vmap(info, in_dims, x, w):
        x_bdim, w_bdim = in_dims
        xb, wb = broadcast_front((x, w), in_dims)
        prod, sq = ScaleAndSquare.apply(xb, wb)
        if w_bdim is None:
            return (prod, sq), (0, None)  # w*w never saw the batch
        # broadcast_front padded w under its batch dim: drop the padding again.
        return (prod, sq.reshape(sq.shape[0], *w.movedim(w_bdim, 0).shape[1:])), (0, 0)


def scale_square_samples(seed: int, dtype: torch.dtype, device: str) -> list[Sample]:
    m = Maker(seed, dtype, device)
    return [
        Sample((m.randn(5), m.randn(5)), "same-shape"),
        Sample((m.randn(4, 5), m.randn(5)), "broadcast"),
        Sample((m.randn(4, 6, 5), m.randn(6, 1)), "broadcast-3d"),
    ]


# --- RowSumWithCount: a non-differentiable float output that no slice changes -------------


class RowSumWithCount(torch.autograd.Function):
    """(x.sum(-1), n) where n = x.shape[-1] as a 0-d float tensor (non-differentiable)."""

    @staticmethod
    def forward(x):
        return x.sum(-1), torch.tensor(float(x.shape[-1]), dtype=x.dtype, device=x.device)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.mark_non_differentiable(output[1])
        ctx.shape = inputs[0].shape

    @staticmethod
    def backward(ctx, grad, _grad_n):
        return grad.unsqueeze(-1).expand(ctx.shape)

    @staticmethod
    def jvp(ctx, x_t):
        return x_t.sum(-1), None

    @staticmethod
    def vmap(info, in_dims, x):
        x = x.movedim(in_dims[0], 0)
        if x.dim() == 1:  # per-slice 0-d is not a valid sample; keep the rule total anyway
            x = x.unsqueeze(-1)
        total, n = RowSumWithCount.apply(x)
        return (total, n), (0, None)


def row_samples(seed: int, dtype: torch.dtype, device: str) -> list[Sample]:
    m = Maker(seed, dtype, device)
    return [
        Sample((m.randn(5),), "1d"),
        Sample((m.randn(4, 6),), "2d"),
        Sample((m.randn(4, 1, 5),), "3d"),
    ]


# --- randomness: a hand-written rule that honours info.randomness, and a generated one ----


class RandomMask(torch.autograd.Function):
    """Inverted dropout: (x * keep / (1 - p), keep) with keep drawn from torch's global RNG;
    ``keep`` is a non-differentiable float output."""

    @staticmethod
    def forward(x, p):
        keep = (torch.rand(x.shape, dtype=torch.float64, device=x.device) >= p).to(x.dtype)
        return x * keep / (1 - p), keep

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.mark_non_differentiable(output[1])
        ctx.save_for_backward(output[1])
        ctx.save_for_forward(output[1])
        ctx.p = inputs[1]

    @staticmethod
    def backward(ctx, grad, _grad_keep):
        (keep,) = ctx.saved_tensors
        return grad * keep / (1 - ctx.p), None

    @staticmethod
    def jvp(ctx, x_t, _p):
        (keep,) = ctx.saved_tensors
        return x_t * keep / (1 - ctx.p), None

    @staticmethod
    def vmap(info, in_dims, x, p):
        if info.randomness == "error":
            raise RuntimeError(
                "RandomMask draws random numbers: call vmap with randomness='same' or 'different'"
            )
        x = x.movedim(in_dims[0], 0)
        if info.randomness == "same":
            # One draw with the per-slice shape, shared by every slice. (Returning ``keep``
            # unbatched with out_dim None would be valid, but torch 2.13 mishandles an
            # unbatched output under out_dims != 0: see RowSumWithCount.)
            keep = (torch.rand(x.shape[1:], dtype=torch.float64, device=x.device) >= p).to(x.dtype)
            # (keep + zeros_like(x), not keep.expand: under nested vmap the outer level
            # must see a batched tensor too.)
            return (x * keep / (1 - p), keep + torch.zeros_like(x)), (0, 0)
        keep = (torch.rand(x.shape, dtype=torch.float64, device=x.device) >= p).to(x.dtype)
        return (x * keep / (1 - p), keep), (0, 0)


class NoiseGenerated(torch.autograd.Function):
    """x + scale * N(0, 1) noise (torch.randn_like); torch's generated rule handles randomness."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x, scale):
        return x + scale * torch.randn_like(x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def backward(ctx, grad):
        return grad, None

    @staticmethod
    def jvp(ctx, x_t, _scale):
        return x_t


def random_samples(seed: int, dtype: torch.dtype, device: str) -> list[Sample]:
    m = Maker(seed, dtype, device)
    return [
        Sample((m.randn(5), 0.5), "1d"),
        Sample((m.randn(4, 6), 0.25), "2d"),
        Sample((m.randn(4, 1, 5), 0.5), "3d"),
    ]


def entries() -> list[Entry]:
    return [
        entry(
            "ScaleAndSquare",
            ScaleAndSquare,
            scale_square_samples,
            tags=(
                "op:elementwise",
                "op:binary",
                "op:broadcast",
                "inputs:several",
                "outputs:tuple",
                "saved:inputs",
                "saved:for-forward",
                "ctx:needs_input_grad",
                "backend:torch",
                "vmap:rule",
                "vmap:composed",
                "vmap:none-out-dim",
            ),
            description="out_dim None for w*w when only x is batched",
            # its double backward is checked (and passes) here: a raise under it on a
            # backend (TwoTensor's forward-over-reverse torch bug) is then an expected
            # failure with its plain-torch repro, not a refusal the Function never claimed
            claims=("double_backward",),
        ),
        entry(
            "RowSumWithCount",
            RowSumWithCount,
            row_samples,
            tags=(
                "op:reduction",
                "inputs:one-tensor",
                "outputs:tuple",
                "outputs:nondiff-float",
                "ctx:mark_non_differentiable",
                "saved:non-tensor",
                "backend:torch",
                "vmap:rule",
                "vmap:composed",
                "vmap:none-out-dim",
            ),
            nondiff_outputs=(1,),
        ),
        entry(
            "RandomMask",
            RandomMask,
            random_samples,
            tags=(
                "op:elementwise",
                "op:random",
                "inputs:one-tensor",
                "inputs:python-float",
                "outputs:tuple",
                "outputs:nondiff-float",
                "ctx:mark_non_differentiable",
                "saved:outputs",
                "backend:torch",
                "vmap:rule",
                "vmap:randomness",
            ),
            nondiff_outputs=(1,),
            randomness=True,
            description="dropout; the rule raises for 'error', shares one draw for 'same'",
        ),
        entry(
            "NoiseGenerated",
            NoiseGenerated,
            random_samples,
            tags=(
                "op:elementwise",
                "op:random",
                "inputs:one-tensor",
                "inputs:python-float",
                "outputs:one-tensor",
                "backend:torch",
                "vmap:generated",
                "vmap:randomness",
            ),
            randomness=True,
        ),
    ]
