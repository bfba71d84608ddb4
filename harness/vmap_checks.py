"""The vmap checks: one level, nested levels and chunked, each against a loop over slices."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from .batching import (
    ArgLayout,
    Plan,
    as_tuple,
    build_batched_args,
    chunked_plans,
    concrete_out_dims,
    loop_reference,
    nested_plans,
    normalize_dim,
    single_level_plans,
    vmapped,
)
from .checks import CaseContext, CheckFailure, CheckSpec, needs_vmap, register
from .compare import compare_outputs
from .options import Options


def _diagnose(actual: Any, expected: Any, plan: Plan, out_dim: Any) -> str:
    """A guess at what the rule got wrong, from the shapes and values alone."""
    if not (isinstance(actual, torch.Tensor) and isinstance(expected, torch.Tensor)):
        return ""
    sizes = {lv.batch_size for lv in plan.levels}
    if actual.shape != expected.shape:
        if sorted(actual.shape) == sorted(expected.shape):
            return "same sizes in another order: the batch dim is probably at the wrong position"
        if actual.dim() == expected.dim() - 1:
            return "one dim short: a batched output was probably returned with out_dim None"
        missing = [s for s in sizes if s in expected.shape and s not in actual.shape]
        if missing:
            return f"batch size {missing[0]} missing from the result: the rule returned a wrong batch size"
        return ""
    if len(plan.levels) == 1 and isinstance(out_dim, int) and actual.dim() > 0:
        d = normalize_dim(out_dim, actual.dim())
        slices = actual.movedim(d, 0)
        ref = expected.movedim(d, 0)
        if (
            slices.shape[0] > 1
            and all(torch.equal(slices[0], s) for s in slices[1:])
            and not all(torch.equal(ref[0], s) for s in ref[1:])
        ):
            return "every batch slice of the result is equal: the rule seems to compute one slice and expand it"
    return ""


def inputs_snapshot(args: Sequence[Any], skip: Sequence[int]) -> list[tuple[int, torch.Tensor]]:
    return [
        (i, a.detach().clone())
        for i, a in enumerate(args)
        if isinstance(a, torch.Tensor) and i not in skip
    ]


def assert_inputs_unchanged(
    name: str, args: Sequence[Any], snapshot: list[tuple[int, torch.Tensor]]
) -> None:
    for i, before in snapshot:
        after = args[i]
        if after.shape != before.shape or not torch.equal(after.detach(), before):
            raise CheckFailure(
                f"{name}: input {i} was modified by the call; declare it with inplace_args "
                "(and mark_dirty) if that is intended"
            )


def run_vmap_plan(ctx: CaseContext, name: str) -> str | None:
    """Run the plan's vmap(s) and compare with the loop reference; raise CheckFailure on mismatch."""
    plan = ctx.plan
    assert plan is not None
    fn = ctx.entry.call
    expected, returned_tuple = loop_reference(fn, plan, ctx.slices)
    out_dims = concrete_out_dims(plan, expected, returned_tuple)
    args = build_batched_args(plan, ctx.slices)
    snapshot = inputs_snapshot(args, ctx.entry.caps.inplace_args)
    actual_raw = vmapped(fn, plan, out_dims)(*args)
    assert_inputs_unchanged(f"{name} {plan.id}", args, snapshot)
    actual = as_tuple(actual_raw)
    if isinstance(actual_raw, (tuple, list)) != returned_tuple:
        raise CheckFailure(
            f"{name} {plan.id}: vmap returned {'a tuple' if not returned_tuple else 'one tensor'}, "
            f"the per-slice call returned {'a tuple' if returned_tuple else 'one tensor'}"
        )
    rtol, atol = ctx.tolerances
    problems = compare_outputs(
        actual,
        expected,
        rtol=rtol,
        atol=atol,
        label=f"{name} {plan.id} (Function under vmap vs loop over slices)",
    )
    if problems:
        k = next(
            (
                i
                for i, (a, e) in enumerate(zip(actual, expected))
                if not (isinstance(a, torch.Tensor) and isinstance(e, torch.Tensor))
                or a.shape != e.shape
                or not torch.allclose(
                    a.detach().to(e.dtype), e, rtol=rtol, atol=atol, equal_nan=True
                )
            ),
            0,
        )
        level_out = out_dims[0]
        out_dim = level_out[k] if isinstance(level_out, tuple) else level_out
        hint = _diagnose(actual[k] if k < len(actual) else None, expected[k], plan, out_dim)
        raise CheckFailure("; ".join(problems) + (f" -- {hint}" if hint else ""))
    return "loop over slices"


def _single(layout: ArgLayout, options: Options) -> list[Plan | None]:
    plans: list[Plan | None] = []
    for b in options.batch_sizes:
        plans.extend(single_level_plans(layout, b, cap=options.plan_cap, seed=options.seed))
    return plans


def _nested(layout: ArgLayout, options: Options) -> list[Plan | None]:
    return list(nested_plans(layout, options.nested_batch_sizes))


def _chunked(layout: ArgLayout, options: Options) -> list[Plan | None]:
    return list(chunked_plans(layout, *options.chunk))


register(
    CheckSpec(
        "vmap",
        lambda ctx: run_vmap_plan(ctx, "vmap"),
        _single,
        needs_vmap,
        "vmap",
        "loop over slices",
        "vmap(f, in_dims, out_dims) for every plan",
    )
)
register(
    CheckSpec(
        "vmap_nested",
        lambda ctx: run_vmap_plan(ctx, "vmap_nested"),
        _nested,
        needs_vmap,
        "vmap",
        "nested loop over slices",
        "vmap(vmap(f)) with a different batch size and in_dims per level",
    )
)
register(
    CheckSpec(
        "vmap_chunked",
        lambda ctx: run_vmap_plan(ctx, "vmap_chunked"),
        _chunked,
        needs_vmap,
        "vmap",
        "loop over slices",
        "vmap(f, chunk_size=k): the rule sees batches smaller than the whole",
    )
)
