"""The loop reference over slices and the vmapped call, for one plan.

``loop_reference`` calls the Function once per slice (nested loops for nested
plans) and stacks the outputs at each level's out_dims: it never runs a vmap rule,
so it is the reference for one. ``vmapped`` wraps a function in one
``torch.func.vmap`` per level of the plan.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from harness.plans.plan import MID, Plan, normalize_dim, resolve_out_dim
from harness.plans.pytrees import output_leaves
from harness.plans.slices import PlanSlices, SliceSource

#: A Function's outputs as the flat tuple of their pytree leaves (``pytrees.output_leaves``).
as_tuple = output_leaves


def loop_reference(
    fn: Callable[..., Any], plan: Plan, slices: SliceSource, *, reuse: Any = None
) -> tuple[tuple[Any, ...], bool]:
    """Call ``fn`` once per slice (nested loops for nested plans), stack at each level's out_dims.

    Returns the stacked outputs as a tuple and whether ``fn`` returned a tuple.
    This never touches the Function's vmap rule: it is the reference for it.

    ``reuse``: a key naming what ``fn`` calls (a ``FlatCall`` of the Function's eager
    call, deterministic on its inputs): the per-slice outputs are then kept by the slice
    source and reused by the sample's later plans that read the same slices, so a slice
    is called once per sample, not once per plan. ``fn`` is left remembering the output
    structure of its last slice, as if it had been called.
    """
    returned_tuple = False
    reader = PlanSlices.of(plan, slices)
    levels = plan.levels
    innermost = len(levels) - 1
    kept = reader.outputs_kept(reuse) if reuse is not None and levels else None
    remembered, remember = getattr(fn, "remembered", None), getattr(fn, "remember", None)
    last: Any = None  # the reused structure of the last slice (``FlatCall.remember``)

    def call(path: tuple[int, ...]) -> tuple[Any, ...]:
        nonlocal returned_tuple
        out = fn(*reader.call_args(path))
        returned_tuple = isinstance(out, (tuple, list))
        detached = []
        for o in output_leaves(out):
            detached.append(o.detach() if isinstance(o, torch.Tensor) else o)
        return tuple(detached)

    call_args = reader.call_args
    is_tensor = torch.Tensor

    def run(level: int, path: tuple[int, ...]) -> tuple[Any, ...]:
        nonlocal returned_tuple, last
        lv = levels[level]
        if level == innermost:  # the slices themselves (``call`` inlined: no frame per slice)
            per_slice: list[tuple[Any, ...]] = []
            for i in range(lv.batch_size):
                if kept is not None:  # kept by an earlier plan of the sample, or now
                    p = (*path, i)
                    hit = kept.get(p)
                    if hit is None:
                        hit = kept[p] = (call(p), remembered() if remembered else None)
                    returned_tuple, last = True, hit[1]  # a reused ``fn`` returns a flat tuple
                    per_slice.append(hit[0])
                    continue
                out = fn(*call_args((*path, i)))
                if isinstance(out, is_tensor):  # one tensor (most Functions): no leaves call
                    returned_tuple = False
                    per_slice.append((out.detach(),))
                    continue
                returned_tuple = isinstance(out, (tuple, list))
                detached = []
                for o in output_leaves(out):
                    detached.append(o.detach() if isinstance(o, is_tensor) else o)
                per_slice.append(tuple(detached))
        else:
            per_slice = [run(level + 1, (*path, i)) for i in range(lv.batch_size)]
        return stack_slices(per_slice, lv.out_dims)

    outs = run(0, ()) if levels else call(())
    if kept is not None and remember is not None:
        remember(last)
    return outs, returned_tuple


def vmapped(
    fn: Callable[..., Any], plan: Plan, out_dims: Sequence[Any], randomness: str = "error"
) -> Callable[..., Any]:
    """``fn`` wrapped in one ``torch.func.vmap`` per level (outermost first in the plan).

    ``out_dims[k]`` is the concrete out_dims for level k (an int, or a tuple per output);
    ``randomness`` is passed to every level (torch's default, "error", unless a random
    entry is being checked).
    """
    wrapped = fn
    for k in reversed(range(len(plan.levels))):
        lv = plan.levels[k]
        wrapped = torch.func.vmap(
            wrapped,
            in_dims=lv.in_dims,
            out_dims=out_dims[k],
            chunk_size=lv.chunk_size,
            randomness=randomness,
        )
    return wrapped


def concrete_out_dims(plan: Plan, stacked: Sequence[Any], returned_tuple: bool) -> list[Any]:
    """Resolve each level's out_dims ("mid" -> ints per output) from the stacked reference.

    At level k (0 outermost) an output's per-slice rank is its stacked rank minus
    k + 1: it still carries the batch dims of the levels inside k.
    """
    result: list[Any] = []
    for k, lv in enumerate(plan.levels):
        if lv.out_dims != MID:
            result.append(lv.out_dims)
            continue
        dims = tuple(
            resolve_out_dim(MID, o.dim() - k - 1) if isinstance(o, torch.Tensor) else 0
            for o in stacked
        )
        result.append(dims if returned_tuple else dims[0])
    return result


def stack_slices(per_slice: Sequence[tuple[Any, ...]], out_dims: Any) -> tuple[Any, ...]:
    """Per-slice outputs stacked at ``out_dims`` (an int, or "mid" per output); a value
    that is not a tensor is the first slice's."""
    stacked = []
    for k, first in enumerate(per_slice[0]):
        if not isinstance(first, torch.Tensor):
            stacked.append(first)
            continue
        n = first.dim() + 1
        dim = out_dims if isinstance(out_dims, int) else resolve_out_dim(out_dims, n - 1)
        stacked.append(torch.stack([s[k] for s in per_slice], dim=normalize_dim(dim, n)))
    return tuple(stacked)
