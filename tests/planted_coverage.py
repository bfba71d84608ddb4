"""Planted bugs for the checks that close the gap with PyTorch's tests and opcheck, each next
to its correct twin (the same Function or op with the one mistake fixed).

* ``FrontBatchAssumedContiguousCube``: a vmap rule that skips ``.contiguous()`` when the
  batch dim is already at the front, then reads the buffer as if it were contiguous
  (only the non-contiguous plans of the vmap family see it).
* ``CubeInnerBackwardBug`` / ``CubeInnerJvpBug``: a cube whose backward calls a helper
  Function; the helper's own backward (or jvp) calls a third Function whose vmap rule
  uses the first slice of a batched argument. Only second-order derivatives under vmap
  run that rule: ``vmap_of_vjp_of_vjp`` (or ``vmap_of_jvp_of_vjp``) alone catches it.
* ``LegacyNumpyBackwardSin``: a legacy ``forward(ctx, x)`` Function (torch.func refuses it,
  so no transform check runs) whose backward goes through numpy, which batched gradients
  (``vmap`` over ``torch.autograd.grad``, ``is_grads_batched=True``) cannot enter.
* ``LogNdtrGenerated``: a generated vmap rule over ``torch.special.log_ndtr``, which has no
  batching rule in torch 2.13: right results, through torch's per-example fallback.
* Custom ops (namespace ``afdb_planted``): a fake kernel with the wrong shape, a kernel
  that mutates an input its schema does not declare mutable, autograd implemented inside
  the CPU kernel, and a backward through numpy (not traceable by torch.compile); the twin
  ``afdb_planted::good_sin`` passes every opcheck test.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor

from autograd_function_db._sampling import Maker
from autograd_function_db.entry import Sample
from autograd_function_db.numpy_ops import NumpyCube


def samples(seed: int, dtype: torch.dtype, device: str) -> list[Sample]:
    m = Maker(seed, dtype, device)
    return [Sample((m.randn(5),), "1d"), Sample((m.randn(4, 5),), "2d")]


# --- non-contiguous batched inputs --------------------------------------------------------


class FrontBatchAssumedContiguousCube(NumpyCube):
    """Moves (and makes contiguous) a batch dim that is not at the front; a batch already at
    the front is assumed contiguous and read from the raw buffer with unit strides."""

    @staticmethod
    def vmap(info, in_dims, x):
        d = in_dims[0]
        if d != 0:
            x = x.movedim(d, 0).contiguous()
        flat = x.as_strided((x.numel(),), (1,))  # right only for a contiguous x
        out, dx = FrontBatchAssumedContiguousCube.apply(flat.view(x.shape))
        return (out, dx), (0, 0)


# --- three transforms: a helper's rule only second order under vmap reaches ----------------


def _front(t: Tensor, d: int | None, size: int) -> Tensor:
    return t.movedim(d, 0) if d is not None else t.expand(size, *t.shape)


def _make_inner(first_slice_bug: bool) -> type:
    class InnerMul(torch.autograd.Function):
        """a * b (same shapes); its vmap rule is the only thing that differs."""

        @staticmethod
        def forward(a, b):
            return a * b

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.save_for_backward(*inputs)
            ctx.save_for_forward(*inputs)

        @staticmethod
        def backward(ctx, g):
            a, b = ctx.saved_tensors
            return g * b, g * a

        @staticmethod
        def jvp(ctx, ta, tb):
            a, b = ctx.saved_tensors
            return ta * b + a * tb

        @staticmethod
        def vmap(info, in_dims, a, b):
            da, db = in_dims
            a, b = _front(a, da, info.batch_size), _front(b, db, info.batch_size)
            if first_slice_bug and da is not None and db is not None:
                b = b[:1].expand_as(b)  # BUG: the first slice of b for every slice
            return InnerMul.apply(a, b), 0

    return InnerMul


def _make_mul(inner: type, in_backward: bool) -> type:
    good = _make_inner(False)
    back_inner = inner if in_backward else good
    jvp_inner = good if in_backward else inner

    class HelperMul(torch.autograd.Function):
        """a * b; its backward and jvp call InnerMul (one of them the planted one)."""

        generate_vmap_rule = True

        @staticmethod
        def forward(a, b):
            return a * b

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.save_for_backward(*inputs)
            ctx.save_for_forward(*inputs)

        @staticmethod
        def backward(ctx, g):
            a, b = ctx.saved_tensors
            return back_inner.apply(g, b), back_inner.apply(g, a)

        @staticmethod
        def jvp(ctx, ta, tb):
            a, b = ctx.saved_tensors
            return jvp_inner.apply(ta, b) + jvp_inner.apply(a, tb)

    return HelperMul


def _make_cube(name: str, helper: type) -> type:
    def forward(x):
        return x**3

    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])
        ctx.save_for_forward(inputs[0])

    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return helper.apply(g, 3 * x * x)

    def jvp(ctx, t):
        (x,) = ctx.saved_tensors
        return t * 3 * x * x

    return type(
        name,
        (torch.autograd.Function,),
        {
            "__doc__": "x**3; backward through a helper Function (generated vmap rule).",
            "generate_vmap_rule": True,
            "forward": staticmethod(forward),
            "setup_context": staticmethod(setup_context),
            "backward": staticmethod(backward),
            "jvp": staticmethod(jvp),
        },
    )


CubeInnerBackwardBug = _make_cube("CubeInnerBackwardBug", _make_mul(_make_inner(True), True))
CubeInnerJvpBug = _make_cube("CubeInnerJvpBug", _make_mul(_make_inner(True), False))
CubeViaHelpers = _make_cube("CubeViaHelpers", _make_mul(_make_inner(False), True))


# --- vmap over torch.autograd.grad -----------------------------------------------------------


class LegacyNumpyBackwardSin(torch.autograd.Function):
    """sin in the legacy style (forward(ctx, x), no vmap rule), backward computed in numpy."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.sin(x)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return torch.from_numpy(g.detach().cpu().numpy() * np.cos(x.detach().cpu().numpy()))


