"""Fixtures for what torch.func cannot differentiate, each next to a planted wrong twin.

* Legacy Functions (``forward(ctx, ...)``, no ``setup_context``), as most real libraries
  still write them: checked by the eager checks (``eager_vjp``, ``eager_jvp``,
  ``eager_vjp_of_vjp``) and the eager in-place/view rules.
* ``torch.library`` custom ops with ``register_autograd``, one whose backward forgets its
  scalar argument.
* Correct Functions that meet torch 2.13's vmap un-batching bug (an output returned with
  out_dim None under out_dims != 0), and wrong twins whose rule really is wrong.
* A Function with a float parameter table that is never differentiated (``nondiff_args``).

Every twin subclasses (or copies) its correct Function and changes one thing.
"""

from __future__ import annotations

import torch
from torch import Tensor

# --- samples ---------------------------------------------------------------------------------


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def three_samples(seed: int) -> list[tuple[Tensor, Tensor, Tensor]]:
    g = _gen(seed)
    x, w, b = (torch.randn(4, 5, generator=g, dtype=torch.float64) for _ in range(3))
    return [(x, w, 0.5 * b)]


def one_sample(seed: int) -> list[tuple[Tensor]]:
    g = _gen(seed)
    return [(torch.randn(4, 5, generator=g, dtype=torch.float64),)]


def away_from_one_samples(seed: int) -> list[tuple[Tensor, Tensor]]:
    """Values in +-[0.1, 0.9] and +-[1.1, 2] (off the clip edge of 1), and a scale."""
    g = _gen(seed)
    mag = torch.where(
        torch.rand(4, 5, generator=g, dtype=torch.float64) < 0.5,
        0.1 + 0.8 * torch.rand(4, 5, generator=g, dtype=torch.float64),
        1.1 + 0.9 * torch.rand(4, 5, generator=g, dtype=torch.float64),
    )
    sign = torch.where(torch.rand(4, 5, generator=g, dtype=torch.float64) < 0.5, -1.0, 1.0)
    return [(mag * sign, 1.5 + torch.rand(4, 5, generator=g, dtype=torch.float64))]


# --- a legacy Function: tanh(x * w) + b --------------------------------------------------------


class LegacyScaledTanh(torch.autograd.Function):
    """tanh(x * w) + b in the legacy style: ctx in forward, saved inputs, a jvp."""

    @staticmethod
    def forward(ctx, x, w, b):
        ctx.save_for_backward(x, w)
        ctx.save_for_forward(x, w)
        return torch.tanh(x * w) + b

    @staticmethod
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        d = 1 - torch.tanh(x * w) ** 2
        return g * d * w, g * d * x, g

    @staticmethod
    def jvp(ctx, x_t, w_t, b_t):
        x, w = ctx.saved_tensors
        d = 1 - torch.tanh(x * w) ** 2
        return d * (x_t * w + x * w_t) + b_t


class LegacyBackwardForgetsW(LegacyScaledTanh):
    """Twin: the grad of x forgets the factor w (a slip in the chain rule)."""

    @staticmethod
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        d = 1 - torch.tanh(x * w) ** 2
        return g * d, g * d * x, g


class LegacyJvpForgetsWTangent(LegacyScaledTanh):
    """Twin: the jvp drops the tangent of w."""

    @staticmethod
    def jvp(ctx, x_t, w_t, b_t):
        x, w = ctx.saved_tensors
        d = 1 - torch.tanh(x * w) ** 2
        return d * x_t * w + b_t


class LegacyDetachedBackward(LegacyScaledTanh):
    """Twin: backward detaches what it saved, so its own derivative (second order) is lost
    while the first order stays right."""

    @staticmethod
    def backward(ctx, g):
        x, w = (t.detach() for t in ctx.saved_tensors)
        d = 1 - torch.tanh(x * w) ** 2
        return g * d * w, g * d * x, g


class LegacyAssumesContiguous(LegacyScaledTanh):
    """Twin: backward reads grad_output as if it were contiguous (as a C extension that
    takes ``data_ptr`` would), which is wrong for a strided grad_output."""

    @staticmethod
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        g = g.as_strided(g.shape, torch.empty(g.shape).stride())
        d = 1 - torch.tanh(x * w) ** 2
        return g * d * w, g * d * x, g


# --- the in-place rule: a legacy Function that scales its input in place -----------------------


