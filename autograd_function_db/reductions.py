"""Reductions over an int ``dim`` with ``keepdim``: sum, logsumexp, max (with indices), var+mean."""

from __future__ import annotations

import numpy as np
import torch

from ._sampling import Maker
from ._util import from_numpy, to_numpy, wrap_dim
from .entry import Entry, Sample, entry


def _unsqueeze_like(g: torch.Tensor, dim: int, keepdim: bool) -> torch.Tensor:
    """A reduced tensor with its reduced dim back (size 1), ready to broadcast against the input."""
    return g if keepdim else g.unsqueeze(dim)


def _rule_dim(x: torch.Tensor, bdim: int, dim: int) -> tuple[torch.Tensor, int]:
    """Batch dim to 0 and the reduced dim shifted past it."""
    x = x.movedim(bdim, 0)
    return x, wrap_dim(dim, x.dim() - 1) + 1


# --- SumDim: torch, default keepdim, only non-tensors saved -------------------------------


class SumDim(torch.autograd.Function):
    @staticmethod
    def forward(x, dim, keepdim=False):
        return x.sum(dim, keepdim=keepdim)

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, dim, *rest = inputs
        ctx.shape = x.shape
        ctx.dim = wrap_dim(dim, x.dim())
        ctx.keepdim = bool(rest[0]) if rest else False

    @staticmethod
    def backward(ctx, grad):
        if not ctx.shape:
            return grad, None, None
        return _unsqueeze_like(grad, ctx.dim, ctx.keepdim).expand(ctx.shape), None, None

    @staticmethod
    def jvp(ctx, x_t, _dim, _keepdim=None):
        return SumDim.apply(x_t, ctx.dim, ctx.keepdim) if ctx.shape else x_t

    @staticmethod
    def vmap(info, in_dims, x, dim, keepdim=False):
        x, dim = _rule_dim(x, in_dims[0], dim)
        return SumDim.apply(x, dim, keepdim), 0


def reduce_samples(seed: int, dtype: torch.dtype, device: str) -> list[Sample]:
    m = Maker(seed, dtype, device)
    return [
        Sample((m.randn(5), 0), "1d-default-keepdim"),
        Sample((m.randn(4, 5), 1, True), "2d-dim1-keepdim"),
        Sample((m.randn(4, 5), -2, False), "2d-dim-2"),
        Sample((m.randn(4, 5, 6), 1, True), "3d-dim1-keepdim"),
    ]


# --- NumpyLogSumExp / LogSumExpGenerated: saves input and output ---------------------------


class _LogSumExpRule:
    """setup_context, backward and jvp of NumpyLogSumExp and LogSumExpGenerated (a mixin)."""

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, dim, keepdim = inputs
        ctx.save_for_backward(x, output)
        ctx.save_for_forward(x, output)
        ctx.dim, ctx.keepdim = wrap_dim(dim, x.dim()), keepdim

    @staticmethod
    def backward(ctx, grad):
        x, out = ctx.saved_tensors
        d, k = ctx.dim, ctx.keepdim
        return _unsqueeze_like(grad, d, k) * torch.exp(x - _unsqueeze_like(out, d, k)), None, None

    @staticmethod
    def jvp(ctx, x_t, _dim, _keepdim):
        x, out = ctx.saved_tensors
        weights = torch.exp(x - _unsqueeze_like(out, ctx.dim, ctx.keepdim))
        return (x_t * weights).sum(ctx.dim, keepdim=ctx.keepdim)


class NumpyLogSumExp(_LogSumExpRule, torch.autograd.Function):
    @staticmethod
    def forward(x, dim, keepdim):
        xn = to_numpy(x)
        top = np.max(xn, axis=dim, keepdims=True)
        out = np.log(np.sum(np.exp(xn - top), axis=dim, keepdims=True)) + top
        return from_numpy(out if keepdim else np.squeeze(out, axis=dim), x)

    @staticmethod
    def vmap(info, in_dims, x, dim, keepdim):
        x, dim = _rule_dim(x, in_dims[0], dim)
        return NumpyLogSumExp.apply(x, dim, keepdim), 0


class LogSumExpGenerated(_LogSumExpRule, torch.autograd.Function):
    generate_vmap_rule = True

    @staticmethod
    def forward(x, dim, keepdim):
        return torch.logsumexp(x, dim, keepdim=keepdim)


def lse_samples(seed: int, dtype: torch.dtype, device: str) -> list[Sample]:
    m = Maker(seed, dtype, device)
    return [
        Sample((m.randn(5), 0, False), "1d"),
        Sample((m.randn(4, 5), 1, True), "2d-dim1-keepdim"),
        Sample((m.randn(4, 5, 6), -1, False), "3d-dim-1"),
    ]


# --- NumpyMax / MaxGenerated: values and non-differentiable int64 indices ------------------


class _MaxRule:
    """setup_context, backward and jvp of NumpyMax and MaxGenerated (a mixin)."""

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, dim, keepdim = inputs
        ctx.mark_non_differentiable(output[1])
        ctx.save_for_backward(output[1])
        ctx.save_for_forward(output[1])
        ctx.shape, ctx.dim, ctx.keepdim = x.shape, wrap_dim(dim, x.dim()), keepdim

    @staticmethod
    def backward(ctx, grad, _grad_idx):
        (idx,) = ctx.saved_tensors
        d, k = ctx.dim, ctx.keepdim
        g = _unsqueeze_like(grad, d, k)
        return g.new_zeros(ctx.shape).scatter(d, _unsqueeze_like(idx, d, k), g), None, None

    @staticmethod
    def jvp(ctx, x_t, _dim, _keepdim):
        (idx,) = ctx.saved_tensors
        d, k = ctx.dim, ctx.keepdim
        out = torch.take_along_dim(x_t, _unsqueeze_like(idx, d, k), d)
        return (out if k else out.squeeze(d)), None


