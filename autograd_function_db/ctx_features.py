"""ctx features: mark_dirty (in place), once_differentiable, set_materialize_grads(False) with
None gradients and tangents, an optional None argument."""

from __future__ import annotations

import torch
from torch.autograd.function import once_differentiable

from ._sampling import Maker
from ._util import broadcast_front, sum_to
from .entry import Entry, Sample, entry

# --- Scale_: in place through torch, mark_dirty ------------------------------------------


class Scale_(torch.autograd.Function):
    """x.mul_(s) for a Python float s; the input is modified and returned."""

    @staticmethod
    def forward(x, s):
        return x.mul_(s)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.mark_dirty(inputs[0])
        ctx.s = inputs[1]

    @staticmethod
    def backward(ctx, grad):
        return grad * ctx.s, None

    @staticmethod
    def jvp(ctx, x_t, _s):
        return x_t.mul_(ctx.s)

    @staticmethod
    def vmap(info, in_dims, x, s):
        Scale_.apply(x, s)
        return x, in_dims[0]


def scale_samples(seed: int, dtype: torch.dtype, device: str) -> list[Sample]:
    m = Maker(seed, dtype, device)
    return [
        Sample((m.randn(), 1.5), "0d"),
        Sample((m.randn(5), -0.5), "1d"),
        Sample((m.randn(4, 6), 2.0), "2d"),
    ]


# --- once_differentiable ------------------------------------------------------------------