class LegacyScaleInPlace(torch.autograd.Function):
    """x.mul_(2), declared: ctx.mark_dirty(x) and returns x itself (inplace_args=(0,))."""

    @staticmethod
    def forward(ctx, x):
        x.mul_(2)
        ctx.mark_dirty(x)
        return x

    @staticmethod
    def backward(ctx, g):
        return 2 * g


class LegacyScaleInPlaceUndeclared(torch.autograd.Function):
    """Twin: modifies its input in place without saying so (no mark_dirty, a new output)."""

    @staticmethod
    def forward(ctx, x):
        x.mul_(2)
        return x.clone()

    @staticmethod
    def backward(ctx, g):
        return 2 * g


# --- gradient="custom": a clipped straight-through estimator with a scale -------------------


class LegacyClippedSTE(torch.autograd.Function):
    """sign(x) * s with the straight-through gradient g * s * (|x| <= 1) for x (a deliberate,
    custom gradient) and the true one for s."""

    @staticmethod
    def forward(ctx, x, s):
        ctx.save_for_backward(x, s)
        return torch.sign(x) * s

    @staticmethod
    def backward(ctx, g):
        x, s = ctx.saved_tensors
        gx = g * s * (x.abs() <= 1).to(g.dtype) if ctx.needs_input_grad[0] else None
        gs = g * torch.sign(x) if ctx.needs_input_grad[1] else None
        return gx, gs


class LegacyClippedSTEDropsClipAlone(LegacyClippedSTE):
    """Twin: when only x needs a gradient, a shortcut forgets the clip (the gradient then
    depends on which inputs are differentiated)."""

    @staticmethod
    def backward(ctx, g):
        x, s = ctx.saved_tensors
        if not ctx.needs_input_grad[1]:
            return g * s, None
        return g * s * (x.abs() <= 1).to(g.dtype), g * torch.sign(x)


class LegacySTEFromOutput(torch.autograd.Function):
    """gradient="custom" whose backward reads its saved output: its eager second order has
    no independent reference (``unsupported``, saying why)."""

    @staticmethod
    def forward(ctx, x):
        y = torch.tanh(x)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        return g * (1 - y * y).clamp(min=0.5)


# --- custom ops: a registered backward that forgets its scalar argument ------------------------


def _define_ops() -> dict[str, object]:
    from torch._library.custom_ops import OPDEFS

    ops: dict[str, object] = {}
    for name, forgets in (("scaled_mul", False), ("scaled_mul_forgets_alpha", True)):
        if f"afdbtest::{name}" in OPDEFS:  # this file imported again under another name
            ops[name] = OPDEFS[f"afdbtest::{name}"]
            continue

        @torch.library.custom_op(f"afdbtest::{name}", mutates_args=())
        def op(x: Tensor, y: Tensor, alpha: float) -> Tensor:
            return alpha * x * y

        @op.register_fake
        def _(x, y, alpha):
            return torch.empty_like(x)

        def setup(ctx, inputs, output):
            x, y, alpha = inputs
            ctx.save_for_backward(x, y)
            ctx.alpha = alpha

        def backward(ctx, grad, _forgets=forgets):
            x, y = ctx.saved_tensors
            alpha = 1.0 if _forgets else ctx.alpha
            return alpha * grad * y, alpha * grad * x, None

        op.register_autograd(backward, setup_context=setup)

        def rule(info, in_dims, x, y, alpha, _op=op):
            x = x.movedim(in_dims[0], 0) if in_dims[0] is not None else x
            y = y.movedim(in_dims[1], 0) if in_dims[1] is not None else y
            if in_dims[0] is None:
                x = x.expand(y.shape)
            if in_dims[1] is None:
                y = y.expand(x.shape)
            return _op(x, y, alpha), 0

        op.register_vmap(rule)
        ops[name] = op
    return ops


OPS = _define_ops()
ScaledMulOp = OPS["scaled_mul"]
ScaledMulForgetsAlpha = OPS["scaled_mul_forgets_alpha"]


def mul_samples(seed: int) -> list[tuple[Tensor, Tensor, float]]:
    g = _gen(seed)
    return [
        (
            torch.randn(4, 5, generator=g, dtype=torch.float64),
            torch.randn(4, 5, generator=g, dtype=torch.float64),
            2.5,
        )
    ]


# --- torch's un-batching bug: correct Functions that meet it, and wrong twins ----------------