class NumpyMax(_MaxRule, torch.autograd.Function):
    @staticmethod
    def forward(x, dim, keepdim):
        xn = to_numpy(x)
        idx = np.argmax(xn, axis=dim, keepdims=True)
        values = np.take_along_axis(xn, idx, axis=dim)
        if not keepdim:
            values, idx = np.squeeze(values, axis=dim), np.squeeze(idx, axis=dim)
        return from_numpy(values, x), from_numpy(idx.astype(np.int64), x)

    @staticmethod
    def vmap(info, in_dims, x, dim, keepdim):
        x, dim = _rule_dim(x, in_dims[0], dim)
        return NumpyMax.apply(x, dim, keepdim), (0, 0)


class MaxGenerated(_MaxRule, torch.autograd.Function):
    generate_vmap_rule = True

    @staticmethod
    def forward(x, dim, keepdim):
        values, idx = torch.max(x, dim, keepdim=keepdim)
        return values, idx


def max_samples(seed: int, dtype: torch.dtype, device: str) -> list[Sample]:
    m = Maker(seed, dtype, device)
    return [
        Sample((m.spread(5), 0, False), "1d"),
        Sample((m.spread(4, 5), 1, True), "2d-dim1-keepdim"),
        Sample((m.spread(4, 5, 6), -3, False), "3d-dim-3"),
    ]


# --- VarMean: the mean is an intermediate returned as an output so backward may use it -----


class VarMean(torch.autograd.Function):
    """(population variance, mean) along ``dim``; backward adds the mean's own gradient."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x, dim):
        mean = x.mean(dim, keepdim=True)
        var = ((x - mean) ** 2).mean(dim)
        return var, mean.squeeze(dim)

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, dim = inputs
        ctx.dim = wrap_dim(dim, x.dim())
        ctx.save_for_backward(x, output[1])
        ctx.save_for_forward(x, output[1])

    @staticmethod
    def backward(ctx, grad_var, grad_mean):
        x, mean = ctx.saved_tensors
        d, n = ctx.dim, x.shape[ctx.dim]
        centred = x - mean.unsqueeze(d)
        return (grad_var.unsqueeze(d) * 2 * centred + grad_mean.unsqueeze(d)) / n, None

    @staticmethod
    def jvp(ctx, x_t, _dim):
        x, mean = ctx.saved_tensors
        d = ctx.dim
        centred = x - mean.unsqueeze(d)
        return (2 * centred * x_t).mean(d), x_t.mean(d)


def var_samples(seed: int, dtype: torch.dtype, device: str) -> list[Sample]:
    m = Maker(seed, dtype, device)
    return [
        Sample((m.randn(5), 0), "1d"),
        Sample((m.randn(4, 5), -1), "2d-dim-1"),
        Sample((m.randn(4, 5, 6), 1), "3d-dim1"),
    ]


def entries() -> list[Entry]:
    red = ("op:reduction", "inputs:one-tensor", "inputs:python-int")
    return [
        entry(
            "SumDim",
            SumDim,
            reduce_samples,
            tags=(
                *red,
                "inputs:default-args",
                "inputs:python-bool",
                "outputs:one-tensor",
                "saved:non-tensor",
                "backend:torch",
                "vmap:rule",
                "vmap:composed",
            ),
            description="sum over dim with a default keepdim; saves only shapes and ints",
        ),
        entry(
            "NumpyLogSumExp",
            NumpyLogSumExp,
            lse_samples,
            tags=(
                *red,
                "inputs:python-bool",
                "outputs:one-tensor",
                "saved:inputs",
                "saved:outputs",
                "saved:for-forward",
                "backend:numpy",
                "vmap:rule",
                "vmap:composed",
            ),
        ),
        entry(
            "LogSumExpGenerated",
            LogSumExpGenerated,
            lse_samples,
            tags=(
                *red,
                "inputs:python-bool",
                "outputs:one-tensor",
                "saved:inputs",
                "saved:outputs",
                "backend:torch",
                "vmap:generated",
            ),
        ),
        entry(
            "NumpyMax",
            NumpyMax,
            max_samples,
            tags=(
                *red,
                "op:indexing",
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
        entry(
            "MaxGenerated",
            MaxGenerated,
            max_samples,
            tags=(
                *red,
                "op:indexing",
                "outputs:tuple",
                "outputs:nondiff-int",
                "ctx:mark_non_differentiable",
                "saved:outputs",
                "backend:torch",
                "vmap:generated",
            ),
            nondiff_outputs=(1,),
        ),
        entry(
            "VarMean",
            VarMean,
            var_samples,
            tags=(
                *red,
                "outputs:tuple",
                "saved:inputs",
                "saved:intermediates",
                "saved:for-forward",
                "backend:torch",
                "vmap:generated",
            ),
            description="the mean is an intermediate returned as an output; backward adds its gradient",
        ),
    ]
