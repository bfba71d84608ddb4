"""Three transforms: ``vmap_of_vjp_of_vjp`` and ``vmap_of_jvp_of_vjp``.

PyTorch's ``test_vmapvjpvjp`` and ``test_vmapjvpvjp`` vmap a second-order function of the
primals and two groups of extra arguments. Here alike:

* ``vmap_of_vjp_of_vjp``: ``g(x, c, w) = (J(x)^T c, d<J(x)^T c, w>/d(x, c))``, the first-order
  grads and the double backward, vmapped over the primals ``x``, the cotangents ``c`` and the
  outer cotangents ``w`` (shaped like the primals' grads).
* ``vmap_of_jvp_of_vjp``: ``torch.func.jvp`` of ``(x, c) -> J(x)^T c`` with tangents ``t``
  (on the primals and on the cotangents), vmapped over ``x``, ``c`` and ``t``.

Plans (``GroupsPlan``, ``harness.plans.composite``): the Function's units at None, 0 or -1
and each group of extras as one more unit at None or 0, in a strength-2 covering array (exhaustive under the cap): every
pair of positions of two arguments, of an argument and a group, or of the two groups occurs
in some plan. Interior batch dims and out_dims other than 0 are left to the vmap and
two-level checks, which cover them. Ids read ``in_dims=(0,),cotangents=None,outer_cotangents=0``.

References are loops of per-slice eager two-level computations, never torch.func:
``torch.autograd.grad`` twice with ``create_graph=True`` (double backward), and
``torch.autograd.forward_ad`` dual tensors through ``torch.autograd.grad``
(forward-over-reverse). A ``gradient="custom"`` entry's forward-over-reverse passes when it
matches either that or eager double backward's ``J_g t`` (as ``jvp_of_vjp`` decides).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import torch

from harness.checks import noise
from harness.checks.autodiff import (
    first_reason,
    needs_backward,
    needs_double_backward,
    needs_jvp,
    with_fixed_rng,
)
from harness.checks.autodiff_refs import (
    DiffView,
    Findings,
    Watch,
    attempt,
    is_custom,
    random_like,
    restricted,
    sample_view,
)
from harness.checks.catalogue import (
    CaseContext,
    CheckSpec,
    ReferenceRaised,
    needs_vmap,
    register,
)
from harness.checks.composites import reference_raised, refuse_unbatched_inplace_tangent
from harness.checks.forward_outputs import note_left_out
from harness.checks.references import grad_where_connected
from harness.checks.second_order import eager_forward_over_reverse_both, first_order_vjp
from harness.plans.batching import as_tuple, concrete_out_dims, loop_reference, vmapped
from harness.plans.composite import GroupsPlan, WithExtras, groups_plans
from harness.plans.slices import build_batched_args

LOOP_DOUBLE_BACKWARD = (
    "loop of per-slice eager double backward (torch.autograd.grad twice, create_graph=True)"
)
LOOP_FORWARD_OVER_REVERSE = (
    "loop of per-slice eager forward-over-reverse (torch.autograd.forward_ad over "
    "torch.autograd.grad)"
)
LOOP_DOUBLE_BACKWARD_JVP = (
    "loop of per-slice eager double backward's J_g t (torch.autograd.grad three times, "
    "gradient=custom)"
)


def _extras(
    ctx: CaseContext, groups: Sequence[tuple[str, Sequence[torch.Tensor]]]
) -> Callable[[tuple[int, ...]], list[torch.Tensor]]:
    """Each slice's extras: every group drawn from its own generator (kind, slice path)."""

    def make(key: tuple[int, ...]) -> list[torch.Tensor]:
        out: list[torch.Tensor] = []
        for kind, likes in groups:
            out.extend(random_like(ctx.generator(kind, key), likes))
        return out

    return make


def _per_slice_view(view: DiffView, args: Sequence[Any]) -> DiffView:
    return dataclasses.replace(view, args=tuple(args))


