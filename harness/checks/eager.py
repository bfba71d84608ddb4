"""The eager checks: what can be checked of a Function that torch.func cannot differentiate.

torch.func refuses a legacy Function (``forward(ctx, ...)`` without ``setup_context``) and,
in torch 2.13, a ``torch.library`` custom op's ``register_autograd`` (the autograd.Function
torch builds for it has no ``setup_context``). Their users differentiate them with eager
autograd, so that is what these checks hold to the suite's references:

* ``eager_vjp``: ``torch.autograd.grad`` (the Function's backward) with each differentiable
  input alone and all together x each output alone and all together, and with
  non-contiguous inputs and cotangents, against float64 finite differences.
* ``eager_jvp``: eager forward-mode AD (``torch.autograd.forward_ad`` dual tensors, the
  Function's ``jvp``) with each tangent alone and all together and non-contiguous, against
  finite differences.
* ``eager_vjp_of_vjp``: eager double backward (``torch.autograd.grad`` twice,
  ``create_graph=True``) against finite differences of the eager first-order vjp.

Every case also holds the Function to the in-place and view rules of an eager call (inputs
unchanged unless declared in-place, ``mark_dirty`` returns the input itself, declared
non-differentiable outputs do not require grad) and leaves incoming cotangents and tangents
unchanged.

``gradient="custom"`` (a backward that is deliberately not the derivative): ``eager_vjp``
cannot compare the gradient's values with anything independent, so it holds the backward
to itself across input subsets and memory layouts (the gradient of input i must not depend
on which other inputs are differentiated, nor on strides) and says so; ``eager_jvp``
passes when it matches either finite differences or the custom backward's Jacobian;
``eager_vjp_of_vjp`` compares with finite differences of the custom first-order map
``(x, c) -> backward(x)(c)`` where every tensor the backward saved is an input, and is
``unsupported`` (saying why) where it saved outputs or intermediates.

The checks make cases only for the Functions torch.func cannot differentiate
(``CheckSpec.by_default``): for the others, torch.func's ``vjp`` and ``vjp_of_vjp`` run
``torch.autograd.grad`` too, and the eager cases would only repeat them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.autograd.forward_ad as fwAD

from autograd_function_db.entry import Entry
from harness.checks import finite_diff as fd
from harness.checks.autodiff import (
    custom_op_no_jvp,
    needs_backward,
    needs_double_backward,
    with_fixed_rng,
)
from harness.checks.autodiff_refs import (
    COTANGENT_WHY,
    FULL_JACOBIAN_MAX,
    INPUT_WHY,
    TANGENT_WHY,
    Findings,
    Watch,
    attempt,
    diff_view,
    eager_protocol,
    is_custom,
    noncontiguous,
    restricted,
)
from harness.checks.catalogue import (
    CaseContext,
    CheckSpec,
    no_plan,
    register,
)
from harness.checks.eager_second_order import (
    EAGER_SECOND_ORDER_REFERENCE,
    run_eager_vjp_of_vjp,
)
from harness.checks.fd_shared import SharedDifferences
from harness.checks.first_order import (
    compare_grads,
    compare_jvp,
    draw_cotangents,
    draw_tangents,
    fd_identity_check,
    jvp_references,
)
from harness.checks.forward_reverse import forward_derivative
from harness.checks.gauge import same_function
from harness.checks.recorded_use import noted_outside_use
from harness.checks.references import (
    eager_jacobian,
    fd_jacobian,
    fresh_leaves,
    grad_where_connected,
    jacobian_fits,
    jvp_cases,
    require_jacobian_budget,
    vjp_cases,
)
from harness.core.errors import FunctionRaised

CUSTOM_CONSISTENCY_REFERENCE = (
    "the same eager backward with every input and all outputs, contiguous (gradient=custom)"
)
CUSTOM_CONSISTENCY_NOTE = (
    "eager_vjp: gradient=custom: the values of a deliberate gradient have no independent "
    "reference, so the backward was held to itself across input subsets and memory layouts "
    "(and to the eager protocol); its forward derivative and second order are checked by "
    "eager_jvp and eager_vjp_of_vjp"
)


NO_EAGER_JVP = (
    "no jvp staticmethod: eager forward-mode AD (torch.autograd.forward_ad) raises for this "
    "Function; add @staticmethod jvp(ctx, *tangents) returning one tangent per output (save "
    "what it needs with ctx.save_for_forward)"
)


def torch_func_cannot_differentiate(entry: Entry) -> bool:
    """A legacy Function, or a custom op (torch 2.13 refuses its register_autograd rule)."""
    return not entry.caps.setup_context or entry.custom_op is not None


# --- the eager calls, keeping the layout of the leaves ----------------------------------------


def eager_grads(
    entry: Entry,
    args: Sequence[Any],
    wrt: Sequence[int],
    outputs: Sequence[int],
    cotangents: Sequence[torch.Tensor | None],
    *,
    strided: bool = False,
) -> tuple[torch.Tensor, ...]:
    """``torch.autograd.grad`` of the selected outputs w.r.t. fresh leaves at ``wrt`` (the
    user's eager call: ``Function.apply`` then ``.grad``), the leaves non-contiguous when
    ``strided``; inputs the outputs do not use get zeros."""
    with torch.enable_grad():
        leaves = fresh_leaves(args, wrt, strided)
        outs = restricted(entry, args, wrt, outputs)(*leaves)
        grads = grad_where_connected(outs, leaves, cotangents)
    if grads is None:
        return tuple(torch.zeros_like(x).detach() for x in leaves)
    return tuple(g.detach() for g in grads)


def eager_forward_ad(
    entry: Entry,
    args: Sequence[Any],
    wrt: Sequence[int],
    outputs: Sequence[int],
    tangents: Sequence[torch.Tensor],
    *,
    strided: bool = False,
) -> tuple[list[Any], list[torch.Tensor | None]]:
    """The primal outputs and their tangents by eager forward-mode AD (dual tensors through
    ``Function.apply``, which runs the Function's ``jvp``). A missing tangent (an output the
    Function gave none) is None."""
    with fwAD.dual_level():
        duals = []
        for i, t in zip(wrt, tangents):
            a = args[i].detach()
            primal = noncontiguous(a) if strided else a.clone()
            duals.append(fwAD.make_dual(primal, t))
        outs = restricted(entry, args, wrt, outputs)(*duals)
        primal_out: list[Any] = []
        tangent_out: list[torch.Tensor | None] = []
        for o in outs:
            if not isinstance(o, torch.Tensor):
                primal_out.append(o)
                tangent_out.append(None)
                continue
            p, t = fwAD.unpack_dual(o)
            primal_out.append(p.detach().clone())
            tangent_out.append(None if t is None else t.detach().clone())
    return primal_out, tangent_out


# --- eager_vjp ---------------------------------------------------------------------------------


def run_eager_vjp(ctx: CaseContext) -> str:
    view = diff_view(ctx)
    eager_protocol(ctx, view)
    entry = ctx.entry
    findings = Findings.derived(ctx, view)
    cot = draw_cotangents(ctx, view)
    custom = is_custom(entry)
    if not custom:
        same_function(ctx, view, "eager_vjp")
        findings = Findings.derived(ctx, view)
    columns = view.columns()
    jac = None
    if not custom and columns <= FULL_JACOBIAN_MAX and not view.is_complex and jacobian_fits(view):
        jac = fd_jacobian(ctx, view)
    ref_name = CUSTOM_CONSISTENCY_REFERENCE if custom else fd.FD_REFERENCE
    args64 = view.args64()
    shared = SharedDifferences(ctx, view, args64)
    #: gradient=custom: the backward's own grads with every input differentiated, contiguous,
    #: per output subset (what the subsets and the strided call must agree with).
    baselines: dict[tuple[int, ...], tuple[torch.Tensor, ...]] = {}

    def baseline(outs: tuple[int, ...]) -> tuple[torch.Tensor, ...]:
        if outs not in baselines:
            cots = [cot[j].clone() if j in outs else None for j in view.outs]
            baselines[outs] = attempt(
                "eager backward, every input, contiguous",
                eager_grads,
                entry,
                view.args,
                view.diff,
                view.outs,
                cots,
            )
        return baselines[outs]

    def check_grads(
        label: str,
        ins: Sequence[int],
        outs: tuple[int, ...],
        grads: Sequence[Any],
        full: bool,
        strided_now: bool = False,
    ) -> None:
        if custom:
            if full:
                return  # the baseline itself: the other cases compare with it
            expected = [baseline(outs)[view.diff.index(i)] for i in ins]
        elif jac is not None:
            cots = [cot[j] if j in outs else None for j in view.outs]
            every = fd.vjp_from_jacobian(jac, cots, view.input_shapes)
            expected = [every[view.diff.index(i)] for i in ins]
        else:

            def regrad(new: dict[int, torch.Tensor]) -> Sequence[Any]:
                cs = [new[j].clone() for j in outs]
                if strided_now:
                    cs = [noncontiguous(c) for c in cs]
                return attempt(  # type: ignore[no-any-return]
                    label, eager_grads, entry, view.args, ins, outs, cs, strided=strided_now
                )

            fd_identity_check(
                ctx, findings, view, args64, label, ins, outs, cot, grads, columns, regrad, shared
            )
            return
        compare_grads(
            findings,
            view,
            label,
            ref_name,
            ins,
            grads,
            expected,
            custom=custom,
            order_hint_in_custom=False,
        )

    for name, ins, outs, strided in vjp_cases(view):
        before = len(findings.problems)
        label = f"eager_vjp: {name} (torch.autograd.grad, the Function's backward)"
        cots = [cot[j].clone() for j in outs]
        if strided:
            cots = [noncontiguous(c) for c in cots]
        watch = Watch()
        for i, a in enumerate(view.args):
            watch.add(f"input {i}", a)
        cot_watch = Watch()
        for j, c in zip(outs, cots):
            cot_watch.add(f"the cotangent of {view.out_name(j)}", c)
        try:
            grads = attempt(label, eager_grads, entry, view.args, ins, outs, cots, strided=strided)
        except FunctionRaised as e:
            if not noted_outside_use(ctx.notes, entry, label, ins, view.diff, e):
                raise
            continue
        watch.verify(label, findings, INPUT_WHY)
        cot_watch.verify(label, findings, COTANGENT_WHY)
        full = not strided and tuple(ins) == view.diff and tuple(outs) == view.outs
        check_grads(label, ins, tuple(outs), grads, full, strided)
        findings.outcome(name, before)
    findings.raise_if_any()
    if custom:
        ctx.notes.append(CUSTOM_CONSISTENCY_NOTE)
    return ref_name


# --- eager_jvp ---------------------------------------------------------------------------------


def run_eager_jvp(ctx: CaseContext) -> str:
    view = diff_view(ctx)
    eager_protocol(ctx, view)
    entry = ctx.entry
    tangents = draw_tangents(ctx, view)
    custom = is_custom(entry)
    same_function(ctx, view, "eager_jvp")
    jac = None
    if custom:
        require_jacobian_budget(view, "the custom backward's Jacobian (reference)")
        jac = eager_jacobian(view)
    references, findings, by_name = jvp_references(ctx, view, tangents, jac)

    for name, subset, strided in jvp_cases(view):
        label = f"eager_jvp: {name} (torch.autograd.forward_ad, the Function's jvp)"
        before = len(findings.problems)
        tans = [tangents[i].clone() for i in subset]
        if strided:
            tans = [noncontiguous(t) for t in tans]
        watch = Watch()
        for i, a in enumerate(view.args):
            watch.add(f"input {i}", a)
        tan_watch = Watch()
        for i, t in zip(subset, tans):
            tan_watch.add(f"the tangent of input {i}", t)
        primal, tout = attempt(
            label, eager_forward_ad, entry, view.args, subset, view.outs, tans, strided=strided
        )
        watch.verify(label, findings, INPUT_WHY)
        tan_watch.verify(label, findings, TANGENT_WHY)
        compare_jvp(
            findings,
            references,
            by_name,
            view,
            name,
            label,
            subset,
            primal,
            tout,
            "forward AD",
            " (the Function's jvp)",
        )
        findings.outcome(name, before)
    if custom:
        return forward_derivative(ctx, "eager_jvp", by_name, findings)
    findings.raise_if_any()
    return fd.FD_REFERENCE


# --- registration ----------------------------------------------------------------------------


def _needs_jvp(entry: Entry) -> str | None:
    if entry.custom_op is not None:
        return custom_op_no_jvp(entry)
    return None if entry.caps.jvp else NO_EAGER_JVP


def _needs_backward_twice(entry: Entry) -> str | None:
    return needs_backward(entry) or needs_double_backward(entry)


_EAGER: list[tuple[str, Callable[[CaseContext], str | None], Any, str, str]] = [
    (
        "eager_vjp",
        run_eager_vjp,
        needs_backward,
        fd.FD_REFERENCE,
        "torch.autograd.grad (no torch.func), each differentiable input alone and all together "
        "x each output alone and all together, and non-contiguous, against finite "
        "differences; only for Functions torch.func cannot differentiate (legacy "
        "forward(ctx, ...), torch.library custom ops)",
    ),
    (
        "eager_jvp",
        run_eager_jvp,
        _needs_jvp,
        fd.FD_REFERENCE,
        "eager forward-mode AD (torch.autograd.forward_ad, the Function's jvp), each tangent "
        "alone and all together, and non-contiguous, against finite differences; only for "
        "Functions torch.func cannot differentiate",
    ),
    (
        "eager_vjp_of_vjp",
        run_eager_vjp_of_vjp,
        _needs_backward_twice,
        EAGER_SECOND_ORDER_REFERENCE,
        "eager double backward (torch.autograd.grad with create_graph=True, twice) against "
        "finite differences of the eager first-order vjp; only for Functions torch.func "
        "cannot differentiate",
    ),
]

for _name, _run, _supported, _reference, _description in _EAGER:
    register(
        CheckSpec(
            _name,
            with_fixed_rng(_run),
            no_plan,
            _supported,
            "eager",
            _reference,
            _description,
            by_default=torch_func_cannot_differentiate,
        )
    )