class OnceDiffExp(torch.autograd.Function):
    @staticmethod
    def forward(x):
        return torch.exp(x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(output)
        ctx.save_for_forward(output)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        return grad * y

    @staticmethod
    def jvp(ctx, x_t):
        (y,) = ctx.saved_tensors
        return x_t * y

    @staticmethod
    def vmap(info, in_dims, x):
        return OnceDiffExp.apply(x), in_dims[0]


class OnceDiffSoftplus(torch.autograd.Function):
    """log(1 + exp(x)); setup_context saves the intermediate sigmoid(x), which is computed
    outside the graph, so backward is once_differentiable."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x):
        return torch.nn.functional.softplus(x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        sig = torch.sigmoid(inputs[0])
        ctx.save_for_backward(sig)
        ctx.save_for_forward(sig)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        (sig,) = ctx.saved_tensors
        return grad * sig

    @staticmethod
    def jvp(ctx, x_t):
        (sig,) = ctx.saved_tensors
        return x_t * sig


def unary_samples(seed: int, dtype: torch.dtype, device: str) -> list[Sample]:
    m = Maker(seed, dtype, device)
    return [Sample((m.randn(),), "0d"), Sample((m.randn(5),), "1d"), Sample((m.randn(4, 6),), "2d")]


# --- set_materialize_grads(False): backward and jvp see None --------------------------------


class SinCosLazy(torch.autograd.Function):
    """(sin x, cos x); an unused output's gradient reaches backward as None."""

    @staticmethod
    def forward(x):
        return torch.sin(x), torch.cos(x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(*output)
        ctx.save_for_forward(*output)

    @staticmethod
    def backward(ctx, g_sin, g_cos):
        s, c = ctx.saved_tensors
        grad = None
        if g_sin is not None:
            grad = g_sin * c
        if g_cos is not None:
            term = -g_cos * s
            grad = term if grad is None else grad + term
        return grad

    @staticmethod
    def jvp(ctx, x_t):
        s, c = ctx.saved_tensors
        if x_t is None:
            return None, None
        return x_t * c, -x_t * s

    @staticmethod
    def vmap(info, in_dims, x):
        return SinCosLazy.apply(x), (in_dims[0], in_dims[0])


class ProdSumLazy(torch.autograd.Function):
    """(x * y, x + y) with broadcasting; ``y`` may be None (then (x, x)), and gradients and
    tangents that are not there arrive as None."""

    @staticmethod
    def forward(x, y=None):
        if y is None:
            return x.clone(), x.clone()
        return x * y, x + y

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.set_materialize_grads(False)
        x, *rest = inputs
        y = rest[0] if rest else None
        ctx.save_for_backward(x, y)
        ctx.save_for_forward(x, y)

    @staticmethod
    def backward(ctx, g_prod, g_sum):
        x, y = ctx.saved_tensors
        if y is None:
            parts = [g for g in (g_prod, g_sum) if g is not None]
            return (sum(parts[1:], parts[0]) if parts else None), None
        gx = gy = None
        if g_prod is not None:
            gx, gy = g_prod * y, g_prod * x
        if g_sum is not None:
            gx = g_sum if gx is None else gx + g_sum
            gy = g_sum if gy is None else gy + g_sum
        gx = sum_to(gx, x.shape) if gx is not None and ctx.needs_input_grad[0] else None
        gy = sum_to(gy, y.shape) if gy is not None and ctx.needs_input_grad[1] else None
        return gx, gy

    @staticmethod
    def jvp(ctx, x_t, y_t=None):
        x, y = ctx.saved_tensors
        if y is None:
            return (x_t, x_t) if x_t is None else (x_t.clone(), x_t.clone())
        prod = sums = None
        if x_t is not None:
            prod, sums = x_t * y, x_t
        if y_t is not None:
            prod = x * y_t if prod is None else prod + x * y_t
            sums = y_t if sums is None else sums + y_t
        if sums is not None and sums.shape != torch.broadcast_shapes(x.shape, y.shape):
            sums = sums.expand(torch.broadcast_shapes(x.shape, y.shape)).clone()
            prod = prod.expand(sums.shape).clone()
        return prod, sums

    @staticmethod
    def vmap(info, in_dims, x, y=None):
        if y is None:
            return ProdSumLazy.apply(x.movedim(in_dims[0], 0)), (0, 0)
        return ProdSumLazy.apply(*broadcast_front((x, y), in_dims)), (0, 0)


def prod_sum_samples(seed: int, dtype: torch.dtype, device: str) -> list[Sample]:
    m = Maker(seed, dtype, device)
    return [
        Sample((m.randn(5), m.randn(5)), "same-shape"),
        Sample((m.randn(4, 5), m.randn(5)), "broadcast"),
        Sample((m.randn(4, 5), None), "none"),
        Sample((m.randn(6),), "default-none"),
    ]


def entries() -> list[Entry]:
    return [
        entry(
            "Scale_",
            Scale_,
            scale_samples,
            tags=(
                "op:elementwise",
                "op:unary",
                "inputs:one-tensor",
                "inputs:python-float",
                "outputs:input-as-is",
                "ctx:mark_dirty",
                "saved:non-tensor",
                "backend:torch",
                "vmap:rule",
                "vmap:composed",
            ),
            inplace_args=(0,),
            description="x.mul_(s) in place, mark_dirty",
        ),
        entry(
            "OnceDiffExp",
            OnceDiffExp,
            unary_samples,
            tags=(
                "op:elementwise",
                "op:unary",
                "inputs:one-tensor",
                "outputs:one-tensor",
                "ctx:once_differentiable",
                "saved:outputs",
                "saved:for-forward",
                "backend:torch",
                "vmap:rule",
                "vmap:composed",
            ),
        ),
        entry(
            "OnceDiffSoftplus",
            OnceDiffSoftplus,
            unary_samples,
            tags=(
                "op:elementwise",
                "op:unary",
                "inputs:one-tensor",
                "outputs:one-tensor",
                "ctx:once_differentiable",
                "saved:intermediates",
                "saved:for-forward",
                "backend:torch",
                "vmap:generated",
            ),
            description="saves sigmoid(x) computed in setup_context (outside the graph)",
        ),
        entry(
            "SinCosLazy",
            SinCosLazy,
            unary_samples,
            tags=(
                "op:elementwise",
                "op:unary",
                "inputs:one-tensor",
                "outputs:tuple",
                "ctx:materialize_grads_false",
                "saved:outputs",
                "saved:for-forward",
                "backend:torch",
                "vmap:rule",
                "vmap:composed",
            ),
        ),
        entry(
            "ProdSumLazy",
            ProdSumLazy,
            prod_sum_samples,
            tags=(
                "op:elementwise",
                "op:binary",
                "op:broadcast",
                "inputs:several",
                "inputs:none-arg",
                "inputs:default-args",
                "outputs:tuple",
                "ctx:materialize_grads_false",
                "ctx:needs_input_grad",
                "saved:inputs",
                "saved:for-forward",
                "backend:torch",
                "vmap:rule",
                "vmap:composed",
            ),
        ),
    ]