def run_groups(
    ctx: CaseContext,
    check: str,
    groups: Sequence[tuple[str, Sequence[torch.Tensor]]],
    actual_fn: Callable[..., tuple[Any, ...]],
    references: Sequence[tuple[str, Callable[..., tuple[Any, ...]]]],
    names: Sequence[str],
    sides: str,
    meaning: str,
) -> str:
    """vmap ``actual_fn`` over the arguments and the groups of extras as the plan batches them,
    against a loop of the first reference in ``references`` that it matches (the message
    names every reference tried when it matches none). Returns the reference's name."""
    plan = ctx.plan
    assert isinstance(plan, GroupsPlan)
    full = plan.combined([len(likes) for _, likes in groups])
    source = WithExtras(ctx.slices, _extras(ctx, groups))
    label = f"{check} {plan.id}"
    n = len(ctx.sample.args)
    tried: list[Findings] = []
    actual: tuple[Any, ...] | None = None
    contract = Findings.of(ctx)
    for ref_name, reference_fn in references:
        try:
            expected, returned_tuple = loop_reference(reference_fn, full, source)  # type: ignore[arg-type]
        except Exception as exc:
            raise ReferenceRaised(
                reference_raised(ctx, label, full, source, actual_fn, ref_name, meaning, exc)
            ) from exc
        if actual is None:
            out_dims = concrete_out_dims(full, expected, returned_tuple)
            batched = build_batched_args(full, source)  # type: ignore[arg-type]
            watch = Watch()
            offsets = [n]
            for _, likes in groups:
                offsets.append(offsets[-1] + len(likes))
            for i, a in enumerate(batched):
                if i < n:
                    watch.add(f"input {i}", a)
                else:
                    g = next(k for k in range(len(groups)) if i < offsets[k + 1])
                    watch.add(f"batched {groups[g][0]} {i - offsets[g]}", a)
            vf = vmapped(actual_fn, full, out_dims, randomness=ctx.vmap_randomness)
            actual = as_tuple(attempt(label, vf, *batched))
            watch.verify(label, contract, "the Function must leave its inputs and extras unchanged")
            if len(actual) != len(expected):
                contract.add(f"{label}: {len(actual)} results, reference {len(expected)}")
            contract.raise_if_any()
        found = Findings.of(ctx)
        compared = [
            (f"{label}: {nm}, {sides} vs {ref_name} (reference)", a, e)
            for nm, a, e in zip(names, actual, expected)
        ]
        for text, a, e in compared:
            found.compare(text, a, e, e.dtype)
        noise.recheck_findings(
            ctx,
            found,
            0,
            compared,
            lambda fn=reference_fn: noise.wide_loop(fn, full, source),  # type: ignore[misc]
        )
        if not found.problems:
            if len(references) > 1:
                ctx.notes.append(f"{check}: matches {ref_name}")
            return ref_name
        tried.append(found)
    merged = Findings.of(ctx)
    for found in tried:
        merged.problems.extend(found.problems[:2])
        for text in found.hints:
            merged.hint(text)
    if len(references) > 1:
        merged.hint(
            "gradient=custom: matches none of the references ("
            + "; ".join(name for name, _ in references)
            + ")"
        )
    merged.raise_if_any()
    return ""


# --- per-slice eager references ------------------------------------------------------------


def _split(view: DiffView, a: Sequence[Any]) -> tuple[tuple[Any, ...], list[Any], list[Any]]:
    n, k = len(view.args), len(view.outs)
    return tuple(a[:n]), list(a[n : n + k]), list(a[n + k :])


def eager_first_and_double_backward(
    view: DiffView, xs: Sequence[torch.Tensor], cots: Sequence[torch.Tensor], w: Sequence[Any]
) -> tuple[torch.Tensor, ...]:
    """``J(x)^T c`` and ``d<J(x)^T c, w>/d(x, c)`` by plain eager autograd (no torch.func)."""
    n = len(view.diff)
    with torch.enable_grad():
        leaves = [p.detach().clone().requires_grad_(True) for p in (*xs, *cots)]
        call = list(view.args)
        for i, x in zip(view.diff, leaves):
            call[i] = x
        outs = restricted(view.entry, call, view.diff, view.outs)(*leaves[:n])
        first = grad_where_connected(outs, leaves[:n], leaves[n:], create_graph=True)
        if first is None:
            zeros = tuple(torch.zeros_like(x) for x in leaves)
            return (*zeros[:n], *zeros)
        second = grad_where_connected(first, leaves, [t.detach().clone() for t in w])
        if second is None:
            second = tuple(torch.zeros_like(x) for x in leaves)
    return (*(g.detach() for g in first), *(g.detach() for g in second))


def eager_double_backward_jvp_both(
    view: DiffView, primals: Sequence[torch.Tensor], tangents: Sequence[torch.Tensor]
) -> tuple[torch.Tensor, ...]:
    """``J(x)^T c`` and ``J_g t`` by eager reverse mode only (the double-vjp trick)."""
    n = len(view.diff)
    with torch.enable_grad():
        leaves = [p.detach().clone().requires_grad_(True) for p in primals]
        call = list(view.args)
        for i, x in zip(view.diff, leaves):
            call[i] = x
        outs = restricted(view.entry, call, view.diff, view.outs)(*leaves[:n])
        first = grad_where_connected(outs, leaves[:n], leaves[n:], create_graph=True)
        if first is None:
            zeros = tuple(torch.zeros_like(x) for x in leaves[:n])
            return (*zeros, *zeros)
        us = [torch.zeros_like(g).requires_grad_(True) for g in first]
        vs = grad_where_connected(first, leaves, us, create_graph=True)
        out = None
        if vs is not None:
            out = grad_where_connected(vs, us, [t.detach().clone() for t in tangents])
        if out is None:
            out = tuple(torch.zeros_like(g) for g in first)
    return (*(g.detach() for g in first), *(o.detach() for o in out))