class LegacySin(torch.autograd.Function):
    """The same, with a backward in torch ops."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.sin(x)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * torch.cos(x)


# --- vmap fallback ---------------------------------------------------------------------------


class _LogNdtrRule:
    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0], output)

    @staticmethod
    def backward(ctx, g):
        x, y = ctx.saved_tensors
        return g * torch.exp(-0.5 * x * x - y) / math.sqrt(2 * math.pi)


class LogNdtrGenerated(_LogNdtrRule, torch.autograd.Function):
    """log of the normal CDF through torch.special.log_ndtr (no batching rule in torch 2.13)."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x):
        return torch.special.log_ndtr(x)


class LogNdtrBatched(_LogNdtrRule, torch.autograd.Function):
    """The same values through ops that have batching rules."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x):
        return torch.log(torch.special.ndtr(x))


# --- custom ops for opcheck ------------------------------------------------------------------

NAMESPACE = "afdb_planted"


def _sin_setup(ctx, inputs, output):
    ctx.save_for_backward(inputs[0])


def _sin_backward(ctx, grad):
    (x,) = ctx.saved_tensors
    return grad * torch.cos(x)


def _numpy_backward(ctx, grad):
    (x,) = ctx.saved_tensors
    return torch.from_numpy(grad.detach().numpy() * np.cos(x.detach().numpy()))


def _sin_kernel(x: Tensor) -> Tensor:
    return torch.sin(x)


def _mutating_kernel(x: Tensor) -> Tensor:
    x.sin_()  # BUG: mutates its input, which the schema does not declare mutable
    return x.clone()


def _define(name, kernel, fake, backward=_sin_backward):
    op = torch.library.custom_op(f"{NAMESPACE}::{name}", mutates_args=())(kernel)
    op.register_fake(fake)
    op.register_autograd(backward, setup_context=_sin_setup)
    op.register_vmap(lambda info, in_dims, x: (op(x), in_dims[0]))
    return op


good_sin = _define("good_sin", _sin_kernel, lambda x: torch.empty_like(x))
wrong_fake_shape = _define(
    "wrong_fake_shape",
    _sin_kernel,
    lambda x: x.new_empty((*x.shape[:-1], x.shape[-1] + 1)),  # BUG: one element too many
)
mutates_input = _define("mutates_input", _mutating_kernel, lambda x: torch.empty_like(x))
numpy_backward = _define(
    "numpy_backward", _sin_kernel, lambda x: torch.empty_like(x), backward=_numpy_backward
)


class _KernelSin(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.sin(x)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * torch.cos(x)


_LIB = torch.library.Library(NAMESPACE, "FRAGMENT")
_LIB.define("autograd_in_kernel(Tensor x) -> Tensor")
# BUG: autograd done inside the CPU kernel (an autograd.Function), not at an Autograd key.
_LIB.impl("autograd_in_kernel", lambda x: _KernelSin.apply(x), "CPU")
_LIB.impl("autograd_in_kernel", lambda x: torch.empty_like(x), "Meta")
autograd_in_kernel = torch.ops.afdb_planted.autograd_in_kernel


def op_samples(seed: int) -> list[tuple[Tensor]]:
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(4, 5, generator=g),)]