class CountedSum(torch.autograd.Function):
    """(x.sum(-1), n) with n = x.shape[-1] as a float tensor; the rule returns n unbatched
    (out_dim None), which is right: n is the same for every slice."""

    @staticmethod
    def forward(x):
        return x.sum(-1), torch.full((3,), float(x.shape[-1]), dtype=x.dtype)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.mark_non_differentiable(output[1])
        ctx.shape = inputs[0].shape

    @staticmethod
    def backward(ctx, grad, _grad_n):
        return grad.unsqueeze(-1).expand(ctx.shape)

    @staticmethod
    def vmap(info, in_dims, x):
        x = x.movedim(in_dims[0], 0)
        total, n = CountedSum.apply(x)
        return (total, n), (0, None)


class CountedSumWrongNone(CountedSum):
    """Twin: the rule returns slice 0's sum unbatched too (out_dim None for a batched output)."""

    @staticmethod
    def vmap(info, in_dims, x):
        x = x.movedim(in_dims[0], 0)
        total, n = CountedSum.apply(x)
        return (total[0], n), (None, None)


def counted_samples(seed: int) -> list[tuple[Tensor]]:
    g = _gen(seed)
    return [(torch.randn(4, 6, generator=g, dtype=torch.float64),)]


class DropoutLike(torch.autograd.Function):
    """Inverted dropout (x * keep / (1 - p), keep), keep drawn from the global RNG. Under
    randomness='same' the rule draws one mask and returns it unbatched (out_dim None), as a
    user would: correct, and hit by torch's un-batching bug for out_dims != 0."""

    @staticmethod
    def forward(x, p):
        keep = (torch.rand(x.shape, dtype=x.dtype) >= p).to(x.dtype)
        return x * keep / (1 - p), keep

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.mark_non_differentiable(output[1])
        ctx.save_for_backward(output[1])
        ctx.p = inputs[1]

    @staticmethod
    def backward(ctx, grad, _grad_keep):
        (keep,) = ctx.saved_tensors
        return grad * keep / (1 - ctx.p), None

    @staticmethod
    def vmap(info, in_dims, x, p):
        if info.randomness == "error":
            raise RuntimeError(
                "DropoutLike draws random numbers: use randomness='same'/'different'"
            )
        x = x.movedim(in_dims[0], 0)
        shape = x.shape[1:] if info.randomness == "same" else x.shape
        keep = (torch.rand(shape, dtype=x.dtype) >= p).to(x.dtype)
        if info.randomness == "same":
            return (x * keep / (1 - p), keep), (0, None)
        return (x * keep / (1 - p), keep), (0, 0)


class DropoutLikeSharedOutput(DropoutLike):
    """Twin: under 'same' it also returns the *output* of slice 0 unbatched (out_dim None),
    though each slice's x differs."""

    @staticmethod
    def vmap(info, in_dims, x, p):
        if info.randomness == "error":
            raise RuntimeError(
                "DropoutLike draws random numbers: use randomness='same'/'different'"
            )
        x = x.movedim(in_dims[0], 0)
        shape = x.shape[1:] if info.randomness == "same" else x.shape
        keep = (torch.rand(shape, dtype=x.dtype) >= p).to(x.dtype)
        if info.randomness == "same":
            return (x[0] * keep / (1 - p), keep), (None, None)
        return (x * keep / (1 - p), keep), (0, 0)


def dropout_samples(seed: int) -> list[tuple[Tensor, float]]:
    g = _gen(seed)
    return [(torch.randn(4, 6, generator=g, dtype=torch.float64), 0.25)]


# --- nondiff_args: a float parameter table that is a constant for its users --------------------


class PairEnergy(torch.autograd.Function):
    """sum_j table[j] * x_j ** 2 per row, ``table`` a float parameter table: backward gives
    no gradient for it (None), as real force-field code does."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x, table):
        return (table * x * x).sum(-1)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs)

    @staticmethod
    def backward(ctx, grad):
        x, table = ctx.saved_tensors
        return 2 * table * x * grad.unsqueeze(-1), None


class PairEnergyWrongGrad(PairEnergy):
    """Twin: the grad of x forgets the factor 2."""

    @staticmethod
    def backward(ctx, grad):
        x, table = ctx.saved_tensors
        return table * x * grad.unsqueeze(-1), None


def pair_samples(seed: int) -> list[tuple[Tensor, Tensor]]:
    g = _gen(seed)
    return [
        (
            torch.randn(4, 5, generator=g, dtype=torch.float64),
            0.5 + torch.rand(5, generator=g, dtype=torch.float64),
        )
    ]