# --- the checks ------------------------------------------------------------------------------


def run_vmap_of_vjp_of_vjp(ctx: CaseContext) -> str:
    view = sample_view(ctx)
    xs = view.primals()
    cots = [view.outputs[j] for j in view.outs]

    def actual(*a: Any) -> tuple[Any, ...]:
        args, c, w = _split(view, a)
        g = first_order_vjp(view, args)
        pulled = torch.func.vjp(g, *(args[i] for i in view.diff), *c)
        first, vjp2 = pulled[0], pulled[1]
        return (*first, *vjp2(tuple(w)))

    def reference(*a: Any) -> tuple[Any, ...]:
        args, c, w = _split(view, a)
        v = _per_slice_view(view, args)
        return eager_first_and_double_backward(v, v.primals(), c, w)

    names = (
        [f"grad of input {i}" for i in view.diff]
        + [f"d<vjp, w>/d input {i}" for i in view.diff]
        + [f"d<vjp, w>/d the cotangent of {view.out_name(j)}" for j in view.outs]
    )
    note_left_out(ctx, "vmap_of_vjp_of_vjp", view)
    return run_groups(
        ctx,
        "vmap_of_vjp_of_vjp",
        [("cotangents", cots), ("outer_cotangents", xs)],
        actual,
        [(LOOP_DOUBLE_BACKWARD, reference)],
        names,
        "vmap of torch.func.vjp of torch.func.vjp (the Function's double backward under vmap)",
        "Eager double backward of the Function (torch.autograd.grad with create_graph=True, "
        "then torch.autograd.grad) fails for its users",
    )


def run_vmap_of_jvp_of_vjp(ctx: CaseContext) -> str:
    view = sample_view(ctx)
    entry = ctx.entry
    n = len(view.args)
    plan = ctx.plan
    assert isinstance(plan, GroupsPlan)
    refuse_unbatched_inplace_tangent(
        entry, n, ((lv, dims[1]) for lv, dims in zip(plan.levels, plan.extra_dims))
    )
    xs = view.primals()
    cots = [view.outputs[j] for j in view.outs]

    def actual(*a: Any) -> tuple[Any, ...]:
        args, c, t = _split(view, a)
        g = first_order_vjp(view, args)
        pushed = torch.func.jvp(g, (*(args[i] for i in view.diff), *c), tuple(t))
        return (*pushed[0], *pushed[1])

    def by(
        fn: Callable[[DiffView, Sequence[Any], Sequence[Any]], tuple[Any, ...]],
    ) -> Callable[..., tuple[Any, ...]]:
        def reference(*a: Any) -> tuple[Any, ...]:
            args, c, t = _split(view, a)
            v = _per_slice_view(view, args)
            return fn(v, [*v.primals(), *c], t)

        return reference

    references = [(LOOP_FORWARD_OVER_REVERSE, by(eager_forward_over_reverse_both))]
    if is_custom(entry):
        references.append((LOOP_DOUBLE_BACKWARD_JVP, by(eager_double_backward_jvp_both)))
    names = [f"grad of input {i}" for i in view.diff] + [
        f"tangent of the grad of input {i}" for i in view.diff
    ]
    note_left_out(ctx, "vmap_of_jvp_of_vjp", view)
    return run_groups(
        ctx,
        "vmap_of_jvp_of_vjp",
        [("cotangents", cots), ("tangents", [*xs, *cots])],
        actual,
        references,
        names,
        "vmap of torch.func.jvp of torch.func.vjp (forward-over-reverse under vmap)",
        "Eager forward-over-reverse of the Function (torch.autograd.forward_ad dual tensors "
        "through torch.autograd.grad) fails for its users",
    )


register(
    CheckSpec(
        "vmap_of_vjp_of_vjp",
        with_fixed_rng(run_vmap_of_vjp_of_vjp),
        groups_plans(("cotangents", "outer_cotangents")),
        first_reason(needs_vmap, needs_backward, needs_double_backward),
        "autodiff",
        LOOP_DOUBLE_BACKWARD,
        "vmap over (primals, cotangents, outer cotangents) of torch.func.vjp of torch.func.vjp "
        "(PyTorch's test_vmapvjpvjp): first-order grads and the double backward, pairwise "
        "plans over the primals and both cotangent levels",
    )
)
register(
    CheckSpec(
        "vmap_of_jvp_of_vjp",
        with_fixed_rng(run_vmap_of_jvp_of_vjp),
        groups_plans(("cotangents", "tangents")),
        first_reason(needs_vmap, needs_backward, needs_jvp, needs_double_backward),
        "autodiff",
        LOOP_FORWARD_OVER_REVERSE,
        "vmap over (primals, cotangents, tangents) of torch.func.jvp of torch.func.vjp "
        "(PyTorch's test_vmapjvpvjp), pairwise plans over the primals, cotangents and tangents",
    )
)
