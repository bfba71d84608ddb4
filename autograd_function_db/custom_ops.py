"""torch.library custom ops as entries: ops defined with ``torch.library.custom_op`` plus
``register_fake``, ``register_autograd`` and ``register_vmap`` (and one deliberately without a
vmap rule, which torch runs through its slow per-slice fallback).

Ops live in the ``afdb`` namespace and are defined once, when this module is imported.
Custom ops have no forward-mode AD (``register_autograd`` gives reverse mode only), so
their entries do not claim ``jvp``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor

from ._sampling import Maker
from ._util import broadcast_front, from_numpy, sum_to, to_numpy, wrap_dim
from .entry import VMAP_NONE, VMAP_RULE, Capabilities, Entry, Sample, SampleFn, Tolerances

NAMESPACE = "afdb"


def _define() -> dict[str, Any]:
    ops: dict[str, Any] = {}

    # --- afdb::numpy_sin: unary, numpy-backed ------------------------------------------
    @torch.library.custom_op(f"{NAMESPACE}::numpy_sin", mutates_args=())
    def numpy_sin(x: Tensor) -> Tensor:
        return from_numpy(np.sin(to_numpy(x)), x)

    @numpy_sin.register_fake
    def _(x):
        return torch.empty_like(x)

    def sin_setup(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    def sin_backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * torch.cos(x)

    numpy_sin.register_autograd(sin_backward, setup_context=sin_setup)

    def sin_vmap(info, in_dims, x):
        return numpy_sin(x), in_dims[0]

    numpy_sin.register_vmap(sin_vmap)
    ops["numpy_sin"] = numpy_sin

    # --- afdb::scaled_mul: binary with broadcasting and a float --------------------------
    @torch.library.custom_op(f"{NAMESPACE}::scaled_mul", mutates_args=())
    def scaled_mul(x: Tensor, y: Tensor, alpha: float) -> Tensor:
        return alpha * x * y

    @scaled_mul.register_fake
    def _(x, y, alpha):
        return torch.empty(torch.broadcast_shapes(x.shape, y.shape), dtype=x.dtype, device=x.device)

    def mul_setup(ctx, inputs, output):
        x, y, alpha = inputs
        ctx.save_for_backward(x, y)
        ctx.alpha = alpha

    def mul_backward(ctx, grad):
        x, y = ctx.saved_tensors
        gx = sum_to(ctx.alpha * grad * y, x.shape) if ctx.needs_input_grad[0] else None
        gy = sum_to(ctx.alpha * grad * x, y.shape) if ctx.needs_input_grad[1] else None
        return gx, gy, None

    scaled_mul.register_autograd(mul_backward, setup_context=mul_setup)

    def mul_vmap(info, in_dims, x, y, alpha):
        x, y = broadcast_front((x, y), in_dims[:2])
        return scaled_mul(x, y, alpha), 0

    scaled_mul.register_vmap(mul_vmap)
    ops["scaled_mul"] = scaled_mul

    # --- afdb::numpy_cumsum: an int dim, numpy-backed -----------------------------------
    @torch.library.custom_op(f"{NAMESPACE}::numpy_cumsum", mutates_args=())
    def numpy_cumsum(x: Tensor, dim: int) -> Tensor:
        return from_numpy(np.cumsum(to_numpy(x), axis=dim), x)

    @numpy_cumsum.register_fake
    def _(x, dim):
        return torch.empty_like(x)

    def cumsum_setup(ctx, inputs, output):
        ctx.dim = wrap_dim(inputs[1], inputs[0].dim())

    def cumsum_backward(ctx, grad):
        # Reverse cumulative sum, written with torch ops so it composes with every transform.
        return grad.flip(ctx.dim).cumsum(ctx.dim).flip(ctx.dim), None

    numpy_cumsum.register_autograd(cumsum_backward, setup_context=cumsum_setup)

    def cumsum_vmap(info, in_dims, x, dim):
        x = x.movedim(in_dims[0], 0)
        return numpy_cumsum(x, wrap_dim(dim, x.dim() - 1) + 1), 0

    numpy_cumsum.register_vmap(cumsum_vmap)
    ops["numpy_cumsum"] = numpy_cumsum

    # --- afdb::numpy_sort: several outputs, a non-differentiable int64 one ---------------
    @torch.library.custom_op(f"{NAMESPACE}::numpy_sort", mutates_args=())
    def numpy_sort(x: Tensor, dim: int) -> tuple[Tensor, Tensor]:
        xn = to_numpy(x)
        idx = np.argsort(xn, axis=dim, kind="stable")
        return from_numpy(np.take_along_axis(xn, idx, axis=dim), x), from_numpy(idx, x)

    @numpy_sort.register_fake
    def _(x, dim):
        return torch.empty_like(x), torch.empty_like(x, dtype=torch.int64)

    def sort_setup(ctx, inputs, output):
        ctx.mark_non_differentiable(output[1])
        ctx.save_for_backward(output[1])
        ctx.dim = wrap_dim(inputs[1], inputs[0].dim())

    def sort_backward(ctx, grad, _grad_idx):
        (idx,) = ctx.saved_tensors
        return torch.zeros_like(grad).scatter(ctx.dim, idx, grad), None

    numpy_sort.register_autograd(sort_backward, setup_context=sort_setup)

    def sort_vmap(info, in_dims, x, dim):
        x = x.movedim(in_dims[0], 0)
        return numpy_sort(x, wrap_dim(dim, x.dim() - 1) + 1), (0, 0)

    numpy_sort.register_vmap(sort_vmap)
    ops["numpy_sort"] = numpy_sort

    # --- afdb::random_mask: the vmap rule honours info.randomness -----------------------
    @torch.library.custom_op(f"{NAMESPACE}::random_mask", mutates_args=())
    def random_mask(x: Tensor, p: float) -> tuple[Tensor, Tensor]:
        keep = (torch.rand(x.shape, dtype=x.dtype, device=x.device) >= p).to(x.dtype)
        return x * keep / (1 - p), keep

    @random_mask.register_fake
    def _(x, p):
        return torch.empty_like(x), torch.empty_like(x)

    def mask_setup(ctx, inputs, output):
        ctx.mark_non_differentiable(output[1])
        ctx.save_for_backward(output[1])
        ctx.p = inputs[1]

    def mask_backward(ctx, grad, _grad_keep):
        (keep,) = ctx.saved_tensors
        return grad * keep / (1 - ctx.p), None

    random_mask.register_autograd(mask_backward, setup_context=mask_setup)

    def mask_vmap(info, in_dims, x, p):
        if info.randomness == "error":
            raise RuntimeError(
                f"{NAMESPACE}::random_mask draws random numbers: use vmap(randomness='same' "
                "or 'different')"
            )
        x = x.movedim(in_dims[0], 0)
        shape = x.shape[1:] if info.randomness == "same" else x.shape
        keep = (torch.rand(shape, dtype=x.dtype, device=x.device) >= p).to(x.dtype)
        return (x * keep / (1 - p), keep + torch.zeros_like(x)), (0, 0)

    random_mask.register_vmap(mask_vmap)
    ops["random_mask"] = random_mask

    # --- afdb::numpy_tanh_no_vmap: no vmap rule, so vmap falls back to a slow loop --------
    @torch.library.custom_op(f"{NAMESPACE}::numpy_tanh_no_vmap", mutates_args=())
    def numpy_tanh_no_vmap(x: Tensor) -> Tensor:
        return from_numpy(np.tanh(to_numpy(x)), x)

    @numpy_tanh_no_vmap.register_fake
    def _(x):
        return torch.empty_like(x)

    def tanh_setup(ctx, inputs, output):
        ctx.save_for_backward(output)

    def tanh_backward(ctx, grad):
        (y,) = ctx.saved_tensors
        return grad * (1 - y * y)

    numpy_tanh_no_vmap.register_autograd(tanh_backward, setup_context=tanh_setup)
    ops["numpy_tanh_no_vmap"] = numpy_tanh_no_vmap
    return ops


#: The ops, defined once per process (importing this module twice must not redefine them).
OPS: dict[str, Any] = _define()


def custom_op_entry(
    name: str,
    op: Any,
    samples: SampleFn,
    *,
    tags: Sequence[str],
    vmap_rule: bool = True,
    nondiff_outputs: tuple[int, ...] = (),
    randomness: bool = False,
    tolerances: Tolerances | None = None,
    description: str = "",
) -> Entry:
    """An Entry for a custom op: capabilities are stated, not read from a class."""
    caps = Capabilities(
        vmap=VMAP_RULE if vmap_rule else VMAP_NONE,
        jvp=False,
        backward=True,
        double_backward=True,
        setup_context=True,
        nondiff_outputs=nondiff_outputs,
        randomness=randomness,
    )
    return Entry(
        name=name,
        function=op,
        samples=samples,
        op=op,
        caps=caps,
        tolerances=tolerances or Tolerances(),
        tags=frozenset(("custom-op", *tags)),
        custom_op=op,
        description=description or f"torch.library custom op {op._qualname}",
    )


def unary_samples(seed: int, dtype: torch.dtype, device: str) -> list[Sample]:
    m = Maker(seed, dtype, device)
    return [Sample((m.randn(),), "0d"), Sample((m.randn(5),), "1d"), Sample((m.randn(4, 6),), "2d")]


def mul_samples(seed: int, dtype: torch.dtype, device: str) -> list[Sample]:
    m = Maker(seed, dtype, device)
    return [
        Sample((m.randn(5), m.randn(5), 0.5), "same-shape"),
        Sample((m.randn(4, 5), m.randn(5), -2.0), "broadcast-rank"),
        Sample((m.randn(6, 1), m.randn(1, 4), 1.5), "broadcast-both"),
    ]


def dim_samples(seed: int, dtype: torch.dtype, device: str) -> list[Sample]:
    m = Maker(seed, dtype, device)
    return [
        Sample((m.spread(5), 0), "1d"),
        Sample((m.spread(4, 5), 1), "2d-dim1"),
        Sample((m.spread(4, 5, 6), -3), "3d-dim-3"),
    ]


def mask_samples(seed: int, dtype: torch.dtype, device: str) -> list[Sample]:
    m = Maker(seed, dtype, device)
    return [Sample((m.randn(5), 0.5), "1d"), Sample((m.randn(4, 6), 0.25), "2d")]


def entries() -> list[Entry]:
    return [
        custom_op_entry(
            "CustomNumpySin",
            OPS["numpy_sin"],
            unary_samples,
            tags=(
                "op:elementwise",
                "op:unary",
                "inputs:one-tensor",
                "outputs:one-tensor",
                "saved:inputs",
                "backend:numpy",
                "vmap:rule",
                "vmap:composed",
            ),
        ),
        custom_op_entry(
            "CustomScaledMul",
            OPS["scaled_mul"],
            mul_samples,
            tags=(
                "op:elementwise",
                "op:binary",
                "op:broadcast",
                "inputs:several",
                "inputs:python-float",
                "outputs:one-tensor",
                "saved:inputs",
                "saved:non-tensor",
                "ctx:needs_input_grad",
                "backend:torch",
                "vmap:rule",
                "vmap:composed",
            ),
        ),
        custom_op_entry(
            "CustomNumpyCumsum",
            OPS["numpy_cumsum"],
            dim_samples,
            tags=(
                "op:reduction",
                "inputs:one-tensor",
                "inputs:python-int",
                "outputs:one-tensor",
                "saved:non-tensor",
                "backend:numpy",
                "vmap:rule",
                "vmap:composed",
            ),
            description="cumulative sum (a scan) along an int dim",
        ),
        custom_op_entry(
            "CustomNumpySort",
            OPS["numpy_sort"],
            dim_samples,
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
        custom_op_entry(
            "CustomRandomMask",
            OPS["random_mask"],
            mask_samples,
            tags=(
                "op:elementwise",
                "op:random",
                "inputs:one-tensor",
                "inputs:python-float",
                "outputs:tuple",
                "outputs:nondiff-float",
                "saved:outputs",
                "backend:torch",
                "vmap:rule",
                "vmap:randomness",
            ),
            nondiff_outputs=(1,),
            randomness=True,
        ),
        custom_op_entry(
            "CustomNoVmapTanh",
            OPS["numpy_tanh_no_vmap"],
            unary_samples,
            tags=(
                "op:elementwise",
                "op:unary",
                "inputs:one-tensor",
                "outputs:one-tensor",
                "saved:outputs",
                "backend:numpy",
                "vmap:fallback",
            ),
            vmap_rule=False,
            description="no register_vmap: vmap falls back to a slow loop (reported, not passed)",
        ),
    ]
